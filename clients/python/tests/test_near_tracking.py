"""The near cache kept fresh by the server's invalidation notices (memfleet's ``track``), and its
TTL fallback on servers without them."""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
from client_support import Server, cache_server, memfleet_server
from mcrouter_harness import McRouter

import memfleet
from memfleet import near as N
from memfleet.near import MISSING, NearCache

WAIT = 2.0  # seconds a notice may take to reach the near cache (no assertion on speed)


def eventually(check: Callable[[], bool], what: str, limit: float = WAIT) -> None:
    deadline = time.monotonic() + limit
    while True:
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit} s: {what}")
        time.sleep(0.01)


@pytest.fixture(scope="module")
def tracking_server() -> Iterator[Server]:
    s = memfleet_server().start()
    yield s
    s.kill()


@pytest.fixture()
def fresh_tracking_server() -> Iterator[Server]:
    """One the test may kill and restart."""
    s = memfleet_server().start()
    yield s
    s.kill()


def near_of(c: Any) -> NearCache:
    nc = c.near_cache
    assert nc is not None
    return nc  # type: ignore[no-any-return]


def cached(c: Any, key: str, value: Any) -> None:
    """Read ``key`` until the near cache serves ``value`` (the first read may come before the
    listener is open, or race a notice of the setup's own write)."""
    nc = near_of(c)

    def served_locally() -> bool:
        hits = nc.hits
        return bool(c.get(key) == value and nc.hits > hits)

    eventually(served_locally, f"{key!r} served from the near cache")


# -- the bookkeeping, without a server -----------------------------------------------------------
def test_a_notice_between_read_and_reply_keeps_the_reply_out() -> None:
    nc = NearCache(10)
    a = nc.add_source("a")
    nc.listening(a, 1)
    t = nc.ticket()
    nc.invalidate(b"k")
    nc.put_read(b"k", "old", a, t)
    nc.put_read(b"other", "fresh", a, t)
    assert nc.get(b"k") is MISSING and nc.get(b"other") == "fresh"
    nc.put_read(b"k", "new", a, nc.ticket())  # a read sent after the notice
    assert nc.get(b"k") == "new"
    nc.invalidate(b"k")  # a notice after caching drops the value
    assert nc.get(b"k") is MISSING
    assert nc.stats()["refused"] == 1 and nc.stats()["invalidations"] == 2


def test_iv_all_and_a_lost_listener_drop_only_that_server() -> None:
    nc = NearCache(10)
    a, b = nc.add_source("a"), nc.add_source("b")
    nc.listening(a, 1)
    nc.listening(b, 7)
    t = nc.ticket()
    nc.put_read(b"ka", 1, a, t)
    nc.put_read(b"kb", 2, b, t)
    t = nc.ticket()
    nc.invalidate_all(a)
    assert nc.get(b"ka") is MISSING and nc.get(b"kb") == 2
    nc.put_read(b"ka", 1, a, t)  # sent before the IV_ALL
    nc.put_read(b"kb2", 3, b, t)
    assert nc.get(b"ka") is MISSING and nc.get(b"kb2") == 3
    nc.put_read(b"ka", 1, a, nc.ticket())
    t = nc.ticket()
    nc.lost(b)
    assert nc.get(b"kb") is MISSING and nc.get(b"ka") == 1
    nc.put_read(b"kb", 2, b, nc.ticket())  # nothing from b until a new listener
    nc.listening(b, 8)
    nc.put_read(b"kb", 2, b, t)  # sent before the listener changed
    assert nc.get(b"kb") is MISSING
    nc.put_read(b"kb", 2, b, nc.ticket())
    assert nc.get(b"kb") == 2
    st = nc.stats()
    assert st["flushes"] == 1 and st["losses"] == 1 and st["tracked"] is True
    assert st["servers"] == {"a": "tracked", "b": "tracked"}


def test_a_read_older_than_the_notice_record_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(N, "_IV_RECORD", 4)
    nc = NearCache(10)
    a = nc.add_source("a")
    nc.listening(a, 1)
    t = nc.ticket()
    for i in range(4):
        nc.invalidate(b"x%d" % i)
    nc.put_read(b"k", 1, a, t)  # the record still covers every notice since t
    assert nc.get(b"k") == 1
    nc.invalidate(b"k")
    nc.invalidate(b"x9")  # the record forgets an older notice
    nc.put_read(b"k", 2, a, t)
    assert nc.get(b"k") is MISSING


def test_writes_fill_only_where_there_is_no_tracking() -> None:
    nc = NearCache(10, ttl=5)
    tracked, ttl, probing = nc.add_source("t"), nc.add_source("u"), nc.add_source("p")
    nc.listening(tracked, 1)
    nc.untracked(ttl)
    for s in (tracked, ttl, probing):
        nc.put(b"w" + s.name.encode(), "before")
        nc.put_written(b"w" + s.name.encode(), "written", s, None)
        nc.put_read(b"r" + s.name.encode(), "read", s, nc.ticket())
    assert [nc.get(k) for k in (b"wt", b"wu", b"wp")] == [MISSING, "written", MISSING]
    assert [nc.get(k) for k in (b"rt", b"ru", b"rp")] == ["read", "read", MISSING]
    assert nc.stats()["tracked"] is False


def test_tracked_values_live_tracked_ttl() -> None:
    nc = NearCache(10, ttl=0.05, tracked_ttl=30)
    a, b = nc.add_source("a"), nc.add_source("b")
    nc.listening(a, 1)
    nc.untracked(b)
    nc.put_read(b"a", 1, a, nc.ticket())
    nc.put_read(b"b", 1, b, nc.ticket())
    time.sleep(0.1)
    assert nc.get(b"a") == 1 and nc.get(b"b") is MISSING


def test_notice_lines() -> None:
    from memfleet._proto import parse_notice, parse_tracking

    assert parse_notice(b"IV user:1") == b"user:1"
    assert parse_notice(b"IV 0LrQu9GO0Yc= b") == "ключ".encode()
    assert parse_notice(b"IV_ALL") is None
    for bad in (b"IV", b"IV a b c", b"IV !!! b", b"OK"):
        with pytest.raises(ValueError):
            parse_notice(bad)
    assert parse_tracking(b"TRACKING 12") == 12
    assert parse_tracking(b"ERROR") is None
    with pytest.raises(memfleet.MemfleetServerError):  # too many listeners: tried again later
        parse_tracking(b"SERVER_ERROR too many listeners")


# -- against memfleet serve ------------------------------------------------------------------------
WRITES: dict[str, tuple[Callable[[memfleet.Client], Any], Any]] = {
    # another client's write to "k" (holding 5), and what the reader sees after its notice
    "set": (lambda o: o.set("k", 9), 9),
    "delete": (lambda o: o.delete("k"), None),
    "incr": (lambda o: o.incr("k", 1), 6),
    "decr": (lambda o: o.decr("k", 1), 4),
    "append": (lambda o: o.append("k", b"0"), 50),
    "prepend": (lambda o: o.prepend("k", b"1"), 15),
    "cas": (lambda o: o.cas("k", 9, o.gets("k")[1] or 0), 9),
    "set_many": (lambda o: o.set_many({"k": 9}), 9),
    "invalidate": (lambda o: o.invalidate("k"), 5),  # marked stale: still readable, re-read
}


@pytest.mark.parametrize("write", list(WRITES))
def test_another_clients_write_reaches_the_near_cache(tracking_server: Server, make_client: Any, write: str) -> None:
    c = make_client([tracking_server.address], near_cache=True)
    other = memfleet.Client([tracking_server.address])
    other.set("k", 5)
    cached(c, "k", 5)
    nc = near_of(c)
    assert nc.stats()["servers"] == {tracking_server.address: "tracked"}
    before = nc.invalidations
    do, seen = WRITES[write]
    do(other)
    # (the read first: the asyncio client's notices are applied while its loop runs)
    eventually(lambda: c.get("k") == seen and nc.invalidations > before, f"{write} seen through the near cache")
    other.close()


def test_own_writes_are_not_cached_but_invalidate(tracking_server: Server, make_client: Any) -> None:
    c = make_client([tracking_server.address], near_cache=True)
    nc = near_of(c)
    c.set("own", 1)
    assert nc.get(b"own") is MISSING  # a write registers nothing: it is not kept
    cached(c, "own", 1)
    c.set("own", 2)
    assert c.get("own") == 2
    cached(c, "own", 2)


def test_binary_keys_come_back_as_base64(tracking_server: Server, make_client: Any) -> None:
    c = make_client([tracking_server.address], near_cache=True)
    other = memfleet.Client([tracking_server.address])
    other.set("ключ", "a")
    cached(c, "ключ", "a")
    other.set("ключ", "b")
    eventually(lambda: c.get("ключ") == "b", "a non-ASCII key's notice")
    other.close()


def test_flush_all_empties_the_near_cache(tracking_server: Server, make_client: Any) -> None:
    c = make_client([tracking_server.address], near_cache=True)
    other = memfleet.Client([tracking_server.address])
    other.set_many({"f1": 1, "f2": 2})
    cached(c, "f1", 1)
    cached(c, "f2", 2)
    nc = near_of(c)
    other.flush_all()
    eventually(lambda: c.get_many(["f1", "f2"]) == {} and nc.flushes >= 1, "IV_ALL applied")
    other.close()


def test_a_restarted_server_empties_the_near_cache_until_tracked_again(
    fresh_tracking_server: Server, make_client: Any
) -> None:
    s = fresh_tracking_server
    c = make_client([s.address], near_cache=True, failure_limit=0, connect_timeout=0.5, timeout=0.5)
    nc = near_of(c)
    other = memfleet.Client([s.address])
    other.set("r", 1)
    cached(c, "r", 1)
    s.kill()
    # the async listener runs when its loop does: each poll runs it (the read fails or misses)
    eventually(lambda: _quietly(c.get, "r") is None and len(nc) == 0, "the near cache emptied")
    assert nc.stats()["servers"][s.address] == "down" and nc.losses >= 1
    s.start()
    other.close()
    other = memfleet.Client([s.address])
    other.set("r", 2)
    eventually(lambda: _quietly(c.get, "r") == 2 and nc.stats()["servers"][s.address] == "tracked", "tracked again")
    cached(c, "r", 2)  # data connections track the new listener
    other.set("r", 3)
    eventually(lambda: c.get("r") == 3, "a notice from the restarted server")
    other.close()


def test_a_cut_listener_connection_drops_and_recovers(tracking_server: Server, make_client: Any) -> None:
    c = make_client([tracking_server.address], near_cache=True)
    nc = near_of(c)
    other = memfleet.Client([tracking_server.address])
    other.set("cut", 1)
    cached(c, "cut", 1)
    listener = c._router.servers[0].listener
    assert listener is not None and listener._conn is not None
    conn = listener._conn
    sock = conn.sock if hasattr(conn, "sock") else conn.writer.get_extra_info("socket")
    sock.shutdown(socket.SHUT_RDWR)
    eventually(lambda: c.get("cut") == 1 and nc.losses == 1 and nc.get(b"cut") is MISSING, "values dropped")
    eventually(lambda: c.get("cut") == 1 and nc.stats()["tracked"], "a new listener")
    cached(c, "cut", 1)
    other.set("cut", 2)
    eventually(lambda: c.get("cut") == 2, "a notice on the new listener")
    other.close()


def test_a_hit_applies_notices_the_listener_thread_has_not_read(
    tracking_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listener thread starved of the CPU or the GIL must not let a hit serve what a notice
    already on this host invalidated: the hit reads the pending notices itself."""
    from memfleet import _conn

    starved = threading.Event()
    monkeypatch.setattr(_conn.Listener, "_follow", lambda self, conn: starved.wait(30))
    c = memfleet.Client([tracking_server.address], near_cache=True)
    other = memfleet.Client([tracking_server.address])
    try:
        other.set("starved", 1)
        cached(c, "starved", 1)
        other.set("starved", 2)
        eventually(lambda: c.get("starved") == 2, "the new value, the notice applied by a hit")
        assert near_of(c).invalidations >= 1
    finally:
        starved.set()
        other.close()
        c.close()


def _quietly(f: Callable[..., Any], *args: Any) -> Any:
    try:
        return f(*args)
    except memfleet.MemfleetConnectionError:
        return None


# -- servers without tracking: the TTL -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["memcached", "memfleet route", "tracking off"])
def test_without_tracking_the_ttl_applies(tracking_server: Server, make_client: Any, kind: str) -> None:
    if kind != "tracking off":
        if kind == "memcached":
            s: Server | None = cache_server(command="memcached").start()
        else:  # a router in front of a server with tracking has none
            s = McRouter({"pools": {"A": {"servers": [tracking_server.address]}}, "route": "PoolRoute|A"}).start()
        assert s is not None
        address = s.address
        c = make_client([address], near_cache=True, near_cache_ttl=1.0)
    else:
        s = None
        address = tracking_server.address
        c = make_client([address], near_cache=True, near_cache_ttl=1.0, near_cache_tracking=False)
    try:
        nc = near_of(c)
        other = memfleet.Client([address])
        c.set("t", 1)
        assert c.get("t") == 1 and nc.hits == 1  # a write fills it, as before
        st = nc.stats()
        assert st["tracked"] is False
        assert st["servers"] == ({address: "ttl"} if s is not None else {})
        other.set("t", 2)
        assert c.get("t") == 1  # nobody says it changed
        eventually(lambda: c.get("t") == 2, "the TTL passed", 5.0)
        other.close()
    finally:
        if s is not None:
            s.kill()


# -- many writers, readers through near caches -------------------------------------------------------
# a write acknowledged this long before a read began must be visible to it. The notice's way
# (server thread, loopback, listener) is scheduling, which a loaded machine stretches; without
# notices a read is served the old value for up to the safety net's 60 s
STALE_AFTER = 0.5
WRITER = r"""
import json, sys, time
import memfleet
address, prefix, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
c = memfleet.Client([address])
acks = []
version = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    version += 1
    for k in range(4):
        key = "%s%d" % (prefix, k)
        c.set(key, version)
        acks.append((key, version, time.monotonic()))
json.dump(acks, sys.stdout)
"""


def _writers(address: str, seconds: float) -> list[subprocess.Popen[str]]:
    src = str(Path(memfleet.__file__).resolve().parents[1])
    env = {"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}
    return [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, address, f"w{w}:", str(seconds)], stdout=subprocess.PIPE, text=True, env=env
        )
        for w in range(3)
    ]


def _check(acks: list[tuple[str, int, float]], reads: list[tuple[str, float, Any]], evicting: bool = False) -> None:
    """Each key has one writer, whose versions rise with its acknowledgement times. Where the
    server is ``evicting``, a miss is a right answer too."""
    times: dict[str, list[float]] = {}
    versions: dict[str, list[int]] = {}
    for key, version, at in sorted(acks, key=lambda a: a[2]):
        times.setdefault(key, []).append(at)
        versions.setdefault(key, []).append(version)
    stale = []
    for key, began, value in reads:
        n = bisect.bisect_left(times.get(key, []), began - STALE_AFTER)
        if n and (value < versions[key][n - 1] if value is not None else not evicting):
            # (key, what it read, what it should have, how long after that was acknowledged)
            stale.append((key, value, versions[key][n - 1], round(began - times[key][n - 1], 3)))
    late = max((s[3] for s in stale), default=0)
    assert not stale, f"{len(stale)} of {len(reads)} reads stale, up to {late} s late, e.g. {stale[:3]}"


KEYS = [f"w{w}:{k}" for w in range(3) for k in range(4)]


@pytest.fixture()
def evicting_server() -> Iterator[Server]:
    """A server small enough that a filler's writes keep evicting the readers' keys."""
    s = memfleet_server("-m", "8").start()
    yield s
    s.kill()


@pytest.mark.parametrize("pressure", [False, True], ids=["plain", "evicting"])
def test_readers_never_see_a_write_acknowledged_before_they_began(
    request: pytest.FixtureRequest, pressure: bool
) -> None:
    server: Server = request.getfixturevalue("evicting_server" if pressure else "tracking_server")
    address = server.address
    readers = [memfleet.Client([address], near_cache=True) for _ in range(2)]
    reads: list[tuple[str, float, Any]] = []
    stop = threading.Event()

    def fill() -> None:
        with memfleet.Client([address]) as filler:
            i = 0
            while not stop.is_set():
                i += 1
                filler.set(f"fill:{i}", os.urandom(100_000))  # incompressible
                time.sleep(0.001)

    def read(c: memfleet.Client) -> None:
        i = 0
        while not stop.is_set():
            key = KEYS[i % len(KEYS)]
            i += 1
            began = time.monotonic()
            reads.append((key, began, c.get(key)))
            if i % 16 == 0:
                time.sleep(0.0001)  # bounds the record's size, not what it checks

    writers = _writers(address, 2.0)
    # two threads share the first client's near cache and pool; few threads, so that the
    # listeners' threads are not kept waiting long for the GIL
    threads = [threading.Thread(target=read, args=(c,)) for c in (readers[0], readers[0], readers[1])]
    if pressure:
        threads.append(threading.Thread(target=fill))
    for t in threads:
        t.start()
    outs = [w.communicate(timeout=30)[0] for w in writers]
    stop.set()
    for t in threads:
        t.join()
    acks = [tuple(a) for out in outs for a in json.loads(out)]
    _check(acks, reads, evicting=pressure)  # type: ignore[arg-type]
    # Enough traffic that the check above saw invalidations race reads. Under eviction a
    # write often lands on a key the reader no longer holds, so fewer are sent (65 seen on
    # a free-threaded build).
    least = 10 if pressure else 100
    for c in readers:
        nc = near_of(c)
        assert nc.stats()["tracked"] and nc.hits > 100 and nc.invalidations > least
        c.close()
    if pressure:
        with memfleet.Client([address]) as c:
            st = c.stats()[address]
        assert int(st["evictions"]) > 0 and int(st["track_notices"]) > 0
        # the readers' keys themselves were evicted while tracked: some reads missed
        assert any(value is None for _, _, value in reads)


def test_async_readers_never_see_a_write_acknowledged_before_they_began(tracking_server: Server) -> None:
    address = tracking_server.address
    reads: list[tuple[str, float, Any]] = []

    async def main() -> list[NearCache]:
        clients = [memfleet.AsyncClient([address], near_cache=True) for _ in range(2)]
        end = time.monotonic() + 2.5

        async def read(c: memfleet.AsyncClient) -> None:
            i = 0
            while time.monotonic() < end:
                key = KEYS[i % len(KEYS)]
                i += 1
                began = time.monotonic()
                reads.append((key, began, await c.get(key)))
                # notices are read by a task on this loop: a reader that never yields starves it
                await asyncio.sleep(0)

        await asyncio.gather(*(read(c) for c in clients for _ in range(3)))
        ncs = [near_of(c) for c in clients]
        for c in clients:
            await c.close()
        return ncs

    writers = _writers(address, 2.0)
    ncs = asyncio.run(main())
    acks = [tuple(a) for w in writers for a in json.loads(w.communicate(timeout=30)[0])]
    _check(acks, reads)  # type: ignore[arg-type]
    for nc in ncs:
        assert nc.hits > 100 and nc.invalidations > 100
