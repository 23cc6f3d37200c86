"""`memfleet route` with DNS-named servers: Debian's dnsmasq serves the records on a
loopback port, memcached runs on 127.0.0.x addresses, and rewriting dnsmasq's hosts file
(then SIGHUP) adds and removes servers as a Kubernetes headless Service would."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import Conn, Server, free_port, keys_held, memcached_command, terminate, wait_for_port
from mcrouter_harness import McRouter
from proxy_harness import Proxy, pool_yaml

DNSMASQ = shutil.which("dnsmasq") or (
    "/usr/sbin/dnsmasq" if os.path.exists("/usr/sbin/dnsmasq") else None
)
ADDRS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
NAME = "cache.memfleet.test"

pytestmark = pytest.mark.skipif(DNSMASQ is None, reason="dnsmasq not installed (scripts/setup)")


def port_free_on(addrs: list[str], kind: int = socket.SOCK_STREAM) -> int:
    """A port free on every address, so each memcached can use the same one."""
    for _ in range(100):
        port = free_port()
        try:
            for a in addrs:
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind((a, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no common free port")


class Dnsmasq:
    """dnsmasq in the foreground on 127.0.0.1:port answering only from a hosts file."""

    def __init__(self, hosts: str, extra: tuple[str, ...] = ()) -> None:
        self.dir = tempfile.mkdtemp(prefix="dnsmasq-")
        os.chmod(self.dir, 0o755)
        self.hosts = Path(self.dir, "hosts")
        self.hosts.write_text(hosts)
        self.port = port_free_on(["127.0.0.1"], socket.SOCK_DGRAM)
        user = ["--user=root"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen(
            [
                DNSMASQ or "dnsmasq",
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                f"--addn-hosts={self.hosts}",
                f"--port={self.port}",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                "--pid-file=",
                "--local-ttl=0",
                *user,
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.served: dict[str, set[str]] = {}
        self.wait_serving(hosts)

    def set(self, hosts: str) -> None:
        """New hosts-file records, read again on SIGHUP; returns once dnsmasq answers them."""
        self.hosts.write_text(hosts)
        self.proc.send_signal(signal.SIGHUP)
        self.wait_serving(hosts)

    def wait_serving(self, hosts: str, limit: float = 10.0) -> None:
        # Names of the previous records that are gone must stop resolving.
        want: dict[str, set[str]] = {name: set() for name in self.served}
        for line in hosts.splitlines():
            addr, *names = line.split()
            for name in names:
                want.setdefault(name, set()).add(addr)
        self.served = want
        deadline = time.monotonic() + limit
        while any(self.lookup(name) != addrs for name, addrs in want.items()):
            if self.proc.poll() is not None:
                raise AssertionError("dnsmasq exited: " + self.proc.stderr.read().decode())
            if time.monotonic() > deadline:
                raise AssertionError(f"dnsmasq does not answer {want} after {limit} s")
            time.sleep(0.02)

    def lookup(self, name: str) -> set[str]:
        """The A records dnsmasq answers for `name` (empty if none or no answer yet)."""
        qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
        query = (
            struct.pack(">HHHHHH", 0x4D46, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1)
        )
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.5)
            try:
                s.sendto(query, ("127.0.0.1", self.port))
                reply = s.recv(4096)
            except OSError:
                return set()
        answers = struct.unpack(">H", reply[6:8])[0]
        at = 12 + len(qname) + 4  # past the header and the question
        found = set()
        for _ in range(answers):
            at += 2 if reply[at] & 0xC0 == 0xC0 else reply.index(b"\0", at) + 1 - at
            rtype, _cls, _ttl, size = struct.unpack(">HHIH", reply[at : at + 10])
            at += 10
            if rtype == 1 and size == 4:
                found.add(socket.inet_ntoa(reply[at : at + 4]))
            at += size
        return found

    def stop(self) -> None:
        terminate(self.proc)
        if self.proc.stderr:
            self.proc.stderr.close()


def memcached_on(addr: str, port: int) -> Server:
    srv = Server(memcached_command("-l", addr, "-p", str(port), "-U", "0", "-t", "1"))
    srv.start()
    wait_for_port(port, host=addr)
    return srv


def a_records(addrs: list[str]) -> str:
    return "".join(f"{a} {NAME}\n" for a in addrs)


@pytest.fixture
def mc_port() -> Iterator[int]:
    """memcached on each of ADDRS, all on this port."""
    port = port_free_on(ADDRS)
    servers = [memcached_on(a, port) for a in ADDRS]
    yield port
    for s in servers:
        s.stop()


@pytest.fixture
def fleet(mc_port: int) -> Iterator[tuple[Dnsmasq, int]]:
    dns = Dnsmasq(a_records(ADDRS[:2]))
    yield dns, mc_port
    dns.stop()


def start_router(dns: Dnsmasq, server: str, refresh_ms: int = 200) -> Proxy:
    listen = free_port()
    conf = pool_yaml(
        "dnspool",
        f"127.0.0.1:{listen}",
        [server],
        distribution="ketama",
        hash="md5",
        dns_refresh_ms=refresh_ms,
        timeout=2000,
    )
    proxy = Proxy(conf, port=listen)
    proxy.argv += ["--dns-server", f"127.0.0.1:{dns.port}"]
    return proxy.start()


def wait_log(proxy: Proxy, text: str, count: int) -> None:
    for _ in range(300):
        if proxy.log_text().count(text) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"router never logged {text!r} x{count}: " + proxy.log_text())


def store_all(proxy: Proxy, keys: list[str]) -> None:
    with Conn(proxy.port or 0) as c:
        for k in keys:
            assert c.request(f"set {k} 0 0 1\r\nx\r\n".encode(), b"\r\n") == b"STORED\r\n"


def placement(mc_port: int, keys: list[str]) -> dict[str, str]:
    """Which memcached address holds each key, asked directly."""
    found: dict[str, str] = {}
    for a in ADDRS:
        for k in keys_held(mc_port, keys, host=a):
            assert k not in found, f"{k} on two servers"
            found[k] = a
    return found


def flush(mc_port: int) -> None:
    for a in ADDRS:
        with Conn(mc_port, host=a) as c:
            assert c.request(b"flush_all\r\n", b"\r\n") == b"OK\r\n"


def test_dns_members_follow_records_and_move_only_their_keys(fleet: tuple[Dnsmasq, int]) -> None:
    dns, mc_port = fleet
    proxy = start_router(dns, f"dns:{NAME}:{mc_port}:1")
    keys = [f"dnskey:{i}" for i in range(900)]
    try:
        store_all(proxy, keys)
        before = placement(mc_port, keys)
        flush(mc_port)
        assert set(before) == set(keys)
        assert set(before.values()) == set(ADDRS[:2]), "keys must go to the resolved servers"

        # A new record: the new server takes its share (about a third, as uneven as ketama's
        # 160 points a server make it; the names carry the random port), only from the others.
        dns.set(a_records(ADDRS))
        wait_log(proxy, "dns: servers added", 1)
        store_all(proxy, keys)
        grown = placement(mc_port, keys)
        flush(mc_port)
        moved = [k for k in keys if grown[k] != before[k]]
        assert all(grown[k] == ADDRS[2] for k in moved), "a key moved between old servers"
        assert len(keys) // 8 < len(moved) < len(keys) * 2 // 3, (
            f"{len(moved)} of {len(keys)} moved"
        )

        # A record goes away under load: only the removed server's keys may fail.
        errors: list[str] = []
        stop = threading.Event()

        def load() -> None:
            conn: Conn | None = None
            for n in range(200_000):
                if stop.is_set():
                    break
                k = keys[n % len(keys)]
                try:
                    conn = conn or Conn(proxy.port or 0)
                    got = conn.request(f"set {k} 0 0 1\r\ny\r\n".encode(), b"\r\n")
                    if got != b"STORED\r\n":
                        errors.append(k)
                except OSError:
                    errors.append(k)
                    conn = None
            if conn:
                conn.close()

        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(0.3)
        dns.set(a_records([ADDRS[0], ADDRS[2]]))
        try:
            wait_log(proxy, "dns: servers added [], removed", 1)
            time.sleep(0.3)
        finally:
            stop.set()
            loader.join(timeout=60)
        assert not loader.is_alive()
        assert all(grown[k] == ADDRS[1] for k in errors), f"errors on kept servers: {errors[:5]}"

        flush(mc_port)
        store_all(proxy, keys)
        shrunk = placement(mc_port, keys)
        assert ADDRS[1] not in shrunk.values()
        stayed = [k for k in keys if grown[k] != ADDRS[1]]
        assert all(shrunk[k] == grown[k] for k in stayed), "a kept server's key moved"
    finally:
        proxy.stop()


def test_srv_targets_keep_their_keys_when_their_address_changes(mc_port: int) -> None:
    srv = f"_memcache._tcp.{NAME}"
    targets = [f"--srv-host={srv},m{i}.{NAME},{mc_port}" for i in range(2)]
    dns = Dnsmasq(f"{ADDRS[0]} m0.{NAME}\n{ADDRS[1]} m1.{NAME}\n", tuple(targets))
    proxy = start_router(dns, f"srv:{srv}:1")
    keys = [f"srvkey:{i}" for i in range(600)]
    try:
        servers = proxy.stats()["dnspool"]
        assert f"m0.{NAME}:{mc_port}" in servers and f"m1.{NAME}:{mc_port}" in servers
        store_all(proxy, keys)
        before = placement(mc_port, keys)
        flush(mc_port)
        assert set(before) == set(keys)
        assert set(before.values()) == set(ADDRS[:2])

        # m1 moves to another address: being named by its target, it keeps its keys.
        dns.set(f"{ADDRS[0]} m0.{NAME}\n{ADDRS[2]} m1.{NAME}\n")
        wait_log(proxy, f"m1.{NAME}:{mc_port}:1@{ADDRS[2]}", 1)
        store_all(proxy, keys)
        after = placement(mc_port, keys)
        moved_to = {ADDRS[0]: ADDRS[0], ADDRS[1]: ADDRS[2]}
        assert all(after[k] == moved_to[before[k]] for k in keys)
    finally:
        proxy.stop()
        dns.stop()


def test_sighup_looks_the_names_up_again(fleet: tuple[Dnsmasq, int]) -> None:
    dns, mc_port = fleet
    # No refresh before the end of the test: only the SIGHUP can see the new record.
    proxy = start_router(dns, f"dns:{NAME}:{mc_port}:1", refresh_ms=600_000)
    keys = [f"hupkey:{i}" for i in range(300)]
    try:
        dns.set(a_records(ADDRS))
        store_all(proxy, keys)
        assert ADDRS[2] not in placement(mc_port, keys).values()
        flush(mc_port)
        assert proxy.proc is not None
        proxy.proc.send_signal(signal.SIGHUP)
        wait_log(proxy, "configuration reloaded", 1)
        store_all(proxy, keys)
        assert ADDRS[2] in placement(mc_port, keys).values()
    finally:
        proxy.stop()


# ---- mcrouter configs: server host names looked up again ----


def test_mcrouter_host_names_follow_their_records(fleet: tuple[Dnsmasq, int]) -> None:
    """An mcrouter pool of host names: a name whose address changes is reconnected at the
    same index (Ch3 places by index: only its keys change server, to a cold one); a name
    that stops resolving keeps its last address."""
    dns, mc_port = fleet
    a, b = f"a.{NAME}", f"b.{NAME}"
    dns.set(f"{ADDRS[0]} {a}\n{ADDRS[1]} {b}\n")
    config = {
        "pools": {"A": {"servers": [f"{a}:{mc_port}", f"{b}:{mc_port}"]}},
        "route": "PoolRoute|A",
    }
    flags = ("--dns-server", f"127.0.0.1:{dns.port}", "--dns-refresh-ms", "200")
    keys = [f"mcdns:{i}" for i in range(300)]
    with McRouter(config, *flags) as r:
        store_all_at(r.port or 0, keys)
        before = placement(mc_port, keys)
        assert set(before.values()) == set(ADDRS[:2]), before

        dns.set(f"{ADDRS[0]} {a}\n{ADDRS[2]} {b}\n")
        wait_text(r.log_text, f"dns: server addresses changed: {b} ({ADDRS[1]} -> {ADDRS[2]})")
        flush(mc_port)
        store_all_at(r.port or 0, keys)
        after = placement(mc_port, keys)
        for k in keys:
            want = ADDRS[2] if before[k] == ADDRS[1] else ADDRS[0]
            assert after[k] == want, (k, before[k], after[k])

        # b no longer resolves: the refresh fails, the current servers stay.
        dns.set(f"{ADDRS[0]} {a}\n")
        wait_text(r.log_text, "keeping the current servers")
        flush(mc_port)
        store_all_at(r.port or 0, keys)
        assert placement(mc_port, keys) == after


def store_all_at(port: int, keys: list[str]) -> None:
    with Conn(port) as c:
        for k in keys:
            assert c.request(f"set {k} 0 0 1\r\nx\r\n".encode(), b"\r\n") == b"STORED\r\n"


def wait_text(read: Callable[[], str], text: str) -> None:
    for _ in range(300):
        if text in read():
            return
        time.sleep(0.05)
    raise AssertionError(f"never logged {text!r}: " + read())
