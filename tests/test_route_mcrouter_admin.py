"""`memfleet route` with an mcrouter config: mcrouter's service-info gets
(`get __mcrouter__.<command>`), Rendezvous pools and RendezvousPolicy failover, checked
against real memcached servers and against the placements mcrouter's own hash code gives
(tests/vectors/mcrouter-rendezvous.json, mcrouter-ch3.json).
"""

from __future__ import annotations

import json
import socket
import zlib
from functools import cache

from harness import ROOT, Server, free_port
from mcrouter_harness import McRouter, fetch, pools, servers, store
from proxy_harness import Proxy, pool_yaml

__all__ = ["servers"]

VECTORS = ROOT / "tests" / "vectors"


@cache
def rendezvous_vectors() -> dict:
    return json.loads((VECTORS / "mcrouter-rendezvous.json").read_text())


@cache
def ch3_vectors() -> dict:
    return json.loads((VECTORS / "mcrouter-ch3.json").read_text())


def ch3_of(key: str, servers: int) -> int:
    """mcrouter's Ch3 pick for `key` over `servers` servers."""
    doc = ch3_vectors()
    column = doc["pool_sizes"].index(servers)
    return next(v["ch3"][column] for v in doc["vectors"] if v["key"] == key)


def admin(port: int, command: str) -> str:
    """The value of `get __mcrouter__.<command>` (which must come back as one VALUE)."""
    key = f"__mcrouter__.{command}"
    reply = fetch(port, key)
    head, _, rest = reply.partition(b"\r\n")
    parts = head.split()
    assert parts[:3] == [b"VALUE", key.encode(), b"0"], reply
    value = rest[: int(parts[3])]
    assert rest[int(parts[3]) :] == b"\r\nEND\r\n", reply
    return value.decode()


def holder(group: list[Server], key: str) -> int:
    """The index of the one server of `group` holding `key`."""
    on = [i for i, s in enumerate(group) if fetch(s.port, key) != b"END\r\n"]
    assert len(on) == 1, f"{key} on {on}"
    return on[0]


def test_service_info_gets(servers) -> None:
    a = servers(3)
    config = {
        "pools": pools(A=a),
        "route": {"type": "AllSyncRoute", "children": ["PoolRoute|A", "Pool|A"]},
    }
    with McRouter(config).start() as r:
        assert admin(r.port, "version").startswith("memfleet ")
        assert admin(r.port, "config_file") == r.conf_path
        assert 0 <= int(admin(r.port, "config_age")) < 600
        for i in range(20):
            key = str(i)
            dests = admin(r.port, f"route(set,{key})").split("\r\n")
            # The pool's Ch3 pick, then every server of the pool in order.
            assert dests == [a[ch3_of(key, 3)].address] + [s.address for s in a], dests
        assert admin(r.port, "route(fly,k)") == "ERROR: route: unknown request fly"
        assert admin(r.port, "route(get)") == "ERROR: route: 2 args expected"
        assert admin(r.port, "nope") == "ERROR: unknown command: nope"
        # Nothing was sent to a server under the service-info key.
        assert all(fetch(s.port, "__mcrouter__.version") == b"END\r\n" for s in a)


def test_rendezvous_pool_places_keys_as_mcrouter(servers) -> None:
    doc = rendezvous_vectors()
    column = 3  # the 5-server tag set
    tags = doc["rendezvous_tags"][column]
    group = servers(len(tags))
    config = {
        "pools": pools(A=group),
        "route": {
            "type": "PoolRoute",
            "pool": "A",
            "hash": {"hash_func": "Rendezvous", "tags": tags},
        },
    }
    keys = [v for v in doc["vectors"] if v["key"].isalnum()][:60]
    with McRouter(config).start() as r:
        for v in keys:
            assert store(r.port, v["key"]) == b"STORED\r\n"
            want = v["rendezvous"][column]
            assert holder(group, v["key"]) == want, v["key"]
            assert admin(r.port, f"route(get,{v['key']})") == group[want].address


def test_rendezvous_policy_fails_over_along_the_rendezvous_order(servers) -> None:
    doc = rendezvous_vectors()
    tags = doc["rendezvous_tags"][doc["rendezvous_order_config"]]
    group = servers(len(tags))
    config = {
        "pools": pools(A=group),
        "route": {
            "type": "FailoverRoute",
            "children": ["PoolRoute|A", "Pool|A"],
            "failover_policy": {"type": "RendezvousPolicy", "tags": tags},
        },
    }
    keys = [v for v in doc["vectors"] if v["key"].isdigit()][:40]
    with McRouter(config).start() as r:
        # Stop server 0: keys whose Ch3 pick is 0 fail over to the first other server in
        # their rendezvous order; the rest stay on their pick.
        group[0].stop()
        for v in keys:
            key = v["key"]
            assert store(r.port, key) == b"STORED\r\n"
            primary = ch3_of(key, len(group))
            want = primary
            if primary == 0:
                want = next(i for i in v["rendezvous_order"] if i != 0)
            assert holder(group[1:], key) + 1 == want, (key, primary, v["rendezvous_order"])


def test_nutcracker_routers_forward_service_info_keys(servers) -> None:
    """With a nutcracker YAML config the key is an ordinary key, stored on a server."""
    (backend,) = servers(1)
    port = free_port()
    with Proxy(pool_yaml("alpha", f"127.0.0.1:{port}", [f"{backend.address}:1"]), port):
        key = "__mcrouter__.version"
        assert fetch(port, key) == b"END\r\n"
        assert store(port, key, "mine") == b"STORED\r\n"
        assert fetch(port, key) == f"VALUE {key} 0 4\r\nmine\r\nEND\r\n".encode()
        assert fetch(backend.port, key) != b"END\r\n"


def host_name(pool: str, index: int, server: Server) -> str:
    """mcrouter's name of a destination handle (the harness runs with a 300 ms timeout)."""
    ap = f"{server.address}:ascii:plain:notcompressed"
    return f"host|pool={pool}|id={index}|ap={ap}|timeout=300ms|keep_routing_prefix=false|msb=0"


def test_route_handles_lists_the_handles_a_request_visits(servers) -> None:
    a, b = servers(3), servers(1)
    config = {
        "pools": pools(A=a, B=b),
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|A", "Pool|B"]},
    }
    with McRouter(config).start() as r:
        for i in range(10):
            key = str(i)
            pick = ch3_of(key, 3)
            want = [
                "proxy",
                " root",
                "  failover",
                "   asynclog:A",
                "    selection|hash|Ch3",
                f"     {host_name('A', pick, a[pick])}",
                f"   {host_name('B', 0, b[0])}",
            ]
            assert admin(r.port, f"route_handles(get,{key})") == "\n".join(want)
            # The hash picks the server the request really reaches.
            assert store(r.port, key) == b"STORED\r\n"
            assert holder(a, key) == pick
        assert admin(r.port, "route_handles(fly,k)") == "ERROR: route: unknown request fly"
        assert admin(r.port, "route_handles(get)") == "ERROR: route_handles: 2 args expected"


def test_pools_lists_each_pools_destinations(servers) -> None:
    a, b = servers(2), servers(1)
    config = {
        "pools": pools(B=b, A=a),
        "route": {"type": "AllSyncRoute", "children": ["PoolRoute|B", "PoolRoute|A"]},
    }
    with McRouter(config).start() as r:
        got = admin(r.port, "pools")
        want = {
            "A": [host_name("A", 0, a[0]), host_name("A", 1, a[1])],
            "B": [host_name("B", 0, b[0])],
        }
        assert json.loads(got) == want
        # Pretty-printed with sorted keys, as mcrouter prints it.
        assert got == json.dumps(want, indent=2, sort_keys=True)


def test_options_show_the_settings_under_mcrouters_names(servers) -> None:
    (a,) = servers(1)
    with McRouter({"pools": pools(A=[a]), "route": "PoolRoute|A"}).start() as r:
        lines = admin(r.port, "options").split("\n")
        opts = dict(line.split(" ", 1) for line in lines)
        assert opts["server_timeout_ms"] == "300"
        assert opts["probe_delay_initial_ms"] == "100"
        assert opts["probe_delay_max_ms"] == "400"
        assert opts["asynclog_disable"] == "0"
        assert admin(r.port, "options(server_timeout_ms)") == "300"
        assert admin(r.port, "options(default_route)") == opts["default_route"]
        assert admin(r.port, "options(version)").startswith("memfleet ")
        assert admin(r.port, "options(nope)") == "ERROR: options: option nope not found"
        assert admin(r.port, "options(a,b)") == "ERROR: options: 0 or 1 args expected"


def test_hostid_is_derived_from_the_host_name(servers) -> None:
    (a,) = servers(1)
    # nutcracker's crc32 of the host name: bits 16..30 of the CRC-32.
    want = (zlib.crc32(socket.gethostname().encode()) >> 16) & 0x7FFF
    with McRouter({"pools": pools(A=[a]), "route": "PoolRoute|A"}).start() as r:
        assert admin(r.port, "hostid") == str(want)
