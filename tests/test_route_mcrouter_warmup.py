"""WarmUpRoute's gets, gat and gats through `memfleet route` against real memcached: a cold
miss that warm can fill is added to cold first, so the client gets cold's CAS token and
cold's item carries the TTL the request asked for. Its lease-get: cold is the lease-speaking
test server (memcached has no lease-get), warm a real memcached."""

from __future__ import annotations

from harness import Conn, eventually
from lease_server import LeaseServer
from mcrouter_harness import McRouter, ask, fetch, pools, servers

__all__ = ["servers"]

CONFIG_ROUTE = {"type": "WarmUpRoute", "cold": "PoolRoute|C", "warm": "PoolRoute|W"}


def ttl_of(port: int, key: str) -> int | None:
    """The remaining TTL (-1: none) of `key` on the server itself; None on a miss."""
    line = ask(port, f"mg {key} t\r\n".encode())
    if not line.startswith(b"HD"):
        return None
    return int(line.split(b" t")[1].split()[0])


def cas_of(reply: bytes) -> int:
    """The CAS token of a one-item `gets`/`gats` reply."""
    return int(reply.split(b"\r\n")[0].split()[4])


def test_gets_on_a_cold_miss_answers_with_colds_cas_token(servers) -> None:
    cold, warm = servers(2)
    config = {"pools": pools(C=[cold], W=[warm]), "route": CONFIG_ROUTE}
    with McRouter(config).start() as r:
        assert ask(warm.port, b"set k 7 500 2\r\nhi\r\n") == b"STORED\r\n"
        got = ask(r.port, b"gets k\r\n", b"END\r\n")
        assert got.startswith(b"VALUE k 7 2 ") and got.endswith(b"\r\nhi\r\nEND\r\n"), got
        on_cold = ask(cold.port, b"gets k\r\n", b"END\r\n")
        assert on_cold.startswith(b"VALUE k 7 2 "), "cold was filled before the reply"
        assert cas_of(got) == cas_of(on_cold)
        assert 490 < (ttl_of(cold.port, "k") or 0) <= 500, "the warm item's remaining TTL"
        # The token works for a cas through the router, which writes cold.
        with Conn(r.port) as c:
            c.send(f"cas k 0 0 3 {cas_of(got)}\r\nnew\r\n".encode())
            assert c.read_line() == b"STORED\r\n"
        assert fetch(cold.port, "k") == b"VALUE k 0 3\r\nnew\r\nEND\r\n"
        # A warm miss is cold's miss, and adds nothing.
        assert ask(r.port, b"gets none\r\n", b"END\r\n") == b"END\r\n"
        assert fetch(cold.port, "none") == b"END\r\n"


def test_gat_and_gats_fill_cold_with_the_requested_ttl(servers) -> None:
    cold, warm = servers(2)
    route = {**CONFIG_ROUTE, "exptime": 50}
    config = {"pools": pools(C=[cold], W=[warm]), "route": route}
    with McRouter(config).start() as r:
        for key in ("a", "b"):
            assert ask(warm.port, f"set {key} 3 0 1\r\nx\r\n".encode()) == b"STORED\r\n"
        got = ask(r.port, b"gat 900 a\r\n", b"END\r\n")
        assert got == b"VALUE a 3 1\r\nx\r\nEND\r\n"
        assert 890 < (ttl_of(cold.port, "a") or 0) <= 900, "the gat's exptime, not the route's"
        got = ask(r.port, b"gats 800 b\r\n", b"END\r\n")
        on_cold = ask(cold.port, b"gets b\r\n", b"END\r\n")
        assert cas_of(got) == cas_of(on_cold)
        assert 790 < (ttl_of(cold.port, "b") or 0) <= 800
        assert ttl_of(warm.port, "b") == -1, "warm gets a plain read: its TTL is untouched"


def test_lease_get_cold_miss_is_filled_from_warm_with_colds_token(servers) -> None:
    (warm,) = servers(1)
    with LeaseServer() as cold:
        config = {
            "pools": {"C": {"servers": [cold.address]}, "W": {"servers": [warm.address]}},
            "route": CONFIG_ROUTE,
        }
        with McRouter(config).start() as r:
            assert ask(warm.port, b"set k 7 500 2\r\nhi\r\n") == b"STORED\r\n"
            # Warm's value answers as a lease-get hit...
            assert ask(r.port, b"lease-get k\r\n", b"END\r\n") == b"VALUE k 7 2\r\nhi\r\nEND\r\n"
            # ...and cold is filled by a lease-set that spent the token cold handed out.
            eventually(
                lambda: fetch(cold.port, "k") == b"VALUE k 7 2\r\nhi\r\nEND\r\n",
                "cold filled by lease-set",
            )
            assert b"k" not in cold.store.tokens, "the lease was spent"
            # Cold answers now: a hit, warm not asked.
            assert ask(warm.port, b"delete k\r\n") == b"DELETED\r\n"
            assert ask(r.port, b"lease-get k\r\n", b"END\r\n") == b"VALUE k 7 2\r\nhi\r\nEND\r\n"
            # Warm misses too: cold's lease for the client to fill.
            got = ask(r.port, b"lease-get none\r\n", b"END\r\n")
            assert got.startswith(b"LVALUE none "), got
            assert int(got.split()[2]) == cold.store.tokens[b"none"]
            assert fetch(cold.port, "none") == b"END\r\n"
