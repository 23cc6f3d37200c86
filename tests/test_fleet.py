"""`memfleet route` (nutcracker YAML) on a fleet of real hosts: four cache hosts and a router
host, each its own network namespace (fleet.py), with real faults: kill -9, SIGSTOP, a 20 ms
link, a blackholed link. The test process is the client, on the fleet's bridge.

Every loop is bounded in count and time; what is asserted is what the client sees (errors,
misses, hits) and the router's counters, never how fast the router is. The one time figure
asserted is a property of the injected fault itself: a host 20 ms away answers no sooner.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest
from fleet import Fleet, Host, memcached_argv, serve_argv
from harness import Conn, memfleet_bin
from proxy_harness import pool_yaml

CACHES = ["a", "b", "c", "d"]
VICTIM = "b"
ROUTER_PORT = 22121
STATS_PORT = 22222
HIT = "hit"
MISS = "miss"
TIMED_OUT = "SERVER_ERROR Connection timed out"

MakeFleet = Callable[[str, list[str]], Fleet]


def get(c: Conn, key: str) -> str:
    """`hit`, `miss`, or the error line the router answered."""
    c.send(f"get {key}\r\n".encode())
    line = c.read_line()
    if line.startswith(b"VALUE "):
        c.read_until(b"END\r\n")
        return HIT
    if line == b"END\r\n":
        return MISS
    return line.decode(errors="replace").strip()


def server_name(host: str) -> str:
    """The host's name in the router's config, stats and log."""
    return f"cache-{host}"


def stats(router: Host) -> dict:
    with socket.create_connection((router.ip, STATS_PORT), timeout=5) as s:
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return dict(json.loads(buf)["pool"])


class Cluster:
    """Four cache hosts (memcached or `memfleet serve`) behind `memfleet route` on its own
    host, with 200 keys set through the router and the host each one landed on."""

    def __init__(self, make_fleet: MakeFleet, name: str, server: str, **pool: object) -> None:
        self.fleet = make_fleet(name, [*CACHES, "router"])
        self.argv = memcached_argv if server == "memcached" else serve_argv
        for n in CACHES:
            self.start_cache(n)
        self.router = self.fleet.host("router")
        servers = [f"{self.fleet.addr(n)}:1 {server_name(n)}" for n in CACHES]
        conf = self.fleet.file(
            "route.yml",
            pool_yaml("pool", self.router.addr(ROUTER_PORT), servers, hash="md5", **pool),
        )
        self.router.spawn(
            [memfleet_bin(), "route", "-T", "2", "-c", str(conf), "-s", str(STATS_PORT),
             "-a", self.router.ip, "-o", str(self.log_path)],
            port=ROUTER_PORT,
        )  # fmt: skip
        self.keys = [f"key:{i}" for i in range(200)]
        with self.client() as c:
            for k in self.keys:
                assert c.request(f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode()) == b"STORED\r\n"
        self.where = self.placement()
        assert all(self.where[n] for n in CACHES), {n: len(v) for n, v in self.where.items()}

    @property
    def log_path(self) -> str:
        return str(self.fleet.dir / "route.log")

    def start_cache(self, name: str) -> None:
        h = self.fleet.host(name)
        h.spawn(self.argv(h.ip, 11211), port=11211)

    def client(self, timeout: float = 5.0) -> Conn:
        return Conn(ROUTER_PORT, timeout=timeout, host=self.router.ip)

    def placement(self) -> dict[str, list[str]]:
        """Which host holds each key, asked of the hosts themselves."""
        where: dict[str, list[str]] = {}
        for n in CACHES:
            with Conn(11211, host=self.fleet.ip(n)) as c:
                where[n] = [k for k in self.keys if get(c, k) == HIT]
        assert sorted(k for ks in where.values() for k in ks) == sorted(self.keys)
        return where

    def others(self) -> list[str]:
        return [k for n in CACHES if n != VICTIM for k in self.where[n]]

    def log(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""


FAILURE_LIMIT = 2
RETRY_MS = 400
EJECTING: dict[str, object] = {
    "timeout": 1000,
    "auto_eject_hosts": True,
    "server_failure_limit": FAILURE_LIMIT,
    "server_retry_timeout": RETRY_MS,
}


@pytest.mark.parametrize("server", ["memcached", "serve"])
def test_killed_host_is_ejected_then_failures_stop(make_fleet: MakeFleet, server: str) -> None:
    cl = Cluster(make_fleet, f"eject-{server}", server, **EJECTING)
    victim_keys = cl.where[VICTIM]
    cl.fleet.host(VICTIM).kill()
    with cl.client() as c:
        failures = 0
        for i in range(50):
            reply = get(c, victim_keys[i % len(victim_keys)])
            if reply.startswith("SERVER_ERROR"):
                failures += 1
                continue
            # Remapped onto a live host, which never held the key.
            assert reply == MISS
            break
        else:
            pytest.fail(f"still failing after 50 gets; router log:\n{cl.log()}")
        assert 1 <= failures <= 2 * FAILURE_LIMIT, failures
        st = stats(cl.router)
        assert st["server_ejects"] >= 1 and st[server_name(VICTIM)]["server_ejected_at"] > 0, st
        assert f"server '{server_name(VICTIM)}' ejected" in cl.log()

        # From the ejection on, no client sees an error: not on the victim's keys, not on the
        # others', and not while the router probes the dead host every server_retry_timeout.
        # Paced to span three retry periods (1.2 s), and at most 2,000 gets.
        after: list[str] = []
        n = 0
        start = time.monotonic()
        while n < 2000 and time.monotonic() - start < 3 * RETRY_MS / 1000:
            reply = get(c, cl.keys[n % len(cl.keys)])
            if reply not in (HIT, MISS):
                after.append(reply)
            n += 1
            time.sleep(0.001)
        assert n >= 200 and after == [], (n, after[:5])
        for k in cl.others():
            assert get(c, k) == HIT, k

        # The host comes back on its address: the next probe puts it back in the ring.
        cl.start_cache(VICTIM)
        deadline = time.monotonic() + 10
        while "is back" not in cl.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"server '{server_name(VICTIM)}' is back" in cl.log()
        key = victim_keys[0]
        assert c.request(f"set {key} 0 0 3\r\nnew\r\n".encode()) == b"STORED\r\n"
    with Conn(11211, host=cl.fleet.ip(VICTIM)) as d:
        assert get(d, key) == HIT, "the key is routed to its host again"


@pytest.mark.parametrize("fault", ["sigstop", "blackhole"])
def test_unanswering_host_times_out_others_keep_working(make_fleet: MakeFleet, fault: str) -> None:
    cl = Cluster(make_fleet, f"hang-{fault}", "memcached", timeout=300)
    victim = cl.fleet.host(VICTIM)
    victim_keys = cl.where[VICTIM]
    others = cl.others()
    if fault == "sigstop":
        victim.pause()
    else:
        victim.blackhole()
    with cl.client() as hung, cl.client() as c:
        # While one client waits on the hung host, another is served by the rest.
        hung.send(f"get {victim_keys[0]}\r\n".encode())
        for k in others[:30]:
            assert get(c, k) == HIT, k
        assert hung.read_line().decode().strip() == TIMED_OUT
        for k in victim_keys[1:4]:
            assert get(c, k) == TIMED_OUT, k
        for k in others[30:60]:
            assert get(c, k) == HIT, k
        assert stats(cl.router)[server_name(VICTIM)]["server_timedout"] >= 4

        if fault == "sigstop":
            victim.resume()
        else:
            victim.heal()
        replies = []
        for _ in range(40):
            replies.append(get(c, victim_keys[0]))
            if replies[-1] == HIT:
                break
            time.sleep(0.05)
        assert replies[-1] == HIT, replies
        for k in victim_keys:
            assert get(c, k) == HIT, k


def test_host_20ms_away_answers_no_sooner_others_unaffected(make_fleet: MakeFleet) -> None:
    cl = Cluster(make_fleet, "remote", "memcached", timeout=2000)
    cl.fleet.host(VICTIM).delay(ms=20)

    def timed(c: Conn, keys: list[str]) -> list[float]:
        took = []
        for k in keys:
            t0 = time.monotonic()
            assert get(c, k) == HIT, k
            took.append(time.monotonic() - t0)
        return took

    with cl.client() as c:
        remote = timed(c, cl.where[VICTIM][:20])
        local = timed(c, cl.others()[:40])
    assert min(remote) >= 0.020, remote
    # A floor, not a speed claim: if the delay sat on the router's link, every get would wait.
    assert min(local) < 0.020, local
    cl.fleet.host(VICTIM).heal()
    with cl.client() as c:
        assert min(timed(c, cl.where[VICTIM][:20])) < 0.020


def test_link_loss_drops_packets_and_heal_restores(make_fleet: MakeFleet) -> None:
    fleet = make_fleet("loss", ["a"])
    a = fleet.host("a")
    a.spawn(memcached_argv(a.ip), port=11211)
    a.loss(100)
    with pytest.raises(OSError), Conn(11211, host=a.ip, timeout=0.5) as c:
        c.request(b"version\r\n")
    a.heal()
    with Conn(11211, host=a.ip) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION ")


def test_fleet_leaves_nothing_behind(make_fleet: MakeFleet) -> None:
    # What a killed earlier run would have left: a namespace (with a process in it), a link
    # and a directory, tagged with a pid that no longer exists.
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale_ns = f"mff-{gone.pid}-1-x"
    stale_link = f"mf{gone.pid}a0"
    subprocess.run(["ip", "netns", "add", stale_ns], check=True)
    subprocess.run(
        ["ip", "link", "add", stale_link, "type", "veth", "peer", "name", f"mf{gone.pid}a1"],
        check=True,
    )
    stale_proc = subprocess.Popen(["ip", "netns", "exec", stale_ns, "sleep", "60"])
    stale_dir = Path(tempfile.mkdtemp(prefix=f"mff-{gone.pid}-1-x-"))
    fleet = make_fleet("tidy", ["a"])
    assert stale_ns not in netns_names()
    assert stale_link not in link_names()
    assert not stale_dir.exists()
    assert stale_proc.wait(timeout=5) == -signal.SIGKILL

    host = fleet.host("a")
    sleeper = host.spawn(["sleep", "60"])
    host.blackhole()
    fleet.close()
    assert sleeper.popen.poll() is not None
    assert host.ns not in netns_names()
    assert not fleet.dir.exists()
    left = [n for n in link_names() if n.startswith(fleet.link_tag)]
    assert left == [], left


def netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def link_names() -> list[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return [line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()]
