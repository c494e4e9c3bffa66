"""PyTorch checkpoints that resume a trial exactly.

``Checkpointer`` saves a model, its optimiser (and LR scheduler, and any
picklable extra state) with every RNG state (Python, NumPy, torch, CUDA)
atomically in the trial's checkpoint directory, reports it, and restores
it: after a worker dies, on ASHA promotion, or from a PBT donor::

    import torch
    from dial import trial
    from dial.pytorch import Checkpointer

    torch.set_num_threads(trial.threads())
    model, opt = make_model(), make_optimizer(trial.params())
    ckpt = Checkpointer(model, opt)
    step = ckpt.restore()              # 0 on a fresh start
    while step < 100:
        step += 1
        loss = train_step(model, opt)
        decision = ckpt.report(step, {"loss": loss}, save=step % 10 == 0)
        if decision.should_exit:
            break
        if decision.exploit:           # the donor's weights are loaded
            set_lr(opt, trial.params()["lr"])
"""
from __future__ import annotations

import os
import random
import re
import tempfile
from typing import Any, Dict, Mapping, Optional

import torch

from . import trial
from ._types import Decision

__all__ = ["Checkpointer", "save_state", "load_state"]

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


def _rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {"python": random.getstate(),
                             "torch": torch.get_rng_state()}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy
        numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(path: str, state: Mapping[str, Any]) -> None:
    """Writes ``state`` with torch.save to a temporary file in the same
    directory, fsyncs it and renames it over ``path``: a process killed
    halfway never leaves a file that looks complete."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(dict(state), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_state(path: str) -> Dict[str, Any]:
    """Reads a state written by ``save_state`` (on the CPU)."""
    return torch.load(path, map_location="cpu", weights_only=False) \
        if "weights_only" in torch.load.__code__.co_varnames \
        else torch.load(path, map_location="cpu")


class Checkpointer:
    """Saves, reports and restores a trial's training state.

    Args:
      model: the ``torch.nn.Module``.
      optimizer, scheduler: optional; their ``state_dict`` is kept too.
      extra: a dict of further picklable state (an epoch counter, a data
        order); ``restore`` updates it in place.
      keep: how many of this trial's own checkpoints to keep (older ones
        are deleted once a newer one is reported).
    """

    def __init__(self, model: torch.nn.Module,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 scheduler: Any = None,
                 extra: Optional[Dict[str, Any]] = None, keep: int = 3):
        self.model, self.optimizer, self.scheduler = model, optimizer, \
            scheduler
        self.extra = extra if extra is not None else {}
        self.keep = max(1, keep)
        self.restored_step: Optional[int] = None
        self.restored_from: Optional[str] = None

    def state(self, step: int) -> Dict[str, Any]:
        """Everything a checkpoint holds for ``step``."""
        state: Dict[str, Any] = {"step": step,
                                 "model": self.model.state_dict(),
                                 "rng": _rng_state(), "extra": self.extra}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def save(self, step: int) -> str:
        """Saves the state at ``step`` as ``ckpt-<step>.pt`` in the trial's
        checkpoint directory; returns its path."""
        path = os.path.join(trial.checkpoint_dir(), f"ckpt-{step}.pt")
        save_state(path, self.state(step))
        return path

    def load(self, path: str, rng: bool = True) -> int:
        """Loads a checkpoint (model, optimiser, scheduler, extra and, with
        ``rng``, the RNG states); returns its step."""
        state = load_state(path)
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        self.extra.update(state.get("extra", {}))
        if rng and "rng" in state:
            _set_rng_state(state["rng"])
        self.restored_step = int(state["step"])
        self.restored_from = path
        return self.restored_step

    def restore(self) -> int:
        """Loads the checkpoint this attempt resumes from, if any; returns
        its step (0 for a fresh start): go on at the next step."""
        path = trial.restore_path()
        if not path:
            return 0
        return self.load(path)

    def report(self, step: int, metrics: Mapping[str, float],
               save: bool = True) -> Decision:
        """Reports ``metrics`` for ``step``, with a checkpoint saved first
        when ``save``. On a PBT EXPLOIT decision, loads the donor's
        checkpoint (its weights and optimiser state; this trial keeps its
        own RNG streams) before returning: the caller applies the new
        ``trial.params()``."""
        path = self.save(step) if save else None
        decision = trial.report(step, metrics, checkpoint=path)
        if path:
            self._prune(step)
        if decision.exploit and decision.checkpoint:
            source = trial.checkpoint_path(decision)
            assert source is not None
            self.load(source, rng=False)
        return decision

    def _prune(self, step: int) -> None:
        """Deletes this trial's checkpoints older than the `keep` newest up
        to `step` (the reported one is durable once the decision came)."""
        directory = trial.checkpoint_dir()
        steps = sorted(int(m.group(1)) for m in
                       map(_NAME.match, os.listdir(directory)) if m)
        older = [s for s in steps if s <= step]
        for s in older[:-self.keep]:
            try:
                os.unlink(os.path.join(directory, f"ckpt-{s}.pt"))
            except FileNotFoundError:
                pass
