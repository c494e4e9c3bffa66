"""The client half of the SDK (dial.connect, Client, Study, Trial, optimize)
against a real dial-scheduler: plaintext, and with TLS, client certificates
and bearer tokens (deploy/dev-ca.sh)."""
import datetime
import math
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import dial
from dial.v1 import study_pb2
from conftest import SCHEDULER_BIN, SOURCE_DIR, _start, read_token

# --------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """One plaintext scheduler for the module's tests (each makes studies of
    its own names)."""
    d = tmp_path_factory.mktemp("scheduler")
    p = _start([SCHEDULER_BIN, "--db=" + str(d / "dial.db"),
                "--checkpoint-root=" + str(d / "ckpt"),
                "--listen=127.0.0.1:0", "--log-level=warn"],
               str(d), "scheduler", "listening on")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def tls_scheduler(tmp_path_factory, pki):
    """A scheduler with TLS, client certificates and tokens."""
    d = tmp_path_factory.mktemp("tls-scheduler")
    p = _start([SCHEDULER_BIN, "--db=" + str(d / "dial.db"),
                "--checkpoint-root=" + str(d / "ckpt"),
                "--listen=127.0.0.1:0", "--log-level=warn",
                "--tls-cert=" + os.path.join(pki, "server.crt"),
                "--tls-key=" + os.path.join(pki, "server.key"),
                "--tls-client-ca=" + os.path.join(pki, "ca.crt"),
                "--auth-tokens=" + os.path.join(pki, "auth-tokens")],
               str(d), "scheduler", "listening on")
    yield p
    p.stop()


@pytest.fixture
def client(scheduler):
    with dial.connect(scheduler.address, token="", retries=2) as c:
        yield c


def unique(prefix):
    prefix = re.sub(r"[^A-Za-z0-9_.-]+", "-", prefix).strip("-")[:40]
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def spec(name, max_trials=10, parallel=None, params=None, **fields):
    s = {"name": name,
         "objective": {"metric": "loss", "goal": "MINIMIZE"},
         "search_space": params or [
             {"name": "x", "float": {"min": -5.0, "max": 5.0}}],
         "searcher": {"random": {"seed": 7}},
         "budget": {"max_trials": max_trials,
                    "max_parallel_trials": parallel or
                    min(max_trials, 1000)}}
    s.update(fields)
    if "objectives" in fields:
        del s["objective"]
    return s


@pytest.fixture
def new_study(client, request):
    """new_study(max_trials=10, parallel=None, params=None, **fields): a new
    ask/tell study named after the test."""
    def make(max_trials=10, parallel=None, params=None, **fields):
        return client.create_study(spec(unique(request.node.name),
                                        max_trials, parallel, params,
                                        **fields))
    return make


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout=30.0, what="the condition"):
    """Polls condition() until it returns something truthy; fails after
    timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def bounded(seconds, fn, *args, **kwargs):
    """fn(*args, **kwargs) in a thread: its result, or its exception
    re-raised; fails the test if it runs past `seconds` (an SDK call that
    hangs must not hang the suite)."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: B902 - re-raised below
            out["error"] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} ran past {seconds} s")
    if "error" in out:
        raise out["error"]
    return out["value"]


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class StubProxy:
    """Wraps a client's stub: counts calls per method, and makes the first
    call of each method in `lose` go through to the scheduler and then fail
    UNAVAILABLE, as if its answer was lost on the way back."""

    def __init__(self, stub, lose=()):
        self._stub = stub
        self.lose = set(lose)
        self.calls = {}
        self.failures = {}

    def __getattr__(self, name):
        rpc = getattr(self._stub, name)

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            try:
                result = rpc(*args, **kwargs)
            except grpc.RpcError:
                self.failures[name] = self.failures.get(name, 0) + 1
                raise
            if name in self.lose:
                self.lose.discard(name)
                raise FakeRpcError(grpc.StatusCode.UNAVAILABLE,
                                   "connection reset (injected)")
            return result
        return call


# --------------------------------------------------------------------------
# dial.connect and Client


def test_connect_defaults_and_argument_checks(monkeypatch, pki):
    monkeypatch.delenv("DIAL_SCHEDULER", raising=False)
    monkeypatch.delenv("DIAL_TOKEN", raising=False)
    c1, c2 = dial.connect(), dial.connect()
    try:
        assert c1.address == "127.0.0.1:7070"
        assert c1._metadata == ()  # no token: no authorization header
        assert c1.client_id.startswith("py-")
        assert c1.client_id != c2.client_id
    finally:
        c1.close()
        c2.close()
    with dial.connect("127.0.0.1:1", token="t", client_id="me",
                      timeout=3.5, retries=4) as c:
        assert (c.address, c.client_id, c.timeout, c.retries) == \
            ("127.0.0.1:1", "me", 3.5, 4)
    crt, key = os.path.join(pki, "user.crt"), os.path.join(pki, "user.key")
    with pytest.raises(dial.InvalidArgument) as e:
        dial.connect("127.0.0.1:1", tls_cert=crt, tls_key=key)
    assert e.value.field == "tls_cert" and "tls_ca" in e.value.message
    with pytest.raises(dial.InvalidArgument) as e:
        dial.connect("127.0.0.1:1", tls_ca=os.path.join(pki, "ca.crt"),
                     tls_cert=crt)
    assert e.value.field == "tls_cert"


def test_a_token_is_never_sent_in_plaintext_beyond_this_host(monkeypatch):
    # Security round two, finding 12: without tls_ca the SDK sent the
    # token in plaintext to any host, with no warning.
    monkeypatch.delenv("DIAL_TOKEN", raising=False)
    for remote in ("10.20.30.40:7070", "scheduler.example.org:7070"):
        with pytest.raises(dial.InvalidArgument) as e:
            dial.connect(remote, token="secret-token")
        assert "plaintext" in e.value.message
        assert "secret-token" not in e.value.message
        dial.connect(remote, token="secret-token", insecure=True).close()
        dial.connect(remote).close()  # no token, nothing to leak
    monkeypatch.setenv("DIAL_TOKEN", "from-env")
    with pytest.raises(dial.InvalidArgument):
        dial.connect("10.20.30.40:7070")
    for local in ("127.0.0.1:1", "localhost:1", "[::1]:1", "unix:/tmp/x"):
        dial.connect(local, token="t").close()


def test_connect_reads_address_and_token_from_the_environment(
        monkeypatch, pki, tls_scheduler):
    tls = dict(tls_ca=os.path.join(pki, "ca.crt"),
               tls_cert=os.path.join(pki, "user.crt"),
               tls_key=os.path.join(pki, "user.key"))
    monkeypatch.setenv("DIAL_SCHEDULER", tls_scheduler.address)
    monkeypatch.setenv("DIAL_TOKEN", read_token(pki, "alice"))
    name = unique("env")
    with dial.connect(**tls) as c:
        assert c.address == tls_scheduler.address
        study = c.create_study(spec(name, 2))
        assert study.proto.owner == "alice"
    # Explicit arguments win over the environment.
    monkeypatch.setenv("DIAL_SCHEDULER", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("DIAL_TOKEN", "not-a-token")
    with dial.connect(tls_scheduler.address, token=read_token(pki, "bob"),
                      retries=0, **tls) as c:
        assert c.create_study(spec(unique("env-bob"), 2)).proto.owner == \
            "bob"
    # $DIAL_TOKEN is what the call carries when no token is given.
    monkeypatch.setenv("DIAL_SCHEDULER", tls_scheduler.address)
    with dial.connect(retries=0, **tls) as c:
        with pytest.raises(dial.Unauthenticated):
            c.study(name)
    monkeypatch.delenv("DIAL_TOKEN")
    with dial.connect(retries=0, **tls) as c:
        with pytest.raises(dial.Unauthenticated):
            list(c.studies())


def test_client_is_a_context_manager_and_close_ends_it(scheduler):
    with dial.connect(scheduler.address, token="") as c:
        assert isinstance(c, dial.Client)
        list(c.studies())
    with pytest.raises(ValueError, match="closed channel"):
        list(c.studies())
    c = dial.connect(scheduler.address, token="")
    c.close()
    with pytest.raises(ValueError, match="closed channel"):
        c.study("anything")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_several_addresses_move_past_a_dead_one(scheduler):
    """A leader and its standbys (docs/ha.md): an address where nothing
    listens is left for the next one."""
    dead = f"127.0.0.1:{_free_port()}"
    with dial.connect(f"{dead}, {scheduler.address}", token="",
                      retries=4) as c:
        assert isinstance(list(c.studies()), list)


def test_a_standbys_refusal_goes_to_the_leader_it_names(scheduler):
    """A stand-in standby answers every call UNAVAILABLE with dial-standby
    and the leader's address: the call goes there at once (no retry
    backoff, nothing counted against `retries`). A leader named outside
    the given addresses is not followed (the token would go to an address
    the user did not name): the next listed one is tried instead."""
    from concurrent import futures
    calls = []

    class Standby(grpc.GenericRpcHandler):
        def __init__(self, leader):
            self.leader = leader

        def service(self, details):
            def refuse(request, context):
                calls.append(details.method)
                context.set_trailing_metadata(
                    (("dial-standby", "1"), ("dial-leader", self.leader)))
                context.abort(grpc.StatusCode.UNAVAILABLE, "standby")
            return grpc.unary_unary_rpc_method_handler(refuse)

    # Nothing listens there: followed, the call would fail (retries=0).
    outside = f"127.0.0.1:{_free_port()}"
    for leader in (scheduler.address, outside):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((Standby(leader),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with dial.connect(f"127.0.0.1:{port},{scheduler.address}",
                              token="", retries=0) as c:
                assert isinstance(list(c.studies()), list)
        finally:
            server.stop(None)
    assert calls, "the stand-in standby was never asked"


def test_create_study_from_dict_yaml_path_and_exist_ok(client, tmp_path):
    name = unique("dict")
    study = client.create_study(spec(name, 3))
    assert isinstance(study, dial.Study) and study.name == name
    assert study.proto.name == name and study.state == "STUDY_ACTIVE"

    yaml_name = unique("yaml")
    study = client.create_study(textwrap.dedent(f"""\
        name: {yaml_name}
        objective: {{metric: acc, goal: MAXIMIZE}}
        search_space:
          - {{name: lr, float: {{min: 1.0e-4, max: 1.0, scale: LOG}}}}
          - {{name: opt, categorical: {{values: [sgd, adam]}}}}
        budget: {{max_trials: 4, max_parallel_trials: 2}}
        """))
    assert study.name == yaml_name
    assert study.objectives == [("acc", "MAXIMIZE")]
    assert [p.name for p in study.spec.search_space] == ["lr", "opt"]
    assert study.spec.budget.max_parallel_trials == 2

    json_name = unique("json")
    assert client.create_study(
        '{"name": "%s", "objective": {"metric": "loss", "goal": "MINIMIZE"}, '
        '"search_space": '
        '[{"name": "x", "int": {"min": 0, "max": 3}}], '
        '"budget": {"max_trials": 2}}' % json_name).name == json_name

    # A path: the example (os.PathLike), and a str path of a tmp file.
    example = pathlib.Path(SOURCE_DIR, "examples", "synthetic-bayesian.yaml")
    study = client.create_study(example, exist_ok=True)
    assert study.name == "synthetic-bayesian"
    assert study.spec.searcher.bayesian.initial_trials == 6
    assert study.spec.trial.trainer["dataset"] == "synthetic"
    study.stop()  # no worker should run its trials
    path_name = unique("path")
    f = tmp_path / "spec.yaml"
    f.write_text(f"name: {path_name}\n"
                 "objective: {metric: loss, goal: MINIMIZE}\n"
                 "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                 "budget: {max_trials: 7}\n")
    study = client.create_study(str(f))
    assert study.name == path_name
    assert study.spec.budget.max_trials == 7

    # exist_ok returns the existing study, whatever the spec says.
    with pytest.raises(dial.AlreadyExists) as e:
        client.create_study(spec(name, 9))
    assert e.value.code == "ALREADY_EXISTS" and name in e.value.message
    again = client.create_study(spec(name, 9), exist_ok=True)
    assert again.name == name and again.spec.budget.max_trials == 3


def test_create_study_refuses_a_bad_spec_naming_the_field(client):
    with pytest.raises(dial.InvalidArgument) as e:
        client.create_study(spec(unique("bad"), max_trials=0))
    assert e.value.field == "budget.max_trials"
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(dial.InvalidArgument) as e:
        client.create_study(spec(unique("bad"), 3, parallel=5))
    assert e.value.field == "budget.max_parallel_trials"
    with pytest.raises(dial.InvalidArgument) as e:
        client.create_study(spec(unique("bad"), params=[
            {"name": "x", "float": {"min": 1.0, "max": 0.0}}]))
    assert e.value.field.startswith("search_space[0]")
    with pytest.raises(dial.InvalidArgument) as e:
        client.create_study(spec(unique("bad"), bogus_key=1))
    assert "bogus_key" in e.value.message
    with pytest.raises(dial.InvalidArgument) as e:
        client.create_study(spec("-not a name"))
    assert e.value.field == "name"
    with pytest.raises(dial.InvalidArgument):
        client.create_study("/no/such/spec.yaml")
    with pytest.raises(dial.InvalidArgument):
        client.create_study(42)
    with pytest.raises(dial.InvalidArgument):
        client.create_study("name: [unclosed")


def test_parse_spec_reads_every_form_and_names_unknown_fields(tmp_path):
    d = spec("parsed", 3)
    message = dial.parse_spec(d)
    assert message.name == "parsed" and message.budget.max_trials == 3
    assert message.search_space[0].float.max == 5.0
    assert dial.parse_spec(message) is message
    f = tmp_path / "s.yaml"
    f.write_text("name: parsed\nbudget: {max_trials: 3}\n")
    assert dial.parse_spec(f).budget.max_trials == 3
    assert dial.parse_spec(str(f)).name == "parsed"
    assert dial.parse_spec("name: parsed\nlabels: {team: x}\n").labels == \
        {"team": "x"}
    with pytest.raises(dial.InvalidArgument) as e:
        dial.parse_spec({"name": "x", "budget": {"max_trails": 3}})
    assert e.value.field == "spec" and "max_trails" in e.value.message


def test_study_lookup_and_studies_page(client):
    with pytest.raises(dial.NotFound):
        client.study(unique("missing"))
    prefix = unique("listed")
    names = [f"{prefix}-{i}" for i in range(7)]
    for n in names:
        client.create_study(spec(n, 2))
    s = client.study(names[3])
    assert s.name == names[3] and s.spec.budget.max_trials == 2
    paged = [s.name for s in client.studies(page_size=3)]
    assert len(paged) == len(set(paged))  # no study on two pages
    assert [n for n in paged if n.startswith(prefix)] == names
    assert paged == [s.name for s in client.studies()]
    study = next(s for s in client.studies(page_size=2) if s.name == names[0])
    assert isinstance(study, dial.Study) and study.proto.name == names[0]


def test_workers_lists_a_started_worker(client, scheduler, start_worker):
    before = {w["id"] for w in client.workers()}
    host = unique("host")
    start_worker(scheduler.address, "--slots=2", "--host=" + host)
    new = wait_for(lambda: [w for w in client.workers()
                            if w["id"] not in before],
                   what="the worker to register")
    assert len(new) == 1
    w = new[0]
    assert w["id"] and w["host"] == host
    assert w["slots"] == 2 and w["running"] == []
    assert isinstance(w["last_seen"], datetime.datetime)
    assert isinstance(w["gpus"], list)


# --------------------------------------------------------------------------
# Study: what it is, its trials


def test_study_properties(new_study):
    study = new_study(4, 2)
    message = study.refresh()
    assert message.name == study.name and study.proto is message
    assert study.state == "STUDY_ACTIVE"
    assert study.trial_counts == {}
    assert study.objectives == [("loss", "MINIMIZE")]
    assert study.spec.budget.max_trials == 4
    assert study.spec.scheduler.HasField("fifo")  # a default filled in
    assert study.spec.searcher.random.seed == 7
    trial = study.ask()
    assert study.trial_counts == {"RUNNING": 1}  # read now, not cached
    trial.complete(1.0)
    study.ask().fail("x")
    assert study.trial_counts == {"COMPLETED": 1, "FAILED": 1}
    assert repr(study) == f"Study({study.name!r})"


def test_trials_page_over_2500(new_study):
    study = new_study(2500, 1000)
    numbers, failed, running = [], [], []
    with ThreadPoolExecutor(4) as pool:
        for batch in (1000, 1000, 500):
            trials = study.ask(batch)
            assert len(trials) == batch
            numbers += [t.number for t in trials]
            done = trials
            if batch == 500:  # the last batch: 100 fail, 100 stay open
                failed, running, done = trials[:100], trials[100:200], \
                    trials[200:]
                list(pool.map(lambda t: t.fail("bad luck"), failed))
            list(pool.map(lambda t: t.complete(t.params["x"] ** 2), done))
    assert sorted(numbers) == list(range(2500))
    # The budget is used and 100 are still open: nothing, and not done.
    assert bounded(30, study.ask, timeout=0) is None

    every = list(study.trials())  # page_size 1000: three pages
    assert [t.number for t in every] == list(range(2500))
    assert len({t.number for t in every}) == 2500
    by_state = {}
    for t in every:
        by_state[t.state] = by_state.get(t.state, 0) + 1
    assert by_state == {"COMPLETED": 2300, "FAILED": 100, "RUNNING": 100}
    assert study.trial_counts == by_state
    completed = list(study.trials(states="COMPLETED"))
    assert len(completed) == 2300
    assert all(t.value == pytest.approx(t.params["x"] ** 2)
               for t in completed)
    assert [t.number for t in study.trials(states=["FAILED", "RUNNING"])] \
        == sorted(t.number for t in failed + running)
    assert [t.number for t in study.trials(states="RUNNING", page_size=7)] \
        == [t.number for t in running]
    assert all(t.error == "bad luck"
               for t in study.trials(states=study_pb2.FAILED))
    with pytest.raises(dial.InvalidArgument):
        list(study.trials(states="SLEEPING"))


def test_trials_small_pages(new_study):
    study = new_study(30, 30)
    for t in study.ask(30):
        t.complete(float(t.number))
    pages = list(study.trials(page_size=7))
    assert [t.number for t in pages] == list(range(30))
    assert [t.value for t in pages] == [float(n) for n in range(30)]
    assert [t.number for t in study.trials("COMPLETED", page_size=1)] == \
        list(range(30))


def test_get_trial_with_history(new_study):
    study = new_study(2)
    trial = study.ask()
    for step, loss in ((1, 0.9), (3, 0.5), (7, 0.25)):
        trial.report(step, loss=loss, acc=1 - loss)
    record = study.get_trial(trial.number)
    assert isinstance(record, dial.TrialRecord)
    assert record.state == "RUNNING" and record.last_step == 7
    assert [p.step for p in record.history] == [1, 3, 7]
    assert record.history[1].metrics == {"loss": 0.5, "acc": 0.5}
    assert all(isinstance(p.time, datetime.datetime) for p in record.history)
    assert study.get_trial(trial.number, history=False).history == ()
    trial.complete(0.25)
    record = study.get_trial(trial.number)
    assert record.state == "COMPLETED" and record.value == 0.25
    assert record.duration is not None and record.duration.total_seconds() \
        >= 0
    with pytest.raises(dial.NotFound):
        study.get_trial(12345)


def test_best_trials_single_objective(new_study):
    study = new_study(6, 6)
    assert len(study.best_trials(3)) == 0 and study.best_trial is None
    values = [3.0, 1.0, 4.0, 1.5, 2.0]
    trials = study.ask(6)
    for t, v in zip(trials, values):
        t.complete(v)
    trials[5].fail("not ranked")
    best = study.best_trials(3)
    assert isinstance(best, dial.BestTrials) and isinstance(best, list)
    assert [t.value for t in best] == [1.0, 1.5, 2.0]
    assert [t.number for t in best] == [trials[1].number, trials[3].number,
                                        trials[4].number]
    assert all(t.state == "COMPLETED" for t in best)
    assert best.seed_runs == {} and best.hypervolume == 0.0
    assert study.best_trial.number == trials[1].number
    assert len(study.best_trials(100)) == 5


def test_best_trials_multi_objective(new_study):
    study = new_study(4, 4, params=[
        {"name": "x", "float": {"min": 0.0, "max": 1.0}}],
        objectives=[{"metric": "a", "goal": "MINIMIZE"},
                    {"metric": "b", "goal": "MINIMIZE"}])
    assert study.objectives == [("a", "MINIMIZE"), ("b", "MINIMIZE")]
    points = [(0.1, 0.9), (0.5, 0.5), (0.9, 0.1), (0.6, 0.9)]
    # optimize: fn returns a sequence in the objectives' order.
    queue = list(points)
    lock = threading.Lock()
    by_number = {}

    def objective(trial):
        with lock:
            by_number[trial.number] = queue.pop(0)
            return by_number[trial.number]
    assert study.optimize(objective) == 4
    best = study.best_trials(10)
    front = {n for n, p in by_number.items() if p != (0.6, 0.9)}
    assert {t.number for t in best} == front  # (0.6, 0.9) is dominated
    assert best.front_size == 3
    assert best.hypervolume > 0
    assert len(best.reference_point) == 2
    for t in best:
        assert t.values == by_number[t.number]
        assert t.value == by_number[t.number][0]
        assert t.metrics == dict(zip("ab", by_number[t.number]))
    df = study.to_dataframe()
    assert list(df["values_1"]) == [by_number[n][1] for n in df["number"]]


def test_importance_ranks_the_parameter_that_matters(new_study):
    study = new_study(40, 40, params=[
        {"name": "x", "float": {"min": 0.0, "max": 1.0}},
        {"name": "y", "float": {"min": 0.0, "max": 1.0}}])
    for t in study.ask(3):
        t.complete(t.params["x"])
    with pytest.raises(dial.FailedPrecondition):
        study.importance()  # fewer than 4 completed trials
    for t in study.ask(37):
        t.complete(t.params["x"])  # only x matters
    importance = study.importance(top_quantile=0.2)
    assert list(importance) == ["x", "y"]
    assert importance["x"] > importance["y"]
    assert sum(importance.values()) == pytest.approx(1.0)
    assert list(study.importance())[0] == "x"  # default quantile
    with pytest.raises(dial.InvalidArgument):
        study.importance(top_quantile=1.5)


def test_watch_streams_the_study_until_it_finishes(new_study):
    study = new_study(3, 1)
    events, errors = [], []
    started = threading.Event()

    def consume():
        try:
            for event in study.watch():
                events.append(event)
                started.set()
        except Exception as e:  # noqa: BLE001 - checked below
            errors.append(e)
            started.set()
    watcher = threading.Thread(target=consume, daemon=True)
    watcher.start()
    assert started.wait(30), "no SNAPSHOT"
    for i in range(3):
        trial = study.ask()
        trial.report(0, loss=10.0 + i)
        trial.complete(float(i))
    watcher.join(30)
    assert not watcher.is_alive(), "watch() did not end after the study"
    assert errors == []
    kinds = [e.kind for e in events]
    assert kinds[0] == "SNAPSHOT" and kinds[-1] == "STUDY_FINISHED"
    assert kinds.count("SNAPSHOT") == kinds.count("STUDY_FINISHED") == 1
    assert [e.trial.number for e in events if e.kind == "TRIAL_CREATED"] \
        == [0, 1, 2]
    assert [e.trial.number for e in events if e.kind == "TRIAL_REPORTED"] \
        == [0, 1, 2]
    finished = [e for e in events if e.kind == "TRIAL_FINISHED"]
    assert [(e.trial.number, e.trial.state, e.trial.value)
            for e in finished] == [(0, "COMPLETED", 0.0),
                                   (1, "COMPLETED", 1.0),
                                   (2, "COMPLETED", 2.0)]
    assert all(e.best_trial.number == 0 for e in finished)
    assert events[0].state == "STUDY_ACTIVE" and events[0].trial is None
    assert events[-1].state == "STUDY_COMPLETED"
    assert events[-1].trial_counts == {"COMPLETED": 3}
    assert isinstance(events[0], dial.StudyEvent)
    # A finished study: its snapshot, STUDY_FINISHED, and the end.
    assert [e.kind for e in study.watch()] == ["SNAPSHOT", "STUDY_FINISHED"]


def test_watch_can_be_left_and_fails_for_an_unknown_study(client, new_study):
    study = new_study(3)
    for event in study.watch():
        assert event.kind == "SNAPSHOT"
        break  # leaving the loop cancels the stream
    assert study.ask() is not None  # the client still works
    with pytest.raises(dial.NotFound):
        next(iter(dial.Study(client, unique("nope")).watch()))


def test_to_dataframe(new_study):
    pandas = pytest.importorskip("pandas")
    study = new_study(3)
    a, b, c = study.ask(3)
    a.report(1, loss=2.0)
    a.complete(1.0, acc=0.5)
    b.complete(2.0)
    c.fail("boom")
    df = study.to_dataframe()
    assert isinstance(df, pandas.DataFrame)
    assert len(df) == 3
    assert {"number", "state", "value", "params_x", "metrics_loss",
            "duration", "last_step", "error"} <= set(df.columns)
    rows = df.set_index("number")
    assert list(rows["state"]) == ["COMPLETED", "COMPLETED", "FAILED"]
    assert rows.loc[a.number, "value"] == 1.0
    assert rows.loc[a.number, "metrics_acc"] == 0.5
    assert rows.loc[a.number, "last_step"] == 1
    assert rows.loc[a.number, "params_x"] == a.params["x"]
    assert rows.loc[c.number, "error"] == "boom"
    assert math.isnan(rows.loc[c.number, "value"])
    assert len(study.to_dataframe(states="COMPLETED")) == 2


def test_stop_stops_suggesting_and_running_trials(new_study):
    study = new_study(5, 2)
    trial = study.ask()
    decision = trial.report(0, loss=1.0)
    assert decision.action == "CONTINUE" and not trial.should_stop
    study.stop()
    assert study.proto.state == study_pb2.STUDY_STOPPED  # StopStudy's answer
    assert study.state == "STUDY_STOPPED"
    decision = trial.report(1, loss=0.5)
    assert decision.should_stop and trial.should_stop
    assert decision.reason == "study stopped"
    assert study.get_trial(trial.number).state == "STOPPED"
    assert bounded(30, study.ask) is None
    # A stopped trial may hand in its final numbers once.
    record = trial.complete(0.5)
    assert record.state == "STOPPED" and record.value == 0.5
    with pytest.raises(dial.FailedPrecondition):
        trial.complete(0.4)
    with pytest.raises(dial.FailedPrecondition):
        study.update(max_trials=10)


def test_update_reopens_a_completed_study(new_study):
    study = new_study(2, 2)
    for t in study.ask(2):
        t.complete(1.0)
    assert study.state == "STUDY_COMPLETED"
    assert bounded(30, study.ask) is None
    study.update(max_trials=3)
    assert study.proto.spec.budget.max_trials == 3
    assert study.state == "STUDY_ACTIVE"
    trial = study.ask()
    assert trial is not None and trial.number == 2
    study.update(max_parallel_trials=1)
    assert study.refresh().spec.budget.max_trials == 3  # unchanged
    assert study.spec.budget.max_parallel_trials == 1
    with pytest.raises(dial.InvalidArgument) as e:
        study.update(max_trials=1)
    assert e.value.field == "max_trials"
    trial.complete(0.5)
    assert study.state == "STUDY_COMPLETED"


def test_delete(client, new_study):
    study = new_study(2)
    study.ask().complete(1.0)
    study.delete()
    with pytest.raises(dial.NotFound):
        client.study(study.name)
    with pytest.raises(dial.NotFound):
        study.refresh()
    with pytest.raises(dial.NotFound):
        study.delete()
    assert study.name not in [s.name for s in client.studies()]


def test_notes_on_the_study_and_a_trial(new_study):
    study = new_study(2)
    trial = study.ask()
    trial.complete(1.0)
    assert study.note == ""
    assert study.set_note("round 2\n<i>wider</i>").note == \
        "round 2\n<i>wider</i>"
    assert study.note == "round 2\n<i>wider</i>"
    record = study.set_note("looks noisy", trial=trial.number)
    assert record.note == "looks noisy" and record.state == "COMPLETED"
    assert study.get_trial(trial.number).note == "looks noisy"
    assert [t.note for t in study.trials()] == ["looks noisy"]
    with pytest.raises(dial.InvalidArgument) as e:
        study.set_note("x" * 2001)
    assert e.value.field == "note"
    with pytest.raises(dial.NotFound):
        study.set_note("no such trial", trial=99)
    study.set_note("")
    assert study.note == ""


def test_enqueued_params_are_evaluated_first(new_study):
    study = new_study(5, 5, params=[
        {"name": "x", "float": {"min": -1.0, "max": 1.0}},
        {"name": "n", "int": {"min": 1, "max": 9}},
        {"name": "c", "categorical": {"values": ["a", "b", "c"]}}])
    ids = study.enqueue({"x": 0.125, "n": 7, "c": "b"})
    assert len(ids) == 1
    more = study.enqueue([{"x": -0.5, "n": 2, "c": "c"},
                          {"x": 0.75, "n": 9, "c": "a"}])
    assert len(more) == 2 and ids[0] < more[0] < more[1]
    assert len(study.refresh().queue) == 3
    first = study.ask()
    assert first.params == {"c": "b", "n": 7, "x": 0.125}
    assert [t.params for t in study.ask(2)] == [
        {"c": "c", "n": 2, "x": -0.5}, {"c": "a", "n": 9, "x": 0.75}]
    assert len(study.refresh().queue) == 0
    with pytest.raises(dial.InvalidArgument) as e:
        study.enqueue({"x": True})
    assert e.value.field == "params.x"


def test_reevaluate_queues_top_configurations_with_seeds(new_study):
    study = new_study(3, 3)
    trials = study.ask(3)
    for t, v in zip(trials, (3.0, 1.0, 2.0)):
        t.complete(v)
    assert study.state == "STUDY_COMPLETED"
    assert study.reevaluate(top=2, seeds=2) == 4
    assert study.state == "STUDY_ACTIVE"
    assert study.spec.budget.max_trials == 7
    reruns = []
    for _ in range(4):
        t = study.ask()
        reruns.append(t)
        t.complete(1.5 if t.origin == trials[1].number else 2.5)
    top = {trials[1].number: trials[1], trials[2].number: trials[2]}
    assert sorted(t.origin for t in reruns) == sorted(list(top) * 2)
    assert all(t.seed is not None for t in reruns)
    assert len({t.seed for t in reruns}) == 4
    for t in reruns:
        assert t.params == top[t.origin].params
    records = {t.number: t for t in study.trials()}
    assert [records[t.number].origin for t in reruns] == \
        [t.origin for t in reruns]
    assert [records[t.number].seed for t in reruns] == \
        [t.seed for t in reruns]
    best = study.best_trials(2)
    assert best.seed_runs[trials[1].number][0] == 3  # the trial + 2 runs
    assert best.seed_runs[trials[1].number][1] == pytest.approx(4.0 / 3)
    assert bounded(30, study.ask) is None


def test_tell_by_number_or_trial(new_study):
    study = new_study(4, 4)
    a, b, c, d = study.ask(4)
    record = study.tell(a.number, 1.5)
    assert (record.number, record.state, record.value) == \
        (a.number, "COMPLETED", 1.5)
    record = study.tell(b, error="out of memory")
    assert (record.state, record.error) == ("FAILED", "out of memory")
    record = study.tell(c.number, loss=0.25, acc=0.9)
    assert record.value == 0.25 and record.metrics == {"loss": 0.25,
                                                       "acc": 0.9}
    assert study.tell(d.number, error="").state == "FAILED"
    with pytest.raises(dial.FailedPrecondition):
        study.tell(a.number, 2.0)
    with pytest.raises(dial.NotFound):
        study.tell(99, 1.0)


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


# --------------------------------------------------------------------------
# Errors


def test_errors_map_to_exceptions(client, new_study):
    with pytest.raises(dial.NotFound) as e:
        client.study("no-such-study")
    assert isinstance(e.value, dial.Error)
    assert e.value.code == "NOT_FOUND" and "no-such-study" in e.value.message
    assert str(e.value).startswith("NOT_FOUND: ")
    study = new_study(2)
    with pytest.raises(dial.NotFound):
        study.get_trial(7)
    with pytest.raises(dial.NotFound):
        dial.Study(client, "no-such-study").ask()
    with pytest.raises(dial.AlreadyExists):
        client.create_study(spec(study.name))
    trial = study.ask()
    first = trial.complete(1.0)
    assert trial.complete(1.0).number == first.number  # the same: stored
    with pytest.raises(dial.FailedPrecondition):
        trial.complete(2.0)
    with pytest.raises(dial.InvalidArgument) as e:
        study.ask(1001)
    assert e.value.field == "count"
    assert dial.InvalidArgument("no field here").field is None
    assert dial.InvalidArgument("a.b[2].c: bad").field == "a.b[2].c"
    fake = FakeRpcError(grpc.StatusCode.DATA_LOSS, "lost")
    error = dial._errors.from_rpc_error(fake)
    assert type(error) is dial.Error and error.code == "DATA_LOSS"


def test_unavailable_is_raised_quickly_after_the_retries(scheduler):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with dial.connect(address, token="", retries=1) as c:
        c._stub = proxy = StubProxy(c._stub)
        started = time.monotonic()
        with pytest.raises(dial.Unavailable) as e:
            c.study("x")
        assert time.monotonic() - started < 5
        assert e.value.code == "UNAVAILABLE"
        assert proxy.calls == {"GetStudy": 2}  # the call and one retry
        with pytest.raises(dial.Unavailable):
            c.create_study(spec(unique("never")))
        assert proxy.calls["CreateStudy"] == 2  # retried: it has on_retry
    with dial.connect(address, token="", retries=0) as c:
        c._stub = proxy = StubProxy(c._stub)
        with pytest.raises(dial.Unavailable):
            list(c.studies())
        assert proxy.calls == {"ListStudies": 1}


def test_unavailable_is_retried_until_the_scheduler_is_back(
        start_scheduler, tmp_path):
    first = start_scheduler()
    address = first.address
    name = unique("restart")
    with dial.connect(address, token="") as c:
        c.create_study(spec(name, 3))
    first.stop()

    client = dial.connect(address, token="", retries=10)
    client._stub = proxy = StubProxy(client._stub)
    result, errors = [], []

    def call():
        try:
            result.append(client.study(name))
        except Exception as e:  # noqa: BLE001 - checked below
            errors.append(e)
    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        wait_for(lambda: proxy.failures.get("GetStudy", 0) >= 1 or errors,
                 what="the first attempt to fail")
        start_scheduler("--listen=" + address)  # the same port and db
        caller.join(60)
        assert not caller.is_alive()
        assert errors == [] and result[0].name == name
        assert result[0].spec.budget.max_trials == 3
        assert proxy.calls["GetStudy"] >= 2  # failed first, then retried
    finally:
        client.close()


def test_a_lost_answer_is_retried_safely(scheduler):
    name = unique("lost")
    with dial.connect(scheduler.address, token="", retries=3) as c:
        c._stub = proxy = StubProxy(c._stub, lose={
            "CreateStudy", "SuggestTrials", "ReportIntermediate",
            "CompleteTrial"})
        # The first try created it; the retry's ALREADY_EXISTS is its answer.
        study = c.create_study(spec(name, 3))
        assert study.name == name and proxy.calls["CreateStudy"] == 2
        trial = study.ask()  # the retry gets the same open trial
        assert study.refresh().trials_created == 1
        decision = trial.report(0, loss=1.0)  # recorded by the first try
        assert decision.action == "CONTINUE"
        assert proxy.calls["ReportIntermediate"] == 2
        record = trial.complete(0.5)
        assert record.state == "COMPLETED" and record.value == 0.5
        assert proxy.calls["CompleteTrial"] == 2
        assert [p.step for p in study.get_trial(trial.number).history] == [0]
        # A call that cannot tell a repeat from a first try is not retried.
        proxy.lose.add("DeleteStudy")
        with pytest.raises(dial.Unavailable):
            study.delete()
        assert proxy.calls["DeleteStudy"] == 1
        with pytest.raises(dial.NotFound):
            c.study(name)


# --------------------------------------------------------------------------
# TLS and tokens


def tls_args(pki, **more):
    return dict(tls_ca=os.path.join(pki, "ca.crt"),
                tls_cert=os.path.join(pki, "user.crt"),
                tls_key=os.path.join(pki, "user.key"), **more)


def test_tls_and_token_round_trip(tls_scheduler, pki):
    name = unique("secure")
    with dial.connect(tls_scheduler.address, token=read_token(pki, "alice"),
                      **tls_args(pki)) as alice:
        study = alice.create_study(spec(name, 2))
        assert study.proto.owner == "alice"
        trial = study.ask()
        assert trial.report(1, loss=0.5).action == "CONTINUE"
        assert trial.complete(0.25).state == "COMPLETED"
        study.optimize(lambda t: t.params["x"] ** 2)
        assert study.trial_counts == {"COMPLETED": 2}
        assert study.best_trial.value == min(
            t.value for t in study.trials())
        assert name in [s.name for s in alice.studies()]
        assert [e.kind for e in study.watch()] == \
            ["SNAPSHOT", "STUDY_FINISHED"]  # the stream carries the token


def test_tls_permission_denied_and_unauthenticated(tls_scheduler, pki):
    name = unique("alices")
    with dial.connect(tls_scheduler.address, token=read_token(pki, "alice"),
                      **tls_args(pki)) as alice:
        alice.create_study(spec(name, 2))
        with pytest.raises(dial.PermissionDenied):
            alice.workers()  # admins and viewers only
    # Another user's study is NOT_FOUND to bob, word for word as one that
    # does not exist (security round two: the refusal named its owner).
    with dial.connect(tls_scheduler.address, token=read_token(pki, "bob"),
                      retries=0, **tls_args(pki)) as bob:
        with pytest.raises(dial.NotFound) as e:
            bob.study(name).ask()
        assert e.value.code == "NOT_FOUND"
        assert e.value.message == f"study '{name}' not found"
        with pytest.raises(dial.NotFound):
            dial.Study(bob, name).ask()
        with pytest.raises(dial.NotFound):
            dial.Study(bob, name).stop()
        assert name not in [s.name for s in bob.studies()]
    with dial.connect(tls_scheduler.address, token=read_token(pki, "admin"),
                      **tls_args(pki)) as admin:
        assert admin.study(name).proto.owner == "alice"
        assert isinstance(admin.workers(), list)
    for token in ("", "not-a-token"):
        with dial.connect(tls_scheduler.address, token=token, retries=3,
                          **tls_args(pki)) as nobody:
            nobody._stub = proxy = StubProxy(nobody._stub)
            with pytest.raises(dial.Unauthenticated) as e:
                nobody.study(name)
            assert e.value.code == "UNAUTHENTICATED"
            assert proxy.calls == {"GetStudy": 1}  # not retried


def test_tls_failures_are_unavailable(tls_scheduler, pki):
    token = read_token(pki, "alice")
    bad = [tls_args(pki, tls_server_name="not-the-scheduler.example"),
           dict(tls_ca=os.path.join(pki, "ca.crt")),  # no client cert
           {}]  # plaintext to a TLS port
    for args in bad:
        with dial.connect(tls_scheduler.address, token=token, retries=0,
                          **args) as c:
            with pytest.raises(dial.Unavailable):
                list(c.studies())
    # The right name, checked explicitly, works.
    with dial.connect(tls_scheduler.address, token=token,
                      **tls_args(pki, tls_server_name="localhost")) as c:
        list(c.studies())
