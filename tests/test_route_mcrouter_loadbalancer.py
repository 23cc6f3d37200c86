"""`memfleet route` with mcrouter's LoadBalancerRoute in front of real memcached servers.

memcached's replies carry no server load, so mcrouter weighs every child 1.0: a key goes
where WeightedCh3 with equal weights (and the salt) puts it, and on an error it is re-hashed
over the other children with the salt followed by the tries left. Where keys should be is
asked of a PoolRoute hashing the same way over a second set of servers; where they are is
read from each server directly.
"""

from __future__ import annotations

from harness import Server
from mcrouter_harness import McRouter, fetch, pools, servers, store

__all__ = ["servers"]

PREFIX = "/lb/x/"


def holder(group: list[Server], key: str) -> int | None:
    """The position of the one server of `group` holding `key` (None: none does)."""
    on = [i for i, s in enumerate(group) if fetch(s.port, key) != b"END\r\n"]
    assert len(on) <= 1, f"{key} on {on}"
    return on[0] if on else None


def equal_weights(pool: str, n: int, salt: str) -> dict:
    """A PoolRoute hashing like a LoadBalancerRoute over `n` children with no load."""
    hash_spec = {"hash_func": "WeightedCh3", "weights": [1.0] * n, "salt": salt}
    return {"type": "PoolRoute", "pool": pool, "hash": hash_spec}


def test_keys_land_where_equal_weight_hashing_puts_them(servers) -> None:
    lb, ref = servers(3), servers(3)
    config = {
        "pools": pools(A=lb, R=ref),
        "routes": [
            {
                "aliases": [PREFIX],
                "route": {"type": "LoadBalancerRoute", "children": "Pool|A", "salt": "s"},
            },
            {"aliases": ["/ref/x/"], "route": equal_weights("R", 3, "s")},
        ],
    }
    with McRouter(config, "--route-prefix", PREFIX).start() as r:
        keys = [f"k{i}" for i in range(90)]
        for k in keys:
            assert store(r.port, f"{PREFIX}{k}") == b"STORED\r\n"
            assert store(r.port, f"/ref/x/{k}") == b"STORED\r\n"
        got = [holder(lb, k) for k in keys]
        want = [holder(ref, k) for k in keys]
        assert got == want
        assert sorted(set(got)) == [0, 1, 2], "every server gets keys"
        assert fetch(r.port, f"{PREFIX}k5") == f"VALUE {PREFIX}k5 0 1\r\nv\r\nEND\r\n".encode()


def test_a_dead_childs_keys_go_to_the_rehashed_child(servers) -> None:
    lb, ref, ref2 = servers(3), servers(3), servers(2)
    config = {
        "pools": pools(A=lb, R=ref, S=ref2),
        "routes": [
            {
                "aliases": [PREFIX],
                "route": {
                    "type": "PoolRoute",
                    "pool": "A",
                    "hash": {"hash_func": "LoadBalancer", "salt": "s", "failover_count": 2},
                },
            },
            {"aliases": ["/ref/x/"], "route": equal_weights("R", 3, "s")},
            # The retry: the two children left, salted "s" + "1" (tries left).
            {"aliases": ["/ref2/x/"], "route": equal_weights("S", 2, "s1")},
        ],
    }
    with McRouter(config, "--route-prefix", PREFIX).start() as r:
        keys = [f"k{i}" for i in range(90)]
        for k in keys:
            assert store(r.port, f"/ref/x/{k}") == b"STORED\r\n"
            assert store(r.port, f"/ref2/x/{k}") == b"STORED\r\n"
        first = {k: holder(ref, k) for k in keys}
        dead = 0
        lb[dead].stop()
        # As mcrouter: the dead child's place is taken by the last one, then the hash
        # picks among what is left.
        left = [2, 1]
        moved = [k for k in keys if first[k] == dead]
        assert len(moved) >= 10, moved
        for k in moved:
            assert store(r.port, f"{PREFIX}{k}", "w") == b"STORED\r\n"
        for k in moved:
            at = holder(ref2, k)
            assert at is not None, k
            want = left[at]
            assert holder(lb[1:], k) == want - 1, k
            got = fetch(r.port, f"{PREFIX}{k}")
            assert got == f"VALUE {PREFIX}{k} 0 1\r\nw\r\nEND\r\n".encode()
        # Keys of live children stay put.
        for k in keys:
            if first[k] != dead:
                assert store(r.port, f"{PREFIX}{k}") == b"STORED\r\n"
                assert holder(lb[1:], k) == first[k] - 1, k
