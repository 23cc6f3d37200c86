"""`memfleet route --config file:PATH` (mcrouter JSON) on a fleet of real hosts: cache hosts
and a router host, each its own network namespace (fleet.py), with real faults: kill -9,
SIGSTOP, a 20 ms link. The test process is the client, on the fleet's bridge.

Every loop is bounded in count and time; what is asserted is what the client sees (errors,
hits) and what the cache hosts hold (values, TTLs read with `mg <key> t`), never a speed.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from fleet import Fleet, Host, memcached_argv
from harness import Conn, eventually
from mcrouter_harness import route_argv

POOL = ["a", "b", "c", "d"]
VICTIM = "b"
PORT = 5000
FAILOVER_EXPTIME = 10
KEYS = [f"key:{i}" for i in range(400)]

MakeFleet = Callable[[str, list[str]], Fleet]


def start_caches(fleet: Fleet, names: list[str]) -> None:
    for n in names:
        h = fleet.host(n)
        h.spawn(memcached_argv(h.ip), port=11211)


def start_router(fleet: Fleet, name: str, config: dict, port: int = PORT, *extra: str) -> Host:
    """The router on the `router` host, with a short server timeout and a quick TKO."""
    router = fleet.host("router")
    conf = fleet.file(f"{name}.json", json.dumps(config))
    options = {
        "--server-timeout": "300",
        "--timeouts-until-tko": "2",
        "--probe-timeout-initial": "60000",
        "--probe-timeout-max": "60000",
    }
    argv = route_argv(conf, port, router.ip, fleet.dir / f"{name}.log", options, extra)
    router.spawn(argv, port=port)
    return router


def pools(fleet: Fleet, **named: list[str]) -> dict:
    return {name: {"servers": [fleet.addr(h) for h in hosts]} for name, hosts in named.items()}


def store(c: Conn, key: str, value: str, exptime: int = 0) -> str:
    return c.request(f"set {key} 0 {exptime} {len(value)}\r\n{value}\r\n".encode()).decode().strip()


def value_of(c: Conn, key: str) -> str | None:
    """The value, None on a miss; raises with the line on an error reply."""
    c.send(f"get {key}\r\n".encode())
    line = c.read_line()
    if line == b"END\r\n":
        return None
    if not line.startswith(b"VALUE "):
        raise LookupError(line.decode(errors="replace").strip())
    data = c.read_until(b"END\r\n")
    return data[: -len(b"\r\nEND\r\n")].decode()


def ttl_on(host: Host, key: str) -> int | None:
    """The remaining TTL (-1: none) of `key` on the host itself; None on a miss."""
    with Conn(11211, host=host.ip) as c:
        line = c.request(f"mg {key} t\r\n".encode())
    if not line.startswith(b"HD"):
        return None
    return int(line.split(b" t")[1].split()[0])


def held_by(fleet: Fleet, name: str, keys: list[str]) -> list[str]:
    with Conn(11211, host=fleet.ip(name)) as c:
        return [k for k in keys if value_of(c, k) is not None]


def failed_gets(router: Host, port: int, keys: list[str], rounds: int) -> int:
    """Sets then gets each key `rounds` times through the router; counts the gets that did not
    return the value just set (an error reply or a miss)."""
    failures = 0
    with Conn(port, host=router.ip) as c:
        for r in range(rounds):
            for k in keys:
                value = f"{k}/{r}"
                store(c, k, value)
                try:
                    if value_of(c, k) != value:
                        failures += 1
                except LookupError:
                    failures += 1
    return failures


def test_gutter_serves_a_killed_hosts_keys_with_short_ttls(make_fleet: MakeFleet) -> None:
    fleet = make_fleet("gutter", [*POOL, "gutter", "router"])
    start_caches(fleet, [*POOL, "gutter"])
    servers = pools(fleet, A=POOL, G=["gutter"])
    gutter_port, plain_port = PORT, PORT + 1
    gutter_conf = {
        "pools": servers,
        "route": {
            "type": "FailoverWithExptimeRoute",
            "normal": "PoolRoute|A",
            "failover": ["PoolRoute|G"],
            "failover_exptime": FAILOVER_EXPTIME,
        },
    }
    router = start_router(fleet, "gutter", gutter_conf, gutter_port)
    start_router(fleet, "plain", {"pools": servers, "route": "PoolRoute|A"}, plain_port)

    with Conn(gutter_port, host=router.ip) as c:
        for k in KEYS:
            assert store(c, k, k, exptime=1000) == "STORED", k
    where = {n: held_by(fleet, n, KEYS) for n in POOL}
    assert sum(len(v) for v in where.values()) == len(KEYS) and all(where.values()), where
    assert held_by(fleet, "gutter", KEYS) == [], "the gutter is idle while the pool answers"
    victim_keys = where[VICTIM][:40]
    others = [k for n in POOL if n != VICTIM for k in where[n]][:40]

    fleet.host(VICTIM).kill()
    # One request to each router first: its connection is refused and the victim is TKO.
    failed_gets(router, gutter_port, victim_keys[:1], 1)
    failed_gets(router, plain_port, victim_keys[:1], 1)
    for name in ("gutter", "plain"):
        log = (fleet.dir / f"{name}.log").read_text()
        assert f"server '{fleet.addr(VICTIM)}' marked hard TKO" in log, log

    rounds = 5
    with_gutter = failed_gets(router, gutter_port, victim_keys, rounds)
    without = failed_gets(router, plain_port, victim_keys, rounds)
    assert without >= len(victim_keys) * rounds // 2, without
    assert with_gutter == 0 and with_gutter <= without // 100, (with_gutter, without)
    assert failed_gets(router, gutter_port, others, 1) == 0, "the live hosts serve their keys"
    assert held_by(fleet, "gutter", others) == [], "only the dead host's keys failed over"

    # Items written during the failure live on the gutter with at most failover_exptime left,
    # whatever exptime the client asked for.
    gutter = fleet.host("gutter")
    with Conn(gutter_port, host=router.ip) as c:
        for i, k in enumerate(victim_keys):
            assert store(c, k, "late", exptime=(0, 1000, 5)[i % 3]) == "STORED", k
        for k in others[:5]:
            assert store(c, k, "late", exptime=1000) == "STORED", k
    for i, k in enumerate(victim_keys):
        ttl = ttl_on(gutter, k)
        cap = 5 if i % 3 == 2 else FAILOVER_EXPTIME
        assert ttl is not None and 0 < ttl <= cap, (k, ttl)
    for k in others[:5]:
        home = next(n for n in POOL if k in where[n])
        assert (ttl_on(fleet.host(home), k) or 0) > 900, ("the normal route keeps it", k)


def test_majority_survives_a_paused_replica_all_sync_reports_it(make_fleet: MakeFleet) -> None:
    replicas = ["a", "b", "c"]
    fleet = make_fleet("majority", [*replicas, "router"])
    start_caches(fleet, replicas)
    children = ["PoolRoute|A", "PoolRoute|B", "PoolRoute|C"]
    config = {
        "pools": pools(fleet, A=["a"], B=["b"], C=["c"]),
        "routes": [
            {"aliases": ["/m/j/"], "route": {"type": "AllMajorityRoute", "children": children}},
            {"aliases": ["/s/y/"], "route": {"type": "AllSyncRoute", "children": children}},
        ],
    }
    router = start_router(fleet, "majority", config, PORT, "--route-prefix", "/m/j/")
    with Conn(PORT, host=router.ip) as c:
        assert store(c, "/m/j/healthy", "1") == "STORED"
        assert store(c, "/s/y/healthy", "1") == "STORED"
    fleet.host("c").pause()
    majority, sync = [], []
    with Conn(PORT, host=router.ip) as c:
        for i in range(6):
            majority.append(store(c, f"/m/j/maj{i}", "m"))
            sync.append(store(c, f"/s/y/syn{i}", "s"))
    assert majority == ["STORED"] * 6, majority
    assert all(r.startswith("SERVER_ERROR") for r in sync), sync
    # The majority's writes reached the two live replicas; AllSync wrote them too but said so.
    for n in ("a", "b"):
        assert held_by(fleet, n, [f"maj{i}" for i in range(6)]) == [f"maj{i}" for i in range(6)]
        assert held_by(fleet, n, [f"syn{i}" for i in range(6)]) == [f"syn{i}" for i in range(6)]
    fleet.host("c").resume()


def test_all_async_reaches_a_host_20ms_away(make_fleet: MakeFleet) -> None:
    fleet = make_fleet("async", ["near", "far", "router"])
    start_caches(fleet, ["near", "far"])
    config = {
        "pools": pools(fleet, N=["near"], F=["far"]),
        "route": {"type": "AllAsyncRoute", "children": ["PoolRoute|N", "PoolRoute|F"]},
    }
    router = start_router(fleet, "async", config, PORT, "--server-timeout", "2000")
    fleet.host("far").delay(ms=20)
    keys = [f"async:{i}" for i in range(30)]
    with Conn(PORT, host=router.ip) as c:
        # AllAsyncRoute answers with NullRoute's reply before any child has.
        replies = [store(c, k, k) for k in keys]
    assert replies == ["NOT_STORED"] * len(keys), replies
    for n in ("near", "far"):

        def arrived(n: str = n) -> bool:
            return held_by(fleet, n, keys) == keys

        eventually(arrived, f"every async write on {n}")


def test_asynclog_deletes_reach_a_paused_host_after_the_router_is_killed(
    make_fleet: MakeFleet,
) -> None:
    fleet = make_fleet("asynclog", [*POOL, "router"])
    start_caches(fleet, POOL)
    config = {"pools": pools(fleet, A=POOL), "route": "PoolRoute|A"}
    spool_dir = fleet.dir / "spool"
    spool = spool_dir / f"{fleet.addr(VICTIM)}.asynclog"
    router = start_router(fleet, "asynclog", config, PORT, "--async-dir", str(spool_dir))
    keys = [f"del:{i}" for i in range(1000)]
    with Conn(PORT, host=router.ip) as c:
        for k in keys:
            assert store(c, k, k) == "STORED", k
    victim = held_by(fleet, VICTIM, keys)
    assert victim

    fleet.host(VICTIM).pause()
    try:
        with Conn(PORT, host=router.ip) as c:
            replies = {c.request(f"delete {k}\r\n".encode()) for k in keys}
        # The victim's deletes time out (then fail at once, TKO) and are spooled, answered
        # NOT_FOUND: the client sees no error.
        assert replies == {b"DELETED\r\n", b"NOT_FOUND\r\n"}, replies
        assert spool.read_text().split() == victim
        # Let the replay thread try the hung host a few times (it runs every 0.5 s): what it
        # sends now must not be deletes that run when the host resumes.
        time.sleep(1.5)
        router.kill()
    finally:
        fleet.host(VICTIM).resume()
    # The first deletes timed out on the wire and may land late; the TKO'd ones were never sent.
    assert set(victim[2:]) <= set(held_by(fleet, VICTIM, keys))
    assert all(held_by(fleet, n, keys) == [] for n in POOL if n != VICTIM)

    start_router(fleet, "asynclog", config, PORT, "--async-dir", str(spool_dir))
    eventually(lambda: held_by(fleet, VICTIM, keys) == [], "the spool replayed", limit=15)
    eventually(lambda: spool.read_text() == "", "the spool emptied")
    log = (fleet.dir / "asynclog.log").read_text()
    assert f"{len(victim)} deletes for {fleet.addr(VICTIM)} left from an earlier run" in log, log
