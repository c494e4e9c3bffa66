"""The client half of the SDK (dial.connect, Client, Study) against a real
dial-scheduler. Ask/tell trials and optimize are in
test_ask_optimize.py, errors, retries and TLS in test_client_errors.py;
the fixtures are in conftest.py."""
import datetime
import math
import os
import pathlib
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import dial
from dial.v1 import study_pb2
from conftest import SOURCE_DIR, read_token
from client_helpers import bounded, free_port, spec, unique, wait_for


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


def test_several_addresses_move_past_a_dead_one(scheduler):
    """A leader and its standbys (docs/ha.md): an address where nothing
    listens is left for the next one."""
    dead = f"127.0.0.1:{free_port()}"
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
    outside = f"127.0.0.1:{free_port()}"
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
