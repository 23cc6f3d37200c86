"""Long pipelines on one connection: a bulk load of quiet sets, and gets nobody reads.

A cache-warming script or a dump restore writes a million `set ... noreply` down one
connection without reading. Both event loops must run such a stream through at full speed
and hold a bounded amount of it unexecuted. scripts/test runs this file on the io_uring loop
(the default), on the epoll loop and on io_uring as older kernels have it.

No fixed time is asserted: each stream's time is compared with memcached's for the same
stream in the same test, with a margin wide enough for noisy machines. A server whose work
grows with what it has buffered (the failure this guards against) takes minutes, not a
multiple of memcached's seconds.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from harness import Conn, Server, memcached, memfleet

MB = 1 << 20
VALUE = b"v" * 100
# memfleet may take this many times memcached's time, plus a constant for start-up noise.
SLOWER_BY = 3.0
SLACK_S = 2.0
# What a connection may hold unexecuted, on top of -m and the process's own memory: 16 KiB
# of requests plus a receive window (64 KiB), or the worker's 1 MiB receive ring on kernels
# before 6.17. Measured memcached at -m 64: 71 MB after a million sets.
MEM_LIMIT_MB = 64
RSS_ABOVE_LIMIT_MB = 40


def text_set(i: int) -> bytes:
    return b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(VALUE), VALUE)


def meta_set(i: int) -> bytes:
    return b"ms k%d %d q\r\n%s\r\n" % (i, len(VALUE), VALUE)


def binary_setq(i: int) -> bytes:
    key = b"k%d" % i
    extras = struct.pack(">II", 0, 0)
    body = len(extras) + len(key) + len(VALUE)
    header = struct.pack(">BBHBBHIIQ", 0x80, 0x11, len(key), len(extras), 0, 0, body, i, 0)
    return header + extras + key + VALUE


BINARY_NOOP = struct.pack(">BBHBBHIIQ", 0x80, 0x0A, 0, 0, 0, 0, 0, 0xFFFF, 0)

STREAMS: dict[str, tuple[Callable[[int], bytes], bytes, bytes]] = {
    # request maker, the request that ends the stream, the reply that says it was reached
    "text": (text_set, b"version\r\n", b"VERSION "),
    "meta": (meta_set, b"mn\r\n", b"MN\r\n"),
    "binary": (binary_setq, BINARY_NOOP, b"\x81\x0a"),
}


def pipe_stream(server: Server, kind: str, count: int, timeout: float) -> tuple[float, float]:
    """Writes `count` quiet sets and a final request down one connection in batches of 2,000,
    with a thread reading replies. Returns the seconds until the final request was answered
    and the server's peak RSS (MiB) meanwhile."""
    make, last, answer = STREAMS[kind]
    done = threading.Event()
    with socket.create_connection(("127.0.0.1", server.port or 0)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def read() -> None:
            got = b""
            while not done.is_set():
                try:
                    chunk = s.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                got = (got + chunk)[-64:]
                if answer in got:
                    done.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        started = time.monotonic()
        for first in range(0, count, 2000):
            s.sendall(b"".join(make(i) for i in range(first, min(first + 2000, count))))
        s.sendall(last)
        answered = done.wait(timeout)
        took = time.monotonic() - started
        peak = server.rss_mb("VmHWM")
        done.set()
        s.shutdown(socket.SHUT_RDWR)
    reader.join(5)
    assert answered, f"{kind}: {count} quiet sets not through in {timeout:.0f} s"
    return took, peak


def servers() -> Iterator[tuple[str, Server]]:
    args = ("-m", str(MEM_LIMIT_MB), "-t", "2", "-U", "0")
    with memcached(*args) as reference:
        yield "memcached", reference
    with memfleet(*args) as server:
        yield "memfleet", server


@pytest.mark.parametrize(
    ("kind", "count"), [("text", 1_000_000), ("meta", 300_000), ("binary", 300_000)]
)
def test_a_bulk_load_of_quiet_sets_runs_at_memcached_speed_in_bounded_memory(
    kind: str, count: int
) -> None:
    took: dict[str, float] = {}
    peak: dict[str, float] = {}
    for name, server in servers():
        limit = 120.0 if name == "memcached" else SLOWER_BY * took["memcached"] + 60
        took[name], peak[name] = pipe_stream(server, kind, count, limit)
        with Conn(server.port or 0) as c:
            # The last set of the stream was stored (the store keeps the newest items).
            reply = c.request(b"get k%d\r\n" % (count - 1), b"END\r\n")
            assert reply.endswith(VALUE + b"\r\nEND\r\n"), (name, reply[:80])
    print(f"{kind}: {count} quiet sets, seconds {took}, peak RSS MB {peak}")
    assert took["memfleet"] < SLOWER_BY * took["memcached"] + SLACK_S, took
    assert peak["memfleet"] < MEM_LIMIT_MB + RSS_ABOVE_LIMIT_MB, peak


def test_a_hundred_thousand_large_gets_nobody_reads_hold_bounded_memory() -> None:
    """The slow-reader probe on one connection: 100,000 gets of a 100 KB value (10 GB of
    replies) pipelined by a client that never reads."""
    size = 100 * 1000
    rss: dict[str, float] = {}
    for name, server in servers():
        port = server.port or 0
        with Conn(port) as c:
            assert c.request(b"set big 0 0 %d\r\n" % size + b"b" * size + b"\r\n") == b"STORED\r\n"
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        pipeline = b"get big\r\n" * 100_000
        sent = 0
        deadline = time.monotonic() + 10
        while sent < len(pipeline) and time.monotonic() < deadline:
            try:
                sent += s.send(pipeline[sent : sent + 65536])
            except BlockingIOError:
                time.sleep(0.01)
        peak = 0.0
        for _ in range(8):
            time.sleep(0.25)
            peak = max(peak, server.rss_mb())
        rss[name] = peak
        with Conn(port) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION "), name
        s.close()
    print(f"RSS MB with 100,000 unread 100 KB gets: {rss}")
    assert rss["memfleet"] < rss["memcached"] + 32, rss
