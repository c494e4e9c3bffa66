"""PyTorch trials run by real workers: examples/python/fmnist_trial.py,
which uses dial.trial and dial.pytorch.Checkpointer, under the real
dial-scheduler and dial-worker (conftest.py).

* A worker SIGKILLed mid-trial: the trial resumes on another worker from its
  last checkpoint and reports exactly the losses of an uninterrupted run.
* PBT: exploits are recorded in the trials' lineage, and the report after
  each shows that the helper loaded the donor's checkpoint.
* ASHA with promotion: paused trials resume from their rung checkpoints.

The script's `restored_step` metric is the step of the checkpoint its
Checkpointer loaded in that attempt (or at the last exploit), -1 for none.
"""
import os
import signal
import time

import pytest

import dial

from conftest import PYTHON, SOURCE_DIR

SCRIPT = os.path.join(SOURCE_DIR, "examples", "python", "fmnist_trial.py")
EXAMPLES = os.path.join(SOURCE_DIR, "examples", "python")
DATA_DIR = "/usr/share/datasets/fashion-mnist"

pytestmark = pytest.mark.skipif(
    not os.path.isdir(DATA_DIR), reason=f"no Fashion-MNIST in {DATA_DIR}")


def wait_for(condition, timeout, what, interval=0.02):
    """Polls `condition` (bounded) until it returns a true value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what}")
        time.sleep(interval)


def wait_for_end(study, timeout):
    wait_for(lambda: study.state != "STUDY_ACTIVE", timeout,
             f"study {study.name} to end", interval=0.2)
    return list(study.trials())


def example_spec(file_name, name, *script_args):
    """An example spec, renamed, running the script with this
    interpreter (it has the SDK) and `script_args`."""
    spec = dial.parse_spec(os.path.join(EXAMPLES, file_name))
    spec.name = name
    del spec.trial.command.argv[:]
    spec.trial.command.argv.extend([PYTHON, SCRIPT, *script_args])
    return spec


def history(record):
    return {p.step: p.metrics for p in record.history}


def trial_processes(study):
    """Pids of the processes running the script for `study`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if SCRIPT.encode() not in argv:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if f"DIAL_STUDY={study}".encode() in env:
            pids.append(int(entry))
    return pids


KILL_ARGS = ["--steps", "12", "--checkpoint-every", "4",
             "--train-size", "20000"]
KILL_SPEC = {
    "objective": {"metric": "val_loss", "goal": "MINIMIZE"},
    # One value each: both studies run the same configuration.
    "search_space": [
        {"name": "lr", "discrete": {"values": [0.05]}},
        {"name": "momentum", "discrete": {"values": [0.9]}},
        {"name": "hidden", "discrete": {"values": [128]}},
        {"name": "dropout", "discrete": {"values": [0.3]}}],
    "searcher": {"random": {"seed": 1}},
    "budget": {"max_trials": 1, "max_failures_per_trial": 2},
    "trial": {"command": {"argv": [PYTHON, SCRIPT, *KILL_ARGS],
                          "env": {"PYTHONUNBUFFERED": "1"}}},
}


def test_sigkilled_worker_trial_resumes_exactly(start_scheduler,
                                                start_worker):
    scheduler = start_scheduler("--worker-lease-ms=2000")
    client = dial.connect(scheduler.address)
    study = client.create_study({"name": "killed", **KILL_SPEC})
    # One thread per trial on every worker: the same arithmetic in both runs.
    first = start_worker(scheduler.address, "--slots=1", "--cpus=1")

    # Past the checkpoint of step 4 by a step or two, before the next one
    # (each step takes a few tenths of a second).
    def past_checkpoint():
        t = study.get_trial(0, history=False)
        return t if t.state == "RUNNING" and t.checkpoint_step >= 4 and \
            t.checkpoint_step < t.last_step < t.checkpoint_step + 3 else None
    wait_for(lambda: study.trial_counts.get("RUNNING") or None, 60,
             "trial 0 to start", interval=0.1)
    wait_for(past_checkpoint, 60, "trial 0 to pass its checkpoint of step 4")
    running = trial_processes("killed")
    assert running, "no process runs the trial script"
    first.kill()
    killed_at = time.monotonic()
    # The dead worker's supervisor takes the trial's process group down.
    # Should one survive, it is killed by its group and the test fails.
    survivors = []
    try:
        wait_for(lambda: not trial_processes("killed"), 10,
                 "the killed worker's trial process to exit", interval=0.05)
    except AssertionError:
        survivors = trial_processes("killed")
        for pid in survivors:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    gone_after = time.monotonic() - killed_at
    assert not survivors, f"trial processes {survivors} outlived the worker"

    # Once the lease has run out (2 s) the trial is requeued; nothing the
    # dead worker sent can change it any more.
    def requeued():
        t = study.get_trial(0, history=False)
        return t if t.state != "RUNNING" else None
    at_kill = wait_for(requeued, 30, "the lost worker's trial to be requeued",
                       interval=0.1)
    kill_step, checkpoint_step = at_kill.last_step, at_kill.checkpoint_step
    assert at_kill.attempt == 1
    assert checkpoint_step < kill_step, (checkpoint_step, kill_step)
    print(f"killed the worker at step {kill_step} (checkpoint of step "
          f"{checkpoint_step}); its trial process {running} was gone "
          f"{gone_after:.2f} s later, the trial {at_kill.state} after "
          f"{time.monotonic() - killed_at:.2f} s")

    start_worker(scheduler.address, "--slots=1", "--cpus=1")
    (resumed,) = wait_for_end(study, 90)
    assert resumed.state == "COMPLETED", resumed.error
    resumed = study.get_trial(0)
    assert resumed.attempt >= 2
    assert resumed.last_step == 12
    print(f"resumed: attempt {resumed.attempt}, failures {resumed.failures}")

    # The same configuration, uninterrupted, on the worker still running.
    reference = client.create_study({"name": "uninterrupted", **KILL_SPEC})
    (ref,) = wait_for_end(reference, 60)
    assert ref.state == "COMPLETED", ref.error
    ref = reference.get_trial(0)
    assert ref.attempt == 1 and ref.params == resumed.params

    got, want = history(resumed), history(ref)
    steps = list(range(1, 13))
    assert sorted(got) == sorted(want) == steps
    # Exactly equal, bit for bit: the resumed attempt replays steps
    # checkpoint+1 .. kill_step (acknowledged, not stored again) and goes
    # on; every value stored after the kill step is its own.
    for metric in ("val_loss", "val_accuracy", "train_loss"):
        assert [got[s][metric] for s in steps] == \
            [want[s][metric] for s in steps], metric
    # Steps up to the kill came from the first attempt, which restored
    # nothing; the rest from the second, which loaded the checkpoint.
    assert all(got[s]["restored_step"] == -1 for s in range(1, kill_step + 1))
    assert all(got[s]["restored_step"] == checkpoint_step
               for s in range(kill_step + 1, 13))
    assert all(want[s]["restored_step"] == -1 for s in want)


def test_pbt_exploits_load_the_donors_checkpoint(start_scheduler,
                                                 start_worker):
    scheduler = start_scheduler()
    client = dial.connect(scheduler.address)
    spec = example_spec("fmnist-pbt.yaml", "pbt", "--steps", "10")
    # A grid over lr alone, two members hopeless: exploits are sure.
    del spec.search_space[:]
    lr = spec.search_space.add()
    lr.name = "lr"
    lr.discrete.values.extend([1.0e-5, 1.0e-4, 0.05, 0.1])
    spec.searcher.Clear()
    spec.searcher.grid.SetInParent()
    # The bottom half copies the top half: the two hopeless members are
    # exploited whenever they report at an interval.
    spec.scheduler.pbt.quantile = 0.5
    study = client.create_study(spec)
    # One worker runs the whole population at once, so every member has
    # others to be ranked against from its first interval on.
    workers = [start_worker(scheduler.address, "--slots=4", "--cpus=2")]
    trials = wait_for_end(study, 120)
    assert len(trials) == 4
    # No attempt failed (the workers log each failure with its reason).
    failures = [line for w in workers for line in w.stderr().splitlines()
                if ": failed: " in line]
    assert not failures, "\n".join(failures)
    for t in trials:
        assert t.state == "COMPLETED", f"trial {t.number}: {t.error}"
        assert t.failures == 0

    exploits = checked = 0
    for t in trials:
        record = study.get_trial(t.number)
        points = history(record)
        params = None
        for entry in record.lineage:
            exploits += 1
            assert entry["source_trial"] != t.number
            assert entry["source_step"] > 0
            if params is not None:
                assert entry["old_params"] == params
            params = entry["new_params"]
            later = [s for s in points if s > entry["step"]]
            if not later:
                continue  # exploited at its last report
            # The next report: the Checkpointer loaded the donor's copy,
            # a checkpoint of the step the lineage names.
            assert points[min(later)]["restored_step"] == \
                entry["source_step"], (t.number, entry)
            checked += 1
            print(f"trial {t.number} exploited trial {entry['source_trial']}"
                  f" at its step {entry['step']}: restored step "
                  f"{entry['source_step']}, now {entry['new_params']}")
        if params is not None:
            assert record.params == params
    timeline = [(t.number, t.params, str(t.start_time), str(t.end_time),
                 t.last_step) for t in trials]
    assert exploits >= 1, timeline
    assert checked >= 1, timeline


def test_asha_promotion_resumes_paused_trials(start_scheduler, start_worker):
    scheduler = start_scheduler()
    client = dial.connect(scheduler.address)
    spec = example_spec("fmnist-asha.yaml", "asha", "--steps", "8")
    spec.budget.max_trials = 6
    study = client.create_study(spec)
    start_worker(scheduler.address, "--slots=2", "--cpus=2")
    trials = wait_for_end(study, 150)
    assert len(trials) == 6
    resumed = 0
    for t in trials:
        assert t.state in ("COMPLETED", "STOPPED"), \
            f"trial {t.number}: {t.state} {t.error}"
        assert t.failures == 0 and not t.error
        if t.state == "STOPPED":
            assert t.last_step in (2, 4), t.last_step
            print(f"trial {t.number}: STOPPED at step {t.last_step}")
            continue
        assert t.last_step == 8
        record = study.get_trial(t.number)
        points = history(record)
        assert sorted(points) == list(range(1, 9))
        # Paused at a rung, resumed from the checkpoint reported there:
        # restored_step grows, a rung below the step reported.
        restored = [points[s]["restored_step"] for s in sorted(points)]
        assert restored == sorted(restored)
        assert all(r in (-1, 2, 4) and r < s
                   for s, r in zip(sorted(points), restored)), restored
        if restored[-1] > 0:
            resumed += 1
            assert record.attempt >= 2
        print(f"trial {t.number}: attempt {record.attempt}, restored_step "
              f"by step {restored}")
    assert resumed >= 1
