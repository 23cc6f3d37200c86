"""Adversarial clients against `memfleet serve`, each run side by side with memcached 1.6.18.

Memory is judged by the server's resident set (VmRSS) against memcached's under the same
load and against `-m`: memcached survives every one of these with a few MB, and memfleet
must stay in the same region. No timing is asserted; the loads are sized so that an
unbounded server would exceed the bounds by hundreds of MB.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest
from harness import (
    Conn,
    Server,
    free_port,
    memcached,
    memfleet,
    serve_command,
    stop_process,
    wait_for_port,
)

MB = 1 << 20


def settled_rss_mb(server: Server, rounds: int = 8) -> float:
    """The largest RSS seen while the server works through what was sent (it only grows)."""
    peak = 0.0
    for _ in range(rounds):
        time.sleep(0.25)
        peak = max(peak, server.rss_mb())
    return peak


def both(*args: str) -> Iterator[tuple[str, Server]]:
    for name, make in (("memfleet", memfleet), ("memcached", memcached)):
        with make(*args) as server:
            yield name, server


def nonblocking_flood(sock: socket.socket, data: bytes, limit: int) -> int:
    """Sends copies of `data` until the peer stops reading (or `limit` bytes). Bytes sent."""
    sock.setblocking(False)
    sent = 0
    while sent < limit:
        try:
            sent += sock.send(data)
        except BlockingIOError:
            break
    return sent


def slow_reader(port: int) -> socket.socket:
    """A client with a small receive window, so the kernel holds little of the replies."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    return s


def stats(port: int, sub: str = "") -> dict[str, str]:
    with Conn(port) as c:
        return c.stats(sub)


def test_sigterm_stops_the_server_after_its_stderr_is_gone() -> None:
    """A server whose stderr pipe has closed (its supervisor went away) still stops on
    SIGTERM: its "Signal handled" line must not take the signal thread down."""
    port = free_port()
    argv = serve_command("-l", "127.0.0.1", "-p", str(port))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port)
        assert proc.stderr is not None
        proc.stderr.close()
        proc.send_signal(signal.SIGTERM)
        # A hang guard, not a timing claim: a stuck server never exits.
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_verbose_logging_to_a_closed_stderr_keeps_serving() -> None:
    """With -vv every request is logged to stderr; once that pipe has closed the workers must
    go on answering rather than die on the failed write."""
    port = free_port()
    argv = serve_command("-l", "127.0.0.1", "-p", str(port), "-t", "1", "-vv")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port)
        assert proc.stderr is not None
        proc.stderr.close()
        for i in range(3):
            with Conn(port) as c:
                assert c.request(f"set k{i} 0 0 1\r\nv\r\n".encode()) == b"STORED\r\n"
                assert c.request(b"get k0\r\n", b"END\r\n") == b"VALUE k0 0 1\r\nv\r\nEND\r\n"
    finally:
        proc.kill()
        proc.wait()


def test_sighup_does_not_stop_the_server() -> None:
    for name, server in both("-m", "64"):
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert server.proc.poll() is None, f"{name} died of SIGHUP"
        with Conn(server.port or 0) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION "), name
        print(f"{name}: RSS {server.rss_mb():.1f} MB after SIGHUP")


@pytest.mark.parametrize("make", [memfleet, memcached], ids=["memfleet", "memcached"])
def test_sighup_as_soon_as_the_port_opens_does_not_stop_the_server(
    make: Callable[..., Server],
) -> None:
    """The listening socket opens before the server has finished starting; a HUP that lands
    in between (here, the first moment a connect succeeds) must not kill it either."""
    for _ in range(10):
        server = make("-m", "64")
        assert server.port is not None
        proc = subprocess.Popen(server.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the port never opened"
                    assert proc.poll() is None, "the server exited at start"
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.2)
            assert proc.poll() is None, "died of a SIGHUP sent as its port opened"
            with Conn(server.port) as c:
                assert c.request(b"version\r\n").startswith(b"VERSION ")
        finally:
            proc.kill()
            proc.wait()


def store_value(port: int, key: bytes, size: int) -> None:
    with Conn(port) as c:
        reply = c.request(b"set %s 0 0 %d\r\n" % (key, size) + b"v" * size + b"\r\n")
        assert reply == b"STORED\r\n"


def measure(args: tuple[str, ...], load: Callable[[int], list[socket.socket]]) -> dict[str, float]:
    """Runs `load` (which returns the sockets it keeps open) against both servers."""
    rss: dict[str, float] = {}
    for name, server in both(*args):
        socks = load(server.port or 0)
        rss[name] = settled_rss_mb(server)
        assert server.proc is not None and server.proc.poll() is None, name
        # Still serving other clients while the slow ones hold their replies.
        with Conn(server.port or 0) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION "), name
        for s in socks:
            s.close()
    print(f"RSS MB: {rss}")
    return rss


def test_multiget_of_large_values_for_a_client_that_never_reads() -> None:
    def load(port: int) -> list[socket.socket]:
        store_value(port, b"big", 1000 * 1000)
        s = slow_reader(port)
        s.sendall(b"get" + b" big" * 1000 + b"\r\n")
        return [s]

    rss = measure(("-m", "64"), load)
    # 1000 copies of the value would be ~1 GB; memcached stays at a few MB.
    assert rss["memfleet"] < rss["memcached"] + 32, rss


def test_pipelined_large_gets_on_many_connections_that_never_read() -> None:
    def load(port: int) -> list[socket.socket]:
        store_value(port, b"half", 512 * 1024)
        socks = []
        for _ in range(40):
            s = slow_reader(port)
            # Single-key gets and eight-key gets (4 MB of reply each) in one pipeline.
            nonblocking_flood(s, b"get" + b" half" * 8 + b"\r\nget half\r\n" * 40, 4 * MB)
            socks.append(s)
        return socks

    rss = measure(("-m", "64"), load)
    assert rss["memfleet"] < rss["memcached"] + 32, rss


def test_stalled_large_sets_count_against_the_memory_limit() -> None:
    size = 1000 * 1000
    conns = 800

    def load(port: int) -> list[socket.socket]:
        socks = []
        for i in range(conns):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"set stalled%d 0 0 %d\r\n" % (i, size) + b"s" * (size - 100 * 1000))
            socks.append(s)
        return socks

    rss = measure(("-m", "64", "-c", "1024"), load)
    # Values under way are item memory (-m 64), as in memcached; not 800 MB beside it.
    assert rss["memfleet"] < 64 + 48, rss


def wait_for_bytes_read(port: int, sent: int) -> None:
    """Waits until the server has read `sent` bytes from its clients (its `bytes_read`)."""
    deadline = time.monotonic() + 30
    while int(stats(port)["bytes_read"]) < sent and time.monotonic() < deadline:
        time.sleep(0.05)


def test_values_under_way_fill_their_share_then_a_set_is_refused_and_a_held_one_finishes() -> None:
    """Values under way hold at most a quarter of -m together (at -m 64, 16 MiB). Once held
    sets fill that share with bytes they really sent, a further large set whose value
    arrives in parts gets memcached's reply as they arrive and its value is swallowed; the
    connection stays usable, and a held one that finishes is stored. (memcached allocates a
    large item's chunks as they arrive, so whether it refuses here depends on timing: only
    memfleet is checked.)"""
    size = 1000 * 1000
    part = 990 * 1000
    with memfleet("-m", "64") as server:
        port = server.port or 0
        held = []
        sent = 0
        # One at a time, so that each is charged whole before the next arrives: 16 fit in
        # 16 MB, and what is left is less than the late value.
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            request = b"set held%d 0 0 %d\r\n" % (i, size) + b"h" * part
            s.sendall(request)
            sent += len(request)
            held.append(s)
            wait_for_bytes_read(port, sent)
        with Conn(port) as c:
            # Its part arrives (and is refused) before the rest: a value that arrives whole
            # in one read is stored, evicting as any store does.
            late = b"set late 0 0 %d\r\n" % size + b"x" * part
            c.send(late)
            wait_for_bytes_read(port, sent + len(late))
            c.send(b"x" * (size - part) + b"\r\n")
            assert c.read_line() == b"SERVER_ERROR out of memory storing object\r\n"
            assert c.request(b"version\r\n").startswith(b"VERSION ")
            assert c.request(b"get late\r\n", b"END\r\n") == b"END\r\n"
        for s in held[1:]:
            s.close()
        first = held[0]
        first.sendall(b"h" * (size - part) + b"\r\n")
        first.settimeout(5)
        assert first.recv(100) == b"STORED\r\n"
        first.close()
        assert int(stats(port)["store_no_memory"]) > 0


def test_announced_values_that_never_arrive_evict_nothing() -> None:
    """65 clients announce 1 MB values (65 MB, more than -m 64), send 10 bytes and stall:
    only what arrived is charged, so the 2,000 items stored before all stay (memcached
    evicts none either)."""
    kept: dict[str, int] = {}
    for name, server in both("-m", "64"):
        port = server.port or 0
        with Conn(port) as c:
            c.send(
                b"".join(
                    b"set item%d 0 0 100 noreply\r\n%s\r\n" % (i, b"i" * 100) for i in range(2000)
                )
            )
            assert c.request(b"version\r\n").startswith(b"VERSION ")
        socks = []
        sent = int(stats(port)["bytes_read"])
        for i in range(65):
            s = socket.create_connection(("127.0.0.1", port))
            request = b"set stall%d 0 0 1000000\r\n" % i + b"s" * 10
            s.sendall(request)
            sent += len(request)
            socks.append(s)
        wait_for_bytes_read(port, sent)
        with Conn(port) as c:
            keys = b" ".join(b"item%d" % i for i in range(2000))
            reply = c.request(b"get " + keys + b"\r\n", b"END\r\n")
            kept[name] = reply.count(b"VALUE ")
            evictions = int(c.stats()["evictions"])
        for s in socks:
            s.close()
        assert evictions == 0, (name, evictions)
    assert kept == {"memfleet": 2000, "memcached": 2000}, kept


def test_values_just_under_64_kib_stalled_on_thousands_of_connections_stay_in_bounds() -> None:
    """2,000 clients each send 64,000 of the 65,000 bytes they announce and stall: 128 MB
    really sent. What values under way hold is item memory within -m (their share of it),
    so the server's RSS stays within memcached's under the same load."""
    conns = 2000

    def load(port: int) -> list[socket.socket]:
        socks = []
        for i in range(conns):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"set part%d 0 0 65000\r\n" % i + b"p" * 64000)
            socks.append(s)
        return socks

    rss = measure(("-m", "64", "-c", "4096"), load)
    assert rss["memfleet"] <= rss["memcached"] + 8, rss


MEMLIMITS = [
    b"7",
    b"8",
    b"1000000000",
    b"1000000001",
    b"4294967295",
    b"4294967296",
    b"99999999999",
    b"-1",
    b"abc",
    b"100",
    b"2000000000 noreply",
    b"7 noreply",
]


def test_cache_memlimit_bounds_like_memcached() -> None:
    answers: dict[str, list[bytes]] = {}
    for name, server in both("-m", "64"):
        with Conn(server.port or 0) as c:
            got = []
            for v in MEMLIMITS:
                got.append(c.request(b"cache_memlimit " + v + b"\r\nmn\r\n", b"MN\r\n"))
            answers[name] = got
        limit = int(stats(server.port or 0)["limit_maxbytes"])
        assert limit == 100 * MB, (name, limit)
    assert answers["memfleet"] == answers["memcached"]
    assert b"MEMLIMIT_ADJUST_FAILED" in answers["memfleet"][3]


def test_disable_evictions_refuses_stores_when_full() -> None:
    for name, server in both("-m", "8", "-M"):
        port = server.port or 0
        value = b"e" * 100_000
        replies = []
        with Conn(port) as c:
            for i in range(300):
                replies.append(
                    c.request(b"set ev%d 0 0 %d\r\n" % (i, len(value)) + value + b"\r\n")
                )
            first = c.request(b"get ev0\r\n", b"END\r\n")
        assert b"SERVER_ERROR out of memory storing object\r\n" in replies, name
        assert first.startswith(b"VALUE ev0 "), name
        st = stats(port)
        assert st["evictions"] == "0", name
        assert int(st["store_no_memory"]) > 0 or name == "memcached"


def test_refused_oversized_stores_are_counted() -> None:
    for name, server in both("-m", "64"):
        with Conn(server.port or 0) as c:
            big = 2 * MB
            reply = c.request(b"set huge 0 0 %d\r\n" % big + b"x" * big + b"\r\n")
            assert reply == b"SERVER_ERROR object too large for cache\r\n", name
            reply = c.request(b"ms huge %d T0\r\n" % big + b"x" * big + b"\r\n")
            assert reply.startswith(b"SERVER_ERROR object too large"), name
        assert stats(server.port or 0)["store_too_large"] == "2", name


def test_verbose_logs_replies_and_unknown_commands() -> None:
    requests = b"set a 0 0 1\r\nx\r\nget a\r\nbogus cmd\r\nget nope\r\ndelete a\r\nincr x 1\r\n"
    logs: dict[str, list[str]] = {}
    for name, server in both("-vv"):
        with Conn(server.port or 0) as c:
            c.send(requests)
            c.request(b"mn\r\n", b"MN\r\n")
        assert server.proc is not None and server.proc.stderr is not None
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=10)
        text = server.proc.stderr.read().decode()
        logs[name] = [
            line.split(" ", 1)[0][0] + " " + line.split(" ", 1)[1]
            for line in text.splitlines()
            if line[:1] in "<>"
            and " " in line
            and "connection" not in line
            and "server listening" not in line
        ]
    assert logs["memfleet"] == logs["memcached"], logs


def test_stats_names_match_memcached() -> None:
    names: dict[str, dict[str, str]] = {}
    settings: dict[str, dict[str, str]] = {}
    for name, server in both("-m", "4096", "-B", "auto"):
        port = server.port or 0
        store_value(port, b"one", 10)
        names[name] = stats(port)
        settings[name] = stats(port, "settings")
        items = stats(port, "items")
        for field in ("age", "evicted_time", "outofmemory"):
            assert f"items:1:{field}" in items, (name, field, items)
        if name == "memfleet":
            # One small item: what is in use, not the index reserved for a 4 GB cache.
            assert int(names[name]["mem_used"]) < 8 * MB, names[name]["mem_used"]
            assert int(stats(port, "slabs")["total_malloced"]) < 8 * MB
            assert server.rss_mb() < 64
    for field in ("listen_disabled_num", "malloc_fails", "hash_bytes"):
        assert field in names["memfleet"], field
    for field in ("shutdown_command", "binding_protocol", "flush_enabled", "evictions"):
        assert settings["memfleet"][field] == settings["memcached"][field], field


def test_unwritable_pid_file_warns_and_runs() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "no", "such", "dir", "mf.pid")
        for name, server in both("-P", path):
            assert server.proc is not None and server.proc.poll() is None, name
            with Conn(server.port or 0) as c:
                assert c.request(b"version\r\n").startswith(b"VERSION "), name


@pytest.fixture(autouse=True)
def _fd_room() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))


def test_bad_key_after_paused_replies_still_discards_them() -> None:
    """A get pauses at large values and at 256 KiB of replies; a too-long key later in it
    must still make the whole reply `CLIENT_ERROR` alone, as in memcached."""
    bad = b"x" * 251
    for name, server in both("-m", "64"):
        port = server.port or 0
        store_value(port, b"large", 200_000)
        store_value(port, b"small", 2000)
        with Conn(port) as c:
            for keys in (b"large large " + bad, b"small " * 300 + bad):
                reply = c.request(b"get " + keys + b"\r\nmn\r\n", b"MN\r\n")
                assert reply == b"CLIENT_ERROR bad command line format\r\nMN\r\n", name
            reply = c.request(b"get large small large\r\n", b"END\r\n")
            assert reply.count(b"VALUE ") == 3 and len(reply) > 400_000, name
        assert stats(port)["get_hits"] == str(2 + 300 + 3), name


def test_requests_on_thousands_of_connections_in_one_turn() -> None:
    """3,000 connections each send a get while the server is stopped (SIGSTOP), so all of
    them arrive in one turn of its event loop: every connection gets its own value, and the
    memory this takes stays in memcached's region. (io_uring: receives for all of them share
    the ring's buffers, and each reply waits for its send in a buffer of its size; a pooled
    16 KiB buffer per waiting reply took ~12 MB here.)"""
    n = 3000
    growth: dict[str, float] = {}
    for name, server in both("-c", "4096"):
        assert server.proc is not None
        socks = [socket.create_connection(("127.0.0.1", server.port or 0)) for _ in range(n)]
        try:
            values = [b"%d" % i * 20 for i in range(n)]
            socks[0].sendall(
                b"".join(
                    b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v)
                    for i, v in enumerate(values)
                )
                + b"version\r\n"
            )
            got = b""
            while not got.endswith(b"\r\n"):
                got += socks[0].recv(4096)
            assert got.startswith(b"VERSION "), (name, got)
            time.sleep(0.3)
            before = server.rss_mb()
            stop_process(server.proc.pid)
            try:
                for i, s in enumerate(socks):
                    s.sendall(b"get k%d\r\n" % i)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            for i, s in enumerate(socks):
                want = b"VALUE k%d 0 %d\r\n%s\r\nEND\r\n" % (i, len(values[i]), values[i])
                got = b""
                while len(got) < len(want):
                    chunk = s.recv(4096)
                    assert chunk, (name, i, got)
                    got += chunk
                assert got == want, (name, i, got)
            growth[name] = settled_rss_mb(server, rounds=2) - before
        finally:
            for s in socks:
                s.close()
    print(f"RSS growth MB: {growth}")
    assert growth["memfleet"] < growth["memcached"] + 6, growth
