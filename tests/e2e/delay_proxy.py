#!/usr/bin/env python3
"""A TCP proxy that adds latency, for tests on hosts of their own.

The kernels these tests run on have no sch_netem, so `tc netem delay` is not
available: this proxy stands between a worker and the scheduler and holds
every chunk it reads for --delay-ms before passing it on, in order, in both
directions (so a round trip costs twice the delay). It does not throttle:
chunks in flight overlap. Prints "listening on HOST:PORT" once it accepts.

    delay_proxy.py --listen 127.0.0.1:0 --to 10.0.0.1:7443 --delay-ms 100
"""
import argparse
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    queue = asyncio.Queue()
    loop = asyncio.get_running_loop()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


def log(message):
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


async def handle(client_reader, client_writer, target, delay):
    host, port = target
    peer = client_writer.get_extra_info("peername")
    try:
        server_reader, server_writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), timeout=10)
    except (OSError, asyncio.TimeoutError) as e:
        log(f"{peer}: cannot reach {host}:{port}: {e!r}")
        client_writer.close()
        return
    log(f"{peer}: connected to {host}:{port}")
    await asyncio.gather(
        pump(client_reader, server_writer, delay),
        pump(server_reader, client_writer, delay),
    )


def split(address):
    host, _, port = address.rpartition(":")
    return host, int(port)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--delay-ms", type=float, default=100)
    args = parser.parse_args()
    host, port = split(args.listen)
    target = split(args.to)
    delay = args.delay_ms / 1000.0
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, target, delay), host, port)
    bound = server.sockets[0].getsockname()
    print(f"listening on {bound[0]}:{bound[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
