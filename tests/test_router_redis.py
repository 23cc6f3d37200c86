"""`memfleet route` Redis pools against real redis-server backends, driven with redis-py,
redis-cli and php-redis; nutcracker (twemproxy 0.5) as the reference for placement."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import proxy_harness
import pytest
import redis
from harness import Server, free_port, listening_socket, memfleet_bin
from proxy_harness import never_reading_client, settle

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
NUTCRACKER = proxy_harness.NUTCRACKER
PHP = shutil.which("php")

BACKEND_PW = "backend-secret"
CLIENT_PW = "client-extra"

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server not installed")


def my_port() -> int:
    """test_router.py keeps to 12000-20000."""
    return free_port()


def redis_server(password: str | None = BACKEND_PW, *flags: str) -> Server:
    port = my_port()
    argv = [
        REDIS_SERVER or "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--logfile",
        "",
        "--loglevel",
        "warning",
    ]
    if password:
        argv += ["--requirepass", password]
    return Server(argv + list(flags), port=port).start()


def pool_yaml(listen: str, servers: list[str], **opts: object) -> str:
    return proxy_harness.pool_yaml("rpool", listen, servers, redis=True, **opts)


Proxy = proxy_harness.Proxy


def rc(**kw: object) -> redis.Redis:
    """redis-py speaking RESP2 unless `protocol` says otherwise (redis-py 8 defaults to 3;
    the RESP3 tests below use that default explicitly)."""
    kw.setdefault("socket_timeout", 10)  # a hang fails the test instead of stalling it
    kw.setdefault("protocol", 2)
    return redis.Redis(host="127.0.0.1", **kw)  # type: ignore[arg-type]


def servers_of(backends: list[Server]) -> list[str]:
    return [f"127.0.0.1:{b.port}:1" for b in backends]


def direct(b: Server, db: int = 0) -> redis.Redis:
    return rc(port=b.port, password=BACKEND_PW, db=db, decode_responses=True)


def where(backends: list[Server], keys: list[str]) -> dict[str, int]:
    """Index of the backend holding each key (checked directly on every redis)."""
    found: dict[str, int] = {}
    for i, b in enumerate(backends):
        with direct(b) as r:
            pipe = r.pipeline(transaction=False)
            for k in keys:
                pipe.exists(k)
            for k, n in zip(keys, pipe.execute()):
                if n:
                    assert k not in found, f"{k} on two backends"
                    found[k] = i
    return found


@pytest.fixture(scope="module")
def backends() -> Iterator[list[Server]]:
    servers = [redis_server() for _ in range(3)]
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture(autouse=True)
def flushed(request: pytest.FixtureRequest) -> None:
    if "backends" in request.fixturenames:
        for b in request.getfixturevalue("backends"):
            with direct(b) as r:
                r.flushall()


@pytest.fixture(scope="module")
def router(backends: list[Server]) -> Iterator[Proxy]:
    port = my_port()
    conf = pool_yaml(
        f"127.0.0.1:{port}",
        servers_of(backends),
        hash="murmur",
        hash_tag='"{}"',
        distribution="ketama",
        redis_auth=BACKEND_PW,
        client_auth=CLIENT_PW,
        timeout=2000,
        preconnect=True,
        server_connections=2,
    )
    with Proxy(conf, port) as p:
        yield p


def client(router: Proxy, password: str | None = BACKEND_PW) -> redis.Redis:
    return rc(port=router.port, password=password, decode_responses=True)


def raw(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def cmd(*args: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_replies(s: socket.socket, n: int) -> list[bytes]:
    """Reads exactly n complete RESP replies (raw bytes each)."""
    buf = b""
    out: list[bytes] = []
    while len(out) < n:
        end = reply_end(buf, 0)
        if end is None:
            chunk = s.recv(65536)
            assert chunk, f"connection closed after {out}"
            buf += chunk
            continue
        out.append(buf[:end])
        buf = buf[end:]
    return out


def reply_end(buf: bytes, pos: int) -> int | None:
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    t, line = buf[pos : pos + 1], buf[pos + 1 : nl]
    if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return nl + 2
    n = int(line)
    if t in (b"$", b"=", b"!"):
        end = nl + 2 + max(n, 0) + (2 if n >= 0 else 0)
        return end if len(buf) >= end else None
    if t == b"%":
        n *= 2
    p: int | None = nl + 2
    for _ in range(max(n, 0)):
        assert p is not None
        p = reply_end(buf, p)
        if p is None:
            return None
    return p


def keys_on_distinct_backends(backends: list[Server], router: Proxy, n: int = 3) -> list[str]:
    """n keys, each on a different backend (found by writing through the router)."""
    picked: dict[int, str] = {}
    with client(router) as r:
        for i in range(200):
            k = f"probe:{i}"
            r.set(k, "1")
            b = where(backends, [k])[k]
            picked.setdefault(b, k)
            r.delete(k)
            if len(picked) == n:
                return [picked[i] for i in sorted(picked)]
    raise AssertionError("keys do not spread over the backends")


# ---------------------------------------------------------------- command families


def test_strings(router: Proxy) -> None:
    with client(router) as r:
        assert r.set("s:a", "hello") is True
        assert r.get("s:a") == "hello"
        assert r.append("s:a", " world") == 11
        assert r.getrange("s:a", 0, 4) == "hello"
        assert r.strlen("s:a") == 11
        assert r.setrange("s:a", 6, "WORLD") == 11 and r.get("s:a") == "hello WORLD"
        assert r.incr("s:n") == 1 and r.incrby("s:n", 41) == 42 and r.decr("s:n") == 41
        assert r.decrby("s:n", 1) == 40 and r.incrbyfloat("s:n", 0.5) == 40.5
        assert r.execute_command("SETEX", "s:e", 100, "v") is True  # SETEX itself, not SET EX
        assert 90 <= r.ttl("s:e") <= 100
        assert r.psetex("s:p", 100000, "v") is True and r.pttl("s:p") > 90000
        assert r.setnx("s:a", "x") is False and r.setnx("s:new", "x") is True
        assert r.getset("s:new", "y") == "x" and r.getdel("s:new") == "y"
        assert r.get("s:missing") is None
        assert r.setbit("s:bits", 7, 1) == 0 and r.getbit("s:bits", 7) == 1
        assert r.bitcount("s:bits") == 1
        with pytest.raises(redis.ResponseError, match="not an integer"):
            r.incr("s:a")


def test_keys(router: Proxy) -> None:
    with client(router) as r:
        r.set("k:a", "1")
        assert r.type("k:a") == "string"
        assert r.expire("k:a", 50) is True and 40 <= r.ttl("k:a") <= 50
        assert r.persist("k:a") is True and r.ttl("k:a") == -1
        assert r.pexpire("k:a", 50000) is True and r.pttl("k:a") > 40000
        assert r.expireat("k:a", int(time.time()) + 60) is True
        assert r.ttl("k:missing") == -2
        assert r.exists("k:a") == 1
        r.rpush("k:l", "x")
        assert r.type("k:l") == "list"


def test_hashes(router: Proxy) -> None:
    with client(router) as r:
        assert r.hset("h", mapping={"a": "1", "b": "2", "c": "3"}) == 3
        assert r.hget("h", "a") == "1"
        assert r.hgetall("h") == {"a": "1", "b": "2", "c": "3"}
        assert r.hmget("h", ["c", "x", "a"]) == ["3", None, "1"]
        assert r.hincrby("h", "a", 10) == 11
        assert r.hexists("h", "b") and not r.hexists("h", "zz")
        assert sorted(r.hkeys("h")) == ["a", "b", "c"] and r.hlen("h") == 3
        assert r.hdel("h", "a", "b") == 2 and r.hvals("h") == ["3"]
        assert r.hsetnx("h", "c", "9") == 0


def test_lists(router: Proxy) -> None:
    with client(router) as r:
        assert r.rpush("l", "a", "b", "c") == 3
        assert r.lpush("l", "z") == 4
        assert r.lrange("l", 0, -1) == ["z", "a", "b", "c"]
        assert r.llen("l") == 4 and r.lindex("l", 1) == "a"
        assert r.lset("l", 1, "A") is True
        assert r.lpop("l") == "z" and r.rpop("l") == "c"
        assert r.linsert("l", "after", "A", "mid") == 3
        assert r.ltrim("l", 0, 1) is True and r.lrange("l", 0, -1) == ["A", "mid"]
        assert r.lrem("l", 0, "mid") == 1


def test_sets(router: Proxy) -> None:
    with client(router) as r:
        assert r.sadd("set", "a", "b", "c") == 3
        assert r.smembers("set") == {"a", "b", "c"}
        assert r.sismember("set", "a") and not r.sismember("set", "x")
        assert r.scard("set") == 3 and r.srem("set", "a") == 1
        # Several keys on one server thanks to the hash tag.
        r.sadd("{grp}s1", "1", "2")
        r.sadd("{grp}s2", "2", "3")
        assert r.sinter("{grp}s1", "{grp}s2") == {"2"}
        assert r.sunion("{grp}s1", "{grp}s2") == {"1", "2", "3"}
        assert r.sdiffstore("{grp}d", ["{grp}s1", "{grp}s2"]) == 1
        assert r.smembers("{grp}d") == {"1"}
        assert r.smove("{grp}s1", "{grp}s2", "1") is True


def test_sorted_sets(router: Proxy) -> None:
    with client(router) as r:
        assert r.zadd("z", {"a": 1, "b": 2, "c": 3.5}) == 3
        assert r.zrange("z", 0, -1, withscores=True) == [("a", 1.0), ("b", 2.0), ("c", 3.5)]
        assert r.zrevrange("z", 0, 0) == ["c"]
        assert r.zscore("z", "b") == 2.0 and r.zrank("z", "c") == 2
        assert r.zincrby("z", 10, "a") == 11.0
        assert r.zrangebyscore("z", 2, 4) == ["b", "c"]
        assert r.zcard("z") == 3 and r.zcount("z", 0, 5) == 2
        assert r.zrem("z", "b") == 1
        r.zadd("{zz}x", {"m": 1})
        r.zadd("{zz}y", {"m": 2})
        assert r.zunionstore("{zz}u", ["{zz}x", "{zz}y"]) == 1
        assert r.zscore("{zz}u", "m") == 3.0


def test_hyperloglog(router: Proxy) -> None:
    with client(router) as r:
        assert r.pfadd("hll", *[f"e{i}" for i in range(100)]) == 1
        assert 95 <= r.pfcount("hll") <= 105
        r.pfadd("{h}1", "a", "b")
        r.pfadd("{h}2", "b", "c")
        assert r.pfcount("{h}1", "{h}2") == 3
        assert r.pfmerge("{h}m", "{h}1", "{h}2") is True and r.pfcount("{h}m") == 3


def test_eval_needs_keys_on_one_server(router: Proxy, backends: list[Server]) -> None:
    a, b, _ = keys_on_distinct_backends(backends, router)
    with client(router) as r:
        r.set("{ev}one", "1")
        script = "return redis.call('incrby', KEYS[1], ARGV[1]) + #KEYS"
        assert r.eval(script, 2, "{ev}one", "{ev}two", 5) == 8
        with pytest.raises(redis.ResponseError, match="hash to different servers"):
            r.eval(script, 2, a, b, 1)
        with pytest.raises(redis.ResponseError, match="at least one key"):
            r.eval("return 1", 0)
        # EVALSHA of a script loaded on the owning backend.
        owner = where(backends, ["{ev}one"])["{ev}one"]
        with direct(backends[owner]) as d:
            sha = d.script_load("return redis.call('get', KEYS[1])")
        assert r.evalsha(sha, 1, "{ev}one") == "6"


def test_multi_key_commands_split_over_three_backends(
    router: Proxy, backends: list[Server]
) -> None:
    keys = [f"mk:{i}" for i in range(30)]
    with client(router) as r:
        assert r.mset({k: f"v{i}" for i, k in enumerate(keys)}) is True
        placed = where(backends, keys)
        assert len(placed) == len(keys)
        assert set(placed.values()) == {0, 1, 2}, "keys land on all three backends"
        # Values really are on the backend the key was placed on.
        for k, i in placed.items():
            with direct(backends[i]) as d:
                assert d.get(k) == f"v{keys.index(k)}"
        ask = ["mk:7", "nope:1", "mk:0", "mk:29", "mk:7", "nope:2", "mk:13"]
        assert r.mget(ask) == ["v7", None, "v0", "v29", "v7", None, "v13"]
        assert r.exists("mk:1", "mk:2", "nope", "mk:1") == 3
        assert r.touch("mk:3", "mk:4", "nope") == 2
        assert r.delete("mk:1", "mk:2", "mk:3", "nope") == 3
        assert r.unlink("mk:4", "mk:5", "mk:6", "mk:4") == 3
        assert r.exists(*keys) == 24
        assert r.mget(["mk:1", "mk:8"]) == [None, "v8"]
    stats = router.stats()["rpool"]
    assert stats["fragments"] > 0


def test_multi_exec_on_one_server(router: Proxy, backends: list[Server]) -> None:
    """A transaction whose keys live on one server runs there as one MULTI/EXEC; keys on
    two servers are refused while queuing and EXEC answers EXECABORT, as Redis does for a
    command refused inside MULTI."""
    a, b, _ = keys_on_distinct_backends(backends, router)
    with client(router) as r:
        p = r.pipeline(transaction=True)
        p.set("{tx}n", "1").incr("{tx}n").lpush("{tx}l", "x").get("{tx}n")
        assert p.execute() == [True, 2, 1, "2"]
        owner = where(backends, ["{tx}n"])["{tx}n"]
        with direct(backends[owner]) as d:
            assert d.get("{tx}n") == "2" and d.lrange("{tx}l", 0, -1) == ["x"]
        p = r.pipeline(transaction=True)
        p.set(a, "1").set(b, "2")
        with pytest.raises(redis.ResponseError, match="hash to different servers"):
            p.execute()
        assert r.get(a) is None and r.get(b) is None


def test_transactions_free_their_place_on_the_server_connection(backends: list[Server]) -> None:
    """The MULTI and queued commands a transaction sends count against
    server_max_inflight only until their replies are read: many transactions in a row on
    one small connection all run."""
    port = my_port()
    conf = pool_yaml(
        f"127.0.0.1:{port}",
        servers_of(backends),
        hash_tag='"{}"',
        redis_auth=BACKEND_PW,
        timeout=2000,
        server_max_inflight=8,
    )
    with Proxy(conf, port) as p, client(p) as r:
        for i in range(40):
            tx = r.pipeline(transaction=True)
            tx.set("{inflight}k", i).incr("{inflight}k").get("{inflight}k")
            assert tx.execute() == [True, i + 1, str(i + 1)]


def test_hash_tag_keeps_keys_together(router: Proxy, backends: list[Server]) -> None:
    keys = [f"{{user:{u}}}:{f}" for u in range(10) for f in ("name", "mail", "cart")]
    with client(router) as r:
        r.mset({k: "x" for k in keys})
    placed = where(backends, keys)
    for u in range(10):
        assert len({placed[f"{{user:{u}}}:{f}"] for f in ("name", "mail", "cart")}) == 1
    assert len(set(placed.values())) > 1


def test_pipeline_from_redis_py(router: Proxy) -> None:
    with client(router) as r:
        pipe = r.pipeline(transaction=False)
        for i in range(300):
            pipe.set(f"p:{i}", i)
            pipe.incr(f"p:{i}")
            if i % 10 == 0:
                pipe.mget([f"p:{i}", f"p:{i // 2}", "p:none"])
        out = pipe.execute()
        expect: list[object] = []
        for i in range(300):
            expect += [True, i + 1]
            if i % 10 == 0:
                expect.append([str(i + 1), str(i // 2 + 1), None])
        assert out == expect


def test_many_clients_share_pooled_backend_connections(router: Proxy) -> None:
    conns = [client(router) for _ in range(40)]
    for i, c in enumerate(conns):
        c.set(f"many:{i}", i)
    for i, c in enumerate(conns):
        assert c.get(f"many:{i}") == str(i)
        c.close()
    servers = router.stats()["rpool"]
    # preconnect + server_connections: 2 per server per worker thread, not one per client.
    total = sum(v["server_connections"] for v in servers.values() if isinstance(v, dict))
    assert 0 < total <= 3 * 2 * 2


# ---------------------------------------------------------------- auth, db, local commands


def test_auth_accepted_refused_and_noauth(router: Proxy) -> None:
    with raw(router.port) as s:
        s.sendall(cmd("GET", "a") + cmd("PING") + cmd("AUTH", "wrong") + cmd("GET", "a"))
        assert read_replies(s, 4) == [
            b"-NOAUTH Authentication required.\r\n",
            b"-NOAUTH Authentication required.\r\n",
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            b"-NOAUTH Authentication required.\r\n",
        ]
        s.sendall(cmd("AUTH", BACKEND_PW) + cmd("SET", "auth:a", "1") + cmd("GET", "auth:a"))
        assert read_replies(s, 3) == [b"+OK\r\n", b"+OK\r\n", b"$1\r\n1\r\n"]
        # As in redis, a failed AUTH leaves an authenticated connection authenticated.
        s.sendall(cmd("AUTH", "bad") + cmd("GET", "auth:a"))
        assert read_replies(s, 2)[1] == b"$1\r\n1\r\n"
    with raw(router.port) as s:
        s.sendall(cmd("AUTH", "default", CLIENT_PW) + cmd("GET", "auth:a"))
        assert read_replies(s, 2) == [b"+OK\r\n", b"$1\r\n1\r\n"]
        s.sendall(cmd("AUTH", "someone", CLIENT_PW) + cmd("AUTH", "a", "b", "c"))
        assert read_replies(s, 2) == [
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            b"-ERR syntax error\r\n",
        ]
    with client(router, password=None) as r, pytest.raises(redis.AuthenticationError):
        r.get("x")
    with client(router, password="nope") as r, pytest.raises(redis.AuthenticationError):
        r.get("x")
    with client(router, password=CLIENT_PW) as r:
        assert r.get("auth:a") == "1"


def test_hello_2_and_3_authenticate_and_switch_protocol(router: Proxy) -> None:
    with raw(router.port) as s:
        s.sendall(cmd("HELLO", "4") + cmd("HELLO", "3", "AUTH", "default", "bad") + cmd("GET", "x"))
        assert read_replies(s, 3) == [
            b"-NOPROTO unsupported protocol version\r\n",
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            b"-NOAUTH Authentication required.\r\n",
        ]
        s.sendall(cmd("HELLO", "3", "AUTH", "default", BACKEND_PW) + cmd("GET", "hello:none"))
        hello, nil = read_replies(s, 2)
        assert hello.startswith(b"%7\r\n$6\r\nserver\r\n") and b"$5\r\nproto\r\n:3\r\n" in hello
        assert nil == b"_\r\n"
        # HELLO without a version keeps RESP3; HELLO 2 switches back.
        s.sendall(cmd("HELLO") + cmd("HELLO", "2", "SETNAME", "me") + cmd("GET", "hello:none"))
        again, hello2, nil2 = read_replies(s, 3)
        assert again.startswith(b"%7\r\n") and hello2.startswith(b"*14\r\n")
        assert b"$5\r\nproto\r\n:2\r\n" in hello2 and nil2 == b"$-1\r\n"
        s.sendall(cmd("HELLO", "2", "AUTH", "default", CLIENT_PW) + cmd("PING"))
        assert read_replies(s, 2)[1] == b"+PONG\r\n"


# Commands whose RESP3 reply differs from RESP2 in type, and some whose does not; sent after
# HELLO 3 to redis-server itself and through the router, the bytes must be equal.
RESP3_SCRIPT: list[tuple[str, ...]] = [
    ("SET", "{t}s", "v"),
    ("GET", "{t}s"),
    ("GET", "{t}none"),
    ("MGET", "{t}s", "{t}none"),
    ("INCR", "{t}n"),
    ("INCRBYFLOAT", "{t}f", "1.5"),
    ("LPOP", "{t}none", "2"),
    ("HSET", "{t}h", "f", "v", "g", "w"),
    ("HGETALL", "{t}h"),
    ("HGETALL", "{t}none"),
    ("HSET", "{t}h1", "f", "v"),  # one field, one member: the random picks are known
    ("HRANDFIELD", "{t}h1", "-2", "WITHVALUES"),
    ("HMGET", "{t}h", "f", "x"),
    ("SADD", "{t}set", "a"),
    ("SMEMBERS", "{t}set"),
    ("SINTER", "{t}set", "{t}set"),
    ("SPOP", "{t}none", "1"),
    ("SMISMEMBER", "{t}set", "a", "b"),
    ("ZADD", "{t}z", "1.5", "a", "2", "b", "3", "c"),
    ("ZSCORE", "{t}z", "a"),
    ("ZSCORE", "{t}z", "none"),
    ("ZMSCORE", "{t}z", "a", "none"),
    ("ZINCRBY", "{t}z", "1", "a"),
    ("ZADD", "{t}z", "INCR", "1", "b"),
    ("ZRANGE", "{t}z", "0", "-1"),
    ("ZRANGE", "{t}z", "0", "-1", "WITHSCORES"),
    ("ZREVRANGEBYSCORE", "{t}z", "+inf", "-inf", "WITHSCORES"),
    ("ZADD", "{t}z1", "7", "m"),
    ("ZRANDMEMBER", "{t}z1", "-2", "WITHSCORES"),
    ("ZUNION", "1", "{t}z", "WITHSCORES"),
    ("ZPOPMIN", "{t}z"),
    ("ZPOPMAX", "{t}z", "1"),
    ("ZRANK", "{t}z", "none"),
    ("GET", "{t}h"),
    ("EXISTS", "{t}s", "{t}none"),
    ("TYPE", "{t}z"),
]


def test_resp3_replies_are_byte_equal_to_redis_server(
    router: Proxy, backends: list[Server]
) -> None:
    def run(port: int, password: str) -> list[bytes]:
        with raw(port) as s:
            s.sendall(cmd("HELLO", "3", "AUTH", "default", password))
            assert read_replies(s, 1)[0].startswith(b"%7\r\n")
            s.sendall(b"".join(cmd(*c) for c in RESP3_SCRIPT))
            return read_replies(s, len(RESP3_SCRIPT))

    routed = run(router.port, BACKEND_PW)
    home = backends[where(backends, ["{t}s"])["{t}s"]]
    for b in backends:
        with direct(b) as r:
            r.flushall()
    reference = run(home.port, BACKEND_PW)
    for c, got, want in zip(RESP3_SCRIPT, routed, reference):
        assert (c, got) == (c, want)


def test_redis_py_with_each_protocol(router: Proxy, backends: list[Server]) -> None:
    """redis-py's default (RESP3 in redis-py 8), explicit RESP3 and RESP2: the same answers."""
    for protocol in (None, 3, 2):
        redis_py_session(router, backends, protocol)


def redis_py_session(router: Proxy, backends: list[Server], protocol: int | None) -> None:
    for b in backends:
        with direct(b) as d:
            d.flushall()
    kw: dict[str, object] = {"port": router.port, "password": BACKEND_PW}
    kw["decode_responses"] = True
    if protocol is None:
        r = redis.Redis(host="127.0.0.1", socket_timeout=10, **kw)  # type: ignore[arg-type]
    else:
        r = rc(protocol=protocol, **kw)
    spread = keys_on_distinct_backends(backends, router)
    with r:
        assert r.ping() is True
        assert r.set("py:s", "v") is True and r.get("py:s") == "v"
        assert r.get("py:none") is None
        assert r.incr("py:n") == 1 and r.incrby("py:n", 4) == 5
        r.mset({k: k.upper() for k in spread})
        assert r.mget([*spread, "py:none"]) == [k.upper() for k in spread] + [None]
        assert r.delete(*spread, "py:none") == len(spread)
        r.hset("py:h", mapping={"f": "v", "g": "w"})
        assert r.hgetall("py:h") == {"f": "v", "g": "w"}
        assert r.hgetall("py:none") == {}
        r.sadd("py:set", "a", "b")
        assert r.smembers("py:set") == {"a", "b"}
        r.zadd("py:z", {"a": 1.5, "b": 2})
        assert r.zscore("py:z", "a") == 1.5
        assert r.zscore("py:z", "none") is None
        assert r.zincrby("py:z", 1, "a") == 2.5
        # redis-py gives pairs as tuples (RESP2, and its RESP3 default) or lists (protocol=3).
        pairs = r.zrange("py:z", 0, -1, withscores=True)
        assert [tuple(p) for p in pairs] == [("b", 2.0), ("a", 2.5)]
        assert r.zmscore("py:z", ["a", "none"]) == [2.5, None]
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            r.get("py:h")
        pipe = r.pipeline(transaction=False)
        for i in range(50):
            pipe.set(f"py:p:{i}", i)
            pipe.get(f"py:p:{i}")
            pipe.get("py:none")
        pipe.hgetall("py:h")
        pipe.smembers("py:set")
        pipe.zscore("py:z", "b")
        pipe.mget(["py:p:1", "py:none", "py:p:2"])
        expect: list[object] = []
        for i in range(50):
            expect += [True, str(i), None]
        expect += [{"f": "v", "g": "w"}, {"a", "b"}, 2.0, ["1", None, "2"]]
        assert pipe.execute() == expect
        hello = r.execute_command("HELLO")
        proto = hello["proto"] if isinstance(hello, dict) else hello[hello.index("proto") + 1]
        assert proto == (protocol or 3)


def test_unauthenticated_limits_like_redis(router: Proxy) -> None:
    with raw(router.port) as s:
        s.sendall(b"*100\r\n")
        assert read_replies(s, 1) == [b"-ERR Protocol error: unauthenticated multibulk length\r\n"]
        assert s.recv(10) == b""


def test_auth_replies_without_password_match_redis(backends: list[Server]) -> None:
    plain = redis_server(password=None)
    port = my_port()
    try:
        with Proxy(pool_yaml(f"127.0.0.1:{port}", servers_of([plain])), port):
            replies = []
            for p in (plain.port, port):
                with raw(p) as s:
                    s.sendall(cmd("AUTH", "x") + cmd("AUTH", "default", "x") + cmd("PING"))
                    replies.append(read_replies(s, 3))
            assert replies[0] == replies[1]
            assert replies[1][0].startswith(b"-ERR AUTH <password> called without any password")
    finally:
        plain.stop()


def test_redis_db_selects_database_on_backends(backends: list[Server]) -> None:
    port = my_port()
    conf = pool_yaml(f"127.0.0.1:{port}", servers_of(backends), redis_auth=BACKEND_PW, redis_db=3)
    with Proxy(conf, port), rc(port=port, password=BACKEND_PW) as r:
        keys = [f"db:{i}" for i in range(20)]
        r.mset({k: "in-3" for k in keys})
        assert r.mget(keys) == [b"in-3"] * 20
        assert r.execute_command("SELECT", "0") in (True, b"OK")
        with pytest.raises(redis.ResponseError, match="only supports SELECT 0"):
            r.execute_command("SELECT", "3")
    in_db3 = 0
    for b in backends:
        with direct(b, db=3) as d3, direct(b, db=0) as d0:
            in_db3 += d3.exists(*keys)
            assert d0.exists(*keys) == 0
    assert in_db3 == 20


def test_local_commands(router: Proxy) -> None:
    with raw(router.port) as s:
        s.sendall(
            cmd("AUTH", BACKEND_PW)
            + cmd("PING")
            + cmd("ping", "hello")
            + cmd("ECHO", "e c h o")
            + cmd("SELECT", "0")
            + cmd("select", "x")
            + cmd("PING", "a", "b")
            + cmd("QUIT")
        )
        assert read_replies(s, 8) == [
            b"+OK\r\n",
            b"+PONG\r\n",
            b"$5\r\nhello\r\n",
            b"$7\r\ne c h o\r\n",
            b"+OK\r\n",
            b"-ERR value is not an integer or out of range\r\n",
            b"-ERR wrong number of arguments for 'ping' command\r\n",
            b"+OK\r\n",
        ]
        assert s.recv(10) == b"", "QUIT closes the connection"


def test_unsupported_commands_leave_the_connection_usable(router: Proxy) -> None:
    with client(router) as r:
        for args in (("KEYS", "*"), ("FLUSHALL",), ("WATCH", "x"), ("INFO",), ("MSETNX", "a", "b")):
            with pytest.raises(redis.ResponseError, match="unsupported command"):
                r.execute_command(*args)
        with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get'"):
            r.execute_command("GET")
        r.set("still", "ok")
        assert r.get("still") == "ok"


def test_inline_commands_and_protocol_errors(router: Proxy) -> None:
    with raw(router.port) as s:
        s.sendall(f"AUTH {BACKEND_PW}\r\nSET inl 'a b'\r\nGET inl\r\n\r\nPING\r\n".encode())
        assert read_replies(s, 4) == [b"+OK\r\n", b"+OK\r\n", b"$3\r\na b\r\n", b"+PONG\r\n"]
        s.sendall(b"*1\r\n$x\r\n")
        assert read_replies(s, 1) == [b"-ERR Protocol error: invalid bulk length\r\n"]
        assert s.recv(10) == b"", "closed after a protocol error, as redis-server does"


def test_large_values(router: Proxy) -> None:
    big = os.urandom(3 * 1024 * 1024)
    with rc(port=router.port, password=BACKEND_PW) as r:
        r.set("big", big)
        r.set("big2", big[::-1])
        assert r.get("big") == big
        assert r.mget(["big", "big2", "nil"]) == [big, big[::-1], None]


# ---------------------------------------------------------------- real clients, sockets


@pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed")
def test_redis_cli_over_unix_socket(backends: list[Server], tmp_path: Path) -> None:
    sock = str(tmp_path / "route.sock")
    conf = pool_yaml(f"{sock} 0600", servers_of(backends), redis_auth=BACKEND_PW)
    with Proxy(conf, None, unix=sock):
        assert oct(os.stat(sock).st_mode & 0o777) == "0o600"
        cli = [REDIS_CLI or "redis-cli", "-s", sock, "--no-auth-warning", "-a", BACKEND_PW]

        def run(*args: str) -> str:
            return subprocess.run(
                cli + list(args), capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()

        assert run("SET", "cli:a", "1") == "OK"
        assert run("MSET", "cli:b", "2", "cli:c", "3") == "OK"
        assert run("MGET", "cli:a", "cli:b", "cli:x", "cli:c").split("\n") == ["1", "2", "", "3"]
        assert run("INCR", "cli:a") == "2"
        assert run("DEL", "cli:a", "cli:b", "cli:c") == "3"
        assert "unsupported command" in run("KEYS", "*")
        piped = subprocess.run(
            cli,
            check=False,
            input="SET cli:p 9\nGET cli:p\nPING\n",
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert piped.stdout.split() == ["OK", "9", "PONG"]
    assert not os.path.exists(sock)


def php_has_redis() -> bool:
    if PHP is None:
        return False
    out = subprocess.run([PHP, "-m"], capture_output=True, text=True, check=False).stdout
    return "redis" in out.split()


def test_php_redis(router: Proxy, backends: list[Server]) -> None:
    if not php_has_redis():
        pytest.skip("php-redis not installed")
    script = f"""
$r = new Redis();
$r->connect('127.0.0.1', {router.port});
var_dump($r->auth('{BACKEND_PW}'));
var_dump($r->set('php:a', 'hello'));
var_dump($r->get('php:a'));
var_dump($r->mset(['php:b' => '1', 'php:c' => '2', 'php:d' => '3']));
var_dump(implode(',', $r->mget(['php:d', 'php:a', 'php:none', 'php:b'])));
var_dump($r->incrBy('php:b', 5));
var_dump($r->hSet('php:h', 'f', 'v'));
var_dump($r->hGetAll('php:h'));
var_dump($r->del('php:a', 'php:b', 'php:c', 'php:zz'));
var_dump($r->ping());
$r->close();
$bad = new Redis();
$bad->connect('127.0.0.1', {router.port});
try {{ echo $bad->auth('wrong') ? "AUTHOK\\n" : "REFUSED\\n"; }}
catch (Exception $e) {{ echo "REFUSED:", $e->getMessage(), "\\n"; }}
try {{ var_dump($bad->get('php:d')); }} catch (Exception $e) {{ echo "NOAUTH:", $e->getMessage(), "\\n"; }}
"""
    out = subprocess.run(
        [PHP or "php", "-r", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.count("bool(true)") >= 3
    assert 'string(5) "hello"' in text
    assert 'string(10) "3,hello,,1"' in text
    assert "int(6)" in text
    assert '["f"]=>\n  string(1) "v"' in text
    assert "int(3)" in text
    assert "REFUSED" in text and "AUTHOK" not in text, "wrong password refused"
    assert "NOAUTH" in text
    assert where(backends, ["php:d"])


# ---------------------------------------------------------------- failures, placement


def test_dead_backend_gives_prompt_error(backends: list[Server]) -> None:
    victims = [redis_server() for _ in range(3)]
    port = my_port()
    conf = pool_yaml(
        f"127.0.0.1:{port}",
        servers_of(victims),
        hash="murmur",
        redis_auth=BACKEND_PW,
        timeout=3000,
        auto_eject_hosts=False,
    )
    try:
        with Proxy(conf, port) as proxy, client(proxy) as r:
            keys = [f"dead:{i}" for i in range(60)]
            r.mset({k: "1" for k in keys})
            placed = where(victims, keys)
            dead = placed[keys[0]]
            on_dead = [k for k in keys if placed[k] == dead]
            alive = [k for k in keys if placed[k] != dead]
            assert alive, "keys spread over the backends"
            victims[dead].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            victims[dead].proc.wait()  # type: ignore[union-attr]
            # An error reply at once (the refused connection), not the pool's 3 s timeout.
            with pytest.raises(redis.ResponseError) as err:
                r.get(on_dead[0])
            assert "timed out" not in str(err.value)
            with pytest.raises(redis.ResponseError):
                r.mget(keys)
            # Split writes fail as a whole when one part fails (twemproxy does the same);
            # the parts on live servers have been applied.
            with pytest.raises(redis.ResponseError):
                r.mset({k: "2" for k in keys})
            assert r.mget(alive) == ["2"] * len(alive)
            with pytest.raises(redis.ResponseError):
                r.delete(*keys)
            assert r.exists(*alive) == 0
            r.mset({k: "1" for k in alive})
            assert r.get(alive[0]) == "1", "the connection stays usable"
            assert r.mget(alive) == ["1"] * len(alive)
            assert proxy.stats()["rpool"]["forward_error"] > 0
    finally:
        for v in victims:
            v.stop()


def test_ejected_backend_is_probed_with_auth_ping_and_returns(backends: list[Server]) -> None:
    victims = [redis_server() for _ in range(2)]
    port = my_port()
    conf = pool_yaml(
        f"127.0.0.1:{port}",
        servers_of(victims),
        hash="murmur",
        redis_auth=BACKEND_PW,
        timeout=1000,
        auto_eject_hosts=True,
        server_failure_limit=1,
        server_retry_timeout=300,
    )
    try:
        with Proxy(conf, port) as proxy, client(proxy) as r:
            keys = [f"ej:{i}" for i in range(40)]
            r.mset({k: "1" for k in keys})
            placed = where(victims, keys)
            key = next(k for k in keys if placed[k] == 1)
            dead_port = victims[1].port
            victims[1].stop()
            with pytest.raises(redis.ResponseError):
                r.get(key)
            # Ejected: its keys now go to the live server (a miss, not an error).
            deadline = time.monotonic() + 5
            while True:
                try:
                    assert r.get(key) is None
                    break
                except redis.ResponseError:
                    assert time.monotonic() < deadline, "server never ejected"
                    time.sleep(0.05)
            assert proxy.stats()["rpool"]["server_ejects"] >= 1
            # Back on the same port with the same password: the AUTH + PING probe lets it in.
            back = Server(victims[1].argv, port=dead_port).start()
            victims[1] = back
            deadline = time.monotonic() + 10
            while True:
                r.set(key, "again")
                with direct(back) as d:
                    if d.get(key) == "again":
                        break
                assert time.monotonic() < deadline, "server never returned"
                time.sleep(0.1)
    finally:
        for v in victims:
            v.stop()


def test_backend_refusing_auth_is_a_backend_failure(backends: list[Server]) -> None:
    port = my_port()
    conf = pool_yaml(f"127.0.0.1:{port}", servers_of(backends[:1]), redis_auth="not-the-password")
    with (
        Proxy(conf, port),
        rc(port=port, password="not-the-password") as r,
        pytest.raises(redis.ResponseError, match="refused AUTH"),
    ):
        r.get("x")


def test_unresponsive_backend_times_out(tmp_path: Path) -> None:
    silent = listening_socket()
    port = my_port()
    conf = pool_yaml(f"127.0.0.1:{port}", [f"127.0.0.1:{silent.getsockname()[1]}:1"], timeout=300)
    try:
        # The router's 300 ms timeout answers, not the client's 5 s socket timeout.
        with (
            Proxy(conf, port),
            rc(port=port, socket_timeout=5) as r,
            pytest.raises(redis.ResponseError, match="timed out"),
        ):
            r.get("x")
    finally:
        silent.close()


@pytest.mark.skipif(NUTCRACKER is None, reason="nutcracker not installed")
@pytest.mark.parametrize(
    ("hash_name", "distribution"),
    [("fnv1a_64", "ketama"), ("murmur", "ketama"), ("md5", "modula")],
)
def test_placement_matches_nutcracker(
    backends: list[Server], hash_name: str, distribution: str
) -> None:
    # The varying part first: twemproxy's fnv1a_64 is 32-bit FNV with the 64-bit constants cut
    # to 32 bits (multiplier 435), so keys differing only at the end hash into a few narrow
    # clusters, which now and then all sit on one server's arcs of the ring.
    keys = [f"{i}:place" for i in range(300)] + ["{t}1", "{t}2"]
    placements = []
    for nut in (True, False):
        for b in backends:
            with direct(b) as d:
                d.flushall()
        port = my_port()
        conf = pool_yaml(
            f"127.0.0.1:{port}",
            servers_of(backends),
            hash=hash_name,
            hash_tag='"{}"',
            distribution=distribution,
            redis_auth=BACKEND_PW,
        )
        # Raw RESP: nutcracker closes connections that send redis-py's CLIENT SETINFO.
        with Proxy(conf, port, nutcracker=nut), raw(port) as s:
            s.sendall(cmd("AUTH", BACKEND_PW) + b"".join(cmd("SET", k, "1") for k in keys))
            assert set(read_replies(s, len(keys) + 1)) == {b"+OK\r\n"}
        placements.append(where(backends, keys))
    assert len(placements[1]) == len(keys)
    assert placements[0] == placements[1]
    assert len(set(placements[1].values())) >= 2


def test_config_test_flag_accepts_redis_pool(tmp_path: Path) -> None:
    conf = tmp_path / "r.yml"
    conf.write_text(
        pool_yaml(
            "127.0.0.1:22199",
            ["127.0.0.1:6379:1"],
            redis_auth="pw",
            redis_db=2,
            client_auth="other",
        )
    )
    r = subprocess.run(
        [memfleet_bin(), "route", "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "syntax is ok" in r.stderr


def test_announced_bulk_size_is_not_allocated_up_front(backends: list[Server]) -> None:
    port = my_port()
    conf = pool_yaml(f"127.0.0.1:{port}", servers_of(backends[:1]), redis_auth=BACKEND_PW)
    with Proxy(conf, port) as p:
        assert p.proc is not None
        before = p.rss_mb()
        socks = [raw(port) for _ in range(8)]
        try:
            for s in socks:
                # Authenticated (before AUTH redis's 16 KB limit would refuse it): 20 bytes
                # announcing a 512 MB argument, then nothing.
                s.sendall(cmd("AUTH", BACKEND_PW))
                assert s.recv(100) == b"+OK\r\n"
                s.sendall(b"*2\r\n$3\r\nGET\r\n$536870912\r\nabc")
            with raw(port) as s:  # every request above has been read once this answers
                s.sendall(cmd("AUTH", BACKEND_PW) + cmd("PING"))
                assert s.recv(100) != b""
            grown_mb = p.rss_mb() - before
            assert grown_mb < 64, f"router grew {grown_mb:.0f} MB for 8 announced 512 MB values"
        finally:
            for s in socks:
                s.close()


def test_clients_that_never_read_large_gets_hold_up_neither_memory_nor_others() -> None:
    """As in test_router.py, for a Redis pool: four clients pipelining GETs of a 500 KB value
    and never reading. Before the router judged replies on their way, it forwarded them all:
    with 20,000 per client redis-server grew to 4 GB of output buffers and another client's
    GET went unanswered."""
    # A router that forwards every GET makes redis buffer the replies: bounded here, so a
    # run against one fails without taking the machine's memory.
    limit = ("--client-output-buffer-limit", "normal 256mb 256mb 0")
    with redis_server(BACKEND_PW, *limit) as backend:
        port = my_port()
        conf = pool_yaml(f"127.0.0.1:{port}", servers_of([backend]), redis_auth=BACKEND_PW)
        with Proxy(conf, port) as p:
            with raw(port) as s:
                s.sendall(cmd("AUTH", BACKEND_PW) + cmd("SET", "big", "v" * 500_000))
                # The two replies may arrive in one read or two.
                got = b""
                while got.count(b"\r\n") < 2 and (chunk := s.recv(100)):
                    got += chunk
                assert got == b"+OK\r\n+OK\r\n"
            before, backend_before = p.rss_mb(), backend.rss_mb()
            auth, get = cmd("AUTH", BACKEND_PW), cmd("GET", "big")
            socks = [never_reading_client(port, auth, get) for _ in range(4)]
            try:

                def gets() -> int:
                    info = direct(backend).info("commandstats")
                    return int(info.get("cmdstat_get", {}).get("calls", 0))

                served = settle(gets)
                grown, backend_grown = p.rss_mb() - before, backend.rss_mb() - backend_before
                print(f"router grew {grown:.0f} MB, redis {backend_grown:.0f} MB; {served} GETs")
                assert grown < 4 * 40, f"router grew {grown:.0f} MB"
                assert backend_grown < 4 * 40, f"redis-server grew {backend_grown:.0f} MB"
                # Each GET forwarded is a reply someone holds (about 25 per client: what
                # fills 8 MB and the sockets' buffers); all 4,000 before.
                assert served < 4 * 60, f"{served} GETs forwarded for clients that read nothing"
                with raw(port) as s:
                    s.sendall(cmd("AUTH", BACKEND_PW) + cmd("GET", "nokey"))
                    assert read_replies(s, 2) == [b"+OK\r\n", b"$-1\r\n"]
            finally:
                for s in socks:
                    s.close()


def test_reload_with_a_new_password_asks_clients_to_authenticate_again(
    backends: list[Server],
) -> None:
    port = my_port()
    servers = servers_of(backends[:1])
    conf = pool_yaml(f"127.0.0.1:{port}", servers, redis_auth=BACKEND_PW)
    with Proxy(conf, port) as p, raw(port) as s:
        s.sendall(cmd("AUTH", BACKEND_PW) + cmd("PING"))
        got = b""
        while got.count(b"\r\n") < 2:
            got += s.recv(100)
        assert got == b"+OK\r\n+PONG\r\n"
        Path(p.conf_path).write_text(
            pool_yaml(f"127.0.0.1:{port}", servers, redis_auth=BACKEND_PW, client_auth="new-pw")
        )
        assert p.proc is not None
        p.proc.send_signal(signal.SIGHUP)
        # The reload is asynchronous: ask until the new configuration answers.
        deadline = time.monotonic() + 10
        while True:
            s.sendall(cmd("PING"))
            reply = s.recv(200)
            if reply.startswith(b"-NOAUTH"):
                break
            assert reply == b"+PONG\r\n", reply
            assert time.monotonic() < deadline, "reload never took effect"
            time.sleep(0.05)
        s.sendall(cmd("AUTH", "new-pw") + cmd("PING"))
        got = b""
        while got.count(b"\r\n") < 2:
            got += s.recv(100)
        assert got == b"+OK\r\n+PONG\r\n"
