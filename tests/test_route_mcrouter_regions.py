"""Two regions through `memfleet route` with an mcrouter config: each region's router
(`--route-prefix /<region>/c/`) reads, writes and deletes in its own region's pool, reads
fail over to the other region only while the local pool errs, a `/<other>/c/` key goes to
the other region, and each pool's server timeout is chosen by its `region`/`cluster`
against the router's prefix (`--within-cluster-timeout-ms`, `--cross-region-timeout-ms`).
Real memcached servers; the silent servers are listening sockets that never answer."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from harness import Conn, free_port, listening_socket
from mcrouter_harness import McRouter, fetch, servers, store

__all__ = ["servers"]

# Far above how long a test waits for any reply: a request that got this timeout rather
# than its region's would leave the client without a reply, and the test fails.
SERVER_TIMEOUT = "60000"


def region_config(local: str, remote: str, addrs: dict[str, list[str]]) -> dict:
    """The config of `local`'s router: pools tagged with their region, the local route
    reading (then failing over to `remote` on errors) and writing locally, and an
    explicit `/<remote>/c/` prefix going to `remote`."""
    return {
        "pools": {name: {"servers": addrs[name], "region": name, "cluster": "c"} for name in addrs},
        "routes": [
            {
                "aliases": [f"/{local}/c/"],
                "route": {
                    "type": "OperationSelectorRoute",
                    "default_policy": f"PoolRoute|{local}",
                    "operation_policies": {
                        op: {
                            "type": "FailoverRoute",
                            "children": [f"PoolRoute|{local}", f"PoolRoute|{remote}"],
                        }
                        for op in ("get", "gets", "lease-get")
                    },
                },
            },
            {"aliases": [f"/{remote}/c/"], "route": f"PoolRoute|{remote}"},
        ],
    }


def router(local: str, remote: str, addrs: dict[str, list[str]], *extra: str) -> McRouter:
    return McRouter(
        region_config(local, remote, addrs),
        "--server-timeout",
        SERVER_TIMEOUT,
        *extra,
        prefix=f"/{local}/c/",
    )


def admin(port: int, command: str) -> str:
    key = f"__mcrouter__.{command}"
    reply = fetch(port, key)
    head, _, rest = reply.partition(b"\r\n")
    assert head.startswith(f"VALUE {key} 0 ".encode()), reply
    return rest[: int(head.split()[3])].decode()


def value(port: int, key: str) -> str | None:
    reply = fetch(port, key)
    if reply == b"END\r\n":
        return None
    assert reply.startswith(b"VALUE "), reply
    return reply.split(b"\r\n")[1].decode()


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    """A server that takes connections (the kernel completes them) and never answers."""
    sock = listening_socket()
    yield sock
    sock.close()


def test_each_region_reads_writes_and_deletes_locally(servers) -> None:
    a, b = servers(2)
    addrs = {"A": [a.address], "B": [b.address]}
    with router("A", "B", addrs).start() as ra, router("B", "A", addrs).start() as rb:
        for key in ("user:1", "rm:user:1"):
            assert store(a.port, key, "in-a") == b"STORED\r\n"
            assert store(b.port, key, "in-b") == b"STORED\r\n"
        # Reads are local in each region.
        assert value(ra.port, "user:1") == "in-a"
        assert value(rb.port, "user:1") == "in-b"
        with Conn(ra.port) as c:
            assert c.request(b"mg user:1 v\r\n") == b"VA 4\r\n"
            assert c.read_line() == b"in-a\r\n"
        # A delete (and a marker's delete) reaches the local pool only.
        with Conn(ra.port) as c:
            assert c.request(b"delete user:1\r\n") == b"DELETED\r\n"
            assert c.request(b"md rm:user:1\r\n") == b"HD\r\n"
        assert value(a.port, "user:1") is None
        assert value(a.port, "rm:user:1") is None
        assert value(b.port, "user:1") == "in-b"
        assert value(b.port, "rm:user:1") == "in-b"
        # Writes, markers included, are local.
        assert store(ra.port, "rm:user:2", "1") == b"STORED\r\n"
        with Conn(ra.port) as c:
            assert c.request(b"ms user:2 2\r\nv2\r\n") == b"HD\r\n"
        assert (value(a.port, "rm:user:2"), value(b.port, "rm:user:2")) == ("1", None)
        assert (value(a.port, "user:2"), value(b.port, "user:2")) == ("v2", None)
        # A key with the other region's prefix goes there (prefix stripped), reads and
        # writes alike; the local pool never sees it.
        assert value(ra.port, "/B/c/user:1") == "in-b"
        assert store(ra.port, "/B/c/user:3", "from-a") == b"STORED\r\n"
        assert (value(a.port, "user:3"), value(b.port, "user:3")) == (None, "from-a")
        assert admin(ra.port, "route(get,user:1)") == a.address
        assert admin(ra.port, "route(delete,user:1)") == a.address
        assert admin(ra.port, "route(get,/B/c/user:1)") == b.address
        assert admin(rb.port, "route(delete,user:1)") == b.address


def test_reads_fail_over_to_the_other_region_only_while_the_local_pool_errs(servers) -> None:
    (b,) = servers(1)
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: connections are refused
    addrs = {"A": [dead], "B": [b.address]}
    assert store(b.port, "user:1", "in-b") == b"STORED\r\n"
    with router("A", "B", addrs).start() as ra:
        # The local pool is down: reads are served by region B...
        assert value(ra.port, "user:1") == "in-b"
        assert value(ra.port, "user:9") is None
        # ...but nothing is written or deleted there.
        with Conn(ra.port) as c:
            assert c.request(b"set user:1 0 0 3\r\nnew\r\n").startswith(b"SERVER_ERROR")
            assert c.request(b"delete user:1\r\n").startswith(b"SERVER_ERROR")
            assert c.request(b"set rm:user:1 0 0 1\r\n1\r\n").startswith(b"SERVER_ERROR")
        assert value(b.port, "user:1") == "in-b"
        assert value(b.port, "rm:user:1") is None


def test_pool_timeouts_follow_region_and_cluster(servers, silent) -> None:
    (a,) = servers(1)
    quiet = f"127.0.0.1:{silent.getsockname()[1]}"
    addrs = {"A": [a.address], "B": [quiet]}
    extra = ("--cross-region-timeout-ms", "400", "--within-cluster-timeout-ms", "250")
    with router("A", "B", addrs, *extra).start() as ra:
        assert admin(ra.port, "options(cross_region_timeout_ms)") == "400"
        assert admin(ra.port, "options(cross_cluster_timeout_ms)") == "0"
        assert admin(ra.port, "options(within_cluster_timeout_ms)") == "250"
        assert admin(ra.port, "options(server_timeout_ms)") == SERVER_TIMEOUT
        pools = admin(ra.port, "pools")
        assert f"ap={a.address}:ascii:plain:notcompressed|timeout=250ms" in pools, pools
        assert f"ap={quiet}:ascii:plain:notcompressed|timeout=400ms" in pools, pools
        # Region B's server never answers: the cross-region timeout fails the request,
        # long before --server-timeout would.
        with Conn(ra.port, timeout=20) as c:
            assert c.request(b"get /B/c/user:1\r\n") == b"SERVER_ERROR timeout\r\n"
            assert c.request(b"get user:1\r\n") == b"END\r\n"
        with Conn(ra.port) as c:
            stats = c.request(b"stats servers\r\n", b"END\r\n").decode()
        assert f"STAT {quiet}:ascii:plain:notcompressed-400 " in stats, stats
        assert f"STAT {a.address}:ascii:plain:notcompressed-250 " in stats, stats
    # Seen from region B the same pools swap: B is within the cluster, A across regions.
    with router("B", "A", addrs, *extra).start() as rb:
        pools = admin(rb.port, "pools")
        assert f"ap={a.address}:ascii:plain:notcompressed|timeout=400ms" in pools, pools
        assert f"ap={quiet}:ascii:plain:notcompressed|timeout=250ms" in pools, pools
        with Conn(rb.port, timeout=20) as c:
            # The local silent server times out, then the read fails over to region A.
            assert store(a.port, "user:1", "in-a") == b"STORED\r\n"
            assert (
                c.request(b"get user:1\r\n", b"END\r\n") == b"VALUE user:1 0 4\r\nin-a\r\nEND\r\n"
            )
            assert c.request(b"set user:1 0 0 1\r\nx\r\n") == b"SERVER_ERROR timeout\r\n"
