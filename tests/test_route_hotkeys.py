"""`memfleet route` with KeySplitRoute (hot keys spread over replica keys) and
L1L2CacheRoute (two cache levels), routing real memcached servers; and the router's own
hot-key handling (`hot_keys` pool key, `--hot-keys`): hot keys' gets answered from its
cache, never older than a write through it, at most `hot_key_ttl` older than one around it.

Each check reads the servers themselves: which replica keys they hold, their `cmd_get`
counts, and what L1 and L2 hold after gets and writes through the router.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from harness import Conn, Server, eventually, free_port
from mcrouter_harness import McRouter, ask, fetch, pools, servers, store
from proxy_harness import Proxy, pool_yaml

__all__ = ["servers"]


def run(config: dict, *extra: str) -> McRouter:
    return McRouter(config, *extra).start()


def key_split(group: list[Server], replicas: int, all_sync: bool = True) -> dict:
    return {
        "pools": pools(A=group),
        "route": {
            "type": "KeySplitRoute",
            "destination": "PoolRoute|A",
            "replicas": replicas,
            "all_sync": all_sync,
        },
    }


def replica_keys(key: str, replicas: int) -> list[str]:
    """mcrouter's replica keys: the key itself, then `key::1`, `key::2`, ..."""
    return [key] + [f"{key}::{i}" for i in range(1, replicas)]


def holders(group: list[Server], key: str, replicas: int) -> dict[int, list[str]]:
    """Which server (by position) holds which replica keys."""
    out: dict[int, list[str]] = {}
    for i, s in enumerate(group):
        for k in replica_keys(key, replicas):
            if fetch(s.port, k) != b"END\r\n":
                out.setdefault(i, []).append(k)
    return out


def cmd_get(s: Server) -> int:
    with Conn(s.port) as c:
        return int(c.stats()["cmd_get"])


def test_key_split_spreads_a_hot_keys_gets_over_its_replicas(servers) -> None:
    group = servers(4)
    with run(key_split(group, 4)) as r:
        # A key whose 4 replica keys land on at least 3 of the 4 servers.
        for n in range(50):
            key = f"hot{n}"
            assert store(r.port, key, "v") == b"STORED\r\n"

            def written(key: str = key) -> bool:
                return sum(map(len, holders(group, key, 4).values())) == 4

            eventually(written, "every replica written")
            placed = holders(group, key, 4)
            if len(placed) >= 3:
                break
        else:
            raise AssertionError("no key spread over 3 servers")
        before = [cmd_get(s) for s in group]
        with Conn(r.port) as c:
            for _ in range(100):
                c.send(f"get {key}\r\n".encode() * 100)
                for _ in range(100):
                    assert c.read_until(b"END\r\n") == f"VALUE {key} 0 1\r\nv\r\nEND\r\n".encode()
        got = [cmd_get(s) - b for s, b in zip(group, before)]
        assert sum(got) == 10_000
        for i, keys in placed.items():
            # A uniform pick gives each replica about 2,500 of the 10,000.
            assert got[i] >= 1_500 * len(keys), (got, placed)


def test_key_split_writes_and_deletes_every_replica(servers) -> None:
    group = servers(4)
    with run(key_split(group, 4)) as r:

        def everywhere(value: str) -> bool:
            item = f"0 {len(value)}\r\n{value}\r\nEND\r\n"
            return all(
                any(fetch(s.port, k) == f"VALUE {k} {item}".encode() for s in group)
                for k in replica_keys("k", 4)
            )

        with Conn(r.port) as c:
            for n in range(300):
                value = f"v{n}"
                assert c.request(f"set k 0 0 {len(value)}\r\n{value}\r\n".encode()) == (
                    b"STORED\r\n"
                )
                # The other replicas' writes were sent before the reply, on the same
                # backend connections this get then uses: never the old value.
                reply = c.request(b"get k\r\n", b"END\r\n")
                assert reply == f"VALUE k 0 {len(value)}\r\n{value}\r\nEND\r\n".encode(), n
        eventually(lambda: everywhere("v299"), "every replica holds the last value")
        assert ask(r.port, b"delete k\r\n") == b"DELETED\r\n"
        eventually(lambda: holders(group, "k", 4) == {}, "every replica deleted")
        assert fetch(r.port, "k") == b"END\r\n"


def test_key_split_without_all_sync_keeps_a_router_on_its_hosts_replica(servers) -> None:
    """As mcrouter: one replica per router host (its host id modulo the replica count), so
    what a router writes is what it then reads, and a counter stays one counter."""
    group = servers(4)
    with run(key_split(group, 4, all_sync=False)) as r, Conn(r.port) as c:
        for n in range(200):
            value = f"v{n}"
            assert c.request(f"set k 0 0 {len(value)}\r\n{value}\r\n".encode()) == b"STORED\r\n"
            reply = c.request(b"get k\r\n", b"END\r\n")
            assert reply == f"VALUE k 0 {len(value)}\r\n{value}\r\nEND\r\n".encode(), n
        assert c.request(b"set n 0 0 1\r\n0\r\n") == b"STORED\r\n"
        for n in range(1, 51):
            assert c.request(b"incr n 1\r\n") == f"{n}\r\n".encode()
        # one replica key of each was written: the others were never touched
        assert sum(map(len, holders(group, "k", 4).values())) == 1
        assert sum(map(len, holders(group, "n", 4).values())) == 1


def l1l2(l1: Server, l2: Server, **extra: int) -> dict:
    route = {"type": "L1L2CacheRoute", "l1": "PoolRoute|L1", "l2": "PoolRoute|L2"}
    return {"pools": pools(L1=[l1], L2=[l2]), "route": {**route, **extra}}


def ttl_of(port: int, key: str) -> int | None:
    line = ask(port, f"mg {key} t\r\n".encode())
    if not line.startswith(b"HD"):
        return None
    return int(line.split(b" t")[1].split()[0])


def test_l1l2_fills_l1_from_l2_and_writes_only_l1(servers) -> None:
    l1, l2 = servers(2)
    with run(l1l2(l1, l2, upgradingL1Exptime=100)) as r:
        assert ask(l2.port, b"set k 7 0 2\r\nv1\r\n") == b"STORED\r\n"
        assert fetch(r.port, "k") == b"VALUE k 7 2\r\nv1\r\nEND\r\n"
        eventually(lambda: ttl_of(l1.port, "k") is not None, "l1 filled")
        assert fetch(l1.port, "k") == b"VALUE k 7 2\r\nv1\r\nEND\r\n"
        assert 0 < (ttl_of(l1.port, "k") or 0) <= 100, "upgradingL1Exptime"
        # L2 changed behind the router: l1's copy answers until it expires.
        assert ask(l2.port, b"set k 7 0 2\r\nv2\r\n") == b"STORED\r\n"
        assert fetch(r.port, "k") == b"VALUE k 7 2\r\nv1\r\nEND\r\n"
        # Writes and deletes reach l1 only, as in mcrouter.
        assert store(r.port, "w", "x") == b"STORED\r\n"
        assert fetch(l1.port, "w") != b"END\r\n" and fetch(l2.port, "w") == b"END\r\n"
        assert ask(r.port, b"delete k\r\n") == b"DELETED\r\n"
        assert fetch(l2.port, "k") == b"VALUE k 7 2\r\nv2\r\nEND\r\n"
        assert fetch(r.port, "k") == b"VALUE k 7 2\r\nv2\r\nEND\r\n"


def test_l1l2_negative_cache_answers_misses_and_refreshes(servers) -> None:
    l1, l2 = servers(2)
    config = l1l2(l1, l2, upgradingL1Exptime=0, ncacheExptime=60, ncacheUpdatePeriod=3)
    # One worker: the refresh counts negative hits per worker.
    with run(config, "--num-proxies", "1") as r:
        assert fetch(r.port, "n") == b"END\r\n"
        negative = b"VALUE n 65536 6\r\nncache\r\nEND\r\n"
        eventually(lambda: fetch(l1.port, "n") == negative, "a negative entry in l1")
        assert 0 < (ttl_of(l1.port, "n") or 0) <= 60, "ncacheExptime"
        assert store(l2.port, "n", "real") == b"STORED\r\n"
        gets = cmd_get(l2)
        for _ in range(2):
            assert fetch(r.port, "n") == b"END\r\n"
        assert cmd_get(l2) == gets, "negative hits do not ask l2"
        # The third negative hit still misses, and refreshes l1 from l2.
        assert fetch(r.port, "n") == b"END\r\n"
        eventually(lambda: fetch(l1.port, "n") == b"VALUE n 0 4\r\nreal\r\nEND\r\n", "refresh")
        assert fetch(r.port, "n") == b"VALUE n 0 4\r\nreal\r\nEND\r\n"


# ---- hot-key handling in the router ----

# Every get sampled, a key hot at a fifth of them: a test's few thousand gets decide.
HOT = {"hot_keys": True, "hot_key_sample": 1, "hot_key_share": "20%"}
HOT_FLAGS = ("--hot-keys", "true", "--hot-key-sample", "1", "--hot-key-share", "0.2")


@contextmanager
def nutcracker_router(group: list[Server], **opts: object) -> Iterator[Proxy]:
    port = free_port()
    names = [f"127.0.0.1:{s.port}:1" for s in group]
    with Proxy(pool_yaml("hot", f"127.0.0.1:{port}", names, **opts), port).start() as p:
        yield p


def router_stats(port: int) -> dict[str, str]:
    with Conn(port) as c:
        return c.stats()


def make_hot(port: int, key: str) -> None:
    """Gets `key` through the router until it reports a hot key."""
    with Conn(port) as c:

        def hot() -> bool:
            c.send(f"get {key}\r\n".encode() * 50)
            for _ in range(50):
                c.read_until(b"END\r\n")
            return int(c.stats().get("hot_keys", "0")) >= 1

        eventually(hot, f"{key} hot")


def gets(port: int, key: str, n: int, want: bytes) -> None:
    with Conn(port) as c:
        for _ in range(n // 100):
            c.send(f"get {key}\r\n".encode() * 100)
            for _ in range(100):
                assert c.read_until(b"END\r\n") == want


@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
def test_a_hot_keys_gets_stop_reaching_its_server(servers, on: bool) -> None:
    group = servers(2)
    opts = HOT if on else {"hot_key_sample": 1}
    with nutcracker_router(group, **opts) as r:
        assert store(r.port, "hot", "v") == b"STORED\r\n"
        if on:
            make_hot(r.port, "hot")
        else:
            gets(r.port, "hot", 1000, b"VALUE hot 0 1\r\nv\r\nEND\r\n")
            assert "hot_keys" not in router_stats(r.port)
        before = sum(cmd_get(s) for s in group)
        gets(r.port, "hot", 2000, b"VALUE hot 0 1\r\nv\r\nEND\r\n")
        reached = sum(cmd_get(s) for s in group) - before
        if on:
            # Only refills (one per TTL, and per get in flight while it is refetched).
            assert reached < 200, reached
            assert int(router_stats(r.port)["hot_key_hits"]) >= 1800
        else:
            assert reached == 2000


def test_mcrouter_config_hot_keys_by_flag(servers) -> None:
    group = servers(2)
    config = {"pools": pools(A=group), "route": "PoolRoute|A"}
    with run(config, *HOT_FLAGS) as r:
        assert store(r.port, "hot", "v") == b"STORED\r\n"
        make_hot(r.port, "hot")
        before = sum(cmd_get(s) for s in group)
        gets(r.port, "hot", 2000, b"VALUE hot 0 1\r\nv\r\nEND\r\n")
        assert sum(cmd_get(s) for s in group) - before < 200
        # gets needs the server's CAS unique: never answered by the router.
        before = sum(cmd_get(s) for s in group)
        with Conn(r.port) as c:
            for _ in range(10):
                assert c.request(b"gets hot\r\n", b"END\r\n").startswith(b"VALUE hot 0 1 ")
        assert sum(cmd_get(s) for s in group) - before == 10


def test_a_hot_key_written_or_deleted_through_the_router_is_current_at_once(servers) -> None:
    group = servers(2)
    with nutcracker_router(group, **HOT, hot_key_ttl=60_000) as r:
        assert store(r.port, "hot", "v1") == b"STORED\r\n"
        make_hot(r.port, "hot")
        gets(r.port, "hot", 200, b"VALUE hot 0 2\r\nv1\r\nEND\r\n")
        with Conn(r.port) as c:
            assert c.request(b"set hot 0 0 2\r\nv2\r\n") == b"STORED\r\n"
            assert c.request(b"get hot\r\n", b"END\r\n") == b"VALUE hot 0 2\r\nv2\r\nEND\r\n"
            gets(r.port, "hot", 200, b"VALUE hot 0 2\r\nv2\r\nEND\r\n")
            assert c.request(b"delete hot\r\n") == b"DELETED\r\n"
            assert c.request(b"get hot\r\n", b"END\r\n") == b"END\r\n"


def version_of(reply: bytes) -> int:
    assert reply.startswith(b"VALUE stale "), reply
    return int(reply.split(b"\r\n")[1])


def test_no_read_is_older_than_an_acknowledged_write(servers) -> None:
    """Writers through the router and around it, readers through it: a read never returns
    a version older than the newest write through the router acknowledged before it began,
    nor one older than a write made directly to the server more than TTL (+ slack) before."""
    ttl_ms, slack = 200, 0.3
    (backend,) = servers(1)
    with nutcracker_router([backend], **HOT, hot_key_ttl=ttl_ms) as r:
        assert store(r.port, "stale", "0") == b"STORED\r\n"
        make_hot(r.port, "stale")
        lock = threading.Lock()
        version = 0
        # (ack time, version, through the router)
        acked: list[tuple[float, int, bool]] = [(0.0, 0, True)]
        errors: list[str] = []
        stop = time.monotonic() + 3.0

        def writer(port: int, through: bool) -> None:
            nonlocal version
            with Conn(port) as c:
                while time.monotonic() < stop:
                    # One write at a time: versions reach the server in order.
                    with lock:
                        version += 1
                        v = str(version)
                        req = f"set stale 0 0 {len(v)}\r\n{v}\r\n".encode()
                        assert c.request(req) == b"STORED\r\n"
                        acked.append((time.monotonic(), version, through))
                    time.sleep(0.002)

        def floor(began: float) -> int:
            with lock:
                seen = [
                    v
                    for at, v, through in acked
                    if (at <= began if through else at <= began - ttl_ms / 1000 - slack)
                ]
            return max(seen)

        def reader() -> None:
            with Conn(r.port) as c:
                while time.monotonic() < stop and not errors:
                    began = time.monotonic()
                    low = floor(began)
                    got = version_of(c.request(b"get stale\r\n", b"END\r\n"))
                    if got < low:
                        errors.append(f"read {got} after {low} was acknowledged")

        threads = [
            threading.Thread(target=writer, args=(r.port, True)),
            threading.Thread(target=writer, args=(backend.port, False)),
        ] + [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:5]
        assert int(router_stats(r.port)["hot_key_hits"]) > 0
