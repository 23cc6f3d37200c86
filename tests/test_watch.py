"""memcached's `watch` log streams (memcached's t/watcher.t and t/watcher_connid.t, and
memfleet's bounds), on each event loop."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from harness import ROOT, Conn, Server, eventually, memfleet, memfleet_bin

ENGINES = [("-o", "io_engine=epoll"), ("-o", "io_engine=uring")]
ENGINE_IDS = ["epoll", "uring"]

LINE_START = rb"ts=\d+\.\d+ gid=\d+ "


@pytest.fixture(params=ENGINES, ids=ENGINE_IDS)
def engine(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return tuple(request.param)


def watcher(port: int, kinds: bytes = b"") -> Conn:
    w = Conn(port)
    assert w.request(b"watch" + kinds + b"\n") == b"OK\r\n"
    return w


def log_line(w: Conn) -> bytes:
    """The next log line (memcached ends them with a bare newline)."""
    return w.read_until(b"\n")


def rss_kb(server: Server) -> int:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def cfd_of(c: Conn) -> int:
    """This connection's fd, from `stats conns` (found by its port: the harness's readiness
    probe may still be listed, so the last line, watcher_connid.t's pick, may not be it)."""
    raw = c.request(b"stats conns\r\n", b"END\r\n")
    mine = b":addr tcp:127.0.0.1:%d" % c.sock.getsockname()[1]
    line = next(x for x in raw.split(b"\r\n") if x.endswith(mine))
    return int(line.split(b":")[0].split()[1])


def test_get_is_logged_to_default_watcher(engine: tuple[str, ...]) -> None:
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0) as c:
        w = watcher(s.port or 0)
        assert c.request(b"get foo\n") == b"END\r\n"
        assert re.fullmatch(
            LINE_START + rb"type=item_get key=foo status=not_found clsid=0 cfd=\d+ size=0\n",
            log_line(w),
        )


def test_longest_key_is_uri_encoded(engine: tuple[str, ...]) -> None:
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0) as c:
        w = watcher(s.port or 0, b" mutations")
        key = b"#" * 250
        assert c.request(b"set %s 0 0 9\r\nmemcached\r\n" % key) == b"STORED\r\n"
        fields = log_line(w).split()
        assert fields[3] == b"key=" + b"%23" * 250
        assert len(fields[3]) == 250 * 3 + len("key=")


def test_connection_events(engine: tuple[str, ...]) -> None:
    with memfleet("-m", "60", *engine) as s:
        w = watcher(s.port or 0, b" connevents")
        with Conn(s.port or 0) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION ")
            c.send(b"quit\r\n")
            assert re.fullmatch(
                LINE_START + rb"type=conn_new rip=127\.0\.0\.1 rport=\d+ transport=tcp cfd=\d+\n",
                log_line(w),
            )
            assert re.fullmatch(
                LINE_START + rb"type=conn_close .+ transport=(local|tcp) reason=normal cfd=\d+\n",
                log_line(w),
            )
        with Conn(s.port or 0) as c:
            c.send(b"GET / HTTP/1.1\r\n")
            assert re.match(LINE_START + rb"type=conn_new .+ transport=(local|tcp)", log_line(w))
            assert re.match(
                LINE_START + rb"type=conn_close .+ transport=(local|tcp) reason=error",
                log_line(w),
            )


def test_get_and_set_sizes(engine: tuple[str, ...]) -> None:
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0) as c:
        w = watcher(s.port or 0, b" fetchers mutations")
        assert c.request(b"set vfoo 0 0 4\r\nvbar\r\n") == b"STORED\r\n"
        assert c.request(b"get vfoo\r\n", b"END\r\n") == b"VALUE vfoo 0 4\r\nvbar\r\nEND\r\n"
        assert re.match(LINE_START + rb"type=item_get key=vfoo .+ size=0\n", log_line(w))
        assert re.match(LINE_START + rb"type=item_store key=vfoo .+ size=4\n", log_line(w))
        assert re.match(LINE_START + rb"type=item_get key=vfoo .+ size=4\n", log_line(w))


def test_cas_and_deletions(engine: tuple[str, ...]) -> None:
    with memfleet(*engine) as s, Conn(s.port or 0) as c:
        w = watcher(s.port or 0, b" mutations deletions")
        assert c.request(b"cas cas_watch_key 0 0 5 1\r\nvalue\r\n") == b"NOT_FOUND\r\n"
        assert re.match(
            LINE_START + rb"type=item_store key=cas_watch_key status=not_found cmd=cas ttl=0 ",
            log_line(w),
        )
        assert c.request(b"set d 0 0 3 noreply\r\nabc\r\ndelete d\r\n") == b"DELETED\r\n"
        assert re.match(LINE_START + rb"type=item_store key=d status=stored cmd=set", log_line(w))
        assert re.fullmatch(
            LINE_START + rb"type=deleted key=d cmd=delete clsid=1 size=3\n", log_line(w)
        )


def test_watcher_count_in_stats(engine: tuple[str, ...]) -> None:
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0) as c:
        w1 = watcher(s.port or 0, b" fetchers")
        eventually(lambda: c.stats()["log_watchers"] == "1", "one watcher counted")
        w2 = watcher(s.port or 0, b" fetchers")
        eventually(lambda: c.stats()["log_watchers"] == "2", "two watchers counted")
        w1.close()
        w2.close()
        eventually(lambda: c.stats()["log_watchers"] == "0", "closed watchers forgotten")


def test_refusals(engine: tuple[str, ...]) -> None:
    with memfleet("-W", *engine) as s, Conn(s.port or 0) as c:
        assert c.request(b"watch mutations\n") == b"CLIENT_ERROR watch commands not allowed\r\n"
    with memfleet(*engine) as s, Conn(s.port or 0) as c:
        assert c.request(b"watch fetchers bogus\r\n") == b"ERROR\r\n"
        assert c.request(b"version\r\nwatch\r\n").startswith(b"VERSION ")
        assert c.read_line() == b"ERROR cannot pipeline other commands before watch\r\n"
        # Kinds memcached has and memfleet never logs are accepted.
        assert c.request(b"watch sysevents proxyreqs\r\n") == b"OK\r\n"


def test_connection_ids(engine: tuple[str, ...]) -> None:
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0) as first:
        cfd_first = cfd_of(first)
        w = watcher(s.port or 0, b" fetchers mutations")
        first.send(b"set foo 0 0 5 noreply\r\nhello\r\n")
        assert re.match(
            LINE_START + rb"type=item_get key=foo status=not_found clsid=\d+ cfd=%d " % cfd_first,
            log_line(w),
        )
        assert re.match(
            LINE_START
            + rb"type=item_store key=foo status=stored cmd=set ttl=\d+ clsid=\d+ cfd=%d "
            % cfd_first,
            log_line(w),
        )
        with Conn(s.port or 0) as second:
            cfd_second = cfd_of(second)
            second.send(b"get foo\r\n")
            assert re.match(
                LINE_START + rb"type=item_get key=foo status=found clsid=\d+ cfd=%d " % cfd_second,
                log_line(w),
            )


def test_stalled_watcher_is_bounded_and_told_what_it_missed(engine: tuple[str, ...]) -> None:
    spacer = b"X" * 180
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0) as c:
        w = watcher(s.port or 0)
        before = rss_kb(s)
        batch = 1000
        for n in range(200):
            c.send(b"".join(b"get foo%d%s\r\n" % (n * batch + i, spacer) for i in range(batch)))
            for _ in range(batch):
                assert c.read_line() == b"END\r\n"
        # ~50 MB of log lines were produced; the watcher holds at most its queue and one
        # batch being written.
        grown = rss_kb(s) - before
        assert grown < 16 * 1024, f"RSS grew by {grown} KiB for a stalled watcher"
        deadline = time.monotonic() + 30
        seen = 0
        while True:
            assert time.monotonic() < deadline, "no skipped= line"
            line = log_line(w)
            seen += 1
            # The skipped count is written once there is room again: make new lines.
            if seen % 100 == 0:
                assert c.request(b"get foo\r\n") == b"END\r\n"
            if line.startswith(b"skipped="):
                assert re.fullmatch(rb"skipped=\d+\n", line)
                break
            assert re.match(LINE_START + rb"type=item_get ", line), line
        assert c.request(b"get foob\r\n") == b"END\r\n"
        assert re.match(LINE_START + rb"type=item_get", log_line(w))
        w.close()


def test_watchers_on_both_workers_see_clients_on_both(engine: tuple[str, ...]) -> None:
    # Connections from one thread go to one worker until it is `placement::SLACK` (8) ahead:
    # twelve watchers and sixteen clients put some of each on both workers.
    with memfleet("-t", "2", *engine) as s:
        watchers = [watcher(s.port or 0, b" fetchers") for _ in range(12)]
        clients = [Conn(s.port or 0) for _ in range(16)]
        for i, c in enumerate(clients):
            assert c.request(b"get client%d\r\n" % i) == b"END\r\n"
        want = {b"client%d" % i for i in range(len(clients))}
        for w in watchers:
            got = set()
            for _ in clients:
                found = re.search(rb"key=(\S+)", log_line(w))
                assert found
                got.add(found.group(1))
            assert got == want
        for c in clients + watchers:
            c.close()


def test_one_set_into_a_full_cache_logs_an_eviction(engine: tuple[str, ...]) -> None:
    """memcached's t/watcher.t eviction block: `-m 60` filled with 8,000 11 KB values, then a
    single set must log an eviction (a full cache evicts as it writes, item by item)."""
    value = b"B" * 11_000
    # A loaded machine may take a while to take in the fill: a long timeout for the filler.
    with memfleet("-m", "60", *engine) as s, Conn(s.port or 0, timeout=60) as c:
        for i in range(1, 8_001):
            c.send(b"set n,foo%d 0 0 11000 noreply\r\n%s\r\n" % (i, value))
        assert c.request(b"version\r\n").startswith(b"VERSION")
        w = watcher(s.port or 0, b" evictions")
        before = int(c.stats()["evictions"])
        assert c.request(b"set bfoo 0 0 11000\r\n%s\r\n" % value) == b"STORED\r\n"
        # About one item of the same size makes room for one (a few when a segment ends).
        evicted = int(c.stats()["evictions"]) - before
        assert 1 <= evicted <= 8, evicted
        assert re.fullmatch(
            LINE_START
            + rb"type=eviction key=n%2Cfoo\d+ fetch=no ttl=-1 la=\d+ clsid=1 size=11000\n",
            log_line(w),
        )


def memcached_t_dir() -> Path | None:
    """A memcached 1.6.18 source tree's t/ directory (with lib/MemcachedTest.pm): MEMCACHED_T,
    else the one scripts/setup unpacks from Debian's source package under target/peers."""
    d = os.environ.get("MEMCACHED_T") or str(ROOT / "target/peers/memcached-1.6.18/t")
    return Path(d) if (Path(d) / "lib" / "MemcachedTest.pm").is_file() else None


def prove(script: str, engine: tuple[str, ...], tmp_path: Path, runs: int) -> None:
    """Runs one of memcached's t/ scripts with prove against `memfleet serve`, `runs` times;
    every run must pass."""
    t = memcached_t_dir()
    if t is None:
        if os.environ.get("CI") == "true":
            pytest.fail("memcached's t/ directory is missing: scripts/setup unpacks it")
        pytest.skip("no memcached t/ directory (MEMCACHED_T, or scripts/setup)")
    # MemcachedTest.pm runs `./timedrun SECONDS ./memcached-debug ARGS` from its cwd.
    (tmp_path / "t").symlink_to(t.resolve())
    exe = tmp_path / "memcached-debug"
    exe.write_text(f'#!/bin/sh\nexec {memfleet_bin()} serve "$@" {" ".join(engine)}\n')
    timedrun = tmp_path / "timedrun"
    timedrun.write_text('#!/bin/sh\nshift\nexec "$@"\n')
    for f in (exe, timedrun):
        f.chmod(0o755)
    for _ in range(runs):
        r = subprocess.run(
            ["prove", f"t/{script}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("prove") is None, reason="needs perl's prove")
def test_memcached_watcher_t(engine: tuple[str, ...], tmp_path: Path) -> None:
    """memcached's own t/watcher.t, run by prove against `memfleet serve`, passes every time
    (its eviction block waits for an eviction after a single set into a full cache)."""
    prove("watcher.t", engine, tmp_path, runs=3)


@pytest.mark.skipif(shutil.which("prove") is None, reason="needs perl's prove")
def test_memcached_watcher_connid_t(engine: tuple[str, ...], tmp_path: Path) -> None:
    """memcached's own t/watcher_connid.t passes against `memfleet serve`."""
    prove("watcher_connid.t", engine, tmp_path, runs=1)


def test_evictions_are_logged_per_item(engine: tuple[str, ...]) -> None:
    """memcached's `type=eviction` line for each item evicted to make room (fetched or not, TTL
    left, idle seconds, value size)."""
    with memfleet("-m", "8", *engine) as s, Conn(s.port or 0) as c:
        w = watcher(s.port or 0, b" evictions")
        assert c.request(b"set read-once 0 1000 5\r\nhello\r\n") == b"STORED\r\n"
        assert c.request(b"get read-once\r\n", b"END\r\n").startswith(b"VALUE")
        value = b"x" * 1000
        for i in range(20_000):
            c.send(b"set fill%d 0 0 1000 noreply\r\n%s\r\n" % (i, value))
        assert c.request(b"mn\r\n") == b"MN\r\n"
        line = log_line(w)
        assert re.fullmatch(
            LINE_START + rb"type=eviction key=fill\d+ fetch=no ttl=-1 la=\d+ clsid=1 size=1000\n",
            line,
        ), line
        with Conn(s.port or 0) as q:
            evicted = int(q.stats()["evictions"])
        rest = [x for x in w.read_all(1.0).split(b"\n") if x]
        logged = 1 + sum(1 for x in rest if b" type=eviction " in x)
        skipped = sum(int(x[len(b"skipped=") :]) for x in rest if x.startswith(b"skipped="))
        # Every eviction is a line, or counted in a skipped=N if the queue was full.
        assert logged + skipped == evicted, (logged, skipped, evicted)
