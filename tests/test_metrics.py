"""Prometheus `/metrics` of `memfleet serve -o metrics=…` and `memfleet route --metrics …`,
`stats latency` and `stats hotkeys`, driven through the built binary with real traffic."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections import Counter

import pytest
from harness import Conn, Server, eventually, free_port, memcached, memfleet, memfleet_bin
from mcrouter_harness import McRouter
from proxy_harness import Proxy, pool_yaml

PROMTOOL = shutil.which("promtool")

Labels = frozenset[tuple[str, str]]

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse(text: str) -> dict[tuple[str, Labels], float]:
    """Samples of a text exposition, keyed by name and label set."""
    out: dict[tuple[str, Labels], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset((k, unescape(v)) for k, v in LABEL.findall(m.group(2) or ""))
        key = (m.group(1), labels)
        assert key not in out, f"duplicate sample {line!r}"
        out[key] = float(m.group(3))
    return out


def value(samples: dict[tuple[str, Labels], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(r.read().decode())


def connections(port: int, name: str) -> float:
    return value(parse(scrape(port)), name)


def promtool_check(text: str) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus; scripts/setup)")
    r = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def listening_tcp_ports(server: Server) -> set[int]:
    """TCP ports the server process listens on (its socket fds matched in /proc/net/tcp*)."""
    assert server.proc is not None
    pid = server.proc.pid
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def stats(c: Conn, arg: str) -> list[tuple[str, str]]:
    reply = c.request(f"stats {arg}\r\n".encode(), b"END\r\n").decode()
    lines = [ln for ln in reply.split("\r\n") if ln.startswith("STAT ")]
    return [(ln.split(" ", 2)[1], ln.split(" ", 2)[2]) for ln in lines]


def traffic(c: Conn) -> None:
    """3 sets, 5 get hits, 2 get misses, 1 delete hit, 1 miss, 2 incr hits, 1 cas badval."""
    for k in ("a", "b", "n"):
        assert c.request(f"set {k} 0 0 1\r\n1\r\n".encode()) == b"STORED\r\n"
    for k in ("a", "a", "b"):
        c.request(f"get {k}\r\n".encode(), b"END\r\n")
    # Pipelined: one read, one batch of four requests timed together.
    c.send(b"get n\r\nget a\r\nget x\r\nget y\r\n")
    for _ in range(4):
        c.read_until(b"END\r\n")
    assert c.request(b"delete b\r\n") == b"DELETED\r\n"
    assert c.request(b"delete b\r\n") == b"NOT_FOUND\r\n"
    assert c.request(b"incr n 1\r\n") == b"2\r\n"
    assert c.request(b"incr n 1\r\n") == b"3\r\n"
    assert c.request(b"cas a 0 0 1 999999\r\nz\r\n") == b"EXISTS\r\n"
    # A last round trip: the worker has recorded the batches before it answers this one.
    c.request(b"version\r\n")


def test_server_metrics_after_known_traffic() -> None:
    mport = free_port()
    with memfleet("-m", "32", "-o", f"metrics=127.0.0.1:{mport}") as srv, Conn(srv.port) as c:
        traffic(c)
        # The harness's readiness probe may not be closed on its worker yet.
        eventually(lambda: connections(mport, "memcached_current_connections") == 1, "one client")
        text = scrape(mport)
        s = parse(text)
        promtool_check(text)
        cmd = "memcached_commands_total"
        assert value(s, cmd, command="get", status="hit") == 5
        assert value(s, cmd, command="get", status="miss") == 2
        assert value(s, cmd, command="delete", status="hit") == 1
        assert value(s, cmd, command="delete", status="miss") == 1
        assert value(s, cmd, command="incr", status="hit") == 2
        assert value(s, cmd, command="cas", status="badval") == 1
        # memcached's cmd_set counts the cas: the exporter's set = cmd_set - cas.
        assert value(s, cmd, command="set", status="hit") == 3
        assert value(s, "memcached_up") == 1
        assert value(s, "memcached_current_items") == 2
        assert value(s, "memcached_items_total") == 3
        assert value(s, "memcached_limit_bytes") == 32 << 20
        assert value(s, "memcached_current_connections") == 1
        assert value(s, "memcached_connections_total") >= 1
        assert value(s, "memcached_read_bytes_total") > 100
        assert value(s, "memcached_items_evicted_total") == 0
        assert value(s, "memcached_slab_current_items", slab="1") == 2
        assert ("memcached_version", frozenset({("version", "1.6.18-memfleet-0.1.0")})) in s

        h = "memfleet_command_duration_seconds"
        assert value(s, h + "_count", command="get") == 7
        assert value(s, h + "_count", command="set") == 3
        assert value(s, h + "_count", command="cas") == 1
        assert value(s, h + "_count", command="incr") == 2
        for command in ("get", "set"):
            buckets = sorted(
                (float(dict(lb)["le"]), v)
                for (n, lb), v in s.items()
                if n == h + "_bucket" and dict(lb)["command"] == command
            )
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), "buckets are cumulative"
            assert buckets[-1] == (float("inf"), value(s, h + "_count", command=command))
            assert 0 < value(s, h + "_sum", command=command) < 10


def test_stats_latency_after_traffic_and_reset() -> None:
    with memfleet() as srv, Conn(srv.port) as c:
        traffic(c)
        lines = dict(stats(c, "latency"))
        assert lines["get:count"] == "7" and lines["set:count"] == "3", lines
        for command in ("get", "set", "delete", "incr"):
            qs = [float(lines[f"{command}:{q}_us"]) for q in ("p50", "p90", "p99", "p99.9", "max")]
            assert qs == sorted(qs), (command, qs)
            # From the read to the reply's write on loopback: above 0, far below a second.
            assert 0 < qs[0] and qs[-1] < 1_000_000, (command, qs)
        c.request(b"stats reset\r\n")
        c.request(b"version\r\n")
        after = dict(stats(c, "latency"))
        assert "get:count" not in after and "set:count" not in after, after


def test_a_paused_multiget_counts_once() -> None:
    """A get of large values pauses after each to write it, and resumes: still one get."""
    big = b"v" * 200_000
    with memfleet("-o", "hotkeys=1") as srv, Conn(srv.port) as c:
        for k in ("b1", "b2", "b3"):
            assert c.request(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(big), big)) == (
                b"STORED\r\n"
            )
        reply = c.request(b"get b1 b2 b3\r\n", b"END\r\n")
        assert reply.count(b"VALUE ") == 3
        c.request(b"version\r\n")
        assert dict(stats(c, "latency"))["get:count"] == "1"
        assert ("hotkey:b1", "2") in stats(c, "hotkeys")


def test_metrics_and_extras_are_off_by_default() -> None:
    with memfleet() as srv, Conn(srv.port) as c:
        assert listening_tcp_ports(srv) == {srv.port}
        assert stats(c, "hotkeys") == [("hotkeys_status", "disabled")]
    with memfleet("-o", "latency=off") as srv, Conn(srv.port) as c:
        traffic(c)
        assert stats(c, "latency") == [("latency_status", "disabled")]


def zipf_keys(n: int, distinct: int, s: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = [1 / r**s for r in range(1, distinct + 1)]
    ranks = rng.choices(range(distinct), weights=weights, k=n)
    # Key names unrelated to rank, so nothing can pass by sorting names.
    names = [f"user:{rng.randrange(10**9):09d}" for _ in range(distinct)]
    return [names[r] for r in ranks]


def test_hotkeys_report_zipf_top_ten() -> None:
    mport = free_port()
    keys = zipf_keys(200_000, 2000, 1.1, seed=15)
    truth = Counter(keys).most_common()
    with memfleet("-o", f"hotkeys=2,metrics=127.0.0.1:{mport}") as srv:
        conns = [Conn(srv.port), Conn(srv.port)]
        for i in range(0, len(keys), 500):
            c = conns[(i // 500) % 2]
            c.send("".join(f"get {k}\r\n" for k in keys[i : i + 500]).encode())
            for _ in range(500):
                c.read_until(b"END\r\n")
        c = conns[0]
        lines = stats(c, "hotkeys")
        assert lines[0] == ("sample_rate", "2")
        sampled = int(dict(lines)["sampled"])
        assert 0.4 * len(keys) < sampled < 0.6 * len(keys), sampled
        reported = [(k.removeprefix("hotkey:"), int(v)) for k, v in lines[2:]]
        assert len(reported) == 20
        assert {k for k, _ in reported[:10]} == {k for k, _ in truth[:10]}
        real = dict(truth)
        for k, est in reported[:10]:
            assert abs(est - real[k]) < 0.1 * real[k], (k, est, real[k])
        s = parse(scrape(mport))
        top = sorted(
            ((v, dict(lb)["key"]) for (n, lb), v in s.items() if n == "memfleet_hotkey_requests"),
            reverse=True,
        )
        assert {k for _, k in top[:10]} == {k for k, _ in truth[:10]}
        for c in conns:
            c.close()


def test_hotkey_labels_are_escaped() -> None:
    mport = free_port()
    with memfleet("-o", f"hotkeys=1,metrics=127.0.0.1:{mport}") as srv, Conn(srv.port) as c:
        odd = 'we"ird\\key'
        c.request(f"get {odd}\r\nget plain\r\n".encode(), b"END\r\nEND\r\n")
        c.request(b"version\r\n")
        text = scrape(mport)
        promtool_check(text)
        assert 'memfleet_hotkey_requests{key="we\\"ird\\\\key"} 1\n' in text
        assert ("memfleet_hotkey_requests", frozenset({("key", odd)})) in parse(text)
        assert ('hotkey:we"ird\\x5ckey', "1") in stats(c, "hotkeys")


def test_metrics_endpoint_answers_http_errors() -> None:
    mport = free_port()
    with memfleet("-o", f"metrics=127.0.0.1:{mport}"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/", timeout=5)
        assert e.value.code == 404
        req = urllib.request.Request(f"http://127.0.0.1:{mport}/metrics", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 405
        # Still serving after the errors.
        assert "memcached_up 1" in scrape(mport)


def test_bad_metrics_address_stops_the_start() -> None:
    r = subprocess.run(
        [memfleet_bin(), "serve", "-p", "-1", "-o", "metrics=nowhere"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert r.returncode != 0
    assert b"invalid metrics address 'nowhere'" in r.stderr, r.stderr


def sets_and_gets_then_scrape(c: Conn, mport: int) -> dict[tuple[str, Labels], float]:
    """40 sets and 40 gets through the router, then its checked and parsed metrics."""
    for i in range(40):
        assert c.request(f"set k{i} 0 0 1\r\nv\r\n".encode()) == b"STORED\r\n"
    for i in range(40):
        c.request(f"get k{i}\r\n".encode(), b"END\r\n")
    text = scrape(mport)
    promtool_check(text)
    return parse(text)


def test_router_metrics_per_pool_and_server() -> None:
    backends = [memfleet("-t", "1").start() for _ in range(2)]
    try:
        port = free_port()
        conf = pool_yaml(
            "alpha",
            f"127.0.0.1:{port}",
            [f"{b.address}:1 s{i}" for i, b in enumerate(backends)],
            hash="fnv1a_64",
            distribution="ketama",
        )
        plain = Proxy(conf, port)
        with plain as p:
            assert listening_tcp_ports(p) == {port, p.stats_port}
        mport = free_port()
        proxy = Proxy(conf, port)
        proxy.argv += ["--metrics", f"127.0.0.1:{mport}"]
        with proxy as p, Conn(port) as c:
            # The harness's readiness probe may not be closed on its worker yet.
            key = "memfleet_router_current_connections"
            eventually(lambda: connections(mport, key) == 1, "one client")
            s = sets_and_gets_then_scrape(c, mport)
            per_server = [
                value(s, "memfleet_router_server_requests_total", pool="alpha", server=f"s{i}")
                for i in range(2)
            ]
            assert sum(per_server) == 80 and min(per_server) > 0, per_server
            assert value(s, "memfleet_router_pool_requests_total", pool="alpha") == 80
            assert value(s, "memfleet_router_pool_forward_error_total", pool="alpha") == 0
            assert value(s, "memfleet_router_current_connections") == 1
            count = "memfleet_router_server_request_duration_seconds_count"
            assert sum(value(s, count, pool="alpha", server=f"s{i}") for i in range(2)) == 80
            assert (
                value(s, "memfleet_router_pool_request_duration_seconds_count", pool="alpha") == 80
            )
            # nutcracker's JSON is unchanged alongside.
            js = p.stats()
            assert sum(js["alpha"][f"s{i}"]["requests"] for i in range(2)) == 80

            # A dead server: its errors show up per server.
            backends[1].stop()
            for i in range(40):
                if c.request(f"get k{i}\r\n".encode(), b"END\r\n", b"ERROR").endswith(b"ERROR"):
                    c.read_line()
            s = parse(scrape(mport))
            errs = value(s, "memfleet_router_pool_forward_error_total", pool="alpha") + sum(
                value(s, "memfleet_router_server_err_total", pool="alpha", server=f"s{i}")
                for i in range(2)
            )
            assert errs > 0
    finally:
        for b in backends:
            b.stop()


def test_router_metrics_with_an_mcrouter_config() -> None:
    """`--metrics` with an mcrouter config: the executor's sends per mcrouter pool and
    server, and a killed server's hard TKO and the sends that failed at once on it."""
    a = [memcached().start() for _ in range(2)]
    b = memcached().start()
    try:
        config = {
            "pools": {
                "A": {"servers": [s.address for s in a]},
                "B": {"servers": [b.address]},
            },
            "route": {"type": "AllSyncRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
        }
        mport = free_port()
        with McRouter(config, "--metrics", f"127.0.0.1:{mport}") as r, Conn(r.port) as c:
            s = sets_and_gets_then_scrape(c, mport)
            req = "memfleet_router_server_requests_total"
            per_a = [value(s, req, pool="A", server=x.address) for x in a]
            assert sum(per_a) == 80 and min(per_a) > 0, per_a
            assert value(s, req, pool="B", server=b.address) == 80
            assert value(s, "memfleet_router_pool_requests_total", pool="A") == 80
            count = "memfleet_router_server_request_duration_seconds_count"
            assert value(s, count, pool="B", server=b.address) == 80
            for x in a:
                assert value(s, "memfleet_router_server_tko", pool="A", server=x.address) == 0

            a[1].stop()
            for i in range(40):
                c.request(f"get k{i}\r\n".encode(), b"END\r\n", b"\r\n")
            text = scrape(mport)
            promtool_check(text)
            s = parse(text)
            dead = {"pool": "A", "server": a[1].address}
            assert value(s, "memfleet_router_server_tko", **dead) == 2
            assert value(s, "memfleet_router_server_err_total", **dead) > 0
            assert value(s, "memfleet_router_server_tko_failed_total", **dead) > 0
            live = {"pool": "A", "server": a[0].address}
            assert value(s, "memfleet_router_server_tko_failed_total", **live) == 0
    finally:
        for x in [*a, b]:
            x.stop()
