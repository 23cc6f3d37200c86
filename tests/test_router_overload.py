"""`memfleet route` under overload: a server that stops answering (SIGSTOP) while clients keep
sending, with a per-connection limit on outstanding requests (nutcracker YAML
`server_max_inflight`, mcrouter's `--target-max-inflight-requests` plus
`--target-max-pending-requests`); and mcrouter's RateLimitRoute.

Four real servers (two `memfleet serve`, two Debian memcached). Once the stopped server's
connection holds the limit, further requests to it are answered at once with mcrouter's
`SERVER_ERROR Max pending requests (N) reached for destination "HOST:PORT".`; the other three
keep answering, the router's memory stays put however much is sent at the stopped server, and
after SIGCONT everything works again."""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
from harness import Conn, Server, eventually, free_port, keys_held, memcached, memfleet
from mcrouter_harness import McRouter
from proxy_harness import Proxy, pool_yaml, stats_json

LIMIT = 8
# The varying part first: fnv1a_64 (as nutcracker's) moves a key's hash only a little for a
# different last byte, so `ov:0` ... `ov:9` share an arc of the ring and whole decades of
# keys land on one server; some placements then left a server with none.
KEYS = [f"{i}:ov" for i in range(400)]
VALUE = b"x" * 100_000
LOAD_CLIENTS = 100
SETS_PER_CLIENT = 16


class Router:
    """The router under test: its port, stats and memory."""

    def __init__(self, server: Server, stats_port: int) -> None:
        self.server = server
        self.stats_port = stats_port

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    def stats(self) -> dict:
        return stats_json(self.stats_port)

    def server_stat(self, address: str, field: str) -> int:
        for pool in self.stats().values():
            if isinstance(pool, dict) and address in pool:
                return int(pool[address][field])
        raise KeyError(address)


@contextmanager
def nutcracker_router(backends: list[Server], limit: int) -> Iterator[Router]:
    """A nutcracker pool without `timeout` (requests may wait forever) and with
    `server_max_inflight` (0: the key is left out)."""
    port = free_port()
    opts: dict[str, object] = {"hash": "fnv1a_64", "distribution": "ketama"}
    if limit:
        opts["server_max_inflight"] = limit
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", [f"{b.address}:1" for b in backends], **opts)
    with Proxy(conf, port, threads=1) as p:
        yield Router(p, p.stats_port)


@contextmanager
def mcrouter_router(backends: list[Server], limit: int) -> Iterator[Router]:
    """PoolRoute over the four, a timeout far beyond the test, and the limit split between
    mcrouter's in-flight and pending allowances (0: neither flag given)."""
    stats_port = free_port()
    flags = ["--num-proxies", "1", "--server-timeout", "600000", "-s", str(stats_port)]
    if limit:
        flags += ["--target-max-inflight-requests", str(limit // 2)]
        flags += ["--target-max-pending-requests", str(limit - limit // 2)]
    config = {"pools": {"A": {"servers": [b.address for b in backends]}}, "route": "PoolRoute|A"}
    with McRouter(config, *flags) as r:
        yield Router(r, stats_port)


ROUTERS: dict[str, Callable[[list[Server], int], AbstractContextManager[Router]]] = {
    "nutcracker": nutcracker_router,
    "mcrouter": mcrouter_router,
}


@pytest.fixture
def backends() -> Iterator[list[Server]]:
    started = [memfleet().start(), memcached().start(), memfleet().start(), memcached().start()]
    yield started
    for s in started:
        assert s.proc is not None
        os.kill(s.proc.pid, signal.SIGCONT)
        s.stop()


def stop(server: Server) -> None:
    """SIGSTOP, and wait until the kernel shows the process stopped (it may still be
    answering for a moment after kill() returns)."""
    assert server.proc is not None
    pid = server.proc.pid
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    eventually(stopped, "the server is stopped")


def overload_error(limit: int, address: str) -> bytes:
    return b'SERVER_ERROR Max pending requests (%d) reached for destination "%s".\r\n' % (
        limit,
        address.encode(),
    )


def placed(router: Router, backends: list[Server]) -> dict[str, list[str]]:
    """Stores every key through the router; which keys each server got."""
    with Conn(router.port) as c:
        for k in KEYS:
            assert c.request(f"set {k} 0 0 2\r\nv0\r\n".encode()) == b"STORED\r\n"
    return {b.address: keys_held(b.port or 0, KEYS) for b in backends}


def set_request(key: str) -> bytes:
    return b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(VALUE), VALUE)


def stop_with_waiters(
    router: Router, backends: list[Server], n: int, what: str
) -> tuple[Server, list[str], list[str], list[Conn]]:
    """Places the keys, stops `backends[1]` (the victim) and has `n` clients each wait for a
    get of one of its keys, until the router shows them sent (`what` names that state).
    Returns the victim, its keys, the other servers' keys and the waiting clients."""
    where = placed(router, backends)
    victim = backends[1]
    stuck = where[victim.address]
    live = [k for b in backends if b is not victim for k in where[b.address]]
    assert len(stuck) > n + 2 and live
    requests_before = router.server_stat(victim.address, "requests")
    assert victim.proc is not None
    stop(victim)
    waiting = [Conn(router.port, timeout=30) for _ in range(n)]
    for c, k in zip(waiting, stuck):
        c.send(f"get {k}\r\n".encode())
    eventually(lambda: router.server_stat(victim.address, "requests") - requests_before == n, what)
    return victim, stuck, live, waiting


def flood(router: Router, keys_for: Callable[[int], list[str]], refusal: bytes) -> float:
    """LOAD_CLIENTS clients at once, client i sending large sets of `keys_for(i)`, each of
    which must be refused with `refusal`. Returns how many MB the router grew meanwhile."""
    before = router.server.rss_mb()
    load = [Conn(router.port, timeout=30) for _ in range(LOAD_CLIENTS)]
    for i, c in enumerate(load):
        c.send(b"".join(set_request(k) for k in keys_for(i)))
    for c in load:
        for _ in range(SETS_PER_CLIENT):
            assert c.read_line() == refusal
        c.close()
    return router.server.rss_mb() - before


def resume(victim: Server, waiting: list[Conn], keys: list[str]) -> None:
    """SIGCONT to `victim`: each waiting client gets the value `v0` of its key."""
    assert victim.proc is not None
    os.kill(victim.proc.pid, signal.SIGCONT)
    for c, k in zip(waiting, keys):
        assert c.read_until(b"END\r\n") == b"VALUE %s 0 2\r\nv0\r\nEND\r\n" % k.encode()
        c.close()


@pytest.mark.parametrize("dialect", ROUTERS)
def test_a_stopped_server_fails_fast_past_the_limit_and_memory_stays_bounded(
    backends: list[Server], dialect: str
) -> None:
    with ROUTERS[dialect](backends, LIMIT) as router:
        # LIMIT clients each wait for a key of the stopped server: its connection is full.
        victim, stuck, live, hogs = stop_with_waiters(
            router, backends, LIMIT, "the stopped server's connection holds the limit"
        )

        # Past it, a request to the stopped server is answered at once...
        error = overload_error(LIMIT, victim.address)
        with Conn(router.port, timeout=30) as c:
            assert c.request(f"get {stuck[LIMIT]}\r\n".encode()) == error
            assert c.request(set_request(stuck[LIMIT + 1])) == error
            # ...and the other three servers answer as ever.
            for k in live[:50]:
                assert c.request(f"get {k}\r\n".encode(), b"END\r\n") == (
                    b"VALUE %s 0 2\r\nv0\r\nEND\r\n" % k.encode()
                )
            assert c.request(b"set %s 0 0 2\r\nv1\r\n" % live[0].encode()) == b"STORED\r\n"

        # Clients keep sending large values at the stopped server: each is refused, none
        # is held, so the router does not grow with what they send (100 MB here).
        grown = flood(
            router, lambda i: [stuck[(i + j) % len(stuck)] for j in range(SETS_PER_CLIENT)], error
        )
        assert grown < 40, f"router grew by {grown:.0f} MB while the server was stopped"

        # Back: the waiting clients get their values, and everything works again.
        resume(victim, hogs, stuck)
        with Conn(router.port, timeout=30) as c:
            k = stuck[LIMIT]
            assert c.request(b"set %s 0 0 2\r\nv2\r\n" % k.encode()) == b"STORED\r\n"
            assert c.request(f"get {k}\r\n".encode(), b"END\r\n") == (
                b"VALUE %s 0 2\r\nv2\r\nEND\r\n" % k.encode()
            )
            for k in stuck[: 3 * LIMIT]:
                assert c.request(f"get {k}\r\n".encode(), b"END\r\n").startswith(b"VALUE ")


def test_failover_route_fails_over_when_a_server_is_at_its_limit(
    backends: list[Server],
) -> None:
    """A FailoverRoute takes the limit's `local_error` as an error of that server and asks
    the next child."""
    main, gutter = backends[:3], backends[3]
    stats_port = free_port()
    config = {
        "pools": {
            "main": {"servers": [b.address for b in main]},
            "gutter": {"servers": [gutter.address]},
        },
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|main", "PoolRoute|gutter"]},
    }
    flags = ["--num-proxies", "1", "--server-timeout", "600000", "-s", str(stats_port)]
    flags += ["--target-max-inflight-requests", "2", "--target-max-pending-requests", "2"]
    with McRouter(config, *flags) as r:
        router = Router(r, stats_port)
        where = placed(router, main)
        victim = main[0]
        stuck = where[victim.address]
        requests_before = router.server_stat(victim.address, "requests")
        assert victim.proc is not None
        stop(victim)
        hogs = [Conn(router.port, timeout=30) for _ in range(4)]
        for c, k in zip(hogs, stuck):
            c.send(f"get {k}\r\n".encode())
        eventually(
            lambda: router.server_stat(victim.address, "requests") - requests_before == 4,
            "the stopped server's connection holds the limit",
        )
        with Conn(router.port, timeout=30) as c:
            k = stuck[5]
            # The gutter answers: the key is not there, then it is.
            assert c.request(f"get {k}\r\n".encode(), b"END\r\n", b"\r\n") == b"END\r\n"
            assert c.request(b"set %s 0 0 1\r\ng\r\n" % k.encode()) == b"STORED\r\n"
        assert keys_held(gutter.port or 0, [k]) == [k]
        os.kill(victim.proc.pid, signal.SIGCONT)
        for c in hogs:
            assert c.read_until(b"END\r\n").startswith(b"VALUE ")
            c.close()


def test_rate_limit_route_refuses_a_burst_beyond_its_bucket(backends: list[Server]) -> None:
    """mcrouter's RateLimitRoute: sets past the bucket (burst 5, a rate too slow to refill
    during the test) get the default reply, NOT_STORED, and are not stored; gets within
    their rate all pass."""
    config = {
        "pools": {"A": {"servers": [b.address for b in backends]}},
        "route": {
            "type": "RateLimitRoute",
            "target": "PoolRoute|A",
            "rates": {"sets_rate": 0.0001, "sets_burst": 5, "gets_rate": 100000},
        },
    }
    with McRouter(config, "--num-proxies", "1") as r:
        assert r.port is not None
        with Conn(r.port) as c:
            c.send(b"".join(b"set rl:%d 0 0 1\r\nv\r\n" % i for i in range(20)))
            replies = [c.read_line() for _ in range(20)]
            assert replies == [b"STORED\r\n"] * 5 + [b"NOT_STORED\r\n"] * 15
            for i in range(20):
                reply = c.request(b"get rl:%d\r\n" % i, b"END\r\n")
                assert reply == (b"VALUE rl:%d 0 1\r\nv\r\nEND\r\n" % i if i < 5 else b"END\r\n")


def test_yaml_pool_rates_refuse_past_the_bucket(backends: list[Server]) -> None:
    """A nutcracker pool's `sets_rate`/`sets_burst` and `deletes_*` (RateLimitRoute's
    `rates`): requests past the bucket get the reply a request to nowhere gets (NOT_STORED,
    NOT_FOUND) and never reach a server; gets, without a rate, all pass."""
    port = free_port()
    opts: dict[str, object] = {"sets_rate": 0, "sets_burst": 5, "deletes_rate": 0}
    opts["deletes_burst"] = 2
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", [f"{b.address}:1" for b in backends], **opts)
    mport = free_port()
    with Proxy(conf, port, threads=1, extra=["--metrics", f"127.0.0.1:{mport}"]), Conn(port) as c:
        c.send(b"".join(b"set rl:%d 0 0 1\r\nv\r\n" % i for i in range(20)))
        replies = [c.read_line() for _ in range(20)]
        assert replies == [b"STORED\r\n"] * 5 + [b"NOT_STORED\r\n"] * 15
        assert c.request(b"set rl:x 0 0 1 noreply\r\nv\r\nget rl:x\r\n", b"END\r\n") == (
            b"END\r\n"
        ), "a noreply set past the rate is dropped silently"
        for i in range(20):
            reply = c.request(b"get rl:%d\r\n" % i, b"END\r\n")
            assert reply == (b"VALUE rl:%d 0 1\r\nv\r\nEND\r\n" % i if i < 5 else b"END\r\n")
        deletes = [c.request(b"delete rl:%d\r\n" % i) for i in range(4)]
        assert deletes == [b"DELETED\r\n"] * 2 + [b"NOT_FOUND\r\n"] * 2
        assert c.request(b"get rl:3\r\n", b"END\r\n").startswith(b"VALUE rl:3 ")
        url = f"http://127.0.0.1:{mport}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        assert 'memfleet_router_pool_rate_limited_total{pool="alpha"} 18\n' in text, text


ACTIVE_LIMIT = 8
ACTIVE_ERROR = b"SERVER_ERROR active request limit reached\r\n"


def test_active_req_limit_answers_past_it_at_once_and_bounds_memory(
    backends: list[Server],
) -> None:
    """`--active-req-limit` (memcached proxy's `active_req_limit`): once the router holds
    that many requests in flight, to any server, further ones are answered at once with
    `SERVER_ERROR active request limit reached`, however many clients send; nothing is held
    for them, and after SIGCONT the waiting requests are answered and the limit frees."""
    port = free_port()
    opts: dict[str, object] = {"hash": "fnv1a_64", "distribution": "ketama"}
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", [f"{b.address}:1" for b in backends], **opts)
    extra = ["--active-req-limit", str(ACTIVE_LIMIT)]
    with Proxy(conf, port, threads=1, extra=extra) as p:
        router = Router(p, p.stats_port)
        victim, stuck, live, hogs = stop_with_waiters(
            router, backends, ACTIVE_LIMIT, "the router holds its limit of requests in flight"
        )

        # The limit is the router's, not the server's: a healthy server's key is refused too.
        with Conn(router.port, timeout=30) as c:
            assert c.request(f"get {live[0]}\r\n".encode()) == ACTIVE_ERROR
            assert c.request(set_request(stuck[ACTIVE_LIMIT])) == ACTIVE_ERROR

        grown = flood(
            router,
            lambda i: [(stuck + live)[(i + j) % len(KEYS)] for j in range(SETS_PER_CLIENT)],
            ACTIVE_ERROR,
        )
        assert grown < 40, f"router grew by {grown:.0f} MB while at its limit"

        resume(victim, hogs, stuck)
        # Answered requests leave the count: a full window of requests goes through again.
        with Conn(router.port, timeout=30) as c:
            for k in (stuck + live)[: 4 * ACTIVE_LIMIT]:
                assert c.request(f"get {k}\r\n".encode(), b"END\r\n").startswith(b"VALUE ")
            assert c.request(b"set %s 0 0 2\r\nv3\r\n" % live[0].encode()) == b"STORED\r\n"


def test_pool_active_req_limit_bounds_its_pool_only(backends: list[Server]) -> None:
    """A nutcracker pool's `active_req_limit`: once that pool's clients have that many
    requests in flight, its further requests, to any server, are answered at once with
    `SERVER_ERROR active request limit reached`; a second pool over the same servers, without
    the key, is not held back; after SIGCONT the limit frees."""
    port, other = free_port(), free_port()
    servers = [f"{b.address}:1" for b in backends]
    opts: dict[str, object] = {"hash": "fnv1a_64", "distribution": "ketama"}
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", servers, active_req_limit=ACTIVE_LIMIT, **opts)
    conf += pool_yaml("beta", f"127.0.0.1:{other}", servers, **opts)
    with Proxy(conf, port, threads=1) as p:
        router = Router(p, p.stats_port)
        victim, stuck, live, hogs = stop_with_waiters(
            router, backends, ACTIVE_LIMIT, "the pool holds its limit of requests in flight"
        )
        with Conn(router.port, timeout=30) as c:
            assert c.request(f"get {live[0]}\r\n".encode()) == ACTIVE_ERROR
        with Conn(other, timeout=30) as c:
            got = c.request(f"get {live[0]}\r\n".encode(), b"END\r\n")
            assert got.startswith(b"VALUE "), "the other pool is not held back"
        resume(victim, hogs, stuck)
        with Conn(router.port, timeout=30) as c:
            for k in (stuck + live)[: 4 * ACTIVE_LIMIT]:
                assert c.request(f"get {k}\r\n".encode(), b"END\r\n").startswith(b"VALUE ")


def test_max_client_outstanding_reqs_stops_reading_the_client(backends: list[Server]) -> None:
    """mcrouter's `--max-client-outstanding-reqs`: a client with that many requests
    unanswered is not read further (back-pressure, no error); its pipelined requests go out
    as replies come back, so after SIGCONT every one of them is answered in order."""
    limit = 4
    stats_port = free_port()
    flags = ["--num-proxies", "1", "--server-timeout", "600000", "-s", str(stats_port)]
    flags += ["--max-client-outstanding-reqs", str(limit)]
    config = {"pools": {"A": {"servers": [b.address for b in backends]}}, "route": "PoolRoute|A"}
    with McRouter(config, *flags) as r:
        router = Router(r, stats_port)
        where = placed(router, backends)
        victim = backends[1]
        stuck = where[victim.address][:20]
        live = [k for b in backends if b is not victim for k in where[b.address]]
        requests_before = router.server_stat(victim.address, "requests")
        assert victim.proc is not None
        stop(victim)

        piped = Conn(router.port, timeout=30)
        piped.send(b"".join(f"get {k}\r\n".encode() for k in stuck))
        eventually(
            lambda: router.server_stat(victim.address, "requests") - requests_before == limit,
            "the client's first requests are in flight",
        )
        # Another client is served meanwhile (and its round trip is a turn of the router's
        # loop, in which the paused client is not read).
        with Conn(router.port, timeout=30) as c:
            assert c.request(f"get {live[0]}\r\n".encode(), b"END\r\n").startswith(b"VALUE ")
        assert router.server_stat(victim.address, "requests") - requests_before == limit

        os.kill(victim.proc.pid, signal.SIGCONT)
        for k in stuck:
            assert piped.read_until(b"END\r\n") == b"VALUE %s 0 2\r\nv0\r\nEND\r\n" % k.encode()
        piped.close()
