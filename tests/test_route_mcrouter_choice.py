"""`memfleet route` with mcrouter's choosing, key-rewriting and latency-injecting handles:
RandomRoute, LatestRoute, HostIdRoute, ModifyKeyRoute and LatencyInjectionRoute, routing
real memcached servers (LoadBalancerRoute: test_route_mcrouter_loadbalancer).

Which server holds a key is read from the servers themselves. The latency tests assert the
order things happen in (the server has the key, the client has no reply yet), with delays
long enough that the checks in between take a small part of them.
"""

from __future__ import annotations

from harness import Conn, eventually
from mcrouter_harness import McRouter, ask, fetch, pools, servers, store

__all__ = ["servers"]


def run(config: dict, *extra: str) -> McRouter:
    return McRouter(config, *extra).start()


def holders(group: list, keys: list[str]) -> list[int]:
    """How many of `keys` each server of `group` holds."""
    return [sum(fetch(s.port, k) != b"END\r\n" for k in keys) for s in group]


def test_random_route_spreads_requests_over_every_child(servers) -> None:
    group = servers(3)
    config = {
        "pools": pools(A=group),
        "route": {"type": "RandomRoute", "children": "Pool|A"},
    }
    with run(config) as r:
        keys = [f"k{i}" for i in range(60)]
        for k in keys:
            assert store(r.port, k) == b"STORED\r\n"
        on = holders(group, keys)
        # Each set lands on one server; that any server got none by chance is ~1e-10.
        assert sum(on) == 60 and all(on), on


def test_latest_route_sticks_to_one_child_and_fails_over_to_another(servers) -> None:
    group = servers(3)
    config = {
        "pools": pools(A=group),
        "route": {"type": "LatestRoute", "children": "Pool|A", "failover_count": 2},
    }
    with run(config) as r:
        first = [f"a{i}" for i in range(20)]
        for k in first:
            assert store(r.port, k) == b"STORED\r\n"
        on = holders(group, first)
        assert sorted(on) == [0, 0, 20], f"every key on this host's child: {on}"
        latest = group[on.index(20)]
        latest.stop()
        rest = [s for s in group if s is not latest]
        second = [f"b{i}" for i in range(20)]
        for k in second:
            assert store(r.port, k) == b"STORED\r\n"
        on = holders(rest, second)
        assert sorted(on) == [0, 20], f"every key on the one failover child: {on}"
        assert fetch(r.port, "b3") == b"VALUE b3 0 1\r\nv\r\nEND\r\n"


def test_host_id_route_and_latest_hash_func_pick_per_host(servers) -> None:
    a, b = servers(2), servers(2)
    config = {
        "pools": pools(A=a, B=b),
        "routes": [
            {"aliases": ["/h/i/"], "route": {"type": "HostIdRoute", "children": "Pool|A"}},
            {
                "aliases": ["/l/h/"],
                "route": {"type": "HashRoute", "children": "Pool|B", "hash_func": "Latest"},
            },
        ],
    }
    with run(config, "--route-prefix", "/h/i/") as r:
        keys = [f"k{i}" for i in range(20)]
        for k in keys:
            assert store(r.port, f"/h/i/{k}") == b"STORED\r\n"
            assert store(r.port, f"/l/h/{k}") == b"STORED\r\n"
        assert sorted(holders(a, keys)) == [0, 20]
        assert sorted(holders(b, keys)) == [0, 20]


def test_modify_key_route_stores_under_the_rewritten_key(servers) -> None:
    (a,) = servers(1)
    config = {
        "pools": pools(A=[a]),
        "route": {
            "type": "ModifyKeyRoute",
            "target": "PoolRoute|A",
            "ensure_key_prefix": "app:",
            "set_key_suffix": ":v2",
        },
    }
    with run(config) as r:
        assert store(r.port, "k", "x") == b"STORED\r\n"
        assert fetch(a.port, "app:k:v2") == b"VALUE app:k:v2 0 1\r\nx\r\nEND\r\n"
        assert fetch(a.port, "k") == b"END\r\n"
        # The client sees its own keys, in a multi-key get too.
        got = ask(r.port, b"get k nope k\r\n", b"END\r\n")
        assert got == b"VALUE k 0 1\r\nx\r\nVALUE k 0 1\r\nx\r\nEND\r\n"
        # A key the rewrite makes too long is an error, as in mcrouter.
        long = "k" * 245
        got = ask(r.port, f"get {long}\r\n".encode())
        assert got.startswith(b"SERVER_ERROR") and b"too long" in got, got


def test_latency_injection_delays_without_blocking_the_worker(servers) -> None:
    (a,) = servers(1)
    config = {
        "pools": pools(A=[a]),
        "route": {
            "type": "PrefixSelectorRoute",
            "policies": {
                "before:": {
                    "type": "LatencyInjectionRoute",
                    "child": "PoolRoute|A",
                    "before_latency_ms": 3000,
                },
                "after:": {
                    "type": "LatencyInjectionRoute",
                    "child": "PoolRoute|A",
                    "after_latency_ms": 3000,
                },
            },
            "wildcard": "PoolRoute|A",
        },
    }
    # One worker: a delay that blocked it would hold every other client up.
    with run(config, "--num-proxies", "1") as r, Conn(r.port, timeout=20) as slow:
        slow.send(b"set before:k 0 0 1\r\nx\r\n")
        assert store(r.port, "other") == b"STORED\r\n", "another client is served meanwhile"
        assert fetch(a.port, "before:k") == b"END\r\n", "not sent before the wait"
        assert slow.read_line() == b"STORED\r\n"
        assert fetch(a.port, "before:k") == b"VALUE before:k 0 1\r\nx\r\nEND\r\n"

        slow.send(b"set after:k 0 0 1\r\ny\r\n")
        eventually(lambda: fetch(a.port, "after:k") != b"END\r\n", "the set reaching the server")
        assert slow.read_all(0.2) == b"", "the reply waits after the server answered"
        slow.sock.settimeout(20)
        assert store(r.port, "other") == b"STORED\r\n"
        assert slow.read_line() == b"STORED\r\n"
