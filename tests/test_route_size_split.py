"""`memfleet route` with L1L2SizeSplitRoute over two real memcached servers.

What each level holds is read from the servers directly: a sentinel is an empty item on
l1 whose flags carry 0x20.
"""

from __future__ import annotations

import re

from harness import Server, eventually
from lease_server import LeaseServer
from mcrouter_harness import McRouter, ask, fetch, pools, servers, store

__all__ = ["servers"]

THRESHOLD = 100
# Every byte value, the value's length well over the threshold.
LARGE = bytes(range(256)) * 8


def size_split(l1: Server, l2: Server, **extra: object) -> dict:
    return {
        "pools": pools(L1=[l1], L2=[l2]),
        "route": {
            "type": "L1L2SizeSplitRoute",
            "l1": "PoolRoute|L1",
            "l2": "PoolRoute|L2",
            "threshold": THRESHOLD,
            **extra,
        },
    }


def set_large(port: int, key: str, flags: int = 7) -> bytes:
    head = f"set {key} {flags} 0 {len(LARGE)}\r\n".encode()
    return ask(port, head + LARGE + b"\r\n")


def large_item(key: str, flags: int = 7) -> bytes:
    return f"VALUE {key} {flags} {len(LARGE)}\r\n".encode() + LARGE + b"\r\nEND\r\n"


def test_a_small_value_lands_on_l1_only(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2)).start() as r:
        assert store(r.port, "s", "x" * (THRESHOLD - 1)) == b"STORED\r\n"
        small = f"VALUE s 0 {THRESHOLD - 1}\r\n{'x' * (THRESHOLD - 1)}\r\nEND\r\n".encode()
        assert fetch(l1.port, "s") == small
        assert fetch(l2.port, "s") == b"END\r\n"
        assert fetch(r.port, "s") == small


def test_a_large_value_lands_on_l2_with_a_sentinel_on_l1(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2)).start() as r:
        assert set_large(r.port, "big") == b"STORED\r\n"
        assert fetch(l1.port, "big") == b"VALUE big 39 0\r\n\r\nEND\r\n"
        assert fetch(l2.port, "big") == large_item("big")
        assert fetch(r.port, "big") == large_item("big")


def test_a_lost_l2_value_reads_as_a_miss_never_the_sentinel(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2)).start() as r:
        assert set_large(r.port, "big") == b"STORED\r\n"
        assert ask(l2.port, b"delete big\r\n") == b"DELETED\r\n"
        assert fetch(r.port, "big") == b"END\r\n"


def test_delete_removes_the_sentinel_so_the_value_is_gone(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2)).start() as r:
        assert set_large(r.port, "big") == b"STORED\r\n"
        assert ask(r.port, b"delete big\r\n") == b"DELETED\r\n"
        assert fetch(l1.port, "big") == b"END\r\n"
        assert fetch(r.port, "big") == b"END\r\n"
        # As in mcrouter, deletes reach l1 only: l2's copy stays until it expires.
        assert fetch(l2.port, "big") == large_item("big")


def test_both_full_set_writes_the_whole_value_to_both(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2, both_full_set=True)).start() as r:
        assert set_large(r.port, "big") == b"STORED\r\n"
        assert fetch(l1.port, "big") == large_item("big")
        eventually(lambda: fetch(l2.port, "big") == large_item("big"), "l2 copy")
        assert fetch(r.port, "big") == large_item("big")


def test_gets_of_a_split_value_carries_l1s_cas_which_a_cas_can_spend(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2)).start() as r:
        assert set_large(r.port, "big") == b"STORED\r\n"
        l1_cas = ask(l1.port, b"gets big\r\n", b"END\r\n").split(b"\r\n")[0].split()[4]
        got = ask(r.port, b"gets big\r\n", b"END\r\n")
        head, _, rest = got.partition(b"\r\n")
        assert head == f"VALUE big 7 {len(LARGE)} ".encode() + l1_cas
        assert rest == LARGE + b"\r\nEND\r\n"
        # The token is l1's, where `cas` goes: it stores there.
        assert ask(r.port, b"cas big 0 0 1 " + l1_cas + b"\r\nx\r\n") == b"STORED\r\n"
        assert fetch(r.port, "big") == b"VALUE big 0 1\r\nx\r\nEND\r\n"


def lease_split(l1: LeaseServer, l2: Server) -> dict:
    config = size_split(l2, l2)
    config["pools"]["L1"] = {"servers": [l1.address]}
    return config


def lease_fill(port: int, key: str) -> bytes:
    """lease-get `key` (a miss), then lease-set LARGE with the token handed out."""
    miss = ask(port, f"lease-get {key}\r\n".encode(), b"END\r\n")
    found = re.fullmatch(rb"LVALUE (\S+) (\d+) 0 0\r\n\r\nEND\r\n", miss)
    assert found, miss
    token = int(found.group(2))
    head = f"lease-set {key} {token} 7 0 {len(LARGE)}\r\n".encode()
    return ask(port, head + LARGE + b"\r\n")


def sentinel_suffix(l1: LeaseServer, key: str) -> bytes:
    """The l2 key suffix a lease-set's sentinel on l1 holds (flags 7 plus 0x20)."""
    item = l1.store.items[key.encode()]
    assert item.flags == 39, item
    assert item.value.isdigit(), item
    return item.value


def test_lease_set_of_a_large_value_leaves_a_sentinel_naming_its_l2_key(servers) -> None:
    (l2,) = servers(1)
    with LeaseServer() as l1, McRouter(lease_split(l1, l2)).start() as r:
        assert lease_fill(r.port, "big") == b"STORED\r\n"
        l2_key = f"big|==|{sentinel_suffix(l1, 'big').decode()}"
        assert fetch(l2.port, l2_key) == large_item(l2_key)
        assert fetch(l2.port, "big") == b"END\r\n"
        # lease-get and get both follow the sentinel.
        assert ask(r.port, b"lease-get big\r\n", b"END\r\n") == large_item("big")
        assert fetch(r.port, "big") == large_item("big")


def test_a_lease_sentinel_whose_l2_value_is_gone_reads_as_a_miss_and_is_removed(
    servers,
) -> None:
    (l2,) = servers(1)
    with LeaseServer() as l1, McRouter(lease_split(l1, l2)).start() as r:
        assert lease_fill(r.port, "big") == b"STORED\r\n"
        suffix = sentinel_suffix(l1, "big").decode()
        assert ask(l2.port, f"delete big|==|{suffix}\r\n".encode()) == b"DELETED\r\n"
        # Asked again after the clean-up, l1 hands out a lease for the refill.
        miss = ask(r.port, b"lease-get big\r\n", b"END\r\n")
        assert re.fullmatch(rb"LVALUE big \d+ 0 0\r\n\r\nEND\r\n", miss), miss
        assert b"big" not in l1.store.items
        assert lease_fill(r.port, "big") == b"STORED\r\n"
        assert fetch(r.port, "big") == large_item("big")


def test_a_set_sentinel_whose_l2_value_is_gone_is_removed_by_gets(servers) -> None:
    l1, l2 = servers(2)
    with McRouter(size_split(l1, l2)).start() as r:
        assert set_large(r.port, "big") == b"STORED\r\n"
        assert ask(l2.port, b"delete big\r\n") == b"DELETED\r\n"
        assert ask(r.port, b"gets big\r\n", b"END\r\n") == b"END\r\n"
        assert fetch(l1.port, "big") == b"END\r\n"
