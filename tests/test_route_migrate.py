"""`memfleet route` with MigrateRoute and StagingRoute over real memcached.

MigrateRoute's phases follow the wall clock; each test picks its phase by setting
`start_time` relative to now, with intervals long enough that the phase cannot change
during the test. What each side holds is read from the servers directly.
"""

from __future__ import annotations

import time

from harness import Conn, Server, eventually
from mcrouter_harness import McRouter, ask, fetch, pools, servers, store

__all__ = ["servers"]

DAY = 86400


def ttl_of(port: int, key: str) -> int | None:
    """The remaining TTL (-1: none) of `key` on the server itself; None on a miss."""
    line = ask(port, f"mg {key} t\r\n".encode())
    if not line.startswith(b"HD"):
        return None
    return int(line.split(b" t")[1].split()[0])


def migrate(old: Server, new: Server, start_time: int) -> dict:
    return {
        "pools": pools(Old=[old], New=[new]),
        "route": {
            "type": "MigrateRoute",
            "from": "PoolRoute|Old",
            "to": "PoolRoute|New",
            "start_time": start_time,
            "interval": DAY,
        },
    }


def on_both(old: Server, new: Server, key: str) -> None:
    for s in (old, new):
        assert store(s.port, key) == b"STORED\r\n"


def test_migrate_before_the_start_uses_from_only(servers) -> None:
    old, new = servers(2)
    with McRouter(migrate(old, new, int(time.time()) + DAY)).start() as r:
        assert store(r.port, "k", "a") == b"STORED\r\n"
        assert fetch(old.port, "k") == b"VALUE k 0 1\r\na\r\nEND\r\n"
        assert fetch(new.port, "k") == b"END\r\n"
        on_both(old, new, "d")
        assert ask(r.port, b"delete d\r\n") == b"DELETED\r\n"
        assert fetch(old.port, "d") == b"END\r\n"
        assert fetch(new.port, "d") != b"END\r\n", "deletes wait for the start too"


def test_migrate_first_interval_deletes_from_both_and_reads_from(servers) -> None:
    old, new = servers(2)
    with McRouter(migrate(old, new, int(time.time()) - 60)).start() as r:
        assert store(r.port, "k", "a") == b"STORED\r\n"
        assert fetch(old.port, "k") == b"VALUE k 0 1\r\na\r\nEND\r\n"
        assert fetch(new.port, "k") == b"END\r\n"
        assert fetch(r.port, "k") == b"VALUE k 0 1\r\na\r\nEND\r\n"
        on_both(old, new, "d")
        assert ask(r.port, b"delete d\r\n") == b"DELETED\r\n"
        assert fetch(old.port, "d") == fetch(new.port, "d") == b"END\r\n"


def test_migrate_after_two_intervals_uses_to_only(servers) -> None:
    old, new = servers(2)
    with McRouter(migrate(old, new, int(time.time()) - 3 * DAY)).start() as r:
        assert store(r.port, "k", "b") == b"STORED\r\n"
        assert fetch(new.port, "k") == b"VALUE k 0 1\r\nb\r\nEND\r\n"
        assert fetch(old.port, "k") == b"END\r\n"
        on_both(old, new, "d")
        assert ask(r.port, b"delete d\r\n") == b"DELETED\r\n"
        assert fetch(new.port, "d") == b"END\r\n"
        assert fetch(old.port, "d") != b"END\r\n", "from is left alone once migrated"


def staging(warm: Server, stage: Server) -> dict:
    return {
        "pools": pools(W=[warm], S=[stage]),
        "route": {"type": "StagingRoute", "warm": "PoolRoute|W", "staging": "PoolRoute|S"},
    }


def test_staging_writes_reach_staging_after_warm(servers) -> None:
    warm, stage = servers(2)
    with McRouter(staging(warm, stage)).start() as r:
        assert store(r.port, "k", "v1", exptime=300) == b"STORED\r\n"
        assert fetch(warm.port, "k") == b"VALUE k 0 2\r\nv1\r\nEND\r\n"
        eventually(lambda: fetch(stage.port, "k") == b"VALUE k 0 2\r\nv1\r\nEND\r\n", "set copy")
        assert 290 < (ttl_of(stage.port, "k") or 0) <= 300
        # An add warm refused is passed on too (NOT_STORED is no error).
        assert ask(r.port, b"add a 0 0 1\r\nx\r\n") == b"STORED\r\n"
        eventually(lambda: fetch(stage.port, "a") == b"VALUE a 0 1\r\nx\r\nEND\r\n", "add copy")
        # Deletes reach both sides before the client hears.
        assert ask(r.port, b"delete k\r\n") == b"DELETED\r\n"
        assert fetch(warm.port, "k") == fetch(stage.port, "k") == b"END\r\n"


def test_staging_copies_a_warm_hit_with_its_remaining_ttl(servers) -> None:
    warm, stage = servers(2)
    with McRouter(staging(warm, stage)).start() as r:
        assert ask(warm.port, b"set h 5 500 2\r\nhi\r\n") == b"STORED\r\n"
        assert fetch(r.port, "h") == b"VALUE h 5 2\r\nhi\r\nEND\r\n"
        eventually(lambda: ttl_of(stage.port, "h") is not None, "staging filled")
        assert fetch(stage.port, "h") == b"VALUE h 5 2\r\nhi\r\nEND\r\n"
        assert 490 < (ttl_of(stage.port, "h") or 0) <= 500
        # Reads never come from staging.
        assert ask(stage.port, b"set only 0 0 1\r\ns\r\n") == b"STORED\r\n"
        assert fetch(r.port, "only") == b"END\r\n"


def test_shard_splits_spread_a_shard_and_fan_deletes_out(servers) -> None:
    (a,) = servers(1)
    config = {
        "pools": pools(A=[a]),
        "route": {"type": "PoolRoute", "pool": "A", "shard_splits": {"10": 3}},
    }
    subs = ["u:10:k", "u:10aa:k", "u:10ba:k"]
    with McRouter(config).start() as r:
        # This host's sub-shard (its host id modulo 3) holds the value; the client sees
        # its own key.
        assert store(r.port, "u:10:k", "x") == b"STORED\r\n"
        held = [k for k in subs if fetch(a.port, k) != b"END\r\n"]
        assert len(held) == 1, held
        assert fetch(r.port, "u:10:k") == b"VALUE u:10:k 0 1\r\nx\r\nEND\r\n"
        # A delete reaches every sub-shard.
        for k in subs:
            assert store(a.port, k) == b"STORED\r\n"
        assert ask(r.port, b"delete u:10:k\r\n") == b"DELETED\r\n"
        eventually(lambda: all(fetch(a.port, k) == b"END\r\n" for k in subs), "all deleted")
        # A shard that is not split keeps its key.
        assert store(r.port, "u:11:k", "y") == b"STORED\r\n"
        assert fetch(a.port, "u:11:k") == b"VALUE u:11:k 0 1\r\ny\r\nEND\r\n"


def test_slow_warmup_sends_a_cold_servers_gets_elsewhere_until_it_hits(servers) -> None:
    cold, full = servers(2)
    config = {
        "pools": pools(A=[cold], F=[full]),
        "route": {
            "type": "PoolRoute",
            "pool": "A",
            "slow_warmup": {
                "failoverTarget": "PoolRoute|F",
                "settings": {"enable_threshold": 0.5, "disable_threshold": 0.9, "min_requests": 10},
            },
        },
    }
    for i in range(20):
        assert store(full.port, f"k{i}", "f") == b"STORED\r\n"
    # One proxy: the hit rate is counted per proxy, as in mcrouter.
    with McRouter(config, "--num-proxies", "1").start() as r, Conn(r.port) as c:

        def get(key: str) -> bytes:
            return c.request(f"get {key}\r\n".encode(), b"END\r\n")

        # Below min_requests every get reaches the (empty) server.
        assert all(get(f"k{i % 20}") == b"END\r\n" for i in range(10))
        # Its hit rate is 0 now: most gets go to the failover target, which has them.
        hits = sum(get(f"k{i % 20}") != b"END\r\n" for i in range(100))
        assert hits >= 50, hits
        # Writes go to the server; as its hit rate climbs, it takes all the gets again.
        for i in range(20):
            assert c.request(f"set k{i} 0 0 1\r\nc\r\n".encode()) == b"STORED\r\n"
        for i in range(2000):
            get(f"k{i % 20}")
        assert all(get(f"k{i}").endswith(b"\r\nc\r\nEND\r\n") for i in range(20))


def test_shadow_route_copies_what_its_shadowed_child_gets(servers) -> None:
    a, shadow = servers(2)
    config = {
        "pools": pools(A=[a], S=[shadow]),
        "route": {
            "type": "ShadowRoute",
            "children": "PoolRoute|A",
            "shadows": [{"target": "PoolRoute|S", "index_range": [0, 1]}],
        },
    }
    with McRouter(config).start() as r:
        assert store(r.port, "k", "s") == b"STORED\r\n"
        assert fetch(a.port, "k") == b"VALUE k 0 1\r\ns\r\nEND\r\n"
        eventually(lambda: fetch(shadow.port, "k") == b"VALUE k 0 1\r\ns\r\nEND\r\n", "copy")
        # The shadow never answers: a key only it has is a miss.
        assert store(shadow.port, "only") == b"STORED\r\n"
        assert fetch(r.port, "only") == b"END\r\n"
