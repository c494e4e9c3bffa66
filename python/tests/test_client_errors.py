"""The SDK's errors against a real dial-scheduler: status codes as
exceptions, retries (UNAVAILABLE, lost answers), and TLS with client
certificates and bearer tokens (deploy/dev-ca.sh). The fixtures are in
conftest.py."""
import os
import threading
import time

import grpc
import pytest

import dial
from conftest import read_token
from client_helpers import (FakeRpcError, StubProxy, free_port, spec, unique,
                            wait_for)


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
