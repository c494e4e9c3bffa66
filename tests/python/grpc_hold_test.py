"""The scheduler's gRPC port under connections that hold unfinished
messages (finding 3 of the third security review): gRPC reads a whole
request before a handler sees its token, and 32 tokenless connections,
each holding an unfinished 16 MiB message, took the scheduler from 216 to
615 MB, growing linearly with the connections and held with no deadline.
With the limits of scheduler/grpc_limits.h the memory they can make it
hold is bounded by --grpc-memory-mb, and it still serves a caller with a
token.

Raw HTTP/2 (no library: only the frames gRPC needs), against the real
dial-scheduler binary on 127.0.0.1. Run:
grpc_hold_test.py SCHEDULER_BIN DIALCTL_BIN.
"""
import hashlib
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

SCHEDULER = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
    "DIAL_SCHEDULER_BIN", "build/scheduler/dial-scheduler")
DIALCTL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(os.path.dirname(SCHEDULER)), "client", "dialctl")

DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 4, 6, 7, 8
MESSAGE = 16 << 20  # the largest request the port takes


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def literal(name, value):
    # HPACK: literal header field without indexing, new name, no Huffman
    # (names and values here are shorter than 127 bytes).
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


class Holder:
    """One connection that sends a CreateStudy request with no token and
    all of its 16 MiB message but the last byte, as fast as the server's
    flow control lets it."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.conn_window = 65535
        self.stream_window = 65535
        self.initial = 65535
        self.sent = 0
        self.buf = b""
        self.closed = False
        # Our receive windows stay large, so the server is never blocked.
        settings = struct.pack(">HI", 4, 1 << 30)
        headers = b"".join([
            literal(b":method", b"POST"), literal(b":scheme", b"http"),
            literal(b":path", b"/dial.v1.StudyService/CreateStudy"),
            literal(b":authority", b"127.0.0.1"),
            literal(b"content-type", b"application/grpc"),
            literal(b"te", b"trailers")])
        self.out = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                    frame(SETTINGS, 0, 0, settings) +
                    frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 30)) +
                    frame(HEADERS, 0x4, 1, headers))
        self.body = b"\x00" + struct.pack(">I", MESSAGE)
        self.target = 5 + MESSAGE - 1

    def pump(self):
        """Reads what the server sent, queues what may be sent; False once
        the connection is gone."""
        if self.closed:
            return False
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.closed = True
                    return False
                self.buf += chunk
        except BlockingIOError:
            pass
        except OSError:
            self.closed = True
            return False
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            kind, flags = self.buf[3], self.buf[4]
            stream = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            if kind == SETTINGS and not flags & 1:
                for i in range(0, len(payload), 6):
                    key, value = struct.unpack(">HI", payload[i:i + 6])
                    if key == 4:
                        self.stream_window += value - self.initial
                        self.initial = value
                self.out += frame(SETTINGS, 1, 0)
            elif kind == PING and not flags & 1:
                self.out += frame(PING, 1, 0, payload)
            elif kind == WINDOW_UPDATE:
                inc = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
                if stream == 0:
                    self.conn_window += inc
                else:
                    self.stream_window += inc
            elif kind == GOAWAY:
                self.closed = True
        room = min(self.conn_window, self.stream_window,
                   self.target - self.sent, 16384)
        while room > 0:
            offset = self.sent
            piece = b""
            if offset < 5:
                piece = self.body[offset:5]
            piece += bytes(room - len(piece))
            self.out += frame(DATA, 0, 1, piece)
            self.sent += room
            self.conn_window -= room
            self.stream_window -= room
            room = min(self.conn_window, self.stream_window,
                       self.target - self.sent, 16384)
        if self.out:
            try:
                n = self.sock.send(self.out)
                self.out = self.out[n:]
            except BlockingIOError:
                pass
            except OSError:
                self.closed = True
                return False
        return True


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class GrpcHoldTest(unittest.TestCase):
    def start(self, *flags):
        self.dir = tempfile.TemporaryDirectory(prefix="dial-grpc-hold-")
        token = "holder-test-token"
        tokens = os.path.join(self.dir.name, "tokens")
        with open(tokens, "w") as f:
            f.write("admin root " + hashlib.sha256(token.encode()).hexdigest()
                    + "\n")
        self.proc = subprocess.Popen(
            [SCHEDULER, "--db=" + os.path.join(self.dir.name, "d.db"),
             "--listen=127.0.0.1:0", "--auth-tokens=" + tokens,
             "--log-level=warn", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        self.assertIn("listening on ", line)
        return int(line.split("listening on ", 1)[1].split()[0]
                   .rsplit(":", 1)[1])

    def tearDown(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.dir.cleanup()

    def hold(self, port, count):
        """Opens `count` holders and pumps them until each has sent all it
        will (the server's windows closed) for 3 s in a row, at most 120 s.
        The scheduler's RSS growth, in MB, and how many were still open."""
        before = rss_mb(self.proc.pid)
        holders = [Holder(port) for _ in range(count)]
        progress = time.monotonic()
        last = -1
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            alive = [h.pump() for h in holders]
            total = sum(h.sent for h in holders)
            if total != last:
                last, progress = total, time.monotonic()
            elif time.monotonic() - progress > 3:
                break
            socks = [h.sock for h in holders if not h.closed]
            if not socks:
                break
            select.select(socks, [], [], 0.05)
        grown = rss_mb(self.proc.pid) - before
        open_now = sum(1 for h in holders if not h.closed)
        return grown, open_now, holders

    def test_unfinished_messages_cannot_grow_it_past_its_quota(self):
        port = self.start("--grpc-memory-mb=64")
        grown, _, holders = self.hold(port, 32)
        sent = sum(h.sent for h in holders) / (1 << 20)
        # Without the quota it takes all 32 x 16 MiB and grows by ~520 MB
        # (measured: 524); with it, what they hold together stays near
        # 64 MiB (measured: 78 MB, the quota's reclaimer closing most of
        # the connections).
        self.assertLess(grown, 160, f"grew {grown:.0f} MB; {sent:.0f} MiB "
                        "were accepted")
        for h in holders:
            h.sock.close()
        # And it still serves a caller with a token.
        out = subprocess.run(
            [DIALCTL, f"--scheduler=127.0.0.1:{port}", "--token=holder-test-token",
             "study", "list"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
