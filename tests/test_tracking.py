"""Near-cache invalidation (`track`): a listener connection is told when a key read by its
tracked data connections changes, whoever changes it and however (docs/protocol.md)."""

from __future__ import annotations

import base64
import os
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from harness import Conn, Server, eventually, memfleet

ENGINES = [("-o", "io_engine=epoll"), ("-o", "io_engine=uring")]
ENGINE_IDS = ["epoll", "uring"]


@pytest.fixture(params=ENGINES, ids=ENGINE_IDS)
def engine(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return tuple(request.param)


def listen(port: int) -> tuple[Conn, int]:
    lc = Conn(port)
    line = lc.request(b"track listen\r\n")
    assert line.startswith(b"TRACKING "), line
    return lc, int(line.split()[1])


def tracked(port: int, lid: int) -> Conn:
    c = Conn(port)
    assert c.request(b"track %d\r\n" % lid) == b"OK\r\n"
    return c


def notices(lc: Conn, quiet: float = 0.3) -> list[bytes]:
    """The notice lines that arrive until the listener is quiet for `quiet` seconds."""
    return [x for x in lc.read_all(quiet).split(b"\r\n") if x]


def next_notice(lc: Conn) -> bytes:
    return lc.read_line()


def stats(port: int) -> dict[str, str]:
    with Conn(port) as c:
        return c.stats()


@dataclass
class Tracking:
    """A server with a listener (`lc`, id `lid`), a data connection it tracks (`reader`) and a
    plain one (`writer`)."""

    server: Server
    port: int
    lc: Conn
    lid: int
    reader: Conn
    writer: Conn


@contextmanager
def tracking(engine: tuple[str, ...], *flags: str, mem: str = "64") -> Iterator[Tracking]:
    with memfleet("-m", mem, *flags, *engine) as s:
        port = s.port or 0
        lc, lid = listen(port)
        reader = tracked(port, lid)
        with lc, reader, Conn(port) as writer:
            yield Tracking(s, port, lc, lid, reader, writer)


# Every way a client changes an item, as (setup already stored "v"=b"10" at KEY), request.
WRITES = {
    "set": b"set {k} 0 0 1\r\nx\r\n",
    "replace": b"replace {k} 0 0 1\r\nx\r\n",
    "append": b"append {k} 0 0 1\r\nx\r\n",
    "prepend": b"prepend {k} 0 0 1\r\nx\r\n",
    "incr": b"incr {k} 1\r\n",
    "decr": b"decr {k} 1\r\n",
    "delete": b"delete {k}\r\n",
    "ms": b"ms {k} 1\r\nx\r\n",
    "md": b"md {k}\r\n",
    "md_invalidate": b"md {k} I T30\r\n",
    "ma": b"ma {k}\r\n",
    "flushed_by_expiry_touch": b"touch {k} -1\r\n",
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_is_announced(engine: tuple[str, ...], write: str) -> None:
    with tracking(engine) as t:
        key = b"k-" + write.encode()
        assert t.writer.request(b"set %s 0 0 2\r\n10\r\n" % key) == b"STORED\r\n"
        assert t.reader.request(b"get %s\r\n" % key, b"END\r\n").startswith(b"VALUE ")
        t.writer.request(WRITES[write].replace(b"{k}", key))
        if write == "flushed_by_expiry_touch":
            # A touch to the past expires the item: announced when it is found gone.
            assert t.writer.request(b"get %s\r\n" % key) == b"END\r\n"
        assert next_notice(t.lc) == b"IV " + key + b"\r\n"


def test_cas_and_meta_reads_register(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t:
        w, reader = t.writer, t.reader
        for k in (b"a", b"b", b"c"):
            assert w.request(b"set %s 0 0 1\r\n1\r\n" % k) == b"STORED\r\n"
        line = reader.request(b"gets a\r\n", b"END\r\n")
        cas = int(line.split(b"\r\n")[0].split()[4])
        assert reader.request(b"mg b v\r\n", b"\r\n").startswith(b"VA 1")
        reader.read_line()
        assert reader.request(b"gat 100 c\r\n", b"END\r\n").startswith(b"VALUE c")
        assert w.request(b"cas a 0 0 1 %d\r\n2\r\n" % cas) == b"STORED\r\n"
        assert w.request(b"set b 0 0 1\r\n2\r\n") == b"STORED\r\n"
        assert w.request(b"delete c\r\n") == b"DELETED\r\n"
        assert sorted(notices(t.lc)) == [b"IV a", b"IV b", b"IV c"]


def test_a_notice_ends_the_registration_and_misses_register_nothing(
    engine: tuple[str, ...],
) -> None:
    with tracking(engine) as t:
        w, reader = t.writer, t.reader
        assert reader.request(b"get nothing\r\n") == b"END\r\n"
        assert reader.request(b"mg nothing2 v\r\n") == b"EN\r\n"
        w.request(b"set nothing 0 0 1\r\n1\r\n")
        w.request(b"set nothing2 0 0 1\r\n1\r\n")
        assert reader.request(b"get nothing\r\n", b"END\r\n").startswith(b"VALUE")
        w.request(b"set nothing 0 0 1\r\n2\r\n")
        w.request(b"set nothing 0 0 1\r\n3\r\n")
        assert notices(t.lc) == [b"IV nothing"]
        assert stats(t.port)["track_keys"] == "0"


def test_untracked_and_switched_off_connections_register_nothing(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t, Conn(t.port) as plain:
        w, reader = t.writer, t.reader
        w.request(b"set a 0 0 1\r\n1\r\n")
        plain.request(b"get a\r\n", b"END\r\n")
        assert reader.request(b"track off\r\n") == b"OK\r\n"
        reader.request(b"get a\r\n", b"END\r\n")
        w.request(b"set a 0 0 1\r\n2\r\n")
        assert notices(t.lc) == []
        # The plain connection still gets exactly memcached's replies.
        assert plain.request(b"get a\r\n", b"END\r\n") == b"VALUE a 0 1\r\n2\r\nEND\r\n"


def test_track_commands_and_their_errors(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t:
        port, lc, lid = t.port, t.lc, t.lid
        lc2, lid2 = listen(port)
        assert lid != lid2
        c = t.writer
        assert c.request(b"track 999999\r\n") == b"NOT_FOUND\r\n"
        assert c.request(b"track abc\r\n").startswith(b"CLIENT_ERROR")
        assert c.request(b"track\r\n") == b"ERROR\r\n"
        assert c.request(b"track %d\r\n" % lid) == b"OK\r\n"
        # Switched to the second listener: the first hears nothing more.
        assert c.request(b"track %d\r\n" % lid2) == b"OK\r\n"
        c.request(b"set a 0 0 1\r\n1\r\n")
        c.request(b"get a\r\n", b"END\r\n")
        c.request(b"delete a\r\n")
        assert next_notice(lc2) == b"IV a\r\n"
        assert notices(lc) == []
        st = c.stats()
        assert st["track_listeners"] == "2"
        assert int(st["track_notices"]) == 1
        with Conn(port) as p:
            assert (
                p.request(b"version\r\ntrack listen\r\n", b"listen\r\n").split(b"\r\n")[-2]
                == b"ERROR cannot pipeline other commands before track listen"
            )
        lc.close()
        eventually(lambda: stats(port)["track_listeners"] == "1", "closed listener forgotten")
        with Conn(port) as c:
            assert c.request(b"track %d\r\n" % lid) == b"NOT_FOUND\r\n"


def test_a_closed_listener_voids_its_connections(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t:
        # Another listener stays, so that writes still look for registrations.
        other, _ = listen(t.port)
        w, reader = t.writer, t.reader
        w.request(b"set a 0 0 1\r\n1\r\n")
        reader.request(b"get a\r\n", b"END\r\n")
        t.lc.close()
        eventually(lambda: stats(t.port)["track_listeners"] == "1", "listener gone")
        reader.request(b"get a\r\n", b"END\r\n")
        assert w.request(b"set a 0 0 1\r\n2\r\n") == b"STORED\r\n"
        assert stats(t.port)["track_notices"] == "0"
        other.close()


def test_binary_keys_are_sent_base64(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t:
        w, reader = t.writer, t.reader
        key = base64.b64encode(b"a key\x00with bytes")
        assert w.request(b"ms %s 1 b\r\nx\r\n" % key) == b"HD\r\n"
        assert reader.request(b"mg %s b v\r\n" % key).startswith(b"VA 1")
        reader.read_line()
        assert w.request(b"md %s b\r\n" % key) == b"HD\r\n"
        assert next_notice(t.lc) == b"IV " + key + b" b\r\n"


def test_flush_all_now_and_later(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t:
        w, reader, lc = t.writer, t.reader, t.lc
        w.request(b"set a 0 0 1\r\n1\r\n")
        reader.request(b"get a\r\n", b"END\r\n")
        assert w.request(b"flush_all\r\n") == b"OK\r\n"
        assert next_notice(lc) == b"IV_ALL\r\n"
        w.request(b"set a 0 0 1\r\n1\r\n")
        reader.request(b"get a\r\n", b"END\r\n")
        assert w.request(b"flush_all 2\r\n") == b"OK\r\n"
        assert notices(lc, 0.5) == []
        lc.sock.settimeout(10)
        # The background expiry pass may find the flushed item first.
        first = next_notice(lc)
        if first == b"IV a\r\n":
            first = next_notice(lc)
        assert first == b"IV_ALL\r\n"
        assert w.request(b"get a\r\n") == b"END\r\n"


def test_expiry_is_announced_without_a_read(engine: tuple[str, ...]) -> None:
    with tracking(engine) as t:
        t.writer.request(b"set short 0 2 1\r\n1\r\n")
        t.writer.request(b"set long 0 0 1\r\n1\r\n")
        t.reader.request(b"get short long\r\n", b"END\r\n")
        t.lc.sock.settimeout(10)
        assert next_notice(t.lc) == b"IV short\r\n"
        assert notices(t.lc, 1.5) == []


def test_evictions_are_announced(engine: tuple[str, ...]) -> None:
    with tracking(engine, mem="8") as t:
        w = t.writer
        tracked_keys = [b"t%d" % i for i in range(200)]
        for k in tracked_keys:
            w.send(b"set %s 0 0 1 noreply\r\n1\r\n" % k)
        assert w.request(b"mn\r\n") == b"MN\r\n"
        t.reader.request(b"get " + b" ".join(tracked_keys) + b"\r\n", b"END\r\n")
        assert stats(t.port)["track_keys"] == "200"
        # Items read once survive a fill of unread ones (S3-FIFO): read the fill too.
        value = b"x" * 1000
        for b in range(40):
            keys = [b"fill%d" % (b * 1000 + i) for i in range(1000)]
            w.send(b"".join(b"set %s 0 0 1000 noreply\r\n%s\r\n" % (k, value) for k in keys))
            w.request(b"get " + b" ".join(keys) + b"\r\n", b"END\r\n")
        gone = {k for k in tracked_keys if w.request(b"mg %s\r\n" % k) == b"EN\r\n"}
        assert gone, "no tracked key was evicted"
        told: set[bytes] = set()
        t.lc.sock.settimeout(10)
        while not gone <= told:
            line = next_notice(t.lc)
            assert line.startswith(b"IV t"), line
            told.add(line[3:-2])
        assert int(stats(t.port)["evictions"]) > 0


def test_a_listener_past_its_bound_is_told_to_drop_everything(engine: tuple[str, ...]) -> None:
    with tracking(engine, "-o", "track_max_keys=10") as t:
        w, reader, lc = t.writer, t.reader, t.lc
        for i in range(11):
            w.request(b"set k%d 0 0 1\r\n1\r\n" % i)
        for i in range(10):
            reader.request(b"get k%d\r\n" % i, b"END\r\n")
        assert notices(lc) == []
        reader.request(b"get k10\r\n", b"END\r\n")
        assert next_notice(lc) == b"IV_ALL\r\n"
        assert stats(t.port)["track_flushes"] == "1"
        # Registrations before the IV_ALL are void; the sweep removes them.
        w.request(b"set k0 0 0 1\r\n2\r\n")
        assert notices(lc) == []
        eventually(lambda: stats(t.port)["track_keys"] == "0", "void registrations swept")


def test_a_listener_that_never_reads_costs_bounded_memory(engine: tuple[str, ...]) -> None:
    with tracking(engine, "-o", "watcher_logbuf_size=64") as t:
        w, reader = t.writer, t.reader
        key_pad = b"p" * 200
        before = t.server.rss_mb()
        for _ in range(100):
            batch = b"".join(b"set %s%d 0 0 1 noreply\r\n1\r\n" % (key_pad, i) for i in range(2000))
            w.send(batch)
            reader.send(b"".join(b"mg %s%d\r\n" % (key_pad, i) for i in range(2000)))
            for _ in range(2000):
                reader.read_line()
        assert w.request(b"mn\r\n") == b"MN\r\n"
        grown = t.server.rss_mb() - before
        # 200,000 notices of ~210 bytes (42 MB) and nobody reading: the kernel's socket
        # buffers take a few MB, the server's queue 64 KB, the rest is dropped. (The
        # server's own buffers for the reads and writes take up to ~10 MB of it.)
        assert grown < 20, grown
        everything = t.lc.read_all(1.0)
        assert everything.endswith(b"IV_ALL\r\n"), everything[-100:]


def test_sweep_keeps_the_total_bound(engine: tuple[str, ...]) -> None:
    with tracking(engine, "-o", "track_total_keys=100") as t:
        # The set-up's listener is the small one.
        small, r_small, w = t.lc, t.reader, t.writer
        big, big_id = listen(t.port)
        r_big = tracked(t.port, big_id)
        for i in range(120):
            w.request(b"set k%d 0 0 1\r\n1\r\n" % i)
        for i in range(10):
            r_small.request(b"get k%d\r\n" % i, b"END\r\n")
        for i in range(10, 95):
            r_big.request(b"get k%d\r\n" % i, b"END\r\n")
        eventually(lambda: int(stats(t.port)["track_flushes"]) >= 1, "the biggest is flushed")
        assert next_notice(big) == b"IV_ALL\r\n"
        assert notices(small) == []
        w.request(b"delete k3\r\n")
        assert next_notice(small) == b"IV k3\r\n"


def test_server_killed_closes_the_listener(engine: tuple[str, ...]) -> None:
    s: Server = memfleet("-m", "64", *engine).start()
    try:
        lc, _ = listen(s.port or 0)
        s.kill()
        # End of stream, not silence (which `read_all` would also give): a client drops
        # everything from the server on it.
        lc.sock.settimeout(10)
        try:
            closed = lc.sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        assert closed
    finally:
        s.stop()


def test_tracking_survives_a_move_to_another_worker(engine: tuple[str, ...]) -> None:
    """Idle connections move to the worker of the CPU their client runs on: a tracked one
    stays tracked."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    with tracking(engine, "-t", "2") as t:
        port, w, lc = t.port, t.writer, t.lc
        readers = [t.reader] + [tracked(port, t.lid) for _ in range(7)]
        w.request(b"set k 0 0 1\r\n1\r\n")
        # Only connections that sent a command within the last second are moved: from here
        # on that is the readers alone (a stats connection starts on its CPU's worker).
        time.sleep(1.5)
        before = int(stats(port)["conns_moved"])
        old = os.sched_getaffinity(0)
        moved = 0
        try:
            for cpu in cpus[:2] * 4:
                os.sched_setaffinity(0, {cpu})
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    for r in readers:
                        assert r.request(b"mn\r\n") == b"MN\r\n"
                    time.sleep(0.05)
                moved = int(stats(port)["conns_moved"]) - before
                if moved:
                    break
        finally:
            os.sched_setaffinity(0, old)
        if not moved:
            pytest.skip("no connection was moved (the kernel kept packets on one CPU)")
        for i, r in enumerate(readers):
            assert r.request(b"get k\r\n", b"END\r\n").startswith(b"VALUE k")
            assert w.request(b"set k 0 0 1\r\n%d\r\n" % (i % 10)) == b"STORED\r\n"
            assert next_notice(lc) == b"IV k\r\n", f"reader {i}"


def test_the_notice_is_in_the_listeners_socket_before_the_write_is_answered(
    engine: tuple[str, ...],
) -> None:
    # One worker serves the listener, the reader and the writer: a notice left for the worker
    # would go out only after the writer's reply. The writer sends it itself (the first of a
    # burst: the writes here are a millisecond apart).
    with tracking(engine, "-t", "1") as t:
        for i in range(5):
            assert t.writer.request(b"set k%d 0 0 1\r\nx\r\n" % i) == b"STORED\r\n"
        late = 0
        for i in range(200):
            key = b"k%d" % (i % 5)
            assert t.reader.request(b"get %s\r\n" % key, b"END\r\n").endswith(b"END\r\n")
            time.sleep(0.001)
            assert t.writer.request(b"set %s 0 0 1\r\nx\r\n" % key) == b"STORED\r\n"
            ready, _, _ = select.select([t.lc.sock], [], [], 0)
            if not ready and not t.lc.buf:
                late += 1
            assert next_notice(t.lc) == b"IV " + key + b"\r\n"
        # The first notice finds the listener not yet idle (its worker has written nothing).
        assert late <= 1, f"{late} of 200 notices were not there when the write was answered"
