"""Ask/tell trials (``Trial``) and the threads of ``Study.optimize``."""
from __future__ import annotations

import math
import threading
import time
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional,
                    Tuple)

from ._errors import InvalidArgument, Pruned
from ._types import Decision, ParamValue, TrialRecord, params_dict
from .v1 import service_pb2, study_pb2

if TYPE_CHECKING:
    from ._client import Study


class _Optimizer:
    """The threads of Study.optimize."""

    def __init__(self, study: Study, fn: Callable[["Trial"], Any],
                 n_trials: Optional[int], n_jobs: int, client_id: str,
                 timeout: Optional[float], catch: Tuple[type, ...]):
        self.study, self.fn, self.n_jobs = study, fn, n_jobs
        self.client_id = client_id
        self.catch = catch
        self.deadline = None if timeout is None else \
            time.monotonic() + timeout
        self.lock = threading.Lock()
        self.left = n_trials  # trials this call may still take on
        self.finished = 0
        self.error: Optional[BaseException] = None
        self.stop = threading.Event()

    def run(self) -> int:
        threads = [threading.Thread(target=self._thread,
                                    name=f"dial-optimize-{k}", daemon=True)
                   for k in range(self.n_jobs)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        except BaseException:
            # KeyboardInterrupt: the open trials stay with their client id.
            self.stop.set()
            raise
        if self.error is not None:
            raise self.error
        return self.finished

    def _expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _take(self) -> bool:
        """Reserves one trial of n_trials; False when none is left."""
        with self.lock:
            if self.stop.is_set() or self._expired():
                return False
            if self.left is None:
                return True
            if self.left <= 0:
                return False
            self.left -= 1
            return True

    def _next(self) -> Optional["Trial"]:
        trials = self.study._wait_for_trials(1, self.client_id, self.deadline,
                                             self.stop)
        return trials[0] if trials else None

    def _thread(self) -> None:
        try:
            while self._take():
                trial = self._next()
                if trial is None:
                    return
                self._evaluate(trial)
        except BaseException as e:  # noqa: B902 - handed to run()
            with self.lock:
                if self.error is None:
                    self.error = e
            self.stop.set()

    def _evaluate(self, trial: "Trial") -> None:
        try:
            result = self.fn(trial)
        except Pruned:
            trial._finish_pruned()
        except self.catch as e:  # type: ignore[misc]
            trial.fail(f"{type(e).__name__}: {e}")
        except Exception as e:
            trial.fail(f"{type(e).__name__}: {e}")
            raise
        else:
            if trial._open:
                try:
                    if isinstance(result, Mapping):
                        trial.complete(**result)
                    else:
                        trial.complete(result)
                except (InvalidArgument, TypeError, ValueError) as e:
                    # A result the trial cannot complete with (NaN, no
                    # objective, not a number) fails the trial, as in
                    # Optuna, and the loop goes on.
                    trial.fail(f"objective returned {result!r}: {e}")
                    warnings.warn(f"dial: trial {trial.number} failed: the "
                                  f"objective returned {result!r}: {e}",
                                  stacklevel=2)
        with self.lock:
            self.finished += 1


class Trial:
    """An ask/tell trial: read its ``params``, ``report`` steps, then
    ``complete`` or ``fail`` it."""

    def __init__(self, study: Study, proto: study_pb2.Trial):
        self.study = study
        self.number: int = proto.number
        self.params: Dict[str, ParamValue] = params_dict(proto.params)
        self.client_id: str = proto.client_id
        # Steps up to here were recorded by an earlier run of this trial.
        self.last_step: int = proto.last_step
        self._resumed_to = proto.last_step
        self.seed: Optional[int] = proto.seed if proto.HasField("seed") \
            else None
        self.origin: Optional[int] = proto.origin if proto.HasField("origin") \
            else None
        self.decision: Decision = Decision("CONTINUE")
        self._open = True
        self._last_metrics: Dict[str, float] = {}

    def __repr__(self) -> str:
        return f"Trial({self.study.name!r}, {self.number}, {self.params})"

    @property
    def should_stop(self) -> bool:
        """The last report's decision was STOP (the trial is STOPPED)."""
        return self.decision.should_stop

    @property
    def should_pause(self) -> bool:
        """The last report's decision was PAUSE (ASHA promotion)."""
        return self.decision.should_pause

    @property
    def resumed(self) -> bool:
        """This trial was handed back to its client with reports already
        recorded (``last_step`` >= 0)."""
        return self._resumed_to >= 0

    def report(self, step: int, metrics: Optional[Mapping[str, float]] = None,
               *, checkpoint: str = "", **more: float) -> Decision:
        """Reports one step's metrics (``trial.report(3, loss=0.2)``);
        returns the decision, also kept in ``trial.decision``. Steps must
        increase. A step an earlier run of this trial already recorded is
        not sent again and gets CONTINUE."""
        values = dict(metrics or {})
        values.update(more)
        values = {k: float(v) for k, v in values.items()}
        self._last_metrics = values
        if step <= self._resumed_to:
            return Decision("CONTINUE", reason="step already recorded")
        request = service_pb2.ReportIntermediateRequest(
            study=self.study.name, trial=self.number, step=step,
            metrics=values, checkpoint=checkpoint)

        # A retry of a report the scheduler recorded (its answer was lost)
        # gets the decision it got then: the call is idempotent.
        response = self.study.client._call("ReportIntermediate", request)
        self.last_step = step
        self.decision = Decision.from_proto(response.decision)
        if self.decision.should_exit:
            self._open = self.decision.should_stop  # STOP: may complete once
        return self.decision

    def _objective_metrics(self, value: Any) -> Dict[str, float]:
        metrics = [m for m, _ in self.study.objectives]
        if isinstance(value, (list, tuple)):
            if len(value) != len(metrics):
                raise InvalidArgument(
                    f"value: {len(value)} values for {len(metrics)} "
                    f"objectives ({', '.join(metrics)})")
            return {m: float(v) for m, v in zip(metrics, value)}
        return {metrics[0]: float(value)}

    def complete(self, value: Any = None, /, **metrics: float) -> TrialRecord:
        """Completes the trial: ``complete(0.12)`` sets the objective (a
        sequence with several objectives), ``complete(loss=0.12, acc=0.9)``
        gives final metrics by name; both may be combined. A NaN or
        infinite objective is refused (``dial.InvalidArgument``): call
        ``fail`` for a diverged run."""
        final = {k: float(v) for k, v in metrics.items()}
        if value is not None:
            final.update(self._objective_metrics(value))
        return self._finish(service_pb2.CompleteTrialRequest(
            study=self.study.name, trial=self.number, final_metrics=final))

    def fail(self, error: str) -> TrialRecord:
        """Marks the trial FAILED with this message (it counts toward
        max_trials and is not retried)."""
        return self._finish(service_pb2.CompleteTrialRequest(
            study=self.study.name, trial=self.number,
            error=str(error) or "failed"))

    def _finish(self, request: service_pb2.CompleteTrialRequest
                ) -> TrialRecord:
        # The same completion again gets the stored result: idempotent.
        response = self.study.client._call("CompleteTrial", request)
        self._open = False
        return TrialRecord.from_proto(response.trial)

    def _finish_pruned(self) -> None:
        """After dial.Pruned: a STOPPED trial keeps its last metrics as its
        final ones; a trial pruned without a STOP is marked failed."""
        if not self._open:
            return
        if self.decision.should_stop and self._last_metrics:
            try:
                self._finish(service_pb2.CompleteTrialRequest(
                    study=self.study.name, trial=self.number,
                    final_metrics={k: v for k, v in self._last_metrics.items()
                                   if math.isfinite(v)}))
            except InvalidArgument:
                self._open = False
            return
        if not self.decision.should_exit:
            self.fail("pruned by the objective function without a STOP")
        self._open = False
