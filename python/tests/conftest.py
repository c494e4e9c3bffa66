"""Fixtures: real dial-scheduler and dial-worker processes from the build.

The binaries come from $DIAL_BUILD_DIR (default ../../build): ctest sets it
(tests/CMakeLists.txt). Every process a test starts is stopped at its end.
"""
import os
import select
import signal
import subprocess
import sys
import tempfile

import pytest

import dial
from client_helpers import spec, unique

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..",
                                          ".."))
BUILD_DIR = os.path.abspath(os.environ.get(
    "DIAL_BUILD_DIR", os.path.join(SOURCE_DIR, "build")))
SCHEDULER_BIN = os.path.join(BUILD_DIR, "scheduler", "dial-scheduler")
WORKER_BIN = os.path.join(BUILD_DIR, "worker", "dial-worker")
# The interpreter running the tests has the SDK installed (the build's
# virtualenv): trial programs run with it too.
PYTHON = sys.executable


class Process:
    """A started binary: its Popen, the address its readiness line named,
    and the files its output goes to."""

    def __init__(self, proc, address, stderr_path):
        self.proc, self.address, self.stderr_path = proc, address, \
            stderr_path

    def stderr(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def kill(self):
        """SIGKILL, and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self):
        """SIGTERM, then SIGKILL after 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def _start(argv, tmp_dir, name, ready_text):
    stderr_path = os.path.join(tmp_dir, name + ".err")
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr,
                                text=True, start_new_session=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if ready_text not in line:
        proc.kill()
        proc.wait(timeout=30)
        with open(stderr_path, errors="replace") as f:
            raise RuntimeError(f"{name} did not start: {line!r}\n{f.read()}")
    return Process(proc, line.strip().rsplit(" ", 1)[-1], stderr_path)


@pytest.fixture
def processes():
    """Stops every process registered with it at the test's end."""
    started = []
    yield started
    for p in reversed(started):
        p.stop()


@pytest.fixture
def start_scheduler(tmp_path, processes):
    """start_scheduler(*flags, db=None) -> Process, on a free loopback
    port, with its database and checkpoint root under tmp_path."""
    count = [0]

    def start(*flags, db=None, checkpoint_root=None):
        count[0] += 1
        db = db or str(tmp_path / "dial.db")
        root = checkpoint_root or str(tmp_path / "ckpt")
        p = _start([SCHEDULER_BIN, "--db=" + db, "--checkpoint-root=" + root,
                    "--listen=127.0.0.1:0", "--log-level=warn", *flags],
                   str(tmp_path), f"scheduler{count[0]}", "listening on")
        processes.append(p)
        return p
    return start


@pytest.fixture
def start_worker(tmp_path, processes):
    """start_worker(address, *flags) -> Process: a dial-worker whose
    checkpoint root is tmp_path/ckpt, allowed to run this interpreter."""
    count = [0]

    def start(address, *flags, checkpoint_root=None):
        count[0] += 1
        work = tmp_path / f"work{count[0]}"
        work.mkdir()
        argv = [WORKER_BIN, "--scheduler=" + address,
                "--checkpoint-root=" + (checkpoint_root or
                                        str(tmp_path / "ckpt")),
                "--work-dir=" + str(work), "--allow-command=" + PYTHON,
                "--acquire-wait-ms=500", "--log-level=info", *flags]
        stderr_path = os.path.join(str(tmp_path), f"worker{count[0]}.err")
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                    stderr=stderr, start_new_session=True)
        p = Process(proc, address, stderr_path)
        p.work_dir = str(work)
        processes.append(p)
        return p
    return start


@pytest.fixture(scope="session")
def pki():
    """deploy/dev-ca.sh's files: ca.crt, server.*, user.*, auth-tokens,
    tokens/<name>.token (admin, alice, bob, ...)."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([os.path.join(SOURCE_DIR, "deploy", "dev-ca.sh"), d],
                       check=True, stdout=subprocess.DEVNULL)
        yield d


def read_token(pki_dir, name):
    with open(os.path.join(pki_dir, "tokens", name + ".token")) as f:
        return f.read().strip()


# A plaintext and a TLS scheduler per test module, a client of the first,
# and new ask/tell studies on it (test_client.py, test_ask_optimize.py).


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


@pytest.fixture
def new_study(client, request):
    """new_study(max_trials=10, parallel=None, params=None, **fields): a new
    ask/tell study named after the test."""
    def make(max_trials=10, parallel=None, params=None, **fields):
        return client.create_study(spec(unique(request.node.name),
                                        max_trials, parallel, params,
                                        **fields))
    return make
