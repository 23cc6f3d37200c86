"""`memfleet route` hot-key handling picks keys by server load: with many warm keys on one
server and the hottest key elsewhere, the keys it caches are the busiest server's, which
brings that server's load toward the mean (the hottest key alone would not). Real memcached
backends; the router's `stats` tells how many hot keys each server has
(`server:<name>:hot_keys`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness import Conn, Server, eventually, free_port
from mcrouter_harness import fetch, servers, store
from proxy_harness import Proxy, pool_yaml

__all__ = ["servers"]

# Every get sampled (exact counts); no key reaches the share, so only the load picks. md5
# spreads the test's few keys over every server.
BALANCE = {
    "hash": "md5",
    "distribution": "ketama",
    "hot_keys": True,
    "hot_key_sample": 1,
    "hot_key_share": "50%",
    "hot_key_max": 4,
}


@contextmanager
def nutcracker_router(group: list[Server], **opts: object) -> Iterator[Proxy]:
    port = free_port()
    names = [f"127.0.0.1:{s.port}:1" for s in group]
    with Proxy(pool_yaml("bal", f"127.0.0.1:{port}", names, **opts), port).start() as p:
        yield p


def placed(port: int, group: list[Server], n: int) -> list[list[str]]:
    """Keys `k0`.. written through the router, by the server (position) that holds them."""
    out: list[list[str]] = [[] for _ in group]
    for i in range(n):
        key = f"k{i}"
        assert store(port, key, "v") == b"STORED\r\n"
        (where,) = [j for j, s in enumerate(group) if fetch(s.port, key) != b"END\r\n"]
        out[where].append(key)
    return out


def hot_per_server(port: int, group: list[Server]) -> list[int]:
    with Conn(port) as c:
        st = c.stats()
    # -1: not judged yet.
    out = []
    for s in group:
        n = [v for k, v in st.items() if f":{s.port}" in k and k.endswith(":hot_keys")]
        out.append(int(n[0]) if n else -1)
    return out


def test_the_keys_cached_are_the_busiest_servers(servers) -> None:
    group = servers(4)
    with nutcracker_router(group, **BALANCE) as r:
        by_server = placed(r.port, group, 200)
        assert all(len(keys) >= 10 for keys in by_server), [len(k) for k in by_server]
        # Per round: server 0 takes 80 gets over 10 warm keys (8 each); server 1 20, 12 of
        # them for one key, the hottest of all; servers 2 and 3 20 each over 10 keys.
        plan = [(k, 8) for k in by_server[0][:10]]
        plan += [(by_server[1][0], 12)] + [(k, 2) for k in by_server[1][1:5]]
        plan += [(k, 2) for s in (2, 3) for k in by_server[s][:10]]
        wire = b"".join(f"get {k}\r\n".encode() * n for k, n in plan)
        count = sum(n for _, n in plan)
        with Conn(r.port) as c:

            def balanced() -> bool:
                c.send(wire)
                for _ in range(count):
                    assert c.read_until(b"END\r\n").startswith(b"VALUE k")
                return hot_per_server(r.port, group) == [4, 0, 0, 0]

            eventually(balanced, "the 4 hot keys on the busiest server", limit=10.0)
