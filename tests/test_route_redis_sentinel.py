"""`memfleet route` with a Sentinel pool (`redis_sentinel: <master name>`): the pool's one
server is the primary three real Sentinels name (tests/redis_cluster.py: SentinelSet). The
mixed workload through the router, Sentinel's failover under load, and the start-up errors.
The workload also runs straight against the Sentinels' primary with redis-py's Sentinel client
and PHP's RedisSentinel, to prove it apart from the router. Run with -s to see the failover
figures."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import proxy_harness
import pytest
import redis
from harness import free_port
from redis.sentinel import Sentinel
from redis_cluster import (
    REDIS_CLI,
    Auth,
    RedisProcess,
    SentinelSet,
    calls_of,
    caught_up,
    require,
    require_php_redis,
    reset_command_calls,
    wait_until,
)
from redis_router import Router, learned_pool_yaml, start_router
from redis_workload import (
    Client,
    Load,
    Value,
    assert_all_read_back,
    failover_summary,
    left_by,
    php_rounds_left,
    plain,
    python_round,
    read_back_errors,
    resp_sets,
    route_until_exit,
    run_php,
)

Proxy = proxy_harness.Proxy
NAME = "mymaster"
NEED = 20  # clean rounds in a row each client must reach once the failover is over


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    require("redis-server", "redis-cli")


def sentinel_yaml(
    pool: str, port: int, sentinels: list[str], master: str = NAME, **opts: object
) -> str:
    return learned_pool_yaml(pool, port, sentinels, redis_sentinel=master, **opts)


def sentinel_router(s: SentinelSet, **opts: object) -> Router:
    return start_router("sn", s.addresses, redis_sentinel=NAME, **opts)


def via_sentinels(s: SentinelSet, protocol: int = 2) -> redis.Redis:
    """redis-py's own Sentinel client: asks the Sentinels for the primary on each connect."""
    hosts = [("127.0.0.1", p.port) for p in s.sentinels]
    return Sentinel(hosts, socket_timeout=5).master_for(
        NAME, protocol=protocol, decode_responses=True, socket_timeout=5
    )


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelSet]:
    s = SentinelSet(NAME, replicas=1)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def router(sentinels: SentinelSet) -> Iterator[Router]:
    p = sentinel_router(sentinels)
    try:
        yield p
    finally:
        p.stop()


# ---------------------------------------------------------------- the harness and workload


def test_harness_sentinels_agree_on_the_primary(sentinels: SentinelSet) -> None:
    assert sentinels.primary is not None
    assert {sentinels.named_primary(s) for s in sentinels.sentinels} == {sentinels.primary.port}
    with sentinels.replicas[0].client() as r:
        info = r.info("replication")
        assert info["role"] == "slave" and info["master_port"] == sentinels.primary.port
    assert sentinels.ready()
    assert all(p.port > 61000 for p in [*sentinels.sentinels, sentinels.primary])


def test_workload_runs_straight_against_the_primary(sentinels: SentinelSet) -> None:
    left: dict[str, Value] = {}
    for proto in (2, 3):
        with via_sentinels(sentinels, proto) as r:
            for i in range(20):
                left.update(python_round(r, f"d{proto}", i))
    require_php_redis()
    php = run_php("sentinel", [NAME, *sentinels.addresses], "dphp", 20)
    assert not php.errors and not php.mismatches and len(php.rounds) == 20, php.output[-2000:]
    left.update(php_rounds_left(php, "dphp"))
    with via_sentinels(sentinels) as r:
        assert_all_read_back([r], left)


# ---------------------------------------------------------------- through the router


def test_mixed_workload_through_the_router(router: Proxy, sentinels: SentinelSet) -> None:
    assert router.port and sentinels.primary is not None
    left: dict[str, Value] = {}
    for proto in (2, 3):
        with plain(router.port, proto) as r:
            for i in range(30):
                left.update(python_round(r, f"r{proto}", i))

    cli = [REDIS_CLI or "redis-cli", "-p", str(router.port), "--no-raw"]

    def run(*args: str, stdin: bytes | None = None) -> str:
        out = subprocess.run(
            [*cli, *args], input=stdin, capture_output=True, timeout=20, check=False
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.decode()

    assert run("SET", "cli:a", "alpha").strip() == "OK"
    assert run("GET", "cli:a").strip() == '"alpha"'
    assert run("MSET", "cli:b", "1", "cli:c", "2").strip() == "OK"
    assert run("MGET", "cli:c", "cli:none", "cli:b").splitlines() == [
        '1) "2"',
        "2) (nil)",
        '3) "1"',
    ]
    assert run("DEL", "cli:b", "cli:none").strip() == "(integer) 1"
    left.update({"cli:a": "alpha", "cli:c": "2"})
    piped = [(f"pipe:{i}", f"value-{i}") for i in range(500)]
    out = run("--pipe", stdin=resp_sets(piped))
    assert "errors: 0, replies: 500" in out, out
    left.update(dict(piped))

    require_php_redis()
    php = run_php("redis", [router.address], "rphp", 30)
    assert not php.errors and not php.mismatches and len(php.rounds) == 30, php.output[-2000:]
    left.update(php_rounds_left(php, "rphp"))

    # Everything is on the primary the Sentinels name, and nowhere else but its replica.
    with plain(router.port) as r, sentinels.primary.client() as primary:
        assert_all_read_back([r, primary], left)


def test_backend_user_and_password() -> None:
    """`redis_backend_user` and `redis_backend_auth`: the router logs in to the primary as
    that ACL user; its own clients give no password (the pool has no `redis_auth`)."""
    auth = Auth(password="harness-secret", user="memfleet", user_password="router-secret")
    own = SentinelSet(NAME, replicas=0, auth=auth)
    try:
        assert own.primary is not None
        port = free_port()
        conf = sentinel_yaml(
            "sn",
            port,
            own.addresses,
            redis_backend_user=auth.user,
            redis_backend_auth=auth.user_password,
        )
        with Proxy(conf, port), plain(port) as r, own.primary.client() as primary:
            left: dict[str, Value] = {}
            for i in range(10):
                left.update(python_round(r, "auth", i))
            assert_all_read_back([r, primary], left)
            assert auth.user in {client["user"] for client in primary.client_list()}
    finally:
        own.stop()


# ---------------------------------------------------------------- reads from replicas

READS = ("get", "mget", "exists", "strlen", "ttl", "type", "hgetall", "smembers", "zrange")


def write_and_sync(router: Proxy, pool: str, s: SentinelSet, n: int) -> None:
    """`n` keys written through the router, every replica caught up with them, and the
    router's pool holding the primary and every replica."""
    with plain(router.port or 0) as r:
        for i in range(n):
            assert r.set(f"k:{i}", f"v{i}")
    wait_until(lambda: all(caught_up(x) for x in s.replicas), "replicas caught up", 20)
    assert s.primary is not None
    nodes = [s.primary, *s.replicas]
    wait_until(
        lambda: all(x.address in router.stats()[pool] for x in nodes),
        "the router's pool has the primary and every replica",
        20,
    )


def test_replica_reads_go_to_replicas_and_writes_to_the_primary() -> None:
    """`redis_read_from: replicas`: reads spread over the Sentinels' replicas and never reach
    the primary; writes, MULTI/EXEC and EVAL do. Without it no command reaches a replica."""
    s = SentinelSet(NAME, replicas=2)
    port = free_port()
    on = Proxy(sentinel_yaml("rr", port, s.addresses, redis_read_from="replicas"), port)
    off_port = free_port()
    off = Proxy(sentinel_yaml("sn", off_port, s.addresses), off_port)
    try:
        on.start()
        off.start()
        assert s.primary is not None
        primary: list[RedisProcess] = [s.primary]
        write_and_sync(on, "rr", s, 40)
        reset_command_calls([*primary, *s.replicas])
        with plain(on.port or 0) as r:
            for i in range(40):
                assert r.get(f"k:{i}") == f"v{i}"
            assert r.mget([f"k:{i}" for i in range(5)]) == [f"v{i}" for i in range(5)]
            assert r.exists("k:1", "k:2", "nokey") == 2
            assert r.strlen("k:1") == 2 and r.ttl("k:1") == -1 and r.type("k:1") == "string"
            assert r.hgetall("nohash") == {} and r.smembers("noset") == set()
            assert r.zrange("nozset", 0, -1) == []
        assert calls_of(primary, *READS) == 0, "no read reaches the primary"
        assert calls_of(s.replicas, "get") == 40
        assert all(calls_of([x], "get") > 0 for x in s.replicas), "spread over both"
        assert calls_of(s.replicas, "readonly") == 0, "READONLY is for cluster nodes"
        assert on.stats()["rr"]["replica_reads"] == calls_of(s.replicas, *READS)

        reset_command_calls([*primary, *s.replicas])
        with plain(on.port or 0) as r:
            for i in range(10):
                assert r.set(f"w:{i}", "x")
            assert r.eval("return redis.call('get', KEYS[1])", 1, "k:5") == "v5"
            tx = r.pipeline(transaction=True)
            tx.get("k:1").incr("w:n")
            assert tx.execute() == ["v1", 1]
        assert calls_of(primary, "set") == 10 and calls_of(primary, "eval", "exec") == 2
        assert calls_of(primary, "get") == 2, "the script's and the transaction's reads"
        assert calls_of(s.replicas, "eval", "exec", "get") == 0

        reset_command_calls([*primary, *s.replicas])
        with plain(off.port or 0) as r:
            for i in range(40):
                assert r.get(f"k:{i}") == f"v{i}"
        assert calls_of(primary, "get") == 40
        assert calls_of(s.replicas, *READS) == 0, "without the setting, no read on a replica"
        assert "replica_reads" not in off.stats()["sn"]
        assert [k for k, v in off.stats()["sn"].items() if isinstance(v, dict)] == [
            s.primary.address
        ], "the pool is the primary alone"
    finally:
        on.stop()
        off.stop()
        s.stop()


def test_a_killed_replica_sends_reads_to_the_other_or_the_primary() -> None:
    """A replica crashes: once the router has noticed (the Sentinels flag it down), no read
    fails; before, a read may fail and is tried again a bounded number of times."""
    s = SentinelSet(NAME, replicas=1)
    port = free_port()
    router = Proxy(sentinel_yaml("rr", port, s.addresses, redis_read_from="replicas"), port)
    try:
        router.start()
        write_and_sync(router, "rr", s, 40)
        assert s.primary is not None
        victim = s.replicas[0]
        victim.kill()
        port = router.port or 0
        errors = read_back_errors(port, "k", 40, tries=5)
        assert not errors, errors[:5]
        wait_until(lambda: victim.address not in router.stats()["rr"], "the router dropped it", 30)
        reset_command_calls([s.primary])
        errors = read_back_errors(port, "k", 40, tries=1)
        assert not errors, f"reads failed after the router noticed: {errors[:5]}"
        assert calls_of([s.primary], "get") == 40
    finally:
        router.stop()
        s.stop()


# ---------------------------------------------------------------- start-up errors


def test_a_master_name_the_sentinels_do_not_know_stops_the_router(
    sentinels: SentinelSet, tmp_path: Path
) -> None:
    conf = sentinel_yaml("strangers", free_port(), sentinels.addresses, master="nosuchmaster")
    code, text = route_until_exit(conf, tmp_path)
    assert code != 0, text
    assert "nosuchmaster" in text, text
    assert re.search(r"\bstrangers\b", text), text


def test_a_primary_that_is_down_gives_prompt_error_replies() -> None:
    """The Sentinels still name a primary that is down (it has no replica to fail over to):
    the router starts, and each request gets an error reply, not a wait."""
    s = SentinelSet(NAME, replicas=0)
    try:
        s.kill_primary()
        with sentinel_router(s) as router, plain(router.port or 0) as r:
            for call in (lambda: r.get("k"), lambda: r.set("k", "v"), lambda: r.mget(["a", "b"])):
                # socket_timeout 5: a hang raises redis.TimeoutError, not ResponseError.
                with pytest.raises(redis.ResponseError):
                    call()
    finally:
        s.stop()


# ---------------------------------------------------------------- Sentinel's failover


@pytest.mark.parametrize("target", ["direct", "router"])
def test_primary_killed_under_load(target: str, tmp_path: Path) -> None:
    """kill -9 the primary while the workload runs: the Sentinels promote the replica; the
    errors clients see stop without restarting anything, and what is written after reads
    back."""
    require_php_redis()
    own = SentinelSet(NAME, replicas=1)
    router: Router | None = None
    try:
        if target == "router":
            router = sentinel_router(own)
        port = router.port if router is not None else None

        def maker(proto: int) -> Callable[[], Client]:
            if port is not None:
                return lambda: plain(port, proto)
            return lambda: via_sentinels(own, proto)

        load = Load(limit=25.0, need=NEED)
        for proto in (2, 3):
            load.python(f"{target}-py{proto}", maker(proto), f"{target}{proto}")
        if router is not None:
            load.php_process("php", "redis", [router.address], f"{target}php", tmp_path / "stop")
        else:
            seeds = [NAME, *own.addresses]
            load.php_process("php", "sentinel", seeds, f"{target}php", tmp_path / "stop")
        try:
            load.started()
            killed_at = time.time()
            own.kill_primary()
            new = own.wait_switch()
            recovered_at = time.time()
        finally:
            tallies = load.stop()
        window_end = failover_summary(f"sentinel/{target}", tallies, killed_at, recovered_at, NEED)
        left = left_by(tallies, target, since=window_end)
        with new.client() as primary:
            clients: list[Client] = [primary]
            if router is not None:
                clients.append(plain(router.port or 0))
            assert_all_read_back(clients, left)
            after = python_round(clients[-1], f"{target}after", 0)
            php = run_php(
                "redis" if router else "sentinel",
                [router.address] if router else [NAME, *own.addresses],
                f"{target}phpafter",
                5,
            )
            assert not php.errors and not php.mismatches, php.output[-2000:]
            after.update(php_rounds_left(php, f"{target}phpafter"))
            assert_all_read_back(clients, after)
        if router is not None:
            assert_switch_counted(router, new)
    finally:
        if router is not None:
            router.stop()
        own.stop()


def assert_switch_counted(router: Router, new: RedisProcess) -> None:
    """The stats port and /metrics count the switch for the pool, and the new primary as
    promoted."""

    def counted() -> bool:
        pool = router.stats()["sn"]
        return pool["failovers"] >= 1 and pool.get(new.address, {}).get("promotions", 0) >= 1

    wait_until(counted, "the router counted the switch", 10)
    failovers = router.metric("memfleet_router_pool_failovers_total", pool="sn")
    assert failovers is not None and failovers >= 1
    promotions = router.metric(
        "memfleet_router_server_promotions_total", pool="sn", server=new.address
    )
    assert promotions is not None and promotions >= 1


# ---------------------------------------------------------------- Sentinels with a password

SENTINEL_PASSWORD = "sentinel-secret"


@pytest.fixture(scope="module")
def locked() -> Iterator[SentinelSet]:
    """Sentinels that want a password (`requirepass`); the data nodes want none."""
    s = SentinelSet(NAME, replicas=0, sentinel_password=SENTINEL_PASSWORD)
    try:
        yield s
    finally:
        s.stop()


def subscribed(s: SentinelSet) -> bool:
    """Whether a client of some Sentinel is subscribed to a channel: the router's watcher (the
    Sentinels' links to each other subscribe to nothing)."""
    for sentinel in s.sentinels:
        with sentinel.client() as r:
            if any(int(c.get("sub", 0)) > 0 for c in r.client_list()):
                return True
    return False


def test_sentinels_with_a_password(locked: SentinelSet) -> None:
    """`redis_sentinel_auth`: the router logs in to the Sentinels, both to ask for the primary
    and to subscribe to +switch-master; the primary itself wants no password."""
    assert locked.primary is not None
    with sentinel_router(locked, redis_sentinel_auth=SENTINEL_PASSWORD) as router:
        with plain(router.port or 0) as r, locked.primary.client() as primary:
            left: dict[str, Value] = {}
            for i in range(10):
                left.update(python_round(r, "sauth", i))
            assert_all_read_back([r, primary], left)
        wait_until(lambda: subscribed(locked), "the router subscribed to a Sentinel", 10)


@pytest.mark.parametrize("given", [None, "not-the-password"])
def test_a_missing_or_wrong_sentinel_password_stops_the_router(
    locked: SentinelSet, given: str | None, tmp_path: Path
) -> None:
    opts = {} if given is None else {"redis_sentinel_auth": given}
    conf = sentinel_yaml("lockedout", free_port(), locked.addresses, **opts)
    code, text = route_until_exit(conf, tmp_path)
    assert code != 0, text
    assert re.search(r"\blockedout\b", text), text
    assert ("NOAUTH" if given is None else "WRONGPASS") in text, text
    assert "redis_sentinel_auth" in text, text
