"""`-e FILE` warm restart: SIGUSR1 saves the items, the next start with the same -e/-m/-I
serves them again with flags, cas and remaining TTL; a bad file starts cold.

The round trip also runs against memcached 1.6.18 -e, which keeps the same observables.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import Conn, Server, memcached, memfleet, save_warm_restart

Items = dict[bytes, tuple[int, int, bytes]]

# Mixed sizes: empty, small, a few KB, and one stored in a buffer of its own (>= 64 KiB).
VALUES: dict[bytes, tuple[int, int, bytes]] = {
    b"empty": (0, 0, b""),
    b"small": (7, 0, b"hello"),
    b"ttl": (1, 1000, b"expires later"),
    b"binary": (2**32 - 1, 0, bytes(range(256)) * 4),
    b"big": (3, 0, b"B" * 300_000),
}


@pytest.fixture
def memfile() -> Iterator[str]:
    path = f"/dev/shm/memfleet-test-warm-{os.getpid()}-{time.monotonic_ns()}"
    yield path
    for p in (path, path + ".meta", path + ".tmp"):
        if os.path.exists(p):
            os.remove(p)


def fill(port: int) -> None:
    with Conn(port) as c:
        for key, (flags, ttl, value) in VALUES.items():
            req = b"set %s %d %d %d\r\n%s\r\n" % (key, flags, ttl, len(value), value)
            assert c.request(req) == b"STORED\r\n"
        for i in range(500):
            assert c.request(b"set k%d %d 0 %d\r\n%s\r\n" % (i, i, i, b"v" * i)) == b"STORED\r\n"


def dump(port: int) -> Items:
    keys = list(VALUES) + [b"k%d" % i for i in range(500)]
    out: Items = {}
    with Conn(port) as c:
        c.send(b"gets " + b" ".join(keys) + b"\r\n")
        while True:
            line = c.read_line()
            if line == b"END\r\n":
                return out
            _, key, flags, size, cas = line.split()
            value = c.read_until(b"\r\n") if int(size) == 0 else b""
            while len(value) < int(size) + 2:
                value += c.read_until(b"\r\n")
            out[key] = (int(flags), int(cas), value[:-2])


def ttl_left(port: int, key: bytes) -> int:
    with Conn(port) as c:
        reply = c.request(b"mg " + key + b" t\r\n")
    assert reply.startswith(b"HD t"), reply
    return int(reply.split()[1][1:])


def new_cas(port: int) -> int:
    with Conn(port) as c:
        assert c.request(b"set fresh 0 0 1\r\nx\r\n") == b"STORED\r\n"
        reply = c.request(b"gets fresh\r\n", b"END\r\n")
    return int(reply.split(b"\r\n")[0].split()[4])


def stop(server: Server, sig: signal.Signals) -> str:
    assert server.proc is not None and server.proc.stderr is not None
    server.proc.send_signal(sig)
    server.proc.wait(timeout=60)
    log = server.proc.stderr.read().decode()
    server.stop()
    return log


def restart_round_trip(start: Callable[[], Server], pause: float) -> None:
    server = start().start()
    fill(server.port or 0)
    before = dump(server.port or 0)
    assert len(before) == len(VALUES) + 500
    stop(server, signal.SIGUSR1)
    time.sleep(pause)
    server = start().start()
    try:
        after = dump(server.port or 0)
        assert after == before
        assert 0 < ttl_left(server.port or 0, b"ttl") <= 1000
        assert new_cas(server.port or 0) > max(cas for _, cas, _ in before.values())
    finally:
        server.stop()


def test_restart_keeps_items_flags_cas_and_ttl(memfile: str) -> None:
    restart_round_trip(lambda: memfleet("-m", "64", "-e", memfile), 0)
    assert not os.path.exists(memfile), "the file is used up once read"


def test_memcached_keeps_the_same(memfile: str) -> None:
    # memcached refuses a restart in the same second as the stop (its clock check).
    restart_round_trip(lambda: memcached("-m", "64", "-e", memfile), 1.2)


def test_shutdown_graceful_saves_and_sigterm_does_not(memfile: str) -> None:
    with memfleet("-m", "64", "-e", memfile, "-A") as s:
        fill(s.port or 0)
        with Conn(s.port or 0) as c:
            c.send(b"shutdown graceful\r\n")
            assert s.proc is not None
            s.proc.wait(timeout=60)
    assert os.path.getsize(memfile) > 300_000
    with memfleet("-m", "64", "-e", memfile) as s:
        assert len(dump(s.port or 0)) == len(VALUES) + 500
        stop(s, signal.SIGTERM)
    assert not os.path.exists(memfile)
    with memfleet("-m", "64", "-e", memfile) as s:
        assert dump(s.port or 0) == {}


def test_sigusr1_while_loading_saves_once_loaded(memfile: str) -> None:
    """A USR1 sent as the port opens, while the saved items still load, stops the server
    gracefully once they have: it is not the signal's default action (death, nothing saved)."""
    save_warm_restart(memfile, 100_000, "-m", "64")
    with memfleet("-m", "64", "-e", memfile) as s:
        assert s.proc is not None
        s.proc.send_signal(signal.SIGUSR1)
        assert s.proc.wait(timeout=30) == 0
    with memfleet("-m", "64", "-e", memfile) as s, Conn(s.port or 0) as c:
        assert c.request(b"mg k0\r\n") == b"HD\r\n"
        assert c.request(b"mg k99999\r\n") == b"HD\r\n"


def saved_file(memfile: str) -> bytes:
    with memfleet("-m", "64", "-e", memfile) as s:
        fill(s.port or 0)
        stop(s, signal.SIGUSR1)
    return Path(memfile).read_bytes()


@pytest.mark.parametrize(
    ("damage", "flags", "message"),
    [
        (lambda b: b[: len(b) // 2], (), "truncated"),
        (lambda b: b[:-1], (), "truncated"),
        (lambda b: b[:5000] + bytes([b[5000] ^ 1]) + b[5001:], (), "checksum mismatch"),
        (lambda b: b + b"x", (), "data after the end frame"),
        (lambda b: os.urandom(len(b)), (), "not a memfleet warm-restart file"),
        (lambda b: b"", (), "not a memfleet warm-restart file"),
        (lambda b: b, ("-m", "128"), "saved with -m"),
        (lambda b: b, ("-I", "2m"), "saved with -I"),
    ],
)
def test_bad_file_starts_cold_with_a_message(
    memfile: str, damage: Callable[[bytes], bytes], flags: tuple[str, ...], message: str
) -> None:
    Path(memfile).write_bytes(damage(saved_file(memfile)))
    args = ("-m", "64", *flags) if "-m" not in flags else flags
    with memfleet(*args, "-e", memfile) as s:
        assert dump(s.port or 0) == {}
        with Conn(s.port or 0) as c:
            assert c.request(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"
        log = stop(s, signal.SIGTERM)
    assert f"[restart] {memfile}:" in log and message in log, log
    assert "starting with a clean cache" in log
    assert not os.path.exists(memfile)


@pytest.mark.parametrize("start", [memfleet, memcached], ids=["memfleet", "memcached"])
def test_stats_settings_names_the_memory_file(memfile: str, start: Callable[..., Server]) -> None:
    with start("-m", "64", "-e", memfile) as s, Conn(s.port or 0) as c:
        settings = c.request(b"stats settings\r\n", b"END\r\n")
    assert b"STAT memory_file %s\r\n" % memfile.encode() in settings
