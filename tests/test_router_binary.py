"""Binary-protocol clients through `memfleet route`: requests translated to text for the
backends (Debian's memcached or `memfleet serve`) and routed like text requests. pylibmc with
binary=True, PHP memcached with OPT_BINARY_PROTOCOL, Ruby's dalli, raw packets, SASL."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pylibmc
import pytest
from binary_corpus import (
    ADD,
    APPEND,
    DECR,
    DELETE,
    FLUSH,
    GAT,
    GET,
    GETK,
    GETKQ,
    INCR,
    INCRQ,
    NOOP,
    QUIT,
    SASL_AUTH,
    SASL_LIST,
    SET,
    SETQ,
    STAT,
    TOUCH,
    VERBOSITY,
    VERSION,
    arith_extras,
    parse,
    pkt,
    store_extras,
)
from harness import Server, free_port, keys_held, memcached, memfleet
from mcrouter_harness import McRouter, fetch, pools, servers
from proxy_harness import Proxy, pool_yaml
from test_binary_clients import RUBY_SCRIPT, have_dalli

Packet = tuple[int, int, int, int, bytes, bytes, bytes]

__all__ = ["servers"]


@pytest.fixture(params=["memcached", "memfleet"])
def backends(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    start = memcached if request.param == "memcached" else memfleet
    started = [start("-t", "1").start() for _ in range(2)]
    yield started
    for s in started:
        s.stop()


def router_for(backends: list[Server], **opts: object) -> Proxy:
    port = free_port()
    servers = [f"127.0.0.1:{b.port}:1" for b in backends]
    conf = pool_yaml(
        "alpha", f"127.0.0.1:{port}", servers, hash="md5", distribution="ketama", **opts
    )
    return Proxy(conf, port)


@pytest.fixture
def router(backends: list[Server]) -> Iterator[Proxy]:
    with router_for(backends, timeout=1000) as p:
        yield p


def exchange(port: int, data: bytes, until: int, wait: float = 5.0) -> tuple[list[Packet], bool]:
    """Sends `data`; reads until a packet with opcode `until` arrives (or the server closes).
    The packets and whether the connection closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return parse(got)[0], True
            got += chunk
            packets, _ = parse(got)
            if any(p[0] == until for p in packets):
                return packets, False


def test_pylibmc_binary_through_the_router(router: Proxy, backends: list[Server]) -> None:
    c = pylibmc.Client([f"127.0.0.1:{router.port}"], binary=True, behaviors={"cas": True})
    data = {f"bk{i}": f"v{i}" * (i + 1) for i in range(40)}
    c.set_multi(data)
    assert c.get_multi([*data, "missing"]) == data
    held = [set(keys_held(b.port or 0, list(data))) for b in backends]
    assert all(held) and held[0] | held[1] == set(data), "keys spread over both backends"
    assert c.set("a", "hello") and c.get("a") == "hello"
    assert c.add("a", "no") is False
    assert c.replace("a", "world")
    assert c.append("a", "!") and c.prepend("a", ">")
    assert c.get("a") == ">world!"
    value, cas = c.gets("a")
    assert value == ">world!" and cas
    assert c.cas("a", "new", cas)
    assert not c.cas("a", "newer", cas)
    assert c.get("a") == "new"
    c.set("n", 10)
    assert c.incr("n", 5) == 15
    assert c.decr("n", 20) == 0
    with pytest.raises(pylibmc.NotFound):
        c.incr("nocounter", 1)
    assert c.touch("a", 100)
    assert not c.touch("missing", 100)
    assert c.delete("a") and c.get("a") is None
    assert not c.delete("a")
    stats = c.get_stats()[0][1]
    assert stats["pid"] == str(router.proc.pid).encode()
    c.flush_all()
    assert c.get_multi(list(data)) == {}


def test_quiet_multi_get_fans_out_and_answers_in_order(router: Proxy) -> None:
    keys = [f"q{i}".encode() for i in range(30)]
    sets = b"".join(
        pkt(SETQ, k, store_extras(flags=i), b"v" + k, opaque=i) for i, k in enumerate(keys)
    )
    packets, _ = exchange(router.port, sets + pkt(NOOP, opaque=999), NOOP)
    assert [(p[0], p[1], p[2]) for p in packets] == [(NOOP, 0, 999)], "quiet sets say nothing"
    asked = keys[::2] + [b"absent"]
    gets = b"".join(pkt(GETKQ, k, opaque=100 + i) for i, k in enumerate(asked))
    packets, _ = exchange(router.port, gets + pkt(NOOP, opaque=7), NOOP)
    hits = packets[:-1]
    assert packets[-1][:3] == (NOOP, 0, 7)
    assert [p[5] for p in hits] == keys[::2], "hits in request order, the miss silent"
    for i, p in enumerate(hits):
        opcode, status, opaque, cas, extras, key, value = p
        assert (opcode, status, opaque) == (GETKQ, 0, 100 + i)
        assert struct.unpack(">I", extras)[0] == keys.index(key) and value == b"v" + key
        assert cas != 0


def test_binary_semantics_kept(router: Proxy) -> None:
    port = router.port or 0
    # incr with an initial value creates the counter; exptime 0xffffffff does not.
    reqs = (
        pkt(INCR, b"ctr", arith_extras(5, initial=10), opaque=1)
        + pkt(INCR, b"ctr", arith_extras(5, initial=10), opaque=2)
        + pkt(DECR, b"nope", arith_extras(1, exptime=0xFFFFFFFF), opaque=3)
        + pkt(INCRQ, b"ctr", arith_extras(1), opaque=4)
        + pkt(SET, b"s", store_extras(3), b"abc", opaque=5)
        + pkt(INCR, b"s", arith_extras(1), opaque=6)
        + pkt(ADD, b"s", store_extras(), b"x", opaque=7)
        + pkt(APPEND, b"missing", b"", b"x", opaque=8)
        + pkt(GETK, b"missing", opaque=9)
        + pkt(GAT, b"s", struct.pack(">I", 100), opaque=10)
        + pkt(TOUCH, b"s", struct.pack(">I", 100), opaque=11)
        + pkt(GET, b"ctr", opaque=12)
        + pkt(VERSION, opaque=13)
        + pkt(SASL_LIST, opaque=14)
        + pkt(VERBOSITY, b"", struct.pack(">I", 1), opaque=16)
        + pkt(GET, b"a key", opaque=17)
        + pkt(SET, b"big", store_extras(), b"x" * (2 << 20), opaque=18)
        + pkt(NOOP, opaque=15)
    )
    packets, _ = exchange(port, reqs, NOOP)
    got = {p[2]: p for p in packets}
    order = [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 15]
    assert [p[2] for p in packets] == order, "replies in request order, incrq quiet"
    assert got[1][6] == struct.pack(">Q", 10) and got[2][6] == struct.pack(">Q", 15)
    assert got[2][3] != 0, "incr returns the counter's CAS"
    assert got[3][1] == 0x01
    assert got[5][1] == 0
    assert (got[6][1], got[6][6]) == (0x06, b"Non-numeric server-side value for incr or decr")
    assert got[7][1] == 0x02 and got[8][1] == 0x05
    assert got[9][1:2] == (0x01,) and got[9][5] == b"missing"
    assert (got[10][1], got[10][4], got[10][6]) == (0, struct.pack(">I", 3), b"abc")
    assert (got[11][1], got[11][6]) == (0, b"")
    assert got[12][6] == b"16"
    assert got[13][6].startswith(b"1.6.18")
    assert got[14][1] == 0x81, "no SASL configured: unknown command, as memcached without -S"
    assert got[16][1] == 0, "verbosity accepted, the next request read right"
    assert got[17][1] == 0x04, "a key text cannot carry"
    assert got[18][1] == 0x03, "too large, its value swallowed"
    # CAS round trip: a set with the CAS of a get, then with a stale one; delete with CAS.
    packets, _ = exchange(port, pkt(GET, b"s", opaque=1), GET)
    cas = packets[0][3]
    reqs = (
        pkt(SET, b"s", store_extras(), b"new", cas=cas, opaque=2)
        + pkt(SET, b"s", store_extras(), b"late", cas=cas, opaque=3)
        + pkt(DELETE, b"s", cas=cas, opaque=4)
        + pkt(GET, b"s", opaque=5)
    )
    packets, _ = exchange(port, reqs, GET)
    assert [(p[2], p[1]) for p in packets] == [(2, 0), (3, 0x02), (4, 0x02), (5, 0)]
    reqs = pkt(DELETE, b"s", cas=packets[-1][3], opaque=6) + pkt(GET, b"s", opaque=7)
    packets, _ = exchange(port, reqs, GET)
    assert [(p[2], p[1]) for p in packets] == [(6, 0), (7, 0x01)]
    # stat: the router's own statistics; flush goes to every backend; quit closes.
    packets, _ = exchange(port, pkt(STAT) + pkt(NOOP), NOOP)
    stats = {p[5]: p[6] for p in packets if p[0] == STAT and p[5]}
    assert stats[b"pool"] == b"alpha" and b"pid" in stats
    packets, _ = exchange(port, pkt(FLUSH, opaque=1) + pkt(GET, b"ctr") + pkt(QUIT), QUIT)
    assert [(p[0], p[1]) for p in packets] == [(FLUSH, 0), (GET, 0x01), (QUIT, 0)]


def test_backend_down_answers_an_error_not_silence() -> None:
    dead = free_port()
    conf_port = free_port()
    conf = pool_yaml(
        "alpha",
        f"127.0.0.1:{conf_port}",
        [f"127.0.0.1:{dead}:1"],
        timeout=500,
        auto_eject_hosts=False,
    )
    with Proxy(conf, conf_port):
        reqs = pkt(SETQ, b"k", store_extras(), b"v", opaque=1) + pkt(GET, b"k", opaque=2)
        packets, _ = exchange(conf_port, reqs + pkt(NOOP, opaque=3), NOOP)
    assert [(p[2], p[1]) for p in packets] == [(1, 0x86), (2, 0x86), (3, 0)]


def test_sasl_plain_with_client_auth(backends: list[Server]) -> None:
    with router_for(backends, client_auth="s3cret") as r:
        port = r.port or 0
        packets, closed = exchange(port, pkt(GET, b"k") + pkt(NOOP), NOOP)
        assert [(p[0], p[1]) for p in packets] == [(GET, 0x20)] and closed
        packets, _ = exchange(port, pkt(SASL_LIST), SASL_LIST)
        assert packets[0][6] == b"PLAIN"
        bad = pkt(SASL_AUTH, b"PLAIN", b"", b"\x00bob\x00wrong")
        packets, _ = exchange(port, bad + pkt(NOOP), NOOP)
        assert [(p[0], p[1]) for p in packets] == [(SASL_AUTH, 0x20), (NOOP, 0x20)]
        good = pkt(SASL_AUTH, b"PLAIN", b"", b"\x00bob\x00s3cret")
        reqs = good + pkt(SET, b"k", store_extras(), b"v") + pkt(GET, b"k")
        packets, _ = exchange(port, reqs, GET)
        assert [(p[0], p[1], p[6]) for p in packets] == [
            (SASL_AUTH, 0, b"Authenticated"),
            (SET, 0, b""),
            (GET, 0, b"v"),
        ]
        # pylibmc's wheel bundles libsasl2, which looks for its PLAIN plugin in /usr/lib64.
        plugins = [
            p for p in ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib64/sasl2") if Path(p).is_dir()
        ]
        env = {**os.environ, **({"SASL_PATH": plugins[0]} if plugins else {})}
        script = (
            "import sys, pylibmc\n"
            "c = pylibmc.Client([sys.argv[1]], binary=True, username='u', password=sys.argv[2])\n"
            "try:\n    c.set('p', 'q'); print(c.get('p'))\n"
            "except pylibmc.Error as e:\n    print('error', e)\n"
        )

        def run(password: str) -> str:
            argv = [sys.executable, "-c", script, f"127.0.0.1:{port}", password]
            out = subprocess.run(
                argv, capture_output=True, text=True, timeout=30, env=env, check=False
            )
            return out.stdout.strip()

        assert run("s3cret") == "q"
        assert run("wrong").startswith("error")


PHP_BINARY = r"""
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->setOption(Memcached::OPT_COMPRESSION, false);
$m->addServer('127.0.0.1', (int)$argv[1]);
$out = [];
$out['set'] = $m->set('php:a', 'hello');
$out['get'] = $m->get('php:a');
$m->setMulti(['php:b' => 'B', 'php:c' => 'C']);
$out['multi'] = $m->getMulti(['php:a', 'php:b', 'php:c', 'php:none']);
$out['add'] = $m->add('php:a', 'x');
$out['miss'] = $m->get('php:none') === false && $m->getResultCode() == Memcached::RES_NOTFOUND;
$m->set('php:n', 5);
$out['incr'] = $m->increment('php:n', 3);
$out['decr'] = $m->decrement('php:n', 100);
$out['incr_initial'] = $m->increment('php:fresh', 1, 40);
$out['append'] = $m->append('php:a', '!') && $m->get('php:a') === 'hello!';
$r = $m->get('php:a', null, Memcached::GET_EXTENDED);
$out['cas'] = $m->cas($r['cas'], 'php:a', 'swapped');
$out['cas_stale'] = $m->cas($r['cas'], 'php:a', 'late');
$out['touch'] = $m->touch('php:a', 100);
$out['delete'] = $m->delete('php:a') && $m->get('php:a') === false;
$out['version'] = array_values($m->getVersion())[0];
$out['flush'] = $m->flush() && $m->get('php:b') === false;
echo json_encode($out);
"""


@pytest.mark.skipif(shutil.which("php") is None, reason="php-cli not installed")
def test_php_memcached_binary_protocol(router: Proxy) -> None:
    import json

    mods = subprocess.run(["php", "-m"], capture_output=True, text=True, check=True).stdout
    if "memcached" not in mods.split():
        pytest.skip("php-memcached not installed")
    out = subprocess.run(
        ["php", "-r", PHP_BINARY, str(router.port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got == {
        "set": True,
        "get": "hello",
        "multi": {"php:a": "hello", "php:b": "B", "php:c": "C"},
        "add": False,
        "miss": True,
        "incr": 8,
        "decr": 0,
        "incr_initial": 40,
        "append": True,
        "cas": True,
        "cas_stale": False,
        "touch": True,
        "delete": True,
        "version": "1.6.18",
        "flush": True,
    }, out.stdout + out.stderr


@pytest.mark.skipif(not have_dalli(), reason="ruby-dalli / ruby-activesupport missing")
def test_dalli_and_rails_cache_store_through_the_router(router: Proxy) -> None:
    out = subprocess.run(
        ["ruby", str(RUBY_SCRIPT), f"127.0.0.1:{router.port}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "DALLI_THROUGH_ROUTER": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok get_multi" in out.stdout and "ok rails read_multi" in out.stdout
    assert out.stdout.rstrip().endswith("all passed")


@pytest.mark.skipif(shutil.which("memccapable") is None, reason="libmemcached-tools missing")
def test_memccapable_binary_passes_through_the_router(router: Proxy) -> None:
    out = subprocess.run(
        ["memccapable", "-h", "127.0.0.1", "-p", str(router.port), "-b", "-t", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0 and "All tests passed" in out.stdout, out.stdout + out.stderr


def test_mcrouter_replication_and_failover_apply_to_binary_clients(servers) -> None:  # type: ignore[no-untyped-def]
    a, b = servers(2)
    sync = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "AllSyncRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with McRouter(sync).start() as r:
        reqs = pkt(SET, b"k", store_extras(), b"x", opaque=1) + pkt(GET, b"k", opaque=2)
        packets, _ = exchange(r.port or 0, reqs, GET)
        assert [(p[2], p[1], p[6]) for p in packets] == [(1, 0, b""), (2, 0, b"x")]
        assert fetch(a.port or 0, "k") == fetch(b.port or 0, "k") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
        packets, _ = exchange(r.port or 0, pkt(DELETE, b"k"), DELETE)
        assert packets[0][1] == 0
        assert fetch(a.port or 0, "k") == fetch(b.port or 0, "k") == b"END\r\n"
    failover = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with McRouter(failover).start() as r:
        a.stop()
        reqs = pkt(SET, b"f", store_extras(), b"second", opaque=1) + pkt(GET, b"f", opaque=2)
        packets, _ = exchange(r.port or 0, reqs, GET)
        assert [(p[2], p[1], p[6]) for p in packets] == [(1, 0, b""), (2, 0, b"second")]
        assert fetch(b.port or 0, "f") == b"VALUE f 0 6\r\nsecond\r\nEND\r\n"
