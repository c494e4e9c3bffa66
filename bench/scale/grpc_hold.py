"""What tokenless connections holding unfinished 16 MiB messages make the
scheduler hold (finding 3 of the third security review), for several
--grpc-memory-mb values and with the bounds lifted: 32 raw HTTP/2
connections (tests/python/grpc_hold_test.py's Holder) each send a
CreateStudy message of 16 MiB but its last byte, as fast as the server's
flow control lets them (and 64 for the default and lifted runs: without a
bound the growth is linear in the connections); printed: the scheduler's
RSS growth, the connections still open once none makes progress, and the
MiB it took.

    /usr/bin/python3 bench/scale/grpc_hold.py [BUILD_DIR]
"""
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
sys.argv = [sys.argv[0], os.path.join(build, "scheduler", "dial-scheduler")]
sys.path.insert(0, os.path.join(root, "tests", "python"))
import grpc_hold_test  # noqa: E402

LIFTED = ["--grpc-memory-mb=1048576",
          "--grpc-max-streams-per-connection=1000000"]
for name, flags, count in [
        ("--grpc-memory-mb=64", ["--grpc-memory-mb=64"], 32),
        ("default (256)", [], 32), ("default (256)", [], 64),
        ("lifted", LIFTED, 32), ("lifted", LIFTED, 64)]:
    t = grpc_hold_test.GrpcHoldTest()
    port = t.start(*flags)
    try:
        grown, open_now, holders = t.hold(port, count)
        taken = sum(h.sent for h in holders) / (1 << 20)
        print(f"{name}: RSS +{grown:.0f} MB, {open_now} of {count} "
              f"connections open, {taken:.0f} MiB taken")
        for h in holders:
            h.sock.close()
    finally:
        t.tearDown()
