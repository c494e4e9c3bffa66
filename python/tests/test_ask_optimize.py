"""Ask/tell trials (Study.ask, Trial) and Study.optimize against a real
dial-scheduler (the fixtures are in conftest.py)."""
import signal
import subprocess
import sys
import threading
import time

import pytest

import dial
from client_helpers import bounded, unique, wait_for


# --------------------------------------------------------------------------
# ask and Trial


def test_ask_gives_typed_params_and_lists(new_study):
    study = new_study(7, 4, params=[
        {"name": "x", "float": {"min": -1.0, "max": 1.0}},
        {"name": "n", "int": {"min": 1, "max": 10}},
        {"name": "c", "categorical": {"values": ["a", "b", "c"]}},
        {"name": "d", "discrete": {"values": [0.5, 1.0]}}])
    trial = study.ask()
    assert isinstance(trial, dial.Trial)
    p = trial.params
    assert list(p) == ["c", "d", "n", "x"]
    assert type(p["x"]) is float and -1.0 <= p["x"] <= 1.0
    assert type(p["n"]) is int and 1 <= p["n"] <= 10
    assert type(p["c"]) is str and p["c"] in ("a", "b", "c")
    assert type(p["d"]) is float and p["d"] in (0.5, 1.0)
    assert trial.last_step == -1 and not trial.resumed
    assert trial.seed is None and trial.origin is None
    trials = study.ask(3)
    assert isinstance(trials, list) and len(trials) == 3
    numbers = [trial.number] + [t.number for t in trials]
    assert len(set(numbers)) == 4
    # max_parallel_trials (4) reached: nothing now.
    started = time.monotonic()
    assert bounded(30, study.ask, timeout=0.3) is None
    assert bounded(30, study.ask, 2, timeout=0.3) == []
    assert 0.6 <= time.monotonic() - started < 30
    trial.complete(0.0)
    assert len(bounded(30, study.ask, 5, timeout=5)) == 1  # a place freed
    assert repr(trial).startswith(f"Trial({study.name!r}, {trial.number}")


def test_ask_returns_none_once_the_study_is_done(new_study):
    study = new_study(1)
    trial = study.ask()
    trial.complete(1.0)
    assert bounded(30, study.ask) is None
    assert bounded(30, study.ask, 3) == []
    assert study.state == "STUDY_COMPLETED"


def test_two_asks_without_completing_give_two_trials(client, new_study):
    study = new_study(5, 5)
    a, b = study.ask(), study.ask()
    assert a.number != b.number
    assert {t.state for t in study.trials()} == {"RUNNING"}
    for t in (a, b):
        assert t.client_id.startswith(client.client_id + "/")
    c = study.ask(client_id="another")
    assert c.number not in (a.number, b.number)
    assert c.client_id.startswith("another/")
    # Study objects of one client share what was handed out: a second
    # object does not hand out a's or b's trial again.
    again = [client.study(study.name).ask() for _ in range(2)]
    assert len({a.number, b.number, c.number} |
               {t.number for t in again}) == 5
    # Anonymous trials (client_id "") are never handed back.
    anonymous = study.ask(client_id="", timeout=5)
    assert anonymous is None or anonymous.client_id == ""


def test_a_restarted_client_gets_its_open_trials_back(scheduler, new_study):
    study = new_study(10, 10)
    cid = unique("host-slot")
    first = dial.connect(scheduler.address, token="", client_id=cid)
    reported, silent = first.study(study.name).ask(2)
    assert reported.report(0, loss=5.0).action == "CONTINUE"
    decision = reported.report(1, {"loss": 4.0})
    assert isinstance(decision, dial.Decision)
    assert decision.action == "CONTINUE" and not decision.should_exit
    first.close()  # "crashes" with two trials open

    with dial.connect(scheduler.address, token="", client_id=cid) as again:
        back = again.study(study.name).ask(2)
        assert sorted(t.number for t in back) == \
            sorted([reported.number, silent.number])
        resumed = next(t for t in back if t.number == reported.number)
        fresh = next(t for t in back if t.number == silent.number)
        assert resumed.resumed and resumed.last_step == 1
        assert resumed.params == reported.params
        assert not fresh.resumed and fresh.last_step == -1
        # A step the crashed run recorded is skipped, not an error.
        decision = resumed.report(1, loss=999.0)
        assert decision.action == "CONTINUE"
        assert decision.reason == "step already recorded"
        assert resumed.report(2, loss=3.0).action == "CONTINUE"
        history = again.study(study.name).get_trial(resumed.number).history
        assert [(p.step, p.metrics["loss"]) for p in history] == \
            [(0, 5.0), (1, 4.0), (2, 3.0)]
        # Another Study object asking with client_id= gets them too.
        with dial.connect(scheduler.address, token="") as other:
            same = other.study(study.name).ask(client_id=cid)
            assert same.number in (reported.number, silent.number)
            assert same.last_step in (2, -1)
            # A different client gets a new trial.
            new = other.study(study.name).ask()
            assert new.number not in (reported.number, silent.number)
            new.complete(0.0)
        resumed.complete(3.0)
        fresh.complete(1.0)
    assert study.trial_counts == {"COMPLETED": 3}


def test_trial_complete_and_fail(new_study):
    study = new_study(6, 6)
    a, b, c = study.ask(3)
    record = a.complete(loss=0.3, acc=0.8)
    assert record.state == "COMPLETED" and record.value == 0.3
    assert record.metrics == {"loss": 0.3, "acc": 0.8}
    with pytest.raises(dial.FailedPrecondition) as e:
        a.complete(0.1)
    assert e.value.code == "FAILED_PRECONDITION"
    with pytest.raises(dial.InvalidArgument) as e:
        b.complete(float("nan"))
    assert e.value.field == "final_metrics.loss"
    with pytest.raises(dial.InvalidArgument):
        b.complete(acc=1.0)  # the objective is missing
    assert study.get_trial(b.number).state == "RUNNING"
    record = b.fail("diverged at step 3")
    assert (record.state, record.error) == ("FAILED", "diverged at step 3")
    with pytest.raises(dial.FailedPrecondition):
        b.report(4, loss=1.0)  # not RUNNING
    c.report(0, loss=1.0)
    # A step on record is not recorded again: it gets its decision again.
    assert c.report(0, loss=2.0).action == "CONTINUE"
    assert [p.step for p in study.get_trial(c.number).history] == [0]
    c.complete(0.9)


def test_complete_several_objectives_with_a_tuple(new_study):
    study = new_study(2, 2, objectives=[{"metric": "a", "goal": "MINIMIZE"},
                                        {"metric": "b", "goal": "MAXIMIZE"}])
    t, u = study.ask(2)
    with pytest.raises(dial.InvalidArgument) as e:
        t.complete((1.0,))
    assert e.value.field == "value"
    record = t.complete((1.0, 2.0))
    assert record.values == (1.0, 2.0) and record.value == 1.0
    assert record.metrics == {"a": 1.0, "b": 2.0}
    assert u.complete([3.0, 4.0], extra=5.0).metrics == \
        {"a": 3.0, "b": 4.0, "extra": 5.0}


# --------------------------------------------------------------------------
# optimize


def test_optimize_runs_n_jobs_in_parallel(new_study):
    study = new_study(20, 8)
    barrier = threading.Barrier(4, timeout=20)  # only 4 at once pass it
    threads = set()

    def objective(trial):
        threads.add(threading.current_thread().name)
        barrier.wait()
        return (trial.params["x"] - 2) ** 2
    assert study.optimize(objective, n_trials=12, n_jobs=4) == 12
    assert len(threads) == 4
    trials = list(study.trials())
    assert len(trials) == 12
    assert all(t.state == "COMPLETED" for t in trials)
    for t in trials:
        assert t.value == pytest.approx((t.params["x"] - 2) ** 2)
    assert study.state == "STUDY_ACTIVE"
    # Without n_trials: until the budget is used.
    assert study.optimize(lambda t: t.params["x"], n_jobs=4) == 8
    assert study.trial_counts == {"COMPLETED": 20}
    assert study.state == "STUDY_COMPLETED"
    assert study.optimize(lambda t: 0.0) == 0
    with pytest.raises(dial.InvalidArgument):
        study.optimize(lambda t: 0.0, n_jobs=0)
    with pytest.raises(dial.InvalidArgument):
        study.optimize(lambda t: 0.0, n_trials=-1)


def test_optimize_takes_dict_results(new_study):
    study = new_study(2)
    assert study.optimize(lambda t: {"loss": 1.0, "acc": 0.5}) == 2
    assert [t.metrics for t in study.trials()] == \
        [{"loss": 1.0, "acc": 0.5}] * 2


def test_optimize_records_pruned_after_stop(new_study):
    study = new_study(5, 1)

    def objective(trial):
        trial.report(0, loss=3.0)
        study.stop()
        trial.report(1, loss=2.5)
        if trial.should_stop:
            raise dial.Pruned()
        return 0.0
    assert study.optimize(objective, n_jobs=2) == 1
    [trial] = list(study.trials())
    assert trial.state == "STOPPED" and trial.error == ""
    assert trial.value == 2.5 and trial.last_step == 1  # last metrics kept
    assert study.state == "STUDY_STOPPED"


def test_optimize_pruned_without_a_stop_fails_the_trial(new_study):
    study = new_study(5, 1)

    def objective(trial):
        raise dial.Pruned()
    assert study.optimize(objective, n_trials=2) == 2
    trials = list(study.trials())
    assert [t.state for t in trials] == ["FAILED", "FAILED"]
    assert all("pruned" in t.error for t in trials)


def test_optimize_fails_the_trial_and_reraises(new_study):
    study = new_study(5, 5)

    def objective(trial):
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        study.optimize(objective, n_trials=5)
    [trial] = list(study.trials())
    assert trial.state == "FAILED" and trial.error == "RuntimeError: boom"


def test_optimize_fails_a_trial_whose_result_is_refused(new_study):
    # As in Optuna: the trial fails (not left RUNNING), with a warning, and
    # the loop goes on.
    study = new_study(5, 5)
    with pytest.warns(UserWarning, match="objective returned nan"):
        assert study.optimize(lambda t: float("nan"), n_trials=2) == 2
    trials = list(study.trials())
    assert [t.state for t in trials] == ["FAILED", "FAILED"]
    assert all("final_metrics.loss" in t.error for t in trials)
    with pytest.warns(UserWarning, match="not a number"):
        assert study.optimize(lambda t: "not a number", n_trials=1) == 1
    assert study.trial_counts == {"FAILED": 3}


def test_optimize_catch_goes_on(new_study):
    study = new_study(10, 10)

    def objective(trial):
        if trial.number % 2 == 0:
            raise ValueError(f"bad {trial.number}")
        return 1.0
    assert study.optimize(objective, n_trials=4, catch=(ValueError,)) == 4
    trials = list(study.trials())
    assert [t.state for t in trials] == ["FAILED", "COMPLETED"] * 2
    assert [t.error for t in trials if t.state == "FAILED"] == \
        ["ValueError: bad 0", "ValueError: bad 2"]


def test_optimize_timeout(new_study):
    study = new_study(1000, 10)

    def objective(trial):
        time.sleep(0.05)  # a little work
        return 1.0
    started = time.monotonic()
    finished = bounded(60, study.optimize, objective, n_jobs=2, timeout=1.0)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 6.0
    assert 2 <= finished < 1000
    assert study.trial_counts == {"COMPLETED": finished}
    assert study.state == "STUDY_ACTIVE"


CHILD = """\
import sys, threading
import dial

address, name, client_id = sys.argv[1:4]
client = dial.connect(address, token="", client_id=client_id)
study = client.study(name)
forever = threading.Event()


def objective(trial):
    for step in range(3):
        trial.report(step, loss=100.0 + step)
    forever.wait()  # killed while "training"


study.optimize(objective, n_jobs=4)
"""


def test_optimize_interrupted_and_resumed(scheduler, new_study, tmp_path):
    study = new_study(10, 6)
    cid = unique("resumable")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    err = open(tmp_path / "child.err", "w")
    child = subprocess.Popen([sys.executable, str(script), scheduler.address,
                              study.name, cid], stderr=err,
                             stdout=subprocess.DEVNULL)
    try:
        def four_reporting():
            assert child.poll() is None, (tmp_path / "child.err").read_text()
            running = [t for t in study.trials(states="RUNNING")
                       if t.last_step == 2]
            return running if len(running) >= 4 else None
        running = wait_for(four_reporting, 60, "4 running trials")
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        err.close()
    killed = sorted(t.number for t in running)
    assert len(killed) == 4  # n_jobs=4 threads, though 6 could run
    assert sorted(t.number for t in study.trials()) == killed
    assert all(t.client_id.startswith(cid + "/") for t in running)

    seen, lock = {}, threading.Lock()

    def objective(trial):
        with lock:
            seen[trial.number] = (trial.resumed, trial.last_step)
        for step in range(5):
            assert trial.report(step, loss=float(step)).action == "CONTINUE"
        return trial.params["x"] ** 2
    with dial.connect(scheduler.address, token="", client_id=cid) as again:
        # (timeout: a run that failed to resume them would wait forever
        # for the places the 4 stale trials hold)
        assert again.study(study.name).optimize(objective, n_jobs=4,
                                                timeout=60) == 10
    assert {n: seen[n] for n in killed} == {n: (True, 2) for n in killed}
    assert all(seen[n] == (False, -1) for n in seen if n not in killed)
    trials = list(study.trials())
    assert sorted(t.number for t in trials) == list(range(10))
    assert all(t.state == "COMPLETED" for t in trials)
    assert study.trial_counts == {"COMPLETED": 10}
    assert study.state == "STUDY_COMPLETED"
    for n in killed:
        record = study.get_trial(n)
        assert [(p.step, p.metrics["loss"]) for p in record.history] == \
            [(0, 100.0), (1, 101.0), (2, 102.0), (3, 3.0), (4, 4.0)]
        assert record.value == pytest.approx(record.params["x"] ** 2)
