"""dial.trial and dial.pytorch without a worker process.

A trial program runs in a subprocess; the test plays the worker's part over
two pipes (docs/trial-protocol.md): it reads each report line from the
report descriptor and answers with the next decision line on the decision
descriptor. The Checkpointer tests run in this process.
"""
import json
import os
import random
import select
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from dial import pytorch as dial_pytorch

PYTHON = sys.executable


def _clean_env(**extra):
    """This process's environment without any trial variable, plus
    `extra` (None values are left out)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DIAL_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


class TrialRun:
    """What a trial program did: its report lines (parsed, and raw), its
    stdout parsed as one JSON value, its stderr and exit status."""

    def __init__(self, lines, stdout, stderr, returncode):
        self.lines = lines
        self.reports = [json.loads(line) for line in lines]
        self.stdout, self.stderr = stdout, stderr
        self.returncode = returncode
        self.result = json.loads(stdout) if stdout.strip() else None


def run_trial(code, decisions=(), env=None, cwd=None, timeout=60):
    """Runs `code` with `python -c`, its report and decision descriptors
    piped to this process. Each report gets the next line of `decisions`
    (a dict, or a raw string); when they run out, the decision pipe is
    closed, as a worker that shuts down does."""
    report_r, report_w = os.pipe()
    decision_r, decision_w = os.pipe()
    full_env = _clean_env(DIAL_REPORT_FD=report_w,
                          DIAL_DECISION_FD=decision_r, **(env or {}))
    proc = subprocess.Popen(
        [PYTHON, "-c", textwrap.dedent(code)], env=full_env, cwd=cwd,
        pass_fds=(report_w, decision_r), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(report_w)
    os.close(decision_r)
    pending = list(decisions)
    lines = []
    deadline = time.monotonic() + timeout
    buffer = b""
    decision_w_open = True
    try:
        if not pending:
            os.close(decision_w)
            decision_w_open = False
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "the trial program did not finish in time"
            ready, _, _ = select.select([report_r], [], [], left)
            if not ready:
                continue
            chunk = os.read(report_r, 65536)
            if not chunk:
                break  # the program exited (or closed its report pipe)
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                lines.append(line.decode())
                if not decision_w_open:
                    continue
                d = pending.pop(0)
                text = d if isinstance(d, str) else json.dumps(d)
                os.write(decision_w, (text + "\n").encode())
                if not pending:
                    os.close(decision_w)
                    decision_w_open = False
        stdout, stderr = proc.communicate(timeout=max(1, deadline -
                                                      time.monotonic()))
    finally:
        os.close(report_r)
        if decision_w_open:
            os.close(decision_w)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert buffer == b"", f"an unterminated report line: {buffer!r}"
    assert proc.returncode == 0, stderr
    return TrialRun(lines, stdout, stderr, proc.returncode)


def run_standalone(code, env=None, cwd=None):
    """Runs `code` without DIAL_REPORT_FD (by hand, outside a worker)."""
    proc = subprocess.run([PYTHON, "-c", textwrap.dedent(code)],
                          env=_clean_env(**(env or {})), cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


def _strict_json(line):
    """json.loads that refuses NaN and Infinity (not JSON)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(line, parse_constant=refuse)


# -- dial.trial: the environment --------------------------------------------

def test_params_keep_json_types_and_are_a_copy():
    run = run_trial("""
        import json
        from dial import trial
        p = trial.params()
        p["lr"] = -1.0                     # the caller's copy only
        q = trial.params()
        print(json.dumps({"types": {k: type(v).__name__ for k, v in q.items()},
                          "params": q}))
    """, env={"DIAL_TRIAL_PARAMS":
              '{"lr": 0.0031, "units": 128, "optimizer": "adam"}'})
    assert run.result["params"] == {"lr": 0.0031, "units": 128,
                                    "optimizer": "adam"}
    assert run.result["types"] == {"lr": "float", "units": "int",
                                   "optimizer": "str"}
    assert run.lines == []


def test_environment_accessors(tmp_path):
    root = tmp_path / "root"
    run = run_trial("""
        import json, os
        from dial import trial
        print(json.dumps({
            "under_worker": trial.under_worker(),
            "study": trial.study(), "number": trial.number(),
            "attempt": trial.attempt(), "seed": trial.seed(),
            "start_step": trial.start_step(), "threads": trial.threads(),
            "gpus": trial.gpus(), "restore_path": trial.restore_path(),
            "checkpoint_dir": trial.checkpoint_dir(),
            "dir_exists": os.path.isdir(trial.checkpoint_dir())}))
    """, env={"DIAL_STUDY": "fm", "DIAL_TRIAL": 4, "DIAL_ATTEMPT": 3,
              "DIAL_SEED": 0, "DIAL_START_STEP": 30, "DIAL_CPU_THREADS": 3,
              "CUDA_VISIBLE_DEVICES": "0,2",
              "DIAL_CHECKPOINT_ROOT": root,
              "DIAL_CHECKPOINT_DIR": root / "fm" / "4",
              "DIAL_RESTORE_CHECKPOINT": "fm/4/ckpt-30.pt"})
    assert run.result == {
        "under_worker": True, "study": "fm", "number": 4, "attempt": 3,
        "seed": 0, "start_step": 30, "threads": 3, "gpus": ["0", "2"],
        "restore_path": str(root / "fm" / "4" / "ckpt-30.pt"),
        "checkpoint_dir": str(root / "fm" / "4"), "dir_exists": True}


def test_fresh_start_and_empty_values():
    run = run_trial("""
        import json
        from dial import trial
        print(json.dumps({"restore_path": trial.restore_path(),
                          "start_step": trial.start_step(),
                          "gpus": trial.gpus(), "seed": trial.seed(),
                          "threads": trial.threads()}))
    """, env={"DIAL_RESTORE_CHECKPOINT": "", "DIAL_START_STEP": "0",
              "CUDA_VISIBLE_DEVICES": "", "DIAL_SEED": "",
              "DIAL_CPU_THREADS": "0", "DIAL_CHECKPOINT_ROOT": "/r"})
    assert run.result == {"restore_path": None, "start_step": 0, "gpus": [],
                          "seed": None, "threads": 1}


# -- dial.trial: reports and decisions --------------------------------------

def test_report_lines_are_json_with_named_non_finite_values(tmp_path):
    root = tmp_path / "root"
    run = run_trial("""
        import json, os
        from dial import trial
        path = os.path.join(trial.checkpoint_dir(), "ckpt-2.pt")
        open(path, "w").close()
        out = [trial.report(1, {"loss": float("nan"), "up": float("inf"),
                                "down": float("-inf"), "acc": 0.5,
                                "count": 7}).action,
               trial.report(2, {"loss": 1.25}, checkpoint=path).action,
               trial.report(3, {"loss": 1.0},
                            checkpoint="fm/4/ckpt-3.pt").action]
        print(json.dumps(out))
    """, decisions=[{"action": "CONTINUE"}] * 3,
        env={"DIAL_CHECKPOINT_ROOT": root,
             "DIAL_CHECKPOINT_DIR": root / "fm" / "4"})
    assert run.result == ["CONTINUE"] * 3
    assert len(run.lines) == 3
    first, second, third = (_strict_json(line) for line in run.lines)
    assert first == {"step": 1, "metrics": {
        "loss": "NaN", "up": "Infinity", "down": "-Infinity", "acc": 0.5,
        "count": 7.0}}
    # An absolute path becomes its id relative to the checkpoint root; an
    # id is passed as it is.
    assert second == {"step": 2, "metrics": {"loss": 1.25},
                      "checkpoint": "fm/4/ckpt-2.pt"}
    assert third["checkpoint"] == "fm/4/ckpt-3.pt"
    assert all(line.count("\n") == 0 for line in run.lines)


def test_checkpoint_id_is_relative_to_the_root(tmp_path):
    run = run_trial("""
        import json
        from dial import trial
        print(json.dumps([trial.checkpoint_id(trial.checkpoint_dir()
                                              + "/run/ckpt-9"),
                          trial.checkpoint_id("%s/fm/4/x.pt")]))
    """ % tmp_path, env={"DIAL_CHECKPOINT_ROOT": tmp_path,
                         "DIAL_CHECKPOINT_DIR": tmp_path / "fm" / "4"})
    assert run.result == ["fm/4/run/ckpt-9", "fm/4/x.pt"]


def test_report_needs_a_metric():
    run = run_trial("""
        import json
        from dial import trial
        try:
            trial.report(1, {})
        except ValueError as e:
            print(json.dumps(str(e)))
    """)
    assert "at least one" in run.result
    assert run.lines == []


def test_decisions_are_parsed(tmp_path):
    root = tmp_path / "root"
    run = run_trial("""
        import json
        from dial import trial
        out = []
        for step in range(1, 5):
            d = trial.report(step, {"loss": 1.0 / step})
            out.append({"action": d.action, "reason": d.reason,
                        "should_stop": d.should_stop,
                        "should_pause": d.should_pause,
                        "should_exit": d.should_exit, "exploit": d.exploit,
                        "checkpoint": d.checkpoint,
                        "path": trial.checkpoint_path(d),
                        "params": trial.params()})
        print(json.dumps(out))
    """, decisions=[
        {"action": "CONTINUE"},
        {"action": "EXPLOIT", "checkpoint": "fm/1/from-3-20",
         "params": {"lr": 0.012, "units": 64}, "reason": "bottom quarter"},
        {"action": "PAUSE", "reason": "rung 3"},
        '{"action":"STOP","reason":"study stopped"}',
    ], env={"DIAL_TRIAL_PARAMS": '{"lr": 0.1, "units": 64, "opt": "sgd"}',
            "DIAL_CHECKPOINT_ROOT": root})
    cont, exploit, pause, stop = run.result
    assert cont == {"action": "CONTINUE", "reason": "", "should_stop": False,
                    "should_pause": False, "should_exit": False,
                    "exploit": False, "checkpoint": "", "path": None,
                    "params": {"lr": 0.1, "units": 64, "opt": "sgd"}}
    assert exploit["action"] == "EXPLOIT" and exploit["exploit"]
    assert not exploit["should_exit"]
    assert exploit["reason"] == "bottom quarter"
    assert exploit["checkpoint"] == "fm/1/from-3-20"
    assert exploit["path"] == str(root / "fm" / "1" / "from-3-20")
    # params() holds the new values from the EXPLOIT on.
    assert exploit["params"] == {"lr": 0.012, "units": 64, "opt": "sgd"}
    assert pause["should_pause"] and pause["should_exit"]
    assert not pause["should_stop"] and pause["reason"] == "rung 3"
    assert pause["params"] == exploit["params"]
    assert stop["should_stop"] and stop["should_exit"]
    assert not stop["should_pause"] and stop["reason"] == "study stopped"
    assert [json.loads(line)["step"] for line in run.lines] == [1, 2, 3, 4]


def test_a_closed_decision_pipe_means_stop():
    run = run_trial("""
        import json
        from dial import trial
        first = trial.report(1, {"loss": 2.0})
        second = trial.report(2, {"loss": 1.0})
        print(json.dumps([first.action, second.action, second.reason]))
    """, decisions=[{"action": "CONTINUE"}])
    assert run.result[0] == "CONTINUE"
    assert run.result[1] == "STOP"
    assert "closed" in run.result[2]
    assert len(run.lines) == 2


def test_standalone_reports_go_to_stderr(tmp_path):
    proc = run_standalone("""
        import json, os
        from dial import trial
        d = trial.report(5, {"loss": float("nan"), "acc": 0.25},
                         checkpoint="x/ckpt-5.pt")
        print(json.dumps({
            "action": d.action, "under_worker": trial.under_worker(),
            "params": trial.params(), "number": trial.number(),
            "attempt": trial.attempt(), "seed": trial.seed(),
            "start_step": trial.start_step(), "threads": trial.threads(),
            "gpus": trial.gpus(), "restore_path": trial.restore_path(),
            "checkpoint_dir": trial.checkpoint_dir(),
            "cpu_count": os.cpu_count()}))
    """, cwd=str(tmp_path))
    result = json.loads(proc.stdout)
    assert result.pop("threads") == result.pop("cpu_count")
    assert result == {
        "action": "CONTINUE", "under_worker": False, "params": {},
        "number": -1, "attempt": 1, "seed": None, "start_step": 0,
        "gpus": [], "restore_path": None,
        "checkpoint_dir": str(tmp_path / "dial-checkpoints")}
    assert (tmp_path / "dial-checkpoints").is_dir()
    line = _strict_json(proc.stderr.strip().splitlines()[-1])
    assert line == {"step": 5, "metrics": {"loss": "NaN", "acc": 0.25},
                    "checkpoint": "x/ckpt-5.pt"}


def test_pytorch_checkpointer_loads_an_exploit_donor(tmp_path):
    """Checkpointer.report on EXPLOIT: the donor's weights and optimiser
    state are loaded, this trial's RNG streams are kept, and it reports
    the step it loaded."""
    root = tmp_path / "root"
    donor_dir = root / "fm" / "3"
    donor_dir.mkdir(parents=True)
    torch.manual_seed(99)
    donor = torch.nn.Linear(4, 2)
    donor_opt = torch.optim.SGD(donor.parameters(), lr=0.5, momentum=0.9)
    dial_pytorch.save_state(str(root / "fm" / "1" / "from-3-20"), {
        "step": 20, "model": donor.state_dict(),
        "optimizer": donor_opt.state_dict(),
        "rng": {"python": random.getstate(),
                "torch": torch.get_rng_state()}, "extra": {"epoch": 7}})
    run = run_trial("""
        import json, torch
        from dial import trial
        from dial.pytorch import Checkpointer
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        extra = {"epoch": 0}
        ckpt = Checkpointer(model, opt, extra=extra)
        d = ckpt.report(4, {"loss": 3.0})
        for g in opt.param_groups:
            g["lr"] = trial.params()["lr"]
        print(json.dumps({
            "action": d.action, "restored_step": ckpt.restored_step,
            "restored_from": ckpt.restored_from, "extra": extra,
            "weight": model.weight.tolist(), "bias": model.bias.tolist(),
            "lr": opt.param_groups[0]["lr"],
            "momentum": opt.param_groups[0]["momentum"],
            "next_random": torch.rand(3).tolist()}))
    """, decisions=[{"action": "EXPLOIT", "checkpoint": "fm/1/from-3-20",
                     "params": {"lr": 0.4}}],
        env={"DIAL_CHECKPOINT_ROOT": root,
             "DIAL_CHECKPOINT_DIR": root / "fm" / "1",
             "DIAL_TRIAL_PARAMS": '{"lr": 0.1}'})
    r = run.result
    assert r["action"] == "EXPLOIT"
    assert r["restored_step"] == 20
    assert r["restored_from"] == str(root / "fm" / "1" / "from-3-20")
    assert r["extra"] == {"epoch": 7}
    assert r["weight"] == donor.weight.tolist()
    assert r["bias"] == donor.bias.tolist()
    assert r["lr"] == 0.4 and r["momentum"] == 0.9
    # Its own torch stream: seed 1 then one Linear init, not the donor's.
    torch.manual_seed(1)
    torch.nn.Linear(4, 2)
    assert r["next_random"] == torch.rand(3).tolist()
    # It saved and reported its own checkpoint of step 4 first.
    assert _strict_json(run.lines[0])["checkpoint"] == "fm/1/ckpt-4.pt"


# -- dial.pytorch.Checkpointer, in this process -----------------------------

@pytest.fixture
def trial_dirs(tmp_path, monkeypatch):
    """A checkpoint root and this 'trial's directory, fm/0, in the
    environment; no report pipe (reports go to stderr)."""
    for name in list(os.environ):
        if name.startswith("DIAL_"):
            monkeypatch.delenv(name)
    root = tmp_path / "root"
    monkeypatch.setenv("DIAL_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("DIAL_CHECKPOINT_DIR", str(root / "fm" / "0"))
    return root


def _model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))


def _train(model, opt, steps):
    """`steps` SGD steps on random data (drawn from torch's RNG); the
    losses, and then the next numbers of every RNG."""
    losses = []
    model.train()
    for _ in range(steps):
        x = torch.randn(32, 8)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, torch.rand(4).tolist(), np.random.rand(4).tolist(), \
        [random.random() for _ in range(4)]


def test_checkpointer_round_trip_resumes_exactly(trial_dirs, monkeypatch):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    extra = {"epoch": 3, "order": [2, 0, 1]}
    ckpt = dial_pytorch.Checkpointer(model, opt, sched, extra=extra)
    _train(model, opt, 5)
    sched.step()
    path = ckpt.save(5)
    assert path == str(trial_dirs / "fm" / "0" / "ckpt-5.pt")
    expected = _train(model, opt, 4)
    expected_out = model.eval()(torch.ones(2, 8)).tolist()

    # Somewhere else entirely: other weights, optimiser moments, RNGs.
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    model2 = _model()
    opt2 = torch.optim.Adam(model2.parameters(), lr=1.0)
    sched2 = torch.optim.lr_scheduler.StepLR(opt2, step_size=1, gamma=0.5)
    extra2 = {"epoch": 0}
    ckpt2 = dial_pytorch.Checkpointer(model2, opt2, sched2, extra=extra2)
    assert ckpt2.restore() == 0 and ckpt2.restored_step is None
    monkeypatch.setenv("DIAL_RESTORE_CHECKPOINT", "fm/0/ckpt-5.pt")
    monkeypatch.setenv("DIAL_START_STEP", "5")
    assert ckpt2.restore() == 5
    assert ckpt2.restored_step == 5 and ckpt2.restored_from == path
    assert extra2 == {"epoch": 3, "order": [2, 0, 1]}
    assert sched2.state_dict()["last_epoch"] == 1
    assert opt2.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.9, abs=0)
    # The same losses (dropout masks, data), then the same random numbers
    # of torch, NumPy and Python, bit for bit.
    assert _train(model2, opt2, 4) == expected
    assert model2.eval()(torch.ones(2, 8)).tolist() == expected_out


def test_load_without_rng_keeps_this_processs_streams(trial_dirs):
    torch.manual_seed(0)
    model = _model()
    path = dial_pytorch.Checkpointer(model).save(1)
    saved_rng = torch.get_rng_state()
    torch.manual_seed(42)
    other = _model()
    before = torch.get_rng_state()
    assert dial_pytorch.Checkpointer(other).load(path, rng=False) == 1
    assert torch.equal(torch.get_rng_state(), before)
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a, b)
    dial_pytorch.Checkpointer(other).load(path)
    assert torch.equal(torch.get_rng_state(), saved_rng)


def test_save_is_atomic(trial_dirs, monkeypatch):
    """While the state is written, only a temporary name that does not
    look like a checkpoint exists; a save that fails halfway leaves the
    previous file of that step as it was and no temporary file."""
    model = _model()
    ckpt = dial_pytorch.Checkpointer(model)
    directory = trial_dirs / "fm" / "0"
    good = ckpt.save(3)
    good_bytes = open(good, "rb").read()
    seen = []
    real_save = torch.save

    def half_then_fail(obj, f, *args, **kwargs):
        f.write(b"partial")
        f.flush()
        seen.extend(os.listdir(directory))
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(3)
    with pytest.raises(OSError):
        ckpt.save(4)
    assert sorted(os.listdir(directory)) == ["ckpt-3.pt"]
    assert open(good, "rb").read() == good_bytes
    temps = [name for name in seen if name != "ckpt-3.pt"]
    assert len(temps) == 2
    assert not any(dial_pytorch._NAME.match(name) for name in temps)
    assert all(name.startswith(".") for name in temps)

    # The successful path: the temporary file is renamed into place.
    seen.clear()

    def record(obj, f, *args, **kwargs):
        seen.extend(os.listdir(directory))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", record)
    ckpt.save(4)
    assert "ckpt-4.pt" not in seen
    assert sorted(os.listdir(directory)) == ["ckpt-3.pt", "ckpt-4.pt"]
    assert dial_pytorch.load_state(str(directory / "ckpt-4.pt"))["step"] == 4


def test_keep_prunes_older_checkpoints(trial_dirs):
    model = _model()
    directory = trial_dirs / "fm" / "0"
    directory.mkdir(parents=True)
    (directory / "from-2-6").write_bytes(b"a PBT copy")
    (directory / "notes.txt").write_text("mine")
    ckpt = dial_pytorch.Checkpointer(model, keep=2)
    for step in range(1, 6):
        decision = ckpt.report(step, {"loss": 1.0 / step},
                               save=step != 4)
        assert decision.action == "CONTINUE"
    assert sorted(os.listdir(directory)) == [
        "ckpt-3.pt", "ckpt-5.pt", "from-2-6", "notes.txt"]
    # keep=1 leaves only the newest.
    dial_pytorch.Checkpointer(model, keep=1).report(6, {"loss": 0.1})
    assert sorted(os.listdir(directory)) == ["ckpt-6.pt", "from-2-6",
                                             "notes.txt"]
