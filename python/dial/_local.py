"""A dial-scheduler of this process's own, for work that needs no shared
service (``dial.sklearn.DialSearchCV`` without a client, notebooks)::

    with dial.LocalScheduler() as local:
        study = local.client.create_study(spec)
        study.optimize(objective, n_trials=50)

It runs the real ``dial-scheduler`` binary as a child process on a free
loopback port, with its database in a temporary directory, and stops it
(and removes the directory) on ``close()``, at the end of the ``with``
block, or when this interpreter exits. The child also stops when this
process dies without cleaning up: it holds the only writer of the child's
standard input, and the child stops when that input ends
(``--stop-on-stdin-eof``).
"""
from __future__ import annotations

import atexit
import hashlib
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any, Optional, Sequence

from ._client import Client, connect
from ._errors import FailedPrecondition

__all__ = ["LocalScheduler", "find_scheduler_binary"]

_BINARY = "dial-scheduler"
_START_SECONDS = 60


def find_scheduler_binary() -> str:
    """The ``dial-scheduler`` to start: ``$DIAL_SCHEDULER_BIN``, else the
    one on ``PATH``, else the build tree's when this interpreter is the
    build's virtualenv (``build/python-venv``). Raises
    ``dial.FailedPrecondition`` naming all three when none is found."""
    explicit = os.environ.get("DIAL_SCHEDULER_BIN")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise FailedPrecondition(
            f"DIAL_SCHEDULER_BIN: '{explicit}' is not an executable file")
    on_path = shutil.which(_BINARY)
    if on_path:
        return on_path
    in_build = os.path.join(os.path.dirname(os.path.abspath(sys.prefix)),
                            "scheduler", _BINARY)
    if os.access(in_build, os.X_OK):
        return in_build
    raise FailedPrecondition(
        f"no {_BINARY} to start a local scheduler: set DIAL_SCHEDULER_BIN, "
        f"put {_BINARY} on PATH, or pass a client connected to a running "
        f"scheduler")


class LocalScheduler:
    """A ``dial-scheduler`` child process; ``address`` and ``client`` once
    started. ``directory``: where its database lives (default a temporary
    directory, removed on close); ``binary``: the executable (default
    ``find_scheduler_binary()``); ``flags``: more command-line flags."""

    def __init__(self, directory: Optional[str] = None, *,
                 binary: Optional[str] = None, flags: Sequence[str] = ()):
        self._directory = directory
        self._binary = binary
        self._flags = list(flags)
        self._owned_dir: Optional[str] = None
        self._proc: Optional[subprocess.Popen] = None
        self._client: Optional[Client] = None
        self._lock = threading.Lock()
        self.address: Optional[str] = None
        #: The admin token a client of it needs (None when ``flags`` give
        #: ``--auth-tokens`` of their own).
        self.token: Optional[str] = None

    def __enter__(self) -> "LocalScheduler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def client(self) -> Client:
        """A client connected to it (started on first use)."""
        self.start()
        assert self._client is not None
        return self._client

    def start(self) -> "LocalScheduler":
        """Starts the scheduler unless it runs; waits until it listens.
        Raises ``dial.FailedPrecondition`` with its log's end when it does
        not start."""
        with self._lock:
            if self._proc is not None:
                return self
            binary = self._binary or find_scheduler_binary()
            directory = self._directory
            if directory is None:
                directory = self._owned_dir = tempfile.mkdtemp(
                    prefix="dial-local-")
            log_path = os.path.join(directory, "scheduler.log")
            argv = [binary, "--db=" + os.path.join(directory, "dial.db"),
                    "--checkpoint-root=" + os.path.join(directory, "ckpt"),
                    "--listen=127.0.0.1:0", "--log-level=warn",
                    "--stop-on-stdin-eof"]
            # Any local user can reach 127.0.0.1: without a token they
            # would be its anonymous admin. A fresh random admin token,
            # kept in this process; the file holds only its hash.
            token = None
            if not any(f.startswith("--auth-tokens")
                       or f.startswith("--auth_tokens") for f in self._flags):
                token = secrets.token_urlsafe(32)
                argv.append("--auth-tokens=" + _write_tokens_file(
                    directory, token))
            argv += self._flags
            # No preexec_fn: it makes subprocess fork() rather than vfork(),
            # and fork() runs gRPC's fork handlers, which can wait forever
            # for a busy thread pool or abort on one shutting down. The
            # pipe on stdin ends with this process, however it ends.
            with open(log_path, "w") as log:
                proc = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=log,
                    stdin=subprocess.PIPE, text=True)
            ready, _, _ = select.select([proc.stdout], [], [], _START_SECONDS)
            line = proc.stdout.readline() if ready else ""
            if "listening on " not in line:
                _stop(proc)
                with open(log_path, errors="replace") as f:
                    tail = f.read()[-2000:]
                self._remove_dir()
                raise FailedPrecondition(
                    f"the local {_BINARY} ({binary}) did not start: "
                    f"{line.strip() or 'no readiness line'}\n{tail}")
            self._proc = proc
            self.address = line.split("listening on ", 1)[1].split()[0]
            self.token = token
            self._client = connect(self.address, token=token)
            atexit.register(self.close)
            return self

    def close(self) -> None:
        """Stops the scheduler (SIGTERM, SIGKILL after 20 s) and removes a
        directory it made. Safe to call twice."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._proc is not None:
                _stop(self._proc)
                self._proc = None
            self._remove_dir()
        atexit.unregister(self.close)

    def _remove_dir(self) -> None:
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _write_tokens_file(directory: str, token: str) -> str:
    """Writes a tokens file (0600) naming ``token``'s SHA-256 as the admin
    ``local``; its path."""
    path = os.path.join(directory, "tokens")
    digest = hashlib.sha256(token.encode()).hexdigest()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# dial.LocalScheduler's own token (its hash)\n"
                f"admin local {digest}\n")
    return path
