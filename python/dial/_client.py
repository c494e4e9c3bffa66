"""The client: connect(), studies, ask/tell trials and optimize()."""
from __future__ import annotations

import os
import random
import threading
import time
import uuid
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Sequence, Tuple, Union)

import grpc

from . import _errors
from ._errors import InvalidArgument, Unavailable, from_rpc_error
from ._trials import Trial, _Optimizer
from ._types import (BestTrials, StudyEvent, TrialRecord, parse_spec,
                     state_number, to_param_value)
from .v1 import service_pb2, service_pb2_grpc, spec_pb2, study_pb2

DEFAULT_ADDRESS = "127.0.0.1:7070"
# A response of up to this size (a page of 1000 trials with their params).
_MAX_MESSAGE = 64 * 1024 * 1024


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _is_loopback(address: str) -> bool:
    """Whether a gRPC target is on this host (localhost, 127.x, ::1, a unix
    socket)."""
    for scheme in ("dns:///", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            address = address[len(scheme):]
    if address.startswith("unix:"):
        return True
    if address.startswith("["):
        host = address[1:address.find("]")] if "]" in address else address
    elif address.count(":") == 1:
        host = address.rsplit(":", 1)[0]
    else:
        host = address
    return host in ("localhost", "::1") or host.startswith("127.")


def connect(address: Optional[str] = None, token: Optional[str] = None,
            tls_ca: Optional[str] = None, *, tls_cert: Optional[str] = None,
            tls_key: Optional[str] = None,
            tls_server_name: Optional[str] = None,
            client_id: Optional[str] = None, timeout: float = 30.0,
            retries: int = 6, insecure: bool = False) -> "Client":
    """Connects to a Dial scheduler.

    Args:
      address: ``host:port``, or several (``"a:7070,b:7070"``): a leader
        and its standbys, followed as docs/ha.md says; default
        ``$DIAL_SCHEDULER``, else ``127.0.0.1:7070``.
      token: bearer token; default ``$DIAL_TOKEN`` (empty: none).
      tls_ca: PEM file of the CA that signed the scheduler's certificate;
        with it the connection uses TLS. ``tls_cert``/``tls_key``: a client
        certificate for a scheduler that requires one (mTLS).
      tls_server_name: the name to check in the scheduler's certificate when
        the address does not carry it.
      client_id: this program's ask/tell identity (see ``Study.ask``);
        default a fresh random one.
      timeout: seconds per call.
      retries: how often an idempotent call is retried on UNAVAILABLE, with
        exponential backoff (0.1 s doubling, at most 5 s).
      insecure: send the token without TLS to an address that is not on
        this host (a network you trust); without it that is refused with
        ``dial.InvalidArgument``.

    The connection is lazy: an unreachable scheduler shows at the first
    call, as ``dial.Unavailable``.
    """
    address = address or os.environ.get("DIAL_SCHEDULER") or DEFAULT_ADDRESS
    if token is None:
        token = os.environ.get("DIAL_TOKEN", "")
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE),
               ("grpc.max_send_message_length", _MAX_MESSAGE)]
    if (tls_cert is None) != (tls_key is None):
        raise InvalidArgument("tls_cert: give tls_cert and tls_key together")
    addresses = [a.strip() for a in address.split(",") if a.strip()]
    if not addresses:
        raise InvalidArgument("address: no scheduler address")
    channels = []
    if tls_ca:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca),
            private_key=_read(tls_key) if tls_key else None,
            certificate_chain=_read(tls_cert) if tls_cert else None)
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        for a in addresses:
            channels.append((a, grpc.secure_channel(a, credentials,
                                                    options=options)))
    else:
        if tls_cert:
            raise InvalidArgument("tls_cert: a client certificate needs "
                                  "tls_ca (TLS)")
        for a in addresses:
            if token and not insecure and not _is_loopback(a):
                raise InvalidArgument(
                    f"tls_ca: refusing to send a token in plaintext to "
                    f"'{a}'; give tls_ca (TLS), or insecure=True on a "
                    f"network you trust")
            channels.append((a, grpc.insecure_channel(a, options=options)))
    return Client(channels[0][1], token=token, client_id=client_id,
                  timeout=timeout, retries=retries, address=address,
                  channels=channels)


class Client:
    """A connection to a scheduler. Thread-safe: share one among threads.
    Use ``dial.connect()`` to make one; ``close()`` (or ``with``) ends it."""

    def __init__(self, channel: grpc.Channel, *, token: str = "",
                 client_id: Optional[str] = None, timeout: float = 30.0,
                 retries: int = 6, address: str = "",
                 channels: Optional[List[Tuple[str, grpc.Channel]]] = None):
        # A leader and its standbys: (address, channel), the current one
        # first; a standby's refusal moves calls to the leader it names.
        self._channels = channels or [(address, channel)]
        self._stubs = [service_pb2_grpc.StudyServiceStub(c)
                       for _, c in self._channels]
        self._current = 0
        # The first address's stub (tests put a proxy in its place).
        self._stub = self._stubs[0]
        self._metadata = (("authorization", "Bearer " + token),) if token \
            else ()
        self.address = address
        self.client_id = client_id or f"py-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.retries = retries
        self._lock = threading.Lock()
        # Guards _current only: callers may hold _lock around a call.
        self._pick_lock = threading.Lock()
        # Per (study, client id): open trials an earlier run of that client
        # left, not handed out yet (Study._take_open).
        self._open_trials: Dict[Tuple[str, str], List[study_pb2.Trial]] = {}

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # A connection is shared, not copied: scikit-learn's clone() deep-copies
    # the parameters of an estimator such as DialSearchCV(client=...).
    def __copy__(self) -> "Client":
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Client":
        return self

    def __reduce__(self) -> Any:
        raise TypeError("a dial.Client is a live connection and cannot be "
                        "pickled; connect again where it is unpickled")

    def close(self) -> None:
        """Closes the connection."""
        for _, channel in self._channels:
            channel.close()

    # -- calls ------------------------------------------------------------
    def _call(self, method: str, request: Any, *, idempotent: bool = True,
              on_retry: Optional[Callable[[Exception], Any]] = None) -> Any:
        """Calls `method`; on UNAVAILABLE retries an idempotent call with
        backoff. A non-idempotent call is retried only with an `on_retry`
        that turns the error of a repeated call into its answer (the first
        try went through) or re-raises it."""
        delay, tries, hops = 0.1, 0, 0
        while True:
            rpc = getattr(self._stub_now(), method)
            try:
                return rpc(request, timeout=self.timeout,
                           metadata=self._metadata)
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                # A standby did nothing: straight to the leader it names,
                # at most once per address.
                if isinstance(error, Unavailable) and self._follow(e) and \
                        hops < len(self._channels):
                    hops += 1
                    continue
                if tries > 0 and on_retry is not None and \
                        not isinstance(error, Unavailable):
                    return on_retry(error)
                if not isinstance(error, Unavailable) or \
                        tries >= self.retries or \
                        not (idempotent or on_retry is not None):
                    raise error from None
            tries += 1
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)

    def _stub_now(self) -> Any:
        """The stub of the address calls go to now."""
        with self._pick_lock:
            return self._stub if self._current == 0 else \
                self._stubs[self._current]

    def _follow(self, e: grpc.RpcError) -> bool:
        """After UNAVAILABLE: moves to the leader a standby named, if it is
        one of the addresses given, else to the next address. True when a
        standby refused the call (so it did nothing)."""
        if len(self._channels) < 2:
            return False
        trailers = dict(e.trailing_metadata() or ())
        standby = "dial-standby" in trailers
        leader = trailers.get("dial-leader", "")
        names = [a for a, _ in self._channels]
        with self._pick_lock:
            if standby and leader in names:
                self._current = names.index(leader)
            else:
                self._current = (self._current + 1) % len(names)
        return standby

    # -- studies ----------------------------------------------------------
    def create_study(self, spec: Any, *, exist_ok: bool = False) -> "Study":
        """Creates a study from a spec: a dict, YAML or JSON text, a path, or
        a ``dial.v1.spec_pb2.StudySpec``. With ``exist_ok``, an existing
        study of that name is returned instead (its spec is not compared).
        Raises ``dial.InvalidArgument`` naming the field of a bad spec, and
        ``dial.AlreadyExists``."""
        message = parse_spec(spec)
        request = service_pb2.CreateStudyRequest(spec=message)

        def retried(error: Exception) -> Any:
            # A retry that finds the name taken: the first try created it.
            if isinstance(error, _errors.AlreadyExists):
                return service_pb2.CreateStudyResponse(
                    study=self._get_study(message.name))
            raise error
        try:
            study = self._call("CreateStudy", request, idempotent=False,
                               on_retry=retried).study
        except _errors.AlreadyExists:
            if not exist_ok:
                raise
            study = self._get_study(message.name)
        return Study(self, study.name, study)

    def _get_study(self, name: str) -> study_pb2.Study:
        return self._call("GetStudy",
                          service_pb2.GetStudyRequest(study=name)).study

    def study(self, name: str) -> "Study":
        """The study of that name (``dial.NotFound`` if there is none)."""
        return Study(self, name, self._get_study(name))

    def studies(self, page_size: int = 100) -> Iterator["Study"]:
        """Every study this token may see, by name, paging transparently."""
        token = ""
        while True:
            response = self._call("ListStudies", service_pb2.ListStudiesRequest(
                page_size=page_size, page_token=token))
            for s in response.studies:
                yield Study(self, s.name, s)
            token = response.next_page_token
            if not token:
                return

    def workers(self) -> List[Dict[str, Any]]:
        """The registered workers: id, host, last_seen and running trials."""
        response = self._call("ListWorkers", service_pb2.ListWorkersRequest())
        return [{"id": w.id, "host": w.host,
                 "last_seen": w.last_seen.ToDatetime(),
                 "slots": w.resources.slots,
                 "gpus": [g.id for g in w.resources.gpus],
                 "running": [(r.study, r.number) for r in w.running]}
                for w in response.workers]


def _states(states: Union[None, str, int, Iterable[Union[str, int]]]
            ) -> List[int]:
    if states is None:
        return []
    if isinstance(states, (str, int)):
        states = [states]
    return [state_number(s) for s in states]


class Study:
    """One study. Get it from ``Client.create_study``, ``Client.study`` or
    ``Client.studies``."""

    def __init__(self, client: Client, name: str,
                 proto: Optional[study_pb2.Study] = None):
        self.client = client
        self.name = name
        self._proto = proto

    def __repr__(self) -> str:
        return f"Study({self.name!r})"

    # -- what it is -------------------------------------------------------
    def refresh(self) -> study_pb2.Study:
        """Reads the study again; returns its message."""
        self._proto = self.client._get_study(self.name)
        return self._proto

    @property
    def proto(self) -> study_pb2.Study:
        """The study message as last read (``refresh()`` reads it again)."""
        return self._proto if self._proto is not None else self.refresh()

    @property
    def spec(self):
        """The spec as stored: defaults filled in, seeds fixed."""
        return self.proto.spec

    @property
    def state(self) -> str:
        """``"STUDY_ACTIVE"``, ``"STUDY_COMPLETED"`` or ``"STUDY_STOPPED"``,
        read now."""
        return study_pb2.StudyState.Name(self.refresh().state)

    @property
    def trial_counts(self) -> Dict[str, int]:
        """Trials by state, read now."""
        return dict(self.refresh().trial_counts)

    @property
    def objectives(self) -> List[Tuple[str, str]]:
        """(metric, goal) of each objective, in order."""
        spec = self.spec
        objectives = list(spec.objectives) or [spec.objective]
        return [(o.metric, spec_pb2.Goal.Name(o.goal))
                for o in objectives]

    # -- reading trials ---------------------------------------------------
    def trials(self, states: Any = None, page_size: int = 1000
               ) -> Iterator[TrialRecord]:
        """The study's trials by number, paging transparently. ``states``:
        one state or several (``"COMPLETED"``, ``["RUNNING", "PAUSED"]``);
        default all."""
        token = ""
        wanted = _states(states)
        while True:
            response = self.client._call(
                "ListTrials", service_pb2.ListTrialsRequest(
                    study=self.name, states=wanted, page_size=page_size,
                    page_token=token))
            for t in response.trials:
                yield TrialRecord.from_proto(t)
            token = response.next_page_token
            if not token:
                return

    def get_trial(self, number: int, history: bool = True) -> TrialRecord:
        """One trial, with its whole metric history (paged) and lineage."""
        points: List[study_pb2.MetricPoint] = []
        token = ""
        while True:
            response = self.client._call(
                "GetTrial", service_pb2.GetTrialRequest(
                    study=self.name, trial=number,
                    # Without history, one point: the least the API sends.
                    history_page_size=10000 if history else 1,
                    history_page_token=token))
            points.extend(response.trial.metric_history)
            token = response.next_history_page_token
            if not history or not token:
                return TrialRecord.from_proto(
                    response.trial, points if history else ())

    def best_trials(self, k: int = 1) -> BestTrials:
        """The best ``k`` COMPLETED trials, best first (several objectives:
        the Pareto front, with ``hypervolume``). Empty before the first
        completed trial."""
        response = self.client._call(
            "GetBestTrials", service_pb2.GetBestTrialsRequest(
                study=self.name, count=k))
        best = BestTrials(TrialRecord.from_proto(t) for t in response.trials)
        best.hypervolume = response.hypervolume
        best.reference_point = tuple(response.reference_point)
        best.front_size = response.front_size
        best.seed_runs = {r.trial: (r.runs, r.mean, r.stddev)
                          for r in response.seed_runs}
        return best

    @property
    def best_trial(self) -> Optional[TrialRecord]:
        """The best completed trial, or None."""
        best = self.best_trials(1)
        return best[0] if best else None

    def importance(self, top_quantile: float = 0.0) -> Dict[str, float]:
        """How much each parameter matters (PED-ANOVA over the COMPLETED
        trials), most important first; the shares sum to 1."""
        response = self.client._call(
            "GetParameterImportance",
            service_pb2.GetParameterImportanceRequest(
                study=self.name, top_quantile=top_quantile))
        return {p.name: p.importance for p in response.params}

    def watch(self) -> Iterator[StudyEvent]:
        """Events as they happen: a SNAPSHOT first, then TRIAL_CREATED,
        TRIAL_REPORTED and TRIAL_FINISHED, and STUDY_FINISHED last, after
        which the iterator ends. Break out of the loop to stop watching."""
        stream = self.client._stub_now().WatchStudy(
            service_pb2.WatchStudyRequest(study=self.name),
            metadata=self.client._metadata)
        try:
            for response in stream:
                yield StudyEvent.from_proto(response.event)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(e) from None
        finally:
            stream.cancel()

    def to_dataframe(self, states: Any = None):
        """The trials as a pandas DataFrame, a row each: number, state,
        value (values_0.. with several objectives), params_<name>,
        metrics_<name>, times, duration (s), last_step, error. Needs
        pandas (Debian: python3-pandas)."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Study.to_dataframe needs pandas (Debian: "
                              "python3-pandas)") from e
        rows = []
        for t in self.trials(states):
            row: Dict[str, Any] = {"number": t.number, "state": t.state,
                                   "value": t.value}
            if len(t.values) > 1:
                for i, v in enumerate(t.values):
                    row[f"values_{i}"] = v
            row.update({f"params_{k}": v for k, v in t.params.items()})
            row.update({f"metrics_{k}": v for k, v in t.metrics.items()})
            duration = t.duration
            row.update({"create_time": t.create_time,
                        "start_time": t.start_time, "end_time": t.end_time,
                        "duration": duration.total_seconds()
                        if duration else None,
                        "last_step": t.last_step, "error": t.error})
            rows.append(row)
        return pandas.DataFrame(rows)

    # -- changing it ------------------------------------------------------
    @property
    def note(self) -> str:
        """The study's note (plain text; "" for none), read now."""
        return self.refresh().note

    def set_note(self, note: str, trial: Optional[int] = None
                 ) -> Union[study_pb2.Study, TrialRecord]:
        """Sets the study's note, or trial ``trial``'s (``""`` clears it):
        plain text, at most 2,000 characters, no control characters but
        newline and tab. The study's owner or an admin. Returns the study
        message, or the trial's record."""
        request = service_pb2.SetNoteRequest(study=self.name, note=note)
        if trial is not None:
            request.trial = int(trial)
        response = self.client._call("SetNote", request)
        if trial is not None:
            return TrialRecord.from_proto(response.trial)
        self._proto = response.study
        return response.study

    def stop(self) -> None:
        """Stops the study: no new trials; running ones get STOP at their
        next report."""
        self._proto = self.client._call(
            "StopStudy", service_pb2.StopStudyRequest(study=self.name)).study

    def update(self, max_trials: Optional[int] = None,
               max_parallel_trials: Optional[int] = None) -> None:
        """Changes the budget. Raising ``max_trials`` of a COMPLETED study
        makes it active again."""
        current = self.refresh()
        self._proto = self.client._call(
            "UpdateStudy", service_pb2.UpdateStudyRequest(
                study=self.name,
                max_trials=max_trials if max_trials is not None
                else current.spec.budget.max_trials,
                max_parallel_trials=max_parallel_trials or 0)).study

    def delete(self) -> None:
        """Deletes the study and its trials."""
        self.client._call("DeleteStudy",
                          service_pb2.DeleteStudyRequest(study=self.name),
                          idempotent=False)

    def enqueue(self, params: Union[Mapping[str, Any],
                                    Sequence[Mapping[str, Any]]]) -> List[int]:
        """Queues configurations (one dict, or a list of them) to be
        evaluated before the searcher's own; returns their queue ids."""
        if isinstance(params, Mapping):
            params = [params]
        request = service_pb2.EnqueueTrialsRequest(study=self.name)
        for p in params:
            queued = request.trials.add()
            for name, value in p.items():
                queued.params[name].CopyFrom(to_param_value(name, value))
        response = self.client._call("EnqueueTrials", request,
                                     idempotent=False)
        return [q.id for q in response.queued]

    def reevaluate(self, top: int, seeds: int = 3) -> int:
        """Runs the ``top`` best configurations again with ``seeds`` new
        seeds each; returns the number of trials queued."""
        response = self.client._call(
            "ReevaluateTrials", service_pb2.ReevaluateTrialsRequest(
                study=self.name, top=top, seeds=seeds), idempotent=False)
        return len(response.queued)

    # -- ask/tell ---------------------------------------------------------
    def _suggest(self, count: int, client_id: str
                 ) -> service_pb2.SuggestTrialsResponse:
        # Idempotent with a client id: a repeat returns the open trials.
        return self.client._call(
            "SuggestTrials", service_pb2.SuggestTrialsRequest(
                study=self.name, count=count, client_id=client_id),
            idempotent=bool(client_id))

    def _take_open(self, cid: str, n: int) -> List[study_pb2.Trial]:
        """Up to n open trials of client `cid` (or of its "cid/..." ids)
        left by an earlier run, each handed out once per Client."""
        if not cid:
            return []  # anonymous trials are never handed out again
        client = self.client
        with client._lock:
            key = (self.name, cid)
            if key not in client._open_trials:
                prefix = cid + "/"
                client._open_trials[key] = [
                    t.proto for t in self.trials(states="RUNNING")
                    if t.client_id == cid or t.client_id.startswith(prefix)]
            pending = client._open_trials[key]
            taken, pending[:] = pending[:n], pending[n:]
            return taken

    def _next_trials(self, n: int, cid: str) -> Tuple[List["Trial"], bool]:
        """One SuggestTrials round: (trials, done). New trials are asked
        for as "<cid>/<random>", so that every call gets new ones while
        `cid`'s earlier trials are still open, and a restarted program with
        the same `cid` finds its open trials by the prefix."""
        resumed = self._take_open(cid, n)
        if resumed:
            return [Trial(self, t) for t in resumed], False
        response = self._suggest(
            n, f"{cid}/{uuid.uuid4().hex[:12]}" if cid else "")
        return [Trial(self, t) for t in response.trials], response.done

    def ask(self, n: Optional[int] = None, *, client_id: Optional[str] = None,
            timeout: Optional[float] = None
            ) -> Union[Optional["Trial"], List["Trial"]]:
        """Asks for a trial to evaluate (``ask()``) or up to ``n``
        (``ask(n)``, a list).

        Waits while none can start (the parallelism limit), up to
        ``timeout`` seconds (default: as long as it takes). Returns None (an
        empty list) once the study is done.

        Trials are owned by ``client_id`` (default the client's). A program
        restarted with the same ``client_id`` gets the trials its last run
        left open back first, with ``trial.resumed`` set and ``last_step``
        the last step recorded.
        """
        cid = client_id if client_id is not None else self.client.client_id
        deadline = None if timeout is None else time.monotonic() + timeout
        trials = self._wait_for_trials(1 if n is None else n, cid, deadline)
        if n is None:
            return trials[0] if trials else None
        return trials

    def _wait_for_trials(self, n: int, cid: str, deadline: Optional[float],
                         stop: Optional[threading.Event] = None
                         ) -> List["Trial"]:
        """Asks until trials come, polling with a growing pause; empty once
        the study is done, at `deadline` (time.monotonic()), or when `stop`
        is set."""
        delay = 0.01
        while stop is None or not stop.is_set():
            trials, done = self._next_trials(n, cid)
            if trials or done:
                return trials
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return []
            pause = delay if deadline is None else min(delay, deadline - now)
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
            delay = min(delay * 1.5, 0.5)
        return []

    def tell(self, trial: Union["Trial", int], value: Any = None, *,
             error: Optional[str] = None, **metrics: float) -> TrialRecord:
        """Finishes a trial by number (or Trial): as ``Trial.complete`` with
        a value or metrics, or as ``Trial.fail`` with ``error``."""
        handle = trial if isinstance(trial, Trial) else Trial(
            self, study_pb2.Trial(study=self.name, number=trial,
                                  last_step=-1))
        if error is not None:
            return handle.fail(error)
        return handle.complete(value, **metrics)

    def optimize(self, fn: Callable[["Trial"], Any],
                 n_trials: Optional[int] = None, n_jobs: int = 1,
                 client_id: Optional[str] = None,
                 timeout: Optional[float] = None,
                 catch: Tuple[type, ...] = ()) -> int:
        """Runs ``fn(trial)`` on trials the study suggests, in ``n_jobs``
        threads, like Optuna's ``study.optimize``.

        ``fn`` returns the objective (a number; with several objectives a
        sequence in their order; or a dict of final metrics), or raises
        ``dial.Pruned`` when ``trial.report`` told it to stop. Any other
        exception fails the trial; it is re-raised, ending the loop, unless
        it is one of ``catch``.

        Ends after ``n_trials`` trials (default: until the study's budget is
        used), after ``timeout`` seconds (no new trial starts then), or when
        the study is done. Returns the number of trials finished here.

        Interrupting is safe: trials that were running stay open, owned by
        ``client_id``; run ``optimize`` again with the same ``client_id``
        and they are evaluated again first (reports of steps already
        recorded are skipped).
        """
        if n_jobs < 1:
            raise InvalidArgument("n_jobs: must be at least 1")
        if n_trials is not None and n_trials < 0:
            raise InvalidArgument("n_trials: must not be negative")
        runner = _Optimizer(self, fn, n_trials, n_jobs,
                            client_id or self.client.client_id, timeout,
                            catch)
        return runner.run()
