#!/usr/bin/env python3
"""Two trials of two owners on one worker, for isolation_test. ROLE=victim
keeps a secret in its checkpoint and work directories, publishes where
they are and its pid in $RENDEZVOUS/victim.json, waits (at most 120 s) for
$RENDEZVOUS/done, and reports whether a file it did not write appeared in
its checkpoint directory (tampered). ROLE=attacker reads victim.json,
tries to read, list and write the victim's directories, to read its
/proc/<pid>/environ and cmdline, to signal it (signal 0: the same
permission check as SIGKILL), to list the worker's work directory, and to
fork FORKS children; writes done and reports each try as 1 (it worked) or
0 (refused), -1 where there was nothing to try."""
import json
import os
import time

SECRET = "alice-secret"


def report(metrics):
    out = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
    decisions = os.fdopen(int(os.environ["DIAL_DECISION_FD"]), "r")
    metrics["done"] = 1
    out.write(json.dumps({"step": 1, "metrics": metrics}) + "\n")
    decisions.readline()


def wait_for(path):
    deadline = time.monotonic() + 120
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.path.exists(path)


def publish(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def victim(meet):
    ckpt = os.environ["DIAL_CHECKPOINT_DIR"]
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "secret.txt"), "w") as f:
        f.write(SECRET)
    # Its own work directory only where the worker gives it one.
    work = os.getcwd() if os.environ.get("HOME") == os.getcwd() else ""
    if work:
        with open(os.path.join(work, "secret.txt"), "w") as f:
            f.write(SECRET)
    print(SECRET, flush=True)  # into its log
    publish(os.path.join(meet, "victim.json"),
            {"pid": os.getpid(), "ckpt": ckpt, "work": work})
    wait_for(os.path.join(meet, "done"))
    planted = [n for n in os.listdir(ckpt) if n != "secret.txt"]
    report({"tampered": 1 if planted else 0})


def attempt(fn):
    try:
        return 1 if fn() else 0
    except OSError:
        return 0


def read_secret(d):
    with open(os.path.join(d, "secret.txt")) as f:
        return f.read() == SECRET


def write_into(d):
    with open(os.path.join(d, "planted"), "w") as f:
        f.write("from bob")
    return True


def read_proc(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return len(f.read()) > 0


def fork_children(count):
    read_end, write_end = os.pipe()
    children = []
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)
            os._exit(0)
        children.append(pid)
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    return len(children)


def attacker(meet):
    found = wait_for(os.path.join(meet, "victim.json"))
    metrics = {"found": 1 if found else 0}
    if found:
        with open(os.path.join(meet, "victim.json")) as f:
            v = json.load(f)
        ckpt, work, pid = v["ckpt"], v["work"], v["pid"]
        metrics["read_ckpt"] = attempt(lambda: read_secret(ckpt))
        metrics["list_ckpt"] = attempt(lambda: os.listdir(ckpt) is not None)
        metrics["write_ckpt"] = attempt(lambda: write_into(ckpt))
        for key, fn in (("read_work", lambda: read_secret(work)),
                        ("list_work", lambda: os.listdir(work) is not None),
                        ("write_work", lambda: write_into(work))):
            metrics[key] = attempt(fn) if work else -1
        metrics["environ"] = attempt(lambda: read_proc(pid, "environ"))
        metrics["cmdline"] = attempt(lambda: read_proc(pid, "cmdline"))
        metrics["signal"] = attempt(lambda: os.kill(pid, 0) is None)
        root = os.environ["WORK_ROOT"]
        metrics["list_work_root"] = attempt(lambda: os.listdir(root) != [])
        metrics["read_log"] = attempt(lambda: SECRET in open(
            os.path.join(root, os.environ["VICTIM_LOG"])).read())
    metrics["forked"] = fork_children(int(os.environ.get("FORKS", "0")))
    with open(os.path.join(meet, "done"), "w"):
        pass
    report(metrics)


def main():
    meet = os.environ["RENDEZVOUS"]
    if os.environ["ROLE"] == "victim":
        victim(meet)
    else:
        attacker(meet)


if __name__ == "__main__":
    main()
