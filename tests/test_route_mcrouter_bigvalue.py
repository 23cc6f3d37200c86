"""BigValueRoute in an mcrouter config: a value over the handle's split_threshold is stored
as chunks plus an index item (mcrouter's format) on the handle's target, and read back
whole through the router; each BigValueRoute applies its own threshold."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import Server, memcached
from mcrouter_harness import McRouter, pools
from value_client import ValueClient

BIG_FLAG = 0x8000


def on_backends(backends: list[Server], key: str) -> tuple[int, bytes] | None:
    """`key` as the servers hold it (one of them at most)."""
    found = []
    for b in backends:
        with ValueClient(b.port or 0) as c:
            got = c.item(key)
        if got is not None:
            found.append(got)
    assert len(found) <= 1, found
    return found[0] if found else None


def chunks_of(backends: list[Server], key: str) -> tuple[int, list[bytes]]:
    """The index item's flags and the chunks it names, read from the servers."""
    index = on_backends(backends, key)
    assert index is not None, f"no index item for {key}"
    flags, data = index
    version, n, suffix = data.decode().split("-")
    assert version == "1", data
    parts = []
    for i in range(int(n)):
        chunk = on_backends(backends, f"{key}:{i}:{suffix}")
        assert chunk is not None, f"chunk {i} of {key} missing"
        parts.append(chunk[1])
    return flags, parts


@pytest.fixture
def backends() -> Iterator[list[Server]]:
    started = [memcached().start() for _ in range(2)]
    yield started
    for s in started:
        s.stop()


def big_value(target: object, threshold: int, batch: int, **more: object) -> dict:
    return {
        "type": "BigValueRoute",
        "target": target,
        "split_threshold": threshold,
        "batch_size": batch,
        **more,
    }


def test_big_value_route_splits_over_its_threshold(backends: list[Server]) -> None:
    config = {"pools": pools(A=backends), "route": big_value("PoolRoute|A", 1000, 2)}
    value = bytes(range(256)) * 20  # 5120 bytes: 6 chunks
    with McRouter(config) as r, ValueClient(r.port or 0) as c:
        assert c.store("set", "big", value, flags=3) == b"STORED"
        flags, parts = chunks_of(backends, "big")
        assert flags == 3 | BIG_FLAG
        assert [len(p) for p in parts] == [1000] * 5 + [120]
        assert b"".join(parts) == value
        # hide_reply_flag defaults to false, as in mcrouter: the bit shows.
        assert c.item("big") == (3 | BIG_FLAG, value)

        small = b"s" * 1000
        assert c.store("set", "small", small, flags=5) == b"STORED"
        assert on_backends(backends, "small") == (5, small)
        assert c.item("small") == (5, small)


def test_each_prefix_gets_its_own_threshold(backends: list[Server]) -> None:
    route = {
        "type": "PrefixSelectorRoute",
        "policies": {
            "a:": big_value("PoolRoute|A", 1000, 0, hide_reply_flag=True),
            "b:": big_value("PoolRoute|A", 3000, 1),
        },
        "wildcard": "PoolRoute|A",
    }
    config = {"pools": pools(A=backends), "route": route}
    value = b"x" * 1500 + b"y" * 500
    with McRouter(config) as r, ValueClient(r.port or 0) as c:
        for key in ("a:k", "b:k", "c:k"):
            assert c.store("set", key, value, flags=1) == b"STORED", key
        flags, parts = chunks_of(backends, "a:k")
        assert flags == 1 | BIG_FLAG
        assert [len(p) for p in parts] == [1000, 1000]
        assert on_backends(backends, "b:k") == (1, value)
        assert on_backends(backends, "c:k") == (1, value)
        # hide_reply_flag: the client gets its own flags back.
        assert c.item("a:k") == (1, value)
        assert c.item("b:k") == (1, value)
        big = value * 2
        assert c.store("set", "b:big", big) == b"STORED"
        _, parts = chunks_of(backends, "b:big")
        assert [len(p) for p in parts] == [3000, 1000]
        assert c.item("b:big") == (BIG_FLAG, big)


def test_chunks_follow_the_base_keys_hash_to_their_big_value_route() -> None:
    # A HashRoute over two BigValueRoutes on separate pools: as in mcrouter, the client's
    # key picks the child, and every chunk goes to that child's target, whatever its own
    # key would hash to.
    p = [memcached().start() for _ in range(2)]
    q = [memcached().start() for _ in range(2)]
    try:
        config = {
            "pools": pools(P=p, Q=q),
            "route": {
                "type": "HashRoute",
                "children": [big_value("PoolRoute|P", 100, 2), big_value("PoolRoute|Q", 100, 0)],
            },
        }
        value = bytes(range(250)) * 3  # 750 bytes: 8 chunks
        with McRouter(config) as r, ValueClient(r.port or 0) as c:
            used = set()
            for i in range(8):
                key = f"blob{i}"
                assert c.store("set", key, value, flags=1) == b"STORED", key
                home = p if on_backends(p, key) is not None else q
                used.add(id(home))
                flags, parts = chunks_of(home, key)
                assert flags == 1 | BIG_FLAG
                assert b"".join(parts) == value, key
                assert c.item(key) == (1 | BIG_FLAG, value), key
            assert len(used) == 2, "both children hold values"
    finally:
        for s in p + q:
            s.stop()
