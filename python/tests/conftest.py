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
