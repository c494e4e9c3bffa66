"""Plain-Python views of the API's messages: parameters as int/float/str,
states as strings, times as datetimes. Every view keeps its message in
``.proto`` for anything it does not surface."""
from __future__ import annotations

import datetime
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from google.protobuf import json_format

from ._errors import InvalidArgument
from .v1 import spec_pb2, study_pb2

ParamValue = Union[int, float, str]

_FROM = re.compile(r"/from-(\d+)-(\d+)$")

STATES = ("PENDING", "RUNNING", "COMPLETED", "STOPPED", "PAUSED", "FAILED")


def param_value(value: study_pb2.ParamValue) -> Optional[ParamValue]:
    """A ParamValue message as the Python value it holds."""
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def params_dict(params: Mapping[str, study_pb2.ParamValue]
                ) -> Dict[str, ParamValue]:
    """A params map as {name: int | float | str}, sorted by name."""
    return {name: param_value(params[name]) for name in sorted(params)}


def to_param_value(name: str, value: Any) -> study_pb2.ParamValue:
    """A Python value as a ParamValue: bool is refused, int -> int_value,
    float -> double_value, str -> string_value."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidArgument(f"params.{name}: must be an int, float or str, "
                              f"not {type(value).__name__}")
    if isinstance(value, str):
        return study_pb2.ParamValue(string_value=value)
    if isinstance(value, int):
        return study_pb2.ParamValue(int_value=value)
    return study_pb2.ParamValue(double_value=value)


def state_name(state: int) -> str:
    return study_pb2.TrialState.Name(state)


def state_number(state: Union[str, int]) -> int:
    if isinstance(state, int):
        return state
    try:
        return study_pb2.TrialState.Value(state.upper())
    except ValueError:
        raise InvalidArgument(f"states: unknown trial state '{state}'; "
                              f"expected one of {', '.join(STATES)}") from None


def _time(ts) -> Optional[datetime.datetime]:
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class MetricPoint:
    """One report of a trial: its step, metrics and time."""
    step: int
    metrics: Dict[str, float]
    time: Optional[datetime.datetime] = None


@dataclass(frozen=True)
class TrialRecord:
    """A trial as the scheduler has it, read-only (``Study.trials()``,
    ``Study.get_trial()``, ``Study.best_trials()``).

    ``value`` is the objective's final value (None until COMPLETED, and on
    trials stopped without final metrics); ``values`` holds every
    objective's, in the spec's order. ``history`` is filled by
    ``Study.get_trial()`` only.
    """
    study: str
    number: int
    state: str
    params: Dict[str, ParamValue]
    value: Optional[float]
    values: Tuple[float, ...]
    metrics: Dict[str, float]
    error: str
    last_step: int
    client_id: str
    checkpoint: str
    checkpoint_step: int
    attempt: int
    failures: int
    worker_id: str
    create_time: Optional[datetime.datetime]
    start_time: Optional[datetime.datetime]
    end_time: Optional[datetime.datetime]
    origin: Optional[int]
    seed: Optional[int]
    lineage: Tuple[Dict[str, Any], ...]
    history: Tuple[MetricPoint, ...] = ()
    note: str = ""
    proto: Any = field(default=None, repr=False, compare=False)

    @property
    def duration(self) -> Optional[datetime.timedelta]:
        """end_time - start_time, for finished trials."""
        if self.start_time and self.end_time:
            return self.end_time - self.start_time
        return None

    @classmethod
    def from_proto(cls, t: study_pb2.Trial,
                   history: Sequence[study_pb2.MetricPoint] = ()
                   ) -> "TrialRecord":
        """The record of a Trial message (and its metric history)."""
        lineage = tuple({
            "step": e.step, "source_trial": e.source_trial,
            "source_step": e.source_step,
            "old_params": params_dict(e.old_params),
            "new_params": params_dict(e.new_params)} for e in t.lineage)
        return cls(
            study=t.study, number=t.number, state=state_name(t.state),
            params=params_dict(t.params),
            value=t.objective_value if t.HasField("objective_value") else None,
            values=tuple(t.objective_values) or (
                (t.objective_value,) if t.HasField("objective_value") else ()),
            metrics=dict(t.final_metrics), error=t.error,
            last_step=t.last_step, client_id=t.client_id,
            checkpoint=t.checkpoint, checkpoint_step=t.checkpoint_step,
            attempt=t.attempt, failures=t.failures, worker_id=t.worker_id,
            create_time=_time(t.create_time), start_time=_time(t.start_time),
            end_time=_time(t.end_time),
            origin=t.origin if t.HasField("origin") else None,
            seed=t.seed if t.HasField("seed") else None,
            lineage=lineage,
            history=tuple(MetricPoint(p.step, dict(p.metrics), _time(p.time))
                          for p in history),
            note=t.note, proto=t)


@dataclass(frozen=True)
class Decision:
    """What the scheduler decided on a report.

    ``action`` is ``"CONTINUE"``, ``"STOP"``, ``"PAUSE"`` (ASHA promotion:
    exit now, resume later from the checkpoint just reported) or
    ``"EXPLOIT"`` (PBT: load ``checkpoint`` and go on with ``params``).
    """
    action: str
    reason: str = ""
    checkpoint: str = ""
    params: Dict[str, ParamValue] = field(default_factory=dict)
    source_trial: Optional[int] = None
    source_step: Optional[int] = None

    @property
    def should_stop(self) -> bool:
        """True for STOP: the trial is over (already STOPPED)."""
        return self.action == "STOP"

    @property
    def should_pause(self) -> bool:
        """True for PAUSE: exit now; the trial may be resumed later."""
        return self.action == "PAUSE"

    @property
    def should_exit(self) -> bool:
        """STOP or PAUSE: leave the training loop."""
        return self.action in ("STOP", "PAUSE")

    @property
    def exploit(self) -> bool:
        """True for EXPLOIT (PBT)."""
        return self.action == "EXPLOIT"

    @classmethod
    def from_proto(cls, d: study_pb2.Decision) -> "Decision":
        """The decision of a Decision message."""
        action = study_pb2.Decision.Action.Name(d.action)
        if action == "ACTION_UNSPECIFIED":
            action = "CONTINUE"
        exploit = action == "EXPLOIT"
        return cls(action=action, reason=d.reason,
                   checkpoint=d.source_checkpoint,
                   params=params_dict(d.new_params),
                   source_trial=d.source_trial if exploit else None,
                   source_step=d.source_step if exploit else None)

    @classmethod
    def from_json(cls, line: str) -> "Decision":
        """A decision line of the trial protocol."""
        d = json.loads(line)
        checkpoint = d.get("checkpoint", "")
        source_trial, source_step = d.get("source_trial"), \
            d.get("source_step")
        # The worker names its copy of the donor's checkpoint
        # <study>/<trial>/from-<source trial>-<source step>.
        match = _FROM.search(checkpoint)
        if match and source_trial is None:
            source_trial, source_step = int(match[1]), int(match[2])
        return cls(action=d.get("action", "CONTINUE"),
                   reason=d.get("reason", ""), checkpoint=checkpoint,
                   params=dict(d.get("params", {})),
                   source_trial=source_trial, source_step=source_step)


CONTINUE = Decision("CONTINUE")


@dataclass(frozen=True)
class StudyEvent:
    """One event of ``Study.watch()``: ``kind`` is ``"SNAPSHOT"`` (first),
    ``"TRIAL_CREATED"``, ``"TRIAL_REPORTED"``, ``"TRIAL_FINISHED"`` or
    ``"STUDY_FINISHED"`` (last); ``state`` the study's state then."""
    kind: str
    state: str
    trial: Optional[TrialRecord]
    best_trial: Optional[TrialRecord]
    trial_counts: Dict[str, int]
    proto: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, e: study_pb2.StudyEvent) -> "StudyEvent":
        """The event of a StudyEvent message."""
        return cls(
            kind=study_pb2.StudyEvent.Kind.Name(e.kind),
            state=study_pb2.StudyState.Name(e.study.state),
            trial=TrialRecord.from_proto(e.trial) if e.HasField("trial")
            else None,
            best_trial=TrialRecord.from_proto(e.best_trial)
            if e.HasField("best_trial") else None,
            trial_counts=dict(e.study.trial_counts), proto=e)


class BestTrials(List[TrialRecord]):
    """``Study.best_trials()``: the best trials, best first (with several
    objectives, the Pareto front by crowding distance). Multi-objective
    studies also carry ``hypervolume``, ``reference_point`` and
    ``front_size``; re-evaluated studies ``seed_runs`` (trial number ->
    (runs, mean, stddev))."""
    hypervolume: float = 0.0
    reference_point: Tuple[float, ...] = ()
    front_size: int = 0
    seed_runs: Dict[int, Tuple[int, float, float]]


def parse_spec(spec: Any) -> spec_pb2.StudySpec:
    """A study spec from a StudySpec message, a dict, YAML or JSON text, or
    the path of a YAML or JSON file. Unknown fields are refused, naming
    them."""
    if isinstance(spec, spec_pb2.StudySpec):
        return spec
    if isinstance(spec, os.PathLike) or (
            isinstance(spec, str) and "\n" not in spec
            and os.path.isfile(spec)):
        with open(spec, encoding="utf-8") as f:
            spec = f.read()
    if isinstance(spec, (str, bytes)):
        import yaml  # python3-yaml
        try:
            loaded = yaml.safe_load(spec)
        except yaml.YAMLError as e:
            raise InvalidArgument(f"spec: not valid YAML or JSON: {e}") from e
        if not isinstance(loaded, dict):
            raise InvalidArgument(
                "spec: expected a mapping of fields (or the path of a spec "
                f"file), got {str(spec)[:80]!r}")
        spec = loaded
    if not isinstance(spec, Mapping):
        raise InvalidArgument("spec: expected a dict, YAML text, a path or a "
                              f"StudySpec, not {type(spec).__name__}")
    message = spec_pb2.StudySpec()
    try:
        json_format.ParseDict(_jsonable(spec), message)
    except json_format.ParseError as e:
        raise InvalidArgument(f"spec: {e}") from e
    return message


def _jsonable(value: Any) -> Any:
    """YAML's dates and the like as strings; everything else as is."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return value


def finite_or_name(value: float) -> Union[float, str]:
    """A metric for the trial protocol's JSON: NaN and infinities as the
    strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
