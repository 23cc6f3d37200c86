"""`memfleet route` with a Redis Cluster pool (`redis_cluster: true`) against a real cluster
(tests/redis_cluster.py): clients speak plain Redis to the router and never see MOVED or ASK;
multi-key commands are split over slots or refused with CROSSSLOT; resharding, a new replica
and a primary's crash under load. The workload (tests/redis_workload.py) is run straight
against the cluster too, with redis-py's and PHP's cluster clients, to prove it apart from the
router. Run with -s to see the failover figures."""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import proxy_harness
import pytest
from harness import free_port
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterCrossSlotError
from redis_cluster import (
    N_SLOTS,
    REDIS_CLI,
    Auth,
    Cluster,
    NodeInfo,
    RedisProcess,
    calls_of,
    caught_up,
    data_node,
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
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
NEED = 20  # clean rounds in a row each client must reach once the disturbance is over


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    require("redis-server", "redis-cli")


def cluster_yaml(name: str, port: int, seeds: list[str], **opts: object) -> str:
    return learned_pool_yaml(name, port, seeds, redis_cluster=True, **opts)


def cluster_router(cluster: Cluster) -> Router:
    return start_router("cl", cluster.seeds[:2], redis_cluster=True)


def direct(cluster: Cluster, protocol: int = 2) -> RedisCluster:
    return RedisCluster(
        host="127.0.0.1",
        port=cluster.live[0].port,
        password=cluster.auth.password if cluster.auth else None,
        protocol=protocol,
        decode_responses=True,
        socket_timeout=5,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(primaries=3, replicas=1)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def router(cluster: Cluster) -> Iterator[Router]:
    p = cluster_router(cluster)
    try:
        yield p
    finally:
        p.stop()


# ---------------------------------------------------------------- the harness and workload


def test_harness_makes_one_agreed_cluster(cluster: Cluster) -> None:
    nodes = cluster.topology()
    primaries = cluster.primaries()
    assert len(nodes) == 6 and len(primaries) == 3
    slots = [s for p in primaries for s in p.slots]
    assert sorted(slots) == list(range(N_SLOTS)), "each slot owned by exactly one primary"
    replicas = cluster.replicas()
    assert sorted(r.primary_id or "" for r in replicas) == sorted(p.id for p in primaries)
    for n in cluster.live:
        with n.client() as r:
            assert "cluster_state:ok" in r.execute_command("CLUSTER", "INFO")
            assert n.port > 61000
    assert cluster.agreed()


def test_workload_runs_straight_against_the_cluster(cluster: Cluster) -> None:
    """The drivers themselves, with cluster-aware clients and no router."""
    left: dict[str, Value] = {}
    for proto in (2, 3):
        with direct(cluster, proto) as r:
            for i in range(20):
                left.update(python_round(r, f"d{proto}", i))
    require_php_redis()
    php = run_php("cluster", cluster.seeds[:2], "dphp", 20)
    assert not php.errors and not php.mismatches and len(php.rounds) == 20
    left.update(php_rounds_left(php, "dphp"))
    with direct(cluster) as r:
        assert_all_read_back([r], left)


def test_php_rounds_send_a_multi_key_command_again_on_tryagain(cluster: Cluster) -> None:
    """While a slot moves, RENAME finds one of its two keys on the source and gets TRYAGAIN.
    PHP's cluster client leaves the retry to the page; the workload retries as a page must, so
    that a resharding under load counts only what the cluster itself fails."""
    require_php_redis()
    slot = key_slot(b"{tphp:0}:a")
    primaries = cluster.primaries()
    src = next(p for p in primaries if slot in p.slots)
    dst = next(p for p in primaries if p.id != src.id)
    by_port = {n.port: n for n in cluster.live}
    with by_port[src.port].client() as s, by_port[dst.port].client() as d:
        s.set("{tphp:0}:a", "before")
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)

        def settle() -> None:
            for r in (s, d):
                r.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")

        timer = threading.Timer(0.5, settle)
        timer.start()
        try:
            php = run_php("cluster", cluster.seeds[:2], "tphp", 1)
        finally:
            timer.join()
    assert not php.errors and not php.mismatches and len(php.rounds) == 1, php.output


# ---------------------------------------------------------------- through the router


def test_mixed_workload_through_the_router(router: Proxy, cluster: Cluster) -> None:
    assert router.port
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
    assert run("MSET", "cli:b", "1", "cli:c", "2", "cli:d", "3").strip() == "OK"
    assert run("MGET", "cli:d", "cli:b", "cli:none", "cli:a").splitlines() == [
        '1) "3"',
        '2) "1"',
        "3) (nil)",
        '4) "alpha"',
    ]
    assert run("DEL", "cli:b", "cli:c", "cli:none").strip() == "(integer) 2"
    assert run("INCR", "cli:d").strip() == "(integer) 4"
    left.update({"cli:a": "alpha", "cli:d": "4"})
    piped = [(f"pipe:{i}", f"value-{i}") for i in range(500)]
    out = run("--pipe", stdin=resp_sets(piped))
    assert "errors: 0, replies: 500" in out, out
    left.update(dict(piped))

    require_php_redis()
    php = run_php("redis", [f"127.0.0.1:{router.port}"], "rphp", 30)
    assert not php.errors and not php.mismatches and len(php.rounds) == 30, php.output[-2000:]
    left.update(php_rounds_left(php, "rphp"))

    with plain(router.port) as via_router, direct(cluster) as straight:
        assert_all_read_back([via_router, straight], left)


def two_slots(cluster: Cluster) -> tuple[str, str]:
    """Two keys on different primaries."""
    with direct(cluster) as r:
        owner = {s: p.id for p in cluster.primaries() for s in p.slots}
        a = "xs:a"
        for i in range(1000):
            b = f"xs:b{i}"
            if owner[r.keyslot(b)] != owner[r.keyslot(a)]:
                return a, b
    raise AssertionError("no two keys on different primaries")


def test_multi_key_commands_split_refused_or_kept_together(router: Proxy, cluster: Cluster) -> None:
    assert router.port
    keys = [f"split:{i}" for i in range(60)]
    with plain(router.port) as r, direct(cluster) as straight:
        owners = {p.id for p in cluster.primaries() for k in keys if straight.keyslot(k) in p.slots}
        assert len(owners) == 3, "the keys span every primary"
        assert r.mset({k: f"v{k}" for k in keys}) is True
        assert r.mget([*keys, "split:none"]) == [f"v{k}" for k in keys] + [None]
        assert straight.mget_nonatomic(keys) == [f"v{k}" for k in keys]
        assert r.exists(*keys, "split:none") == 60
        assert r.touch(*keys) == 60
        assert r.delete(*keys[:20], "split:none") == 20
        assert r.unlink(*keys[20:40]) == 20
        assert r.exists(*keys) == 20
        assert straight.exists(*keys[:40]) == 0 and straight.exists(*keys[40:]) == 20

        a, b = two_slots(cluster)
        assert key_slot(f"{a}:s".encode()) not in (key_slot(a.encode()), key_slot(b.encode()))
        r.set(a, "1")
        r.sadd(f"{a}:s", "m")
        for call in (
            lambda: r.rename(a, b),
            lambda: r.sunionstore(b, [a, f"{a}:s"]),
            lambda: r.smove(f"{a}:s", b, "m"),
        ):
            # redis-py picks this class by the reply's CROSSSLOT code, and strips the code.
            with pytest.raises(
                ClusterCrossSlotError, match=re.escape(CROSSSLOT[len("CROSSSLOT ") :])
            ):
                call()
        with socket.create_connection(("127.0.0.1", router.port), timeout=5) as s:
            s.sendall(resp_command("RENAME", a, b))
            assert read_some(s) == f"-{CROSSSLOT}\r\n".encode()
        assert r.get(a) == "1" and r.get(b) is None, "a refused command changed nothing"

        t = "{same}"
        assert r.set(f"{t}a", "1") is True and r.rename(f"{t}a", f"{t}b") is True
        assert r.sadd(f"{t}x", "1", "2") == 2 and r.sadd(f"{t}y", "3") == 1
        assert r.sunionstore(f"{t}u", [f"{t}x", f"{t}y"]) == 3
        assert r.smove(f"{t}x", f"{t}y", "1") is True
        assert straight.smembers(f"{t}y") == {"1", "3"}

        assert r.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "ev:k", "e") == "OK"
        script = "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}"
        assert r.eval(script, 2, f"{t}b", f"{t}a") == ["1", None]
        assert straight.get("ev:k") == "e"


def test_multi_exec_on_one_slot(router: Proxy, cluster: Cluster) -> None:
    """MULTI ... EXEC runs on the slot's primary as one transaction; keys in two slots are
    refused as Redis Cluster refuses them (CROSSSLOT, then EXECABORT)."""
    assert router.port
    t = "{tx}"
    with plain(router.port) as r, direct(cluster) as straight:
        p = r.pipeline(transaction=True)
        p.set(f"{t}n", "1").incr(f"{t}n").get(f"{t}n").mget([f"{t}n", f"{t}none"])
        assert p.execute() == [True, 2, "2", ["2", None]]
        assert straight.get(f"{t}n") == "2"
        a, b = two_slots(cluster)
        p = r.pipeline(transaction=True)
        p.set(a, "x").set(b, "y")
        with pytest.raises(ClusterCrossSlotError):
            p.execute()
        assert straight.get(a) != "x" or straight.get(b) is None, "nothing of it ran"
    with socket.create_connection(("127.0.0.1", router.port), timeout=5) as s:
        s.sendall(b"EXEC\r\nDISCARD\r\nMULTI\r\nSET {tx}d 1\r\nDISCARD\r\nMULTI\r\nEXEC\r\n")
        want = b"-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n+QUEUED\r\n+OK\r\n+OK\r\n*0\r\n"
        got = b""
        while len(got) < len(want):
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got == want
    with plain(router.port) as r:
        assert r.get(f"{t}d") is None, "a discarded transaction never reached the cluster"


def test_resp3_after_hello_3(router: Proxy) -> None:
    assert router.port
    keys = ["r3:s", "r3:x", "r3:y"]
    assert len({key_slot(k.encode()) for k in keys}) == 3, "the MGET below is split"
    with socket.create_connection(("127.0.0.1", router.port), timeout=5) as s:
        s.sendall(resp_command("HELLO", "3"))
        hello = read_some(s)
        assert hello.startswith(b"%") and b"$5\r\nproto\r\n:3\r\n" in hello, hello
        s.sendall(resp_command("HSET", "r3:h", "f", "v"))
        assert read_some(s) in (b":1\r\n", b":0\r\n")
        s.sendall(resp_command("HGETALL", "r3:h"))
        assert read_some(s) == b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
        s.sendall(resp_command("SET", "r3:s", "v"))
        assert read_some(s) == b"+OK\r\n"
        # A split MGET merges into one array; a missing key is RESP3's null.
        s.sendall(resp_command("MGET", *keys))
        assert read_some(s) == b"*3\r\n$1\r\nv\r\n_\r\n_\r\n"
        s.sendall(resp_command("GET", "r3:x"))
        assert read_some(s) == b"_\r\n"
    with plain(router.port, 3) as r:
        assert r.hgetall("r3:h") == {"f": "v"}
        assert r.mget(keys) == ["v", None, None]


def resp_command(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()))
    return b"".join(out)


def read_some(s: socket.socket) -> bytes:
    """Exactly one whole RESP2/RESP3 reply (the socket's timeout bounds the wait)."""
    buf = b""
    while (end := reply_end(buf, 0)) is None:
        chunk = s.recv(65536)
        assert chunk, f"closed after {buf!r}"
        buf += chunk
    assert end == len(buf), f"more than one reply: {buf!r}"
    return buf


def reply_end(buf: bytes, pos: int) -> int | None:
    """Where the reply starting at `pos` ends, None if `buf` does not hold all of it yet."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    kind, head = buf[pos : pos + 1], buf[pos + 1 : nl]
    if kind in b"+-:_,#(":
        return nl + 2
    n = int(head)
    if kind in b"$=!":
        end = nl + 2 + (n + 2 if n >= 0 else 0)
        return end if len(buf) >= end else None
    items = 2 * n if kind in b"%|" else n
    p: int | None = nl + 2
    for _ in range(max(items, 0)):
        assert p is not None
        p = reply_end(buf, p)
        if p is None:
            return None
    return p


def test_backend_user_and_password() -> None:
    """`redis_backend_user` and `redis_backend_auth`: the router logs in to every node as that
    ACL user; its own clients give no password (the pool has no `redis_auth`)."""
    auth = Auth(password="harness-secret", user="memfleet", user_password="router-secret")
    own = Cluster(primaries=3, replicas=0, auth=auth)
    try:
        port = free_port()
        conf = cluster_yaml(
            "cl",
            port,
            own.seeds[:2],
            redis_backend_user=auth.user,
            redis_backend_auth=auth.user_password,
        )
        with Proxy(conf, port), plain(port) as r, direct(own) as straight:
            left: dict[str, Value] = {}
            for i in range(10):
                left.update(python_round(r, "auth", i))
            assert_all_read_back([r, straight], left)
            for node in own.live:
                with node.client() as c:
                    users = {client["user"] for client in c.client_list()}
                assert auth.user in users, f"{node.address}: no connection as {auth.user}"
    finally:
        own.stop()


# ---------------------------------------------------------------- changes under load


def start_load(load: Load, target: str, cluster: Cluster, router: Proxy | None, tmp: Path) -> None:
    """Two redis-py clients (RESP2 and RESP3) and a PHP process, through the router or
    straight at the cluster."""
    port = router.port if router is not None else None

    def maker(proto: int) -> Callable[[], Client]:
        if port is not None:
            return lambda: plain(port, proto)
        return lambda: direct(cluster, proto)

    for proto in (2, 3):
        load.python(f"{target}-py{proto}", maker(proto), f"{target}{proto}")
    if target == "router":
        assert router is not None
        load.php_process("php", "redis", [f"127.0.0.1:{router.port}"], f"{target}php", tmp)
    else:
        load.php_process("php", "cluster", cluster.seeds[:2], f"{target}php", tmp)


@pytest.mark.parametrize("target", ["direct", "router"])
def test_resharding_and_a_new_replica_under_load(
    target: str, cluster: Cluster, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """1,000 slots move between primaries and a replica joins while the workload runs: no
    client sees an error (no MOVED, no ASK), and every key reads back."""
    router = request.getfixturevalue("router") if target == "router" else None
    require_php_redis()
    load = Load(limit=20.0, need=NEED)
    start_load(load, target, cluster, router, tmp_path / "stop")
    pipe_out = ""
    try:
        load.started()
        src, dst = cluster.primaries()[:2]
        reshard = cluster.reshard(1000, src.id, dst.id)
        if router is not None:
            piped = [(f"rpipe:{i}", f"v{i}") for i in range(2000)]
            pipe_out = subprocess.run(
                [REDIS_CLI or "redis-cli", "-p", str(router.port), "--pipe"],
                input=resp_sets(piped),
                capture_output=True,
                timeout=30,
                check=False,
            ).stdout.decode()
        cluster.add_replica()
        out, _ = reshard.communicate(timeout=60)
        assert reshard.returncode == 0, out[-2000:]
        cluster.wait_ok()
    finally:
        tallies = load.stop()
    for t in tallies:
        print(f"{t.name}: {len(t.rounds)} rounds, {len(t.errors)} errors")
        assert not t.errors, f"{t.name} saw errors: {t.errors[:5]}"
        assert not t.mismatches, f"{t.name} read wrong values: {t.mismatches[:5]}"
        assert t.rounds
    left = left_by(tallies, target)
    if router is not None:
        assert_redirects_counted(router, f"127.0.0.1:{src.port}")
        assert "errors: 0, replies: 2000" in pipe_out, pipe_out
        left.update({f"rpipe:{i}": f"v{i}" for i in range(2000)})
    with direct(cluster) as straight:
        clients: list[Client] = [straight]
        if router is not None:
            clients.append(plain(router.port or 0))
        assert_all_read_back(clients, left)


def assert_redirects_counted(router: Router, src: str) -> None:
    """The node slots moved away from answered the router with MOVED or ASK: counted for it
    on the stats port and in /metrics; resharding is no failover."""
    pool = router.stats()["cl"]
    node = pool[src]
    assert node["redirect_moved"] + node["redirect_ask"] >= 1, pool
    assert pool["failovers"] == 0, pool
    moved = router.metric("memfleet_router_server_redirect_moved_total", pool="cl", server=src)
    ask = router.metric("memfleet_router_server_redirect_ask_total", pool="cl", server=src)
    assert moved is not None and ask is not None and moved + ask >= 1
    assert router.metric("memfleet_router_pool_failovers_total", pool="cl") == 0


# ---------------------------------------------------------------- reads from replicas

READS = ("get", "mget", "exists", "strlen", "getrange", "ttl", "type", "hget", "lrange")


def by_role(cluster: Cluster) -> tuple[list[RedisProcess], list[RedisProcess]]:
    """The live primaries and replicas as processes."""
    primary_ports = {n.port for n in cluster.primaries()}
    primaries = [n for n in cluster.live if n.port in primary_ports]
    replicas = [n for n in cluster.live if n.port not in primary_ports]
    return primaries, replicas


def replica_router(cluster: Cluster) -> Proxy:
    port = free_port()
    yaml = cluster_yaml("rr", port, cluster.seeds[:2], redis_read_from="replicas")
    return Proxy(yaml, port).start()


def write_and_sync(router: Proxy, pool: str, cluster: Cluster, prefix: str, n: int) -> None:
    """`n` keys written through the router, then every replica caught up with them and in
    the router's pool (CLUSTER SHARDS names a replica "loading" until it has a replication
    offset, and the router leaves such nodes out)."""
    with plain(router.port or 0) as r:
        for i in range(n):
            assert r.set(f"{prefix}:{i}", f"v{i}")
    _, replicas = by_role(cluster)
    wait_until(lambda: all(caught_up(n) for n in replicas), "replicas caught up", 20)
    wait_until(
        lambda: all(n.address in router.stats()[pool] for n in replicas),
        "the router's pool has every replica",
        20,
    )


def test_replica_reads_go_to_replicas_and_writes_to_primaries(cluster: Cluster) -> None:
    """With `redis_read_from: replicas` every read-only command is executed by a replica,
    never a primary; writes, MULTI/EXEC and EVAL by primaries; the pool counts the reads."""
    router = replica_router(cluster)
    try:
        primaries, replicas = by_role(cluster)
        assert len(primaries) == 3 and len(replicas) >= 3
        write_and_sync(router, "rr", cluster, "rr", 60)
        reset_command_calls(cluster.live)
        with plain(router.port or 0) as r:
            for i in range(60):
                assert r.get(f"rr:{i}") == f"v{i}"
            assert r.mget([f"rr:{i}" for i in range(10)]) == [f"v{i}" for i in range(10)]
            assert r.exists(*[f"rr:{i}" for i in range(10)]) == 10
            assert r.strlen("rr:1") == 2 and r.getrange("rr:12", 0, 0) == "v"
            assert r.ttl("rr:2") == -1 and r.type("rr:3") == "string"
            assert r.hget("rr:nohash", "f") is None and r.lrange("rr:nolist", 0, -1) == []
        assert calls_of(primaries, *READS) == 0, "no read reaches a primary"
        assert calls_of(replicas, "get") == 60
        assert calls_of(replicas, *READS) >= 60 + 3 + 3 + 6
        assert all(calls_of([n], "readonly") >= 1 for n in replicas), "READONLY first"
        assert calls_of(primaries, "readonly") == 0
        reads = router.stats()["rr"]["replica_reads"]
        assert reads == calls_of(replicas, *READS), "one count per read a replica got"

        reset_command_calls(cluster.live)
        with plain(router.port or 0) as r:
            for i in range(20):
                assert r.set(f"rw:{i}", "x")
            assert r.incr("rw:n") == 1
            assert r.eval("return redis.call('get', KEYS[1])", 1, "rr:5") == "v5"
            tx = r.pipeline(transaction=True)
            tx.get("{rr}a").get("{rr}b")
            assert tx.execute() == [None, None]
            r.delete("rw:n")
        assert calls_of(primaries, "set") == 20 and calls_of(primaries, "incrby") == 1
        assert calls_of(primaries, "eval") == 1 and calls_of(primaries, "exec") == 1
        assert calls_of(primaries, "get") == 3, "the script's and the transaction's reads"
        assert calls_of(replicas, "get", "eval", "exec") == 0
    finally:
        router.stop()


def test_without_replica_reads_no_command_reaches_a_replica(
    router: Proxy, cluster: Cluster
) -> None:
    primaries, replicas = by_role(cluster)
    write_and_sync(router, "cl", cluster, "pr", 30)
    reset_command_calls(cluster.live)
    with plain(router.port or 0) as r:
        for i in range(30):
            assert r.get(f"pr:{i}") == f"v{i}"
        assert r.mget([f"pr:{i}" for i in range(5)]) == [f"v{i}" for i in range(5)]
    assert calls_of(primaries, "get") == 30
    assert calls_of(replicas, *READS, "readonly") == 0
    assert "replica_reads" not in router.stats()["cl"]


def test_reads_follow_a_slot_moved_under_replica_reads(cluster: Cluster) -> None:
    """A slot moved back and forth between two primaries while reads go to replicas: every
    read answers the value (a replica's MOVED is followed to the slot's new primary)."""
    router = replica_router(cluster)
    try:
        key = "{moving}k"
        write_and_sync(router, "rr", cluster, "{moving}k", 1)
        slot = key_slot(b"{moving}k:0")
        primaries = cluster.primaries()
        src = next(p for p in primaries if slot in p.slots)
        dst = next(p for p in primaries if p is not src)
        ports = {n.port: n for n in cluster.live}
        with plain(router.port or 0) as r:
            for step in range(4):
                a, b = (src, dst) if step % 2 == 0 else (dst, src)
                move_slot(cluster, ports[a.port], ports[b.port], a.id, b.id, slot)
                for _ in range(20):
                    assert r.get(f"{key}:0") == "v0"
        moved = router.stats()["rr"]["redirect_moved"]
        print(f"MOVED followed: {moved}")
    finally:
        router.stop()


def move_slot(
    cluster: Cluster, a: RedisProcess, b: RedisProcess, a_id: str, b_id: str, slot: int
) -> None:
    """Slot `slot` and its keys from primary `a` to `b`, the new owner told to every primary
    (replicas learn it over the cluster bus)."""
    with a.client() as ra, b.client() as rb:
        rb.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", a_id)
        ra.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", b_id)
        while keys := ra.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            auth = ["AUTH", cluster.auth.password] if cluster.auth else []
            ra.execute_command("MIGRATE", "127.0.0.1", b.port, "", 0, 5000, *auth, "KEYS", *keys)
        primaries, _ = by_role(cluster)
        for n in primaries:
            with n.client() as r:
                r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", b_id)
    cluster.wait_ok()


def test_replica_reads_with_backend_credentials() -> None:
    """A pool with backend credentials: a replica connection logs in, then sends READONLY,
    and its reads are served by the replica as the ACL user."""
    auth = Auth(password="harness-secret", user="memfleet", user_password="router-secret")
    own = Cluster(primaries=3, replicas=1, auth=auth)
    port = free_port()
    conf = cluster_yaml(
        "rr",
        port,
        own.seeds[:2],
        redis_read_from="replicas",
        redis_backend_user=auth.user,
        redis_backend_auth=auth.user_password,
    )
    router = Proxy(conf, port)
    try:
        router.start()
        write_and_sync(router, "rr", own, "ra", 30)
        primaries, replicas = by_role(own)
        reset_command_calls(own.live)
        with plain(port) as r:
            for i in range(30):
                assert r.get(f"ra:{i}") == f"v{i}"
        assert calls_of(primaries, "get") == 0 and calls_of(replicas, "get") == 30
        for node in replicas:
            with node.client() as c:
                mine = [x for x in c.client_list() if x["user"] == auth.user]
            assert mine and all("r" in x["flags"] for x in mine), f"{node.address}: {mine}"
    finally:
        router.stop()
        own.stop()


def test_a_killed_replica_sends_its_reads_to_the_primary() -> None:
    """A replica crashes while reads go to replicas: its shard's reads go to the primary
    (those in flight on the dead connection too); once the router has dropped the node, no
    read fails at all."""
    c = Cluster(primaries=3, replicas=1)
    router = replica_router(c)
    try:
        write_and_sync(router, "rr", c, "kr", 60)
        primaries, replicas = by_role(c)
        victim = replicas[0]
        victim_name = victim.address
        assert victim_name in router.stats()["rr"]
        victim.kill()
        c.killed.add(victim.port)
        port = router.port or 0
        # Bounded retries while the router notices.
        errors = read_back_errors(port, "kr", 60, tries=5)
        assert not errors, errors[:5]
        wait_until(
            lambda: victim_name not in router.stats()["rr"], "the router dropped the replica", 30
        )
        reset_command_calls([*primaries, *[n for n in replicas if n is not victim]])
        errors = read_back_errors(port, "kr", 60, tries=1)
        assert not errors, f"reads failed after the router noticed: {errors[:5]}"
        assert calls_of(primaries, "get") > 0, "the dead replica's shard read on its primary"
        assert calls_of(primaries, "get") < 60, "the other shards still read on replicas"
    finally:
        router.stop()
        c.stop()


# ---------------------------------------------------------------- start-up errors


def test_no_seed_answering_stops_the_router(tmp_path: Path) -> None:
    seeds = [f"127.0.0.1:{free_port()}" for _ in range(2)]  # nothing listens there
    code, text = route_until_exit(cluster_yaml("deadseeds", free_port(), seeds), tmp_path)
    assert code != 0, text
    assert re.search(r"\bdeadseeds\b", text), text


def test_a_seed_not_in_cluster_mode_stops_the_router(tmp_path: Path) -> None:
    node: RedisProcess = data_node(tmp_path).start()
    try:
        conf = cluster_yaml("plainseed", free_port(), [node.address])
        code, text = route_until_exit(conf, tmp_path)
    finally:
        node.stop()
    assert code != 0, text
    assert re.search(r"\bplainseed\b", text), text


# ---------------------------------------------------------------- a primary crashes


@pytest.mark.parametrize("target", ["direct", "router"])
def test_primary_killed_under_load(target: str, tmp_path: Path) -> None:
    """kill -9 a primary while the workload runs: its replica takes over; the errors clients
    see stop without restarting anything, and what is written after reads back."""
    require_php_redis()
    own = Cluster(primaries=3, replicas=1)
    router: Router | None = None
    try:
        if target == "router":
            router = cluster_router(own)
        load = Load(limit=25.0, need=NEED)
        start_load(load, target, own, router, tmp_path / "stop")
        try:
            load.started()
            killed_at = time.time()
            victim = own.kill_primary(0)
            promoted = own.wait_failover()
            recovered_at = time.time()
        finally:
            tallies = load.stop()
        assert len(promoted) == 1 and victim.slots <= promoted[0].slots
        window_end = failover_summary(f"cluster/{target}", tallies, killed_at, recovered_at, NEED)
        left = left_by(tallies, target, since=window_end)
        with direct(own) as straight:
            clients: list[Client] = [straight]
            if router is not None:
                clients.append(plain(router.port or 0))
            assert_all_read_back(clients, left)
            # The same router (or client) goes on working: a fresh round, and PHP's.
            after = python_round(clients[-1], f"{target}after", 0)
            php = run_php(
                "redis" if router else "cluster",
                [router.address] if router else own.seeds[:2],
                f"{target}phpafter",
                5,
            )
            assert not php.errors and not php.mismatches, php.output[-2000:]
            after.update(php_rounds_left(php, f"{target}phpafter"))
            assert_all_read_back(clients, after)
        if router is not None:
            assert_failover_counted(router, victim, promoted[0])
    finally:
        if router is not None:
            router.stop()
        own.stop()


def assert_failover_counted(router: Router, victim: NodeInfo, promoted: NodeInfo) -> None:
    """The stats port and /metrics count the failover for the pool, and the promoted replica
    as a primary serving the killed one's slots."""
    name = f"127.0.0.1:{promoted.port}"

    def counted() -> bool:
        pool = router.stats()["cl"]
        node = pool.get(name, {})
        return (
            pool["failovers"] >= 1
            and node.get("promotions", 0) >= 1
            and node.get("cluster_slots", 0) >= len(victim.slots)
        )

    wait_until(counted, "the router counted the failover", 10)
    failovers = router.metric("memfleet_router_pool_failovers_total", pool="cl")
    assert failovers is not None and failovers >= 1
    promotions = router.metric("memfleet_router_server_promotions_total", pool="cl", server=name)
    assert promotions is not None and promotions >= 1
    slots = router.metric("memfleet_router_server_cluster_slots", pool="cl", server=name)
    assert slots is not None and slots >= len(victim.slots)
