"""Big values through `memfleet route`: a value over the split threshold is stored as chunks
across the pool plus an index item under its key (mcrouter's BigValueRoute format), so a
10 MB value crosses servers that hold at most 1 MB items."""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Iterator

import pylibmc
import pytest
from harness import Conn, Server, free_port, memcached, memfleet
from mcrouter_harness import McRouter, pools
from proxy_harness import Proxy, pool_yaml
from value_client import ValueClient as Client

THRESHOLD = 1_000_000
BIG = 10 * 1024 * 1024
BIG_FLAG = 0x8000


def value_of(port: int, key: str) -> bytes | None:
    c = Client(port)
    try:
        got = c.get(key)
    finally:
        c.close()
    assert len(got) <= 1
    return got[0][2] if got else None


def index_on(backends: list[Server], key: str) -> tuple[int, int, int]:
    """(backend, chunks, suffix) of the index item of `key`, read from the servers."""
    for i, b in enumerate(backends):
        c = Client(b.port or 0)
        got = c.get(key)
        c.close()
        if got:
            _, flags, data, _ = got[0]
            assert flags & BIG_FLAG, flags
            version, chunks, suffix = data.decode().split("-")
            assert version == "1"
            return i, int(chunks), int(suffix)
    raise AssertionError(f"no index item for {key}")


def holder(backends: list[Server], key: str) -> Server:
    for b in backends:
        c = Client(b.port or 0)
        got = c.get(key)
        c.close()
        if got:
            return b
    raise AssertionError(f"{key} on no server")


@pytest.fixture(params=["memcached", "memfleet"])
def small_items(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    """Three servers that refuse items over 1 MB."""
    start = memcached if request.param == "memcached" else memfleet
    started = [start("-I", "1m", "-m", "256").start() for _ in range(3)]
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def nut_router(small_items: list[Server]) -> Iterator[Proxy]:
    servers = [f"127.0.0.1:{b.port}:1" for b in small_items]
    port = free_port()
    conf = pool_yaml(
        "big",
        f"127.0.0.1:{port}",
        servers,
        hash="fnv1a_64",
        distribution="ketama",
        big_value_split_threshold=THRESHOLD,
    )
    with Proxy(conf, port) as p:
        yield p


def test_ten_megabytes_round_trip_through_one_megabyte_servers(
    nut_router: Proxy, small_items: list[Server]
) -> None:
    port = nut_router.port or 0
    value = os.urandom(BIG)
    c = Client(port)
    # The servers alone refuse it.
    direct = Client(small_items[0].port or 0)
    assert direct.store("set", "big", value) != b"STORED"
    direct.close()
    assert c.store("set", "big", value, flags=5) == b"STORED"
    got = c.get("big")
    assert [(k, f, len(d)) for k, f, d, _ in got] == [("big", 5, BIG)]
    assert got[0][2] == value
    # gets carries the index item's CAS, and cas with it replaces the whole value.
    ((_, _, data, cas),) = c.get("big", "gets")
    assert data == value and cas
    other = os.urandom(BIG - 12345)
    assert c.store("cas", "big", other, extra=f" {cas}") == b"STORED"
    assert c.store("cas", "big", other, extra=f" {cas}") == b"EXISTS"
    assert value_of(port, "big") == other
    # add of an existing key stores nothing; replace does.
    assert c.store("add", "big", value) == b"NOT_STORED"
    assert c.store("replace", "big", value) == b"STORED"
    assert value_of(port, "big") == value
    # Chunks are spread over the pool as keys of their own.
    _, chunks, suffix = index_on(small_items, "big")
    assert chunks == 11
    assert len({id(holder(small_items, f"big:{i}:{suffix}")) for i in range(chunks)}) > 1
    # A multi-get mixes big and small values in request order.
    assert c.store("set", "small", b"tiny") == b"STORED"
    c.sock.sendall(b"get small big nothere small\r\n")
    items = []
    while (line := c.line()) != b"END":
        n = int(line.split()[3])
        c._fill(n + 2)
        items.append((line.split()[1], c.buf[:n]))
        c.buf = c.buf[n + 2 :]
    assert items == [(b"small", b"tiny"), (b"big", value), (b"small", b"tiny")]
    # Plain values under the threshold pass unchanged.
    assert value_of(port, "small") == b"tiny"
    assert c.call(b"delete big\r\n") == b"DELETED"
    assert value_of(port, "big") is None
    assert c.call(b"append small 0 0 5000000\r\n" + b"x" * 5_000_000 + b"\r\n").startswith(
        b"SERVER_ERROR"
    )
    c.close()


def test_a_missing_chunk_is_a_miss(nut_router: Proxy, small_items: list[Server]) -> None:
    port = nut_router.port or 0
    value = os.urandom(3 * THRESHOLD + 7)
    c = Client(port)
    assert c.store("set", "k", value) == b"STORED"
    assert value_of(port, "k") == value
    _, chunks, suffix = index_on(small_items, "k")
    assert chunks == 4
    chunk = f"k:2:{suffix}"
    b = holder(small_items, chunk)
    with Conn(b.port) as direct:
        assert direct.request(f"delete {chunk}\r\n".encode()) == b"DELETED\r\n"
    assert c.get("k") == []
    # A damaged index (appended to) is a miss too, never the index's bytes as a value.
    assert c.store("set", "k", value) == b"STORED"
    assert c.store("append", "k", b"zz") == b"STORED"
    assert c.get("k") == []
    c.close()


def test_concurrent_overwrites_never_mix(nut_router: Proxy) -> None:
    port = nut_router.port or 0
    values = [os.urandom(5 * 1024 * 1024) for _ in range(3)]
    seen: list[bytes | None] = []
    bad: list[str] = []
    stop = threading.Event()

    def writer(v: bytes) -> None:
        c = Client(port)
        for _ in range(8):
            reply = c.store("set", "hot", v)
            if reply != b"STORED":
                bad.append(f"set: {reply!r}")
        c.close()

    def reader() -> None:
        c = Client(port)
        while not stop.is_set():
            got = c.get("hot")
            data = got[0][2] if got else None
            seen.append(data)
            if data is not None and data not in values:
                bad.append(f"mixed value of {len(data)} bytes")
        c.close()

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(v,)) for v in values]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not bad, bad[:3]
    assert any(s is not None for s in seen)
    assert value_of(port, "hot") in values


def test_at_most_sixteen_big_values_are_under_way(
    nut_router: Proxy, small_items: list[Server]
) -> None:
    """Each big value under way holds its value and a thread: past 16 at once over the router
    a big request is refused at once, and the 16 finish once their servers answer."""
    port = nut_router.port or 0
    value = b"v" * (2 * THRESHOLD)
    n = 20
    clients = [Client(port) for _ in range(n)]
    replies: dict[int, bytes] = {}
    with contextlib.ExitStack() as stopped:
        for b in small_items:
            stopped.enter_context(b.paused())
        # The servers do not answer: each store's helper waits on its chunk sets.
        for i, c in enumerate(clients):
            c.sock.sendall(f"set big{i} 0 0 {len(value)}\r\n".encode() + value + b"\r\n")
        deadline = time.monotonic() + 30
        while len(replies) < n - 16 and time.monotonic() < deadline:
            waiting = {c.sock: i for i, c in enumerate(clients) if i not in replies}
            ready, _, _ = select.select(list(waiting), [], [], 1.0)
            for sock in ready:
                i = waiting[sock]
                replies[i] = clients[i].line()
        assert set(replies.values()) == {b"SERVER_ERROR big value: too many under way"}, replies
        assert len(replies) == n - 16, replies
    for i, c in enumerate(clients):
        if i not in replies:
            assert c.line() == b"STORED", i
            assert value_of(port, f"big{i}") == value
        c.close()


def test_binary_and_meta_clients_split_too(nut_router: Proxy) -> None:
    port = nut_router.port or 0
    value = os.urandom(2 * THRESHOLD + 1)
    mc = pylibmc.Client([f"127.0.0.1:{port}"], binary=True)
    assert mc.set("bin", value)
    assert mc.get("bin") == value
    assert mc.delete("bin")
    assert mc.get("bin") is None
    c = Client(port)
    assert c.call(f"ms meta {len(value)} T0 F3\r\n".encode() + value + b"\r\n") == b"HD"
    assert c.get("meta") == [("meta", 3, value, "")]
    c.close()


def mcrouter_with(servers: list[Server], *flags: str) -> McRouter:
    config = {"pools": pools(A=servers), "route": "PoolRoute|A"}
    return McRouter(config, "--big-value-split-threshold", str(THRESHOLD), *flags)


@pytest.fixture
def mc_small() -> Iterator[Callable[[], list[Server]]]:
    started: list[Server] = []

    def start() -> list[Server]:
        out = [memcached("-I", "1m", "-m", "256").start() for _ in range(3)]
        started.extend(out)
        return out

    yield start
    for s in started:
        s.stop()


def test_mcrouter_flag_splits_in_mcrouters_format(mc_small: Callable[[], list[Server]]) -> None:
    servers = mc_small()
    value = os.urandom(BIG)
    with mcrouter_with(servers) as r:
        c = Client(r.port or 0)
        assert c.store("set", "big", value, flags=1) == b"STORED"
        # As mcrouter without --big-value-hide-reply-flag: the flag bit shows.
        assert c.get("big") == [("big", 1 | BIG_FLAG, value, "")]
        _, chunks, suffix = index_on(servers, "big")
        assert chunks == 11
        holder(servers, f"big:10:{suffix}")
        assert c.call(b"delete big\r\n") == b"DELETED"
        assert c.get("big") == []
        c.close()
    with mcrouter_with(servers, "--big-value-hide-reply-flag", "true") as r:
        c = Client(r.port or 0)
        assert c.store("set", "big2", value, flags=1) == b"STORED"
        assert c.get("big2") == [("big2", 1, value, "")]
        c.close()
