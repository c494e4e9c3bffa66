"""Helpers of the SDK's client tests (test_client.py, test_ask_optimize.py):
names, specs, bounded waits and a stub proxy that loses answers."""
import re
import socket
import threading
import time
import uuid

import grpc
import pytest


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
