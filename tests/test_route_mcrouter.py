"""`memfleet route --config file:PATH -p PORT`: mcrouter configs routing real memcached.

Each test starts memcached instances on loopback ports and the built router with an mcrouter
JSON config, then checks each route handle's effect where it shows: on the servers
themselves (read directly, with `mg <key> t v` for TTLs) and in the replies clients get.
Faults are real: servers are stopped (SIGTERM), paused (SIGSTOP) and restarted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from harness import Conn, Server, eventually, free_port, memcached, memfleet_bin
from mcrouter_harness import McRouter, ask, fetch, pools, servers, store

__all__ = ["servers"]


def ttl_of(port: int, key: str) -> int | None:
    """The remaining TTL (-1: none) of `key` read from the server itself; None on a miss."""
    line = ask(port, f"mg {key} t\r\n".encode())
    if not line.startswith(b"HD"):
        return None
    return int(line.split(b" t")[1].split()[0])


def run(config: dict, *extra: str, prefix: str | None = None) -> McRouter:
    return McRouter(config, *extra, prefix=prefix).start()


def test_pool_route_hashes_and_strips_the_routing_prefix(servers) -> None:
    a = servers(2)
    config = {
        "pools": pools(A=a),
        "routes": [{"aliases": ["/r/c/"], "route": "PoolRoute|A"}],
    }
    with run(config, prefix="/r/c/") as r:
        for i in range(20):
            assert store(r.port, f"/r/c/k{i}", f"v{i}") == b"STORED\r\n"
        on = [sum(fetch(s.port, f"k{i}") != b"END\r\n" for i in range(20)) for s in a]
        assert sum(on) == 20 and all(on), f"stored without the prefix, on both: {on}"
        assert fetch(r.port, "/r/c/k3") == b"VALUE /r/c/k3 0 2\r\nv3\r\nEND\r\n"
        assert fetch(r.port, "k3") == b"VALUE k3 0 2\r\nv3\r\nEND\r\n", "default prefix"
        # A multi-key get is split per key and merged in the client's order.
        got = ask(r.port, b"get k5 nope /r/c/k1 k5\r\n", b"END\r\n")
        assert got == (
            b"VALUE k5 0 2\r\nv5\r\nVALUE /r/c/k1 0 2\r\nv1\r\nVALUE k5 0 2\r\nv5\r\nEND\r\n"
        )
        assert ask(r.port, b"get /x/y/k1\r\n").startswith(b"SERVER_ERROR no route")
        # Requests passed on as they are and requests carried out by the route tree (the
        # prefix is stripped) share a connection: a later get never overtakes a set.
        with Conn(r.port) as c:
            for i in range(30):
                key = f"order{i}"
                c.send(f"get {key}\r\nset /r/c/{key} 0 0 1\r\nx\r\nget {key}\r\n".encode())
                assert c.read_until(b"END\r\n") == b"END\r\n"
                assert c.read_line() == b"STORED\r\n"
                assert c.read_until(b"END\r\n") == f"VALUE {key} 0 1\r\nx\r\nEND\r\n".encode()


def test_all_sync_writes_everywhere_and_reports_a_dead_replica(servers) -> None:
    a, b = servers(2)
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "AllSyncRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with run(config) as r:
        assert store(r.port, "k", "x") == b"STORED\r\n"
        assert fetch(a.port, "k") == fetch(b.port, "k") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
        assert ask(r.port, b"delete k\r\n") == b"DELETED\r\n"
        assert fetch(a.port, "k") == fetch(b.port, "k") == b"END\r\n"
        b.stop()
        assert store(r.port, "k", "y").startswith(b"SERVER_ERROR")
        assert fetch(a.port, "k") == b"VALUE k 0 1\r\ny\r\nEND\r\n"


def test_all_async_answers_at_once_and_writes_in_the_background(servers) -> None:
    a, b, dead = servers(3)
    dead.stop()
    config = {
        "pools": pools(A=[a], B=[b], D=[dead]),
        "route": {
            "type": "AllAsyncRoute",
            "children": ["PoolRoute|A", "PoolRoute|B", "PoolRoute|D"],
        },
    }
    with run(config) as r:
        # mcrouter's default reply for an update (NullRoute's), before anything answered.
        assert store(r.port, "k", "z") == b"NOT_STORED\r\n"
        for s in (a, b):
            eventually(lambda s=s: fetch(s.port, "k") != b"END\r\n", "the async write")


def test_all_majority_and_initial_and_fastest(servers) -> None:
    a, b, c = servers(3)
    children = ["PoolRoute|A", "PoolRoute|B", "PoolRoute|C"]
    config = {
        "pools": pools(A=[a], B=[b], C=[c]),
        "routes": [
            {"aliases": ["/m/j/"], "route": {"type": "AllMajorityRoute", "children": children}},
            {"aliases": ["/i/n/"], "route": {"type": "AllInitialRoute", "children": children}},
            {"aliases": ["/f/a/"], "route": {"type": "AllFastestRoute", "children": children}},
        ],
    }
    with run(config, prefix="/m/j/") as r:
        c.stop()
        assert store(r.port, "/m/j/k") == b"STORED\r\n", "2 of 3 is a majority"
        b.stop()
        assert store(r.port, "/m/j/k").startswith(b"SERVER_ERROR"), "1 of 3 is not"
        assert store(r.port, "/i/n/k2", "i") == b"STORED\r\n", "the first child's reply"
        assert store(r.port, "/f/a/k3", "f") == b"STORED\r\n", "the first non-error"
        assert fetch(a.port, "k3") == b"VALUE k3 0 1\r\nf\r\nEND\r\n"


def test_failover_moves_on_when_a_server_dies(servers) -> None:
    a, b = servers(2)
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with run(config) as r:
        assert store(r.port, "k", "first") == b"STORED\r\n"
        assert fetch(b.port, "k") == b"END\r\n", "only the first child while it answers"
        a.stop()
        assert store(r.port, "k", "second") == b"STORED\r\n"
        assert fetch(b.port, "k") == b"VALUE k 0 6\r\nsecond\r\nEND\r\n"
        assert fetch(r.port, "k") == b"VALUE k 0 6\r\nsecond\r\nEND\r\n"


def lease_token(reply: bytes) -> int:
    """The CAS token of an `mg ... c N<ttl>` reply that won the lease (`W`)."""
    flags = reply.split(b"\r\n")[0].split()[2:]
    assert b"W" in flags, reply
    return next(int(f[1:]) for f in flags if f.startswith(b"c"))


def test_leases_go_back_to_the_server_that_issued_them(servers) -> None:
    a, b = servers(2)
    port = a.port
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with run(config, "--probe-timeout-initial", "200") as r:
        # The primary hands out a lease, then fails: the set spending it is not sent to
        # the backup (which never issued it), the client sees the primary's error.
        token = lease_token(ask(r.port, b"mg held v c N30\r\n"))
        a.stop()
        got = ask(r.port, f"ms held 3 T30 C{token}\r\nnew\r\n".encode())
        assert got.startswith(b"SERVER_ERROR"), got
        assert fetch(b.port, "held") == b"END\r\n"
        # With the primary down the backup hands out the lease; the primary comes back,
        # and the set still goes to the backup.
        token = lease_token(ask(r.port, b"mg k v c N30\r\n"))
        back = memcached(port=port).start()
        try:
            eventually(
                lambda: (
                    store(r.port, "probe") == b"STORED\r\n"
                    and fetch(back.port, "probe") != b"END\r\n"
                ),
                "the primary back after a probe",
            )
            assert ask(r.port, f"ms k 3 T30 C{token}\r\nnew\r\n".encode()) == b"HD\r\n"
            assert fetch(b.port, "k") == b"VALUE k 0 3\r\nnew\r\nEND\r\n"
            assert fetch(back.port, "k") == b"END\r\n"
            # Requests without a token follow the route again: the primary.
            assert store(r.port, "k", "plain") == b"STORED\r\n"
            assert fetch(back.port, "k") == b"VALUE k 0 5\r\nplain\r\nEND\r\n"
        finally:
            back.stop()


def test_deterministic_order_policy_spreads_failovers(servers) -> None:
    primary, *rest = servers(4)
    config = {
        "pools": pools(A=[primary, *rest]),
        "route": {
            "type": "FailoverRoute",
            "children": "Pool|A",
            "failover_policy": {
                "type": "DeterministicOrderPolicy",
                "max_tries": 2,
                "max_error_tries": 2,
                "ignore_normal_reply_index": True,
            },
        },
    }
    with run(config) as r:
        primary.stop()
        keys = [f"k{i}" for i in range(30)]
        for key in keys:
            assert store(r.port, key, key) == b"STORED\r\n"
        holders = []
        for key in keys:
            on = [s for s in rest if fetch(s.port, key) != b"END\r\n"]
            assert len(on) == 1, f"{key} on {len(on)} servers"
            holders.append(on[0].port)
            # A get fails over to the same child as the set did.
            assert fetch(r.port, key) == f"VALUE {key} 0 {len(key)}\r\n{key}\r\nEND\r\n".encode()
        # In order, every failover would land on the second child; hashed, they spread.
        assert len(set(holders)) >= 2, holders


def test_salted_failover_route_hashes_its_pool_then_fails_over_within_it(servers) -> None:
    a = servers(4)
    # The fourth server weighs 0: only a failover can put a key on it.
    weights = [1.0, 1.0, 1.0, 0.0]
    config = {
        "pools": pools(A=a),
        "route": {
            "type": "SaltedFailoverRoute",
            "pool": "A",
            "hash": {"hash_func": "WeightedCh3", "weights": weights},
            "failover_policy": {
                "type": "DeterministicOrderPolicy",
                "max_tries": 4,
                "max_error_tries": 4,
            },
        },
    }
    keys = [f"salted{i}" for i in range(60)]
    with run(config) as r:
        for key in keys:
            assert store(r.port, key, key) == b"STORED\r\n"
        on = [[k for k in keys if fetch(s.port, k) != b"END\r\n"] for s in a]
        # The first child is the PoolRoute with the handle's own weighted hash.
        assert sum(map(len, on)) == len(keys) and not on[3], [len(o) for o in on]
        lost = on[0]
        assert lost, "the weighted hash put nothing on the first server"
        a[0].stop()
        for key in lost:
            assert store(r.port, key, "again") == b"STORED\r\n"
        # Each failed-over key went to one live server of the same pool, the same one a
        # get then reads, and together they spread (the policy hashes, not config order).
        holders = set()
        for key in lost:
            held = [
                i
                for i, s in enumerate(a[1:], 1)
                if fetch(s.port, key).endswith(b"again\r\nEND\r\n")
            ]
            assert len(held) == 1, f"{key} on {held}"
            holders.add(held[0])
            assert fetch(r.port, key) == f"VALUE {key} 0 5\r\nagain\r\nEND\r\n".encode()
        assert len(holders) >= 2 or len(lost) < 4, holders


def test_least_failures_policy_skips_a_child_that_just_failed(servers) -> None:
    a, c, d = servers(3)
    # B answers, but refuses items over 1 KB with SERVER_ERROR: an error, not a TKO.
    b = memcached("-I", "1k", "-o", "slab_chunk_max=1024").start()
    try:
        config = {
            "pools": pools(A=[a], B=[b], C=[c], D=[d]),
            "route": {
                "type": "FailoverRoute",
                "children": ["PoolRoute|A", "PoolRoute|B", "PoolRoute|C", "PoolRoute|D"],
                "failover_policy": {"type": "LeastFailuresPolicy", "max_tries": 3},
            },
        }
        # One worker: each proxy thread keeps its own error counts, as in mcrouter.
        with run(config, "--num-proxies", "1") as r:
            a.stop()
            big = "x" * 2000
            assert store(r.port, "big", big) == b"STORED\r\n"
            assert fetch(c.port, "big").startswith(b"VALUE big"), "A down, B refused: C"
            # B would take a small item, and in config order it is next after A; with its
            # error in a row it comes after C and D.
            assert store(r.port, "small", "v") == b"STORED\r\n"
            assert fetch(b.port, "small") == b"END\r\n"
            assert fetch(c.port, "small") == b"VALUE small 0 1\r\nv\r\nEND\r\n"
    finally:
        b.stop()


def test_failover_errors_per_operation_class(servers) -> None:
    a, b = servers(2)
    a.stop()
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {
            "type": "FailoverRoute",
            "children": ["PoolRoute|A", "PoolRoute|B"],
            "failover_errors": {"gets": ["connect_error", "tko"], "updates": []},
        },
    }
    with run(config) as r:
        assert store(b.port, "k", "b") == b"STORED\r\n"
        assert fetch(r.port, "k") == b"VALUE k 0 1\r\nb\r\nEND\r\n", "gets fail over"
        assert store(r.port, "k", "x").startswith(b"SERVER_ERROR"), "updates do not"


def test_failover_with_exptime_caps_ttls_on_the_gutter(servers) -> None:
    a, gutter = servers(2)
    config = {
        "pools": pools(A=[a], G=[gutter]),
        "route": {
            "type": "FailoverWithExptimeRoute",
            "normal": "PoolRoute|A",
            "failover": ["PoolRoute|G"],
            "failover_exptime": 10,
        },
    }
    with run(config) as r:
        assert store(r.port, "kept", "v", exptime=1000) == b"STORED\r\n"
        assert 990 < (ttl_of(a.port, "kept") or 0) <= 1000, "the normal route keeps it"
        a.stop()
        for key, exptime in (("never", 0), ("long", 1000), ("short", 5)):
            assert store(r.port, key, "v", exptime=exptime) == b"STORED\r\n"
        assert 0 < (ttl_of(gutter.port, "never") or 0) <= 10
        assert 0 < (ttl_of(gutter.port, "long") or 0) <= 10
        assert 0 < (ttl_of(gutter.port, "short") or 0) <= 5


def test_miss_failover_reads_on_until_a_hit(servers) -> None:
    a, b = servers(2)
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "MissFailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with run(config) as r:
        store(b.port, "k", "b")
        assert fetch(r.port, "k") == b"VALUE k 0 1\r\nb\r\nEND\r\n"
        assert store(r.port, "w", "a") == b"STORED\r\n"
        assert fetch(a.port, "w") != b"END\r\n" and fetch(b.port, "w") == b"END\r\n"


def test_warm_up_fills_cold_with_the_remaining_ttl(servers) -> None:
    cold, warm = servers(2)
    config = {
        "pools": pools(C=[cold], W=[warm]),
        "route": {"type": "WarmUpRoute", "cold": "PoolRoute|C", "warm": "PoolRoute|W"},
    }
    with run(config) as r:
        assert ask(warm.port, b"set k 7 500 2\r\nhi\r\n") == b"STORED\r\n"
        assert fetch(r.port, "k") == b"VALUE k 7 2\r\nhi\r\nEND\r\n"
        eventually(lambda: ttl_of(cold.port, "k") is not None, "cold filled")
        assert fetch(cold.port, "k") == b"VALUE k 7 2\r\nhi\r\nEND\r\n"
        assert 490 < (ttl_of(cold.port, "k") or 0) <= 500, "the warm item's remaining TTL"
        assert store(r.port, "new", "n") == b"STORED\r\n"
        assert fetch(warm.port, "new") == b"END\r\n", "writes go to cold only"


def test_warm_up_deletes_reach_cold_and_warm(servers) -> None:
    cold, warm = servers(2)
    config = {
        "pools": pools(C=[cold], W=[warm]),
        "route": {"type": "WarmUpRoute", "cold": "PoolRoute|C", "warm": "PoolRoute|W"},
    }
    with run(config) as r:
        assert ask(warm.port, b"set k 0 0 3\r\nold\r\n") == b"STORED\r\n"
        assert fetch(r.port, "k") == b"VALUE k 0 3\r\nold\r\nEND\r\n"
        eventually(lambda: ttl_of(cold.port, "k") is not None, "cold filled")
        # Deleted from both: the next get misses instead of bringing warm's copy back.
        assert ask(r.port, b"delete k\r\n") == b"DELETED\r\n"
        assert fetch(r.port, "k") == b"END\r\n"
        assert fetch(cold.port, "k") == fetch(warm.port, "k") == b"END\r\n"
        # The reply is cold's: a key only warm has is NOT_FOUND, yet gone from warm.
        assert ask(warm.port, b"set w 0 0 1\r\nx\r\n") == b"STORED\r\n"
        assert ask(r.port, b"delete w\r\n") == b"NOT_FOUND\r\n"
        assert fetch(warm.port, "w") == b"END\r\n"
        assert ask(warm.port, b"set m 0 0 1\r\nx\r\n") == b"STORED\r\n"
        assert ask(r.port, b"md m\r\n") == b"NF\r\n"
        assert fetch(warm.port, "m") == b"END\r\n"


def test_prefix_and_operation_selectors(servers) -> None:
    a, b, c = servers(3)
    config = {
        "pools": pools(A=[a], B=[b], C=[c]),
        "route": {
            "type": "PrefixSelectorRoute",
            "policies": {"user:": "PoolRoute|A", "user:vip:": "PoolRoute|B"},
            "wildcard": {
                "type": "OperationSelectorRoute",
                "operation_policies": {"delete": "NullRoute"},
                "default_policy": "PoolRoute|C",
            },
        },
    }
    with run(config) as r:
        for key in ("user:1", "user:vip:2", "other"):
            assert store(r.port, key) == b"STORED\r\n"
        assert fetch(a.port, "user:1") != b"END\r\n"
        assert fetch(b.port, "user:vip:2") != b"END\r\n", "the longest prefix wins"
        assert fetch(c.port, "other") != b"END\r\n"
        assert ask(r.port, b"delete other\r\n") == b"NOT_FOUND\r\n", "NullRoute for deletes"
        assert fetch(c.port, "other") != b"END\r\n"


def test_modify_exptime_null_and_error_routes(servers) -> None:
    (a,) = servers(1)
    config = {
        "pools": pools(A=[a]),
        "routes": [
            {
                "aliases": ["/x/y/"],
                "route": {
                    "type": "ModifyExptimeRoute",
                    "target": "PoolRoute|A",
                    "exptime": 20,
                    "action": "min",
                },
            },
            {"aliases": ["/n/n/"], "route": "NullRoute"},
            {"aliases": ["/e/e/"], "route": "ErrorRoute|closed for maintenance"},
        ],
    }
    with run(config, prefix="/x/y/") as r:
        store(r.port, "forever", exptime=0)
        store(r.port, "short", exptime=5)
        assert 0 < (ttl_of(a.port, "forever") or 0) <= 20
        assert 0 < (ttl_of(a.port, "short") or 0) <= 5
        assert ask(r.port, b"ms meta 1 T100\r\nm\r\n") == b"HD\r\n"
        assert 0 < (ttl_of(a.port, "meta") or 0) <= 20
        assert fetch(r.port, "/n/n/k") == b"END\r\n"
        assert store(r.port, "/n/n/k") == b"NOT_STORED\r\n"
        assert ask(r.port, b"delete /n/n/k\r\n") == b"NOT_FOUND\r\n"
        assert ask(r.port, b"mg /n/n/k v\r\n") == b"EN\r\n"
        assert ask(r.port, b"get /e/e/k\r\n") == b"SERVER_ERROR closed for maintenance\r\n"


def test_shadows_get_copies_and_a_dead_shadow_changes_nothing(servers) -> None:
    a, shadow, dead = servers(3)
    dead.stop()

    def config(target: Server) -> dict:
        return {
            "pools": pools(A=[a], S=[target]),
            "route": {
                "type": "PoolRoute",
                "pool": "A",
                "shadows": [{"target": "PoolRoute|S", "index_range": [0, 1]}],
            },
        }

    with run(config(shadow)) as r:
        assert store(r.port, "k", "s") == b"STORED\r\n"
        eventually(lambda: fetch(shadow.port, "k") != b"END\r\n", "the shadow copy")
    with run(config(dead)) as r:
        for i in range(20):
            assert store(r.port, f"k{i}") == b"STORED\r\n"
            assert fetch(r.port, f"k{i}") == b"VALUE k%d 0 1\r\nv\r\nEND\r\n" % i


def test_pipelined_requests_over_different_routes_keep_their_order(servers) -> None:
    a, b = servers(2)
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {
            "type": "PrefixSelectorRoute",
            "policies": {"slow:": {"type": "AllSyncRoute", "children": ["Pool|A", "Pool|B"]}},
            "wildcard": "PoolRoute|B",
        },
    }
    with run(config) as r, Conn(r.port) as c:
        req = b""
        want = b""
        for i in range(50):
            key = f"slow:{i}" if i % 3 else f"fast:{i}"
            req += f"set {key} 0 0 {len(str(i))}\r\n{i}\r\nget {key}\r\n".encode()
            want += f"STORED\r\nVALUE {key} 0 {len(str(i))}\r\n{i}\r\nEND\r\n".encode()
        req += b"ms q 1 q\r\nx\r\nmg q v q\r\nmg nope v q\r\nmn\r\n"
        want += b"VA 1\r\nx\r\nMN\r\n"
        c.send(req)
        assert c.read_until(b"MN\r\n") == want


def test_a_killed_server_goes_tko_fails_fast_and_comes_back(servers) -> None:
    a, b = servers(2)
    port = a.port
    config = {"pools": pools(A=[a], B=[b]), "route": "PoolRoute|A"}
    with run(config, "--probe-timeout-initial", "200") as r:
        assert store(r.port, "k") == b"STORED\r\n"
        a.stop()
        first = store(r.port, "k")
        assert first.startswith(b"SERVER_ERROR"), first
        eventually(lambda: store(r.port, "k") == b"SERVER_ERROR unavailable\r\n", "TKO")
        assert "marked hard TKO" in r.log_text()
        # Requests to a TKO'd server are not sent: they fail at once, every one.
        with Conn(r.port) as c:
            c.send(b"get k\r\n" * 50)
            assert c.read_until(b"\r\n" * 1) == b"SERVER_ERROR unavailable\r\n"
        back = memcached(port=port).start()
        try:
            eventually(lambda: store(r.port, "k") == b"STORED\r\n", "back after a probe")
            assert fetch(back.port, "k") == b"VALUE k 0 1\r\nv\r\nEND\r\n"
        finally:
            back.stop()


def test_a_hung_server_goes_soft_tko_after_timeouts_and_fails_over(servers) -> None:
    a, b = servers(2)
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with run(config, "--timeouts-until-tko", "2", "--server-timeout", "200") as r:
        assert a.proc is not None
        with a.paused():
            # Each request times out on A, then fails over to B; after 2 timeouts A is TKO.
            for i in range(3):
                assert store(r.port, f"k{i}", "b") == b"STORED\r\n"
            eventually(lambda: "marked soft TKO" in r.log_text(), "soft TKO logged")
            assert fetch(b.port, "k2") == b"VALUE k2 0 1\r\nb\r\nEND\r\n"
        eventually(lambda: "is back" in r.log_text(), "A back after SIGCONT")
        assert store(r.port, "after", "a") == b"STORED\r\n"
        assert fetch(a.port, "after") == b"VALUE after 0 1\r\na\r\nEND\r\n"


def test_reload_on_sighup_and_file_change_refuses_a_bad_config(servers) -> None:
    a, b = servers(2)
    with run({"pools": pools(A=[a], B=[b]), "route": "PoolRoute|A"}) as r:
        assert store(r.port, "k1") == b"STORED\r\n"
        assert fetch(a.port, "k1") != b"END\r\n"
        r.write({"pools": pools(A=[a], B=[b]), "route": "PoolRoute|B"})
        assert r.proc is not None
        r.proc.send_signal(signal.SIGHUP)
        eventually(
            lambda: store(r.port, "k2") == b"STORED\r\n" and fetch(b.port, "k2") != b"END\r\n",
            "reload",
        )
        Path(r.conf_path).write_text('{"route": "PoolRoute|Nope"}')
        r.proc.send_signal(signal.SIGHUP)
        eventually(lambda: "reload refused" in r.log_text(), "the refusal logged")
        assert "pool 'Nope' is not defined" in r.log_text()
        assert store(r.port, "k3") == b"STORED\r\n"
        assert fetch(b.port, "k3") != b"END\r\n", "the old config is kept"
        # No signal: the changed file is picked up by itself.
        r.write({"pools": pools(A=[a]), "route": "PoolRoute|A"})
        eventually(
            lambda: store(r.port, "k4") == b"STORED\r\n" and fetch(a.port, "k4") != b"END\r\n",
            "file watch reload",
        )


def test_one_change_is_one_reload_whether_signalled_or_watched(servers) -> None:
    """An edited config followed by SIGHUP is read once: the file watch, which checks the
    file once a second, must not reload the same change again (it logged two reloads)."""
    a, b = servers(2)
    with run({"pools": pools(A=[a], B=[b]), "route": "PoolRoute|A"}) as r:
        assert r.proc is not None

        def reloads() -> int:
            return r.log_text().count("configuration reloaded")

        r.write({"pools": pools(A=[a], B=[b]), "route": "PoolRoute|B"})
        r.proc.send_signal(signal.SIGHUP)
        eventually(lambda: reloads() >= 1, "the signalled reload")
        time.sleep(2.5)  # past two of the watch's once-a-second checks
        assert reloads() == 1, r.log_text()
        r.write({"pools": pools(A=[a], B=[b]), "route": "PoolRoute|A"})
        eventually(lambda: reloads() >= 2, "the watched reload")
        time.sleep(2.5)
        assert reloads() == 2, r.log_text()


def test_command_line(tmp_path: Path, servers) -> None:
    (a,) = servers(1)
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"pools": pools(A=[a]), "route": "PoolRoute|A"}))
    r = subprocess.run(
        [memfleet_bin(), "route", "--config", f"file:{conf}", "-p", "1", "--big-values"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert r.returncode != 0 and "--big-values" in r.stderr
    pid = tmp_path / "pid"
    with McRouter(json.loads(conf.read_text()), "--pid-file", str(pid)) as router:
        assert pid.read_text().strip() == str(router.proc.pid if router.proc else "")
        assert ask(router.port, b"version\r\n").startswith(b"VERSION ")
        assert store(router.port, "k") == b"STORED\r\n"
    # --config-str and --config-file route the same; --validate-config=run checks, then routes.
    for flag, value in (
        ("--config-str", conf.read_text()),
        ("--config-file", str(conf)),
        ("--validate-config=run", f"--config=file:{conf}"),
    ):
        port = free_port()
        argv = [memfleet_bin(), "route", flag, value, "--port", str(port)]
        with Server(argv + ["--listen-addresses", "127.0.0.1"], port=port) as s:
            assert fetch(s.port, "k") == b"VALUE k 0 1\r\nv\r\nEND\r\n"
