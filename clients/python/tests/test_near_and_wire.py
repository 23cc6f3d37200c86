"""Near cache behaviour and wire details (one write per request, TCP_NODELAY)."""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

import pytest

import memfleet
from memfleet.near import NearCache


def test_near_cache_hits_and_local_updates(server: Any, make_client: Any) -> None:
    # the TTL mode (a server with tracking: tests/test_near_tracking.py)
    c = make_client([server.address], near_cache=True, near_cache_size=2, near_cache_ttl=0.5, near_cache_tracking=False)
    other = memfleet.Client([server.address])
    c.flush_all()
    nc = c.near_cache
    assert nc is not None
    c.set("a", 1)
    assert c.get("a") == 1 and nc.hits == 1  # set filled the near cache
    other.set("a", 2)
    assert c.get("a") == 1  # served locally until the short TTL passes
    time.sleep(0.6)
    assert c.get("a") == 2
    c.delete("a")
    assert c.get("a") is None
    c.set("b", "b")
    c.set("c", "c")
    c.set("d", "d")  # evicts b (max 2 items)
    assert len(nc) == 2
    misses = nc.misses
    assert c.get_many(["b", "c", "d"]) == {"b": "b", "c": "c", "d": "d"}
    assert nc.misses == misses + 1
    assert nc.stats()["hits"] >= 3
    c.set("n", 5)
    assert c.incr("n", 1) == 6
    assert c.get("n") == 6  # incr dropped the near copy
    c.flush_all()
    assert len(nc) == 0


WRITES: dict[str, tuple[Callable[[Any], Any], Any]] = {
    # what each write does to "k" (5 in the near cache, 7 on the server), and what get sees next
    "set": (lambda c: c.set("k", 9), 9),
    "add": (lambda c: c.add("k", 9), 7),
    "replace": (lambda c: c.replace("k", 9), 9),
    "cas": (lambda c: c.cas("k", 9, 1), 7),
    "append": (lambda c: c.append("k", b"0"), 70),
    "prepend": (lambda c: c.prepend("k", b"1"), 17),
    "set_many": (lambda c: c.set_many({"k": 9}), 9),
    "delete": (lambda c: c.delete("k"), None),
    "delete_many": (lambda c: c.delete_many(["k"]), None),
    "incr": (lambda c: c.incr("k", 1), 8),
    "decr": (lambda c: c.decr("k", 1), 6),
    "touch": (lambda c: c.touch("k", 100), 7),
    "invalidate": (lambda c: c.invalidate("k"), 7),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_every_write_drops_the_near_copy(server: Any, make_client: Any, write: str) -> None:
    c = make_client([server.address], near_cache=True, near_cache_ttl=60, near_cache_tracking=False)
    other = memfleet.Client([server.address])
    c.flush_all()
    c.set("k", 5)
    assert c.get("k") == 5
    other.set("k", 7)
    assert c.get("k") == 5  # served from the near cache
    do, seen = WRITES[write]
    do(c)
    assert c.get("k") == seen


def test_near_cache_never_serves_an_expired_write(server: Any, make_client: Any) -> None:
    c = make_client([server.address], near_cache=True, near_cache_ttl=60)
    c.flush_all()
    assert c.set("z", 1, ttl=-1)  # Django's timeout=0: expired at once
    assert c.get("z") is None
    assert c.set("past", 1, ttl=int(time.time()) - 10)  # an absolute time in the past
    assert c.get("past") is None
    assert c.get_or_set("lazy", lambda: 1, ttl=-1) == 1
    assert c.get("lazy") is None
    assert c.set("short", 1, ttl=1)
    time.sleep(2.1)
    assert c.get("short") is None  # the near copy lives no longer than the item


def test_near_cache_instance_and_lru_order() -> None:
    nc = NearCache(max_items=2, ttl=10)
    nc.put(b"x", 1)
    nc.put(b"y", 2)
    nc.get(b"x")  # x is now most recent
    nc.put(b"z", 3)
    assert nc.get(b"y") is memfleet.near.MISSING
    assert nc.get(b"x") == 1


class _CountingSocket:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._sock.sendall(data)

    def sendmsg(self, parts: Any) -> int:
        self.writes.append(b"".join(parts))
        return int(self._sock.sendmsg(parts))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def test_each_request_is_one_write_with_nodelay(server: Any) -> None:
    for protocol in ("meta", "text"):
        c = memfleet.Client([server.address], protocol=protocol, compress_threshold=None)
        srv = c._router.servers[0]
        conn = srv.acquire()
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        counting = _CountingSocket(conn.sock)
        conn.sock = counting  # type: ignore[assignment]
        srv.release(conn)
        value = b"v" * 8192 if protocol == "meta" else b"w" * 100_000
        t0 = time.monotonic()
        for _ in range(20):
            assert c.set("big", value)
            assert c.get("big") == value
        assert time.monotonic() - t0 < 0.5  # no 40 ms delayed-ACK stalls
        assert all(w.count(b"\r\n") <= 2 for w in counting.writes)
        assert len(counting.writes) == 40
        set_write = counting.writes[0]
        assert set_write.endswith(value + b"\r\n")
        c.get_many(["big", "x", "y"])
        assert len(counting.writes) == 41
