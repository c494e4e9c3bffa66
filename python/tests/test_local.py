"""dial.LocalScheduler, the scheduler child of this process: it starts
without fork(), it outlives the thread that started it, and it stops when
this process dies without cleaning up."""
import os
import select
import subprocess
import textwrap
import threading

import pytest

import dial

from conftest import PYTHON, SCHEDULER_BIN

# Python-level fork handlers run on every fork() this interpreter makes
# for a child (os.fork, or subprocess with a preexec_fn); C libraries'
# handlers, gRPC's among them, run on the same forks.
_FORKS = []
os.register_at_fork(before=lambda: _FORKS.append(1))


@pytest.fixture(autouse=True)
def binary(monkeypatch):
    monkeypatch.setenv("DIAL_SCHEDULER_BIN", SCHEDULER_BIN)


def test_starting_one_runs_no_fork_handlers():
    # gRPC's fork handlers wait for its thread pool to go idle, forever
    # while a channel keeps reconnecting (below), and abort the process
    # when the pool is shutting down: a CI run of test_sklearn.py died so.
    before = len(_FORKS)
    with dial.connect("127.0.0.1:1", timeout=0.2, retries=0) as dead:
        with pytest.raises(dial.Unavailable):
            next(dead.studies())
        for _ in range(2):
            with dial.LocalScheduler() as local:
                assert list(local.client.studies()) == []
    assert len(_FORKS) == before


def test_it_outlives_the_thread_that_started_it():
    # A parent-death signal (PR_SET_PDEATHSIG) follows the thread that
    # forked, not the process: the scheduler would stop with that thread.
    local = dial.LocalScheduler()
    starter = threading.Thread(target=local.start)
    starter.start()
    starter.join()
    try:
        pidfd = os.pidfd_open(local._proc.pid)
        study = local.client.create_study({
            "name": "after-the-thread", "searcher": {"random": {"seed": 1}},
            "objective": {"metric": "loss", "goal": "MINIMIZE"},
            "search_space": [{"name": "x", "float": {"min": 0, "max": 1}}],
            "budget": {"max_trials": 5}})
        assert study.optimize(lambda t: t.params["x"], n_trials=5) == 5
        ended, _, _ = select.select([pidfd], [], [], 1.0)
        os.close(pidfd)
        assert not ended and local._proc.poll() is None
    finally:
        local.close()


def test_a_killed_parent_leaves_no_scheduler():
    program = textwrap.dedent("""
        import sys
        import dial
        local = dial.LocalScheduler().start()
        print(local._proc.pid, flush=True)
        sys.stdin.read()  # until killed
    """)
    parent = subprocess.Popen([PYTHON, "-c", program], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([parent.stdout], [], [], 60)
        assert ready, "the parent did not start its scheduler"
        pid = int(parent.stdout.readline())
        pidfd = os.pidfd_open(pid)
    finally:
        parent.kill()
        parent.wait(timeout=30)
    # No cleanup ran in the parent: the scheduler's stdin ended with it.
    ended, _, _ = select.select([pidfd], [], [], 30)
    os.close(pidfd)
    assert ended, f"scheduler {pid} outlived its SIGKILLed parent"


def test_it_refuses_callers_without_its_token():
    # Finding 4 of the third security review: any local user (uid nobody)
    # listed the victim's study and completed a trial with a forged score,
    # which became best_trial.
    with dial.LocalScheduler() as local:
        study = local.client.create_study({
            "name": "private", "searcher": {"random": {"seed": 1}},
            "objective": {"metric": "loss", "goal": "MINIMIZE"},
            "search_space": [{"name": "x", "float": {"min": 0, "max": 1}}],
            "budget": {"max_trials": 5}})
        trial = study.ask()
        assert local.token and len(local.token) >= 40
        for token in ("", "guessed"):
            with dial.connect(local.address, token=token,
                              retries=0) as other:
                with pytest.raises(dial.Unauthenticated):
                    list(other.studies())
                with pytest.raises(dial.Unauthenticated):
                    other.study("private").tell(trial.number, 99.0)
        assert study.best_trial is None
        # Its tokens file holds the hash only, readable by its owner only.
        with open(os.path.join(local._owned_dir, "tokens")) as f:
            text = f.read()
        assert local.token not in text
        assert os.stat(os.path.join(local._owned_dir, "tokens")).st_mode \
            & 0o077 == 0
        # The token lets another client in.
        with dial.connect(local.address, token=local.token) as mine:
            assert [s.name for s in mine.studies()] == ["private"]
