"""The trial side: for programs that ``dial-worker`` runs as a study's
``trial.command`` (docs/trial-protocol.md)::

    from dial import trial

    lr = trial.params()["lr"]
    for step in range(trial.start_step() + 1, 101):
        loss = train_one_epoch(lr)
        decision = trial.report(step, {"loss": loss})
        if decision.should_exit:
            break

Outside a worker (no ``DIAL_REPORT_FD``) the functions still work: reports
go to stderr as JSON lines and every decision is CONTINUE, so a trial
script can be tried by hand.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional

from ._types import CONTINUE, Decision, ParamValue, finite_or_name

__all__ = ["params", "report", "restore_path", "checkpoint_dir",
           "checkpoint_id", "start_step", "threads", "gpus", "study",
           "number", "attempt", "seed", "under_worker", "checkpoint_path"]

_lock = threading.Lock()
_pipes: Optional[tuple] = None
_params: Optional[Dict[str, ParamValue]] = None


def under_worker() -> bool:
    """True when run by dial-worker (the report pipe is set)."""
    return bool(os.environ.get("DIAL_REPORT_FD"))


def params() -> Dict[str, ParamValue]:
    """The trial's hyperparameters (``DIAL_TRIAL_PARAMS``) as JSON gives
    them: numbers as int or float (a float parameter whose value is whole,
    such as 0.0, arrives as an int: convert with ``float()``), categorical
    values as str. After a PBT ``EXPLOIT`` decision they hold the new
    values."""
    global _params
    with _lock:
        if _params is None:
            raw = json.loads(os.environ.get("DIAL_TRIAL_PARAMS") or "{}")
            _params = dict(raw)
        return dict(_params)


def study() -> str:
    """The study's name (``DIAL_STUDY``)."""
    return os.environ.get("DIAL_STUDY", "")


def number() -> int:
    """The trial's number (``DIAL_TRIAL``); -1 outside a worker."""
    return int(os.environ.get("DIAL_TRIAL", "-1"))


def attempt() -> int:
    """The attempt, from 1; it grows with each retry or resume."""
    return int(os.environ.get("DIAL_ATTEMPT", "1"))


def seed() -> Optional[int]:
    """``DIAL_SEED``: the seed of a re-evaluation run, else None."""
    value = os.environ.get("DIAL_SEED")
    return int(value) if value else None


def start_step() -> int:
    """The step of the checkpoint to resume from (``DIAL_START_STEP``), 0
    for a fresh start: continue at ``start_step() + 1``."""
    return int(os.environ.get("DIAL_START_STEP") or 0)


def threads() -> int:
    """This trial's CPU thread budget (``DIAL_CPU_THREADS``; default the
    machine's CPU count)."""
    value = os.environ.get("DIAL_CPU_THREADS")
    return max(1, int(value)) if value else (os.cpu_count() or 1)


def gpus() -> List[str]:
    """The GPUs reserved for this trial (``CUDA_VISIBLE_DEVICES``), as
    ids; empty for none."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [g for g in value.split(",") if g]


def _root() -> str:
    return os.environ.get("DIAL_CHECKPOINT_ROOT", "")


def restore_path() -> Optional[str]:
    """The absolute path of the checkpoint to resume from, or None for a
    fresh start."""
    restore = os.environ.get("DIAL_RESTORE_CHECKPOINT", "")
    return os.path.join(_root(), restore) if restore else None


def checkpoint_dir() -> str:
    """This trial's checkpoint directory (``DIAL_CHECKPOINT_DIR``),
    created if missing. Outside a worker: ``./dial-checkpoints``."""
    path = os.environ.get("DIAL_CHECKPOINT_DIR") or os.path.abspath(
        "dial-checkpoints")
    os.makedirs(path, exist_ok=True)
    return path


def checkpoint_id(path: str) -> str:
    """The id to report for a checkpoint file or directory: its path
    relative to the checkpoint root (``<study>/<trial>/...``)."""
    root = _root()
    if not root:
        return path
    return os.path.relpath(os.path.abspath(path), root)


def _open_pipes() -> Optional[tuple]:
    global _pipes
    if _pipes is None and under_worker():
        report_fd = int(os.environ["DIAL_REPORT_FD"])
        decision_fd = int(os.environ["DIAL_DECISION_FD"])
        _pipes = (os.fdopen(report_fd, "w", buffering=1, closefd=False),
                  os.fdopen(decision_fd, "r", closefd=False))
    return _pipes


def report(step: int, metrics: Mapping[str, float],
           checkpoint: Optional[str] = None) -> Decision:
    """Reports one step and waits for the scheduler's decision.

    ``metrics`` may hold NaN and infinities (sent as the protocol's
    strings). ``checkpoint`` is a checkpoint you saved at this step: a path
    (under ``checkpoint_dir()``) or an id. The decision's ``should_exit``
    says to leave the loop (STOP, or PAUSE for ASHA promotion); on
    ``exploit`` (PBT) load ``trial.checkpoint_path(decision)`` and go on with
    ``params()``, which now hold the new values.
    """
    if not metrics:
        raise ValueError("report: metrics must hold at least one value")
    message: Dict[str, Any] = {
        "step": int(step),
        "metrics": {str(k): finite_or_name(v) for k, v in metrics.items()}}
    if checkpoint:
        message["checkpoint"] = checkpoint_id(checkpoint) \
            if os.path.isabs(checkpoint) else checkpoint
    line = json.dumps(message, allow_nan=False)
    with _lock:
        pipes = _open_pipes()
        if pipes is None:
            print(line, file=sys.stderr, flush=True)
            return CONTINUE
        pipes[0].write(line + "\n")
        pipes[0].flush()
        answer = pipes[1].readline()
    if not answer:
        # The worker closed the decision pipe: it is shutting down.
        return Decision("STOP", reason="the worker closed the decision pipe")
    decision = Decision.from_json(answer)
    if decision.exploit and decision.params:
        params()  # load them first
        with _lock:
            assert _params is not None
            _params.update(decision.params)
    return decision


def checkpoint_path(decision: Decision) -> Optional[str]:
    """The absolute path of an EXPLOIT decision's checkpoint."""
    return os.path.join(_root(), decision.checkpoint) \
        if decision.checkpoint else None
