#!/usr/bin/env python3
"""A hostile trial for worker_security_test: looks for the worker's token
where a trial could read it (the environment of every process above it in
/proc, and the file $TOKEN_FILE), tries to fork FORKS children at once, and
reports what it found as metrics at step 1: env_token (1 when a non-empty
DIAL_TOKEN was readable), file_token (1 when the token file was), uid, and
forked (how many children it got)."""
import json
import os


def parent_of(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("PPid:"):
                return int(line.split()[1])
    return 0


def token_in_environments():
    pid = os.getpid()
    for _ in range(4):
        pid = parent_of(pid)
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                entries = environ.read().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"DIAL_TOKEN=") and len(e) > 11 for e in entries):
            return 1
    return 0


def token_file_readable():
    path = os.environ.get("TOKEN_FILE", "")
    try:
        with open(path) as f:
            return 1 if f.read().strip() else 0
    except OSError:
        return 0


def fork_children(count):
    children = []
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)  # EOF once the parent lets go
            os._exit(0)
        children.append(pid)
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    return len(children)


read_end, write_end = os.pipe()


def main():
    metrics = {
        "env_token": token_in_environments(),
        "file_token": token_file_readable(),
        "uid": os.getuid(),
        "forked": fork_children(int(os.environ.get("FORKS", "0"))),
    }
    report = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
    decisions = os.fdopen(int(os.environ["DIAL_DECISION_FD"]), "r")
    report.write(json.dumps({"step": 1, "metrics": metrics}) + "\n")
    decisions.readline()


if __name__ == "__main__":
    main()
