"""A local dial-scheduler for the Python benchmarks (bench/curves,
bench/suite): started on a free loopback port in a directory of its own,
with its output in DIR/s.out and DIR/s.log."""
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))


def start_scheduler(directory, *extra):
    """Starts the scheduler; returns (process, address). Raises
    RuntimeError (after stopping it) if it does not listen within 30 s."""
    out = os.path.join(directory, "s.out")
    proc = subprocess.Popen(
        [os.path.join(BUILD, "scheduler", "dial-scheduler"),
         "--db=" + os.path.join(directory, "dial.db"),
         "--checkpoint-root=" + os.path.join(directory, "ckpt"),
         "--listen=127.0.0.1:0", "--sync-full=false", *extra],
        stdout=open(out, "w"),
        stderr=open(os.path.join(directory, "s.log"), "w"),
        stdin=subprocess.DEVNULL)
    for _ in range(300):
        text = open(out).read()
        if "listening on " in text:
            return proc, text.split("listening on ")[1].split()[0]
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop([proc])
    raise RuntimeError(f"dial-scheduler did not start (see {directory}/s.log)")


def stop(procs):
    """Terminates the processes, killing any still there after 20 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
