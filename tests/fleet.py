"""A fleet of real hosts on one machine: one network namespace per host, joined by a bridge.

    with Fleet("eject", hosts=["a", "b", "router"]) as fleet:
        a = fleet.host("a")
        a.spawn(memcached_argv(a.ip, 11211), port=11211)
        a.delay(ms=20)        # every round trip through a: +20 ms (a remote region)
        a.blackhole()         # every packet to and from a dropped, no RST, no ICMP
        a.heal()              # the link is clean again
        a.pause(); a.resume() # SIGSTOP / SIGCONT: a hung host
        a.kill()              # kill -9
        fleet.addr("a")       # "10.x.y.2:11211"

Each host is a namespace `mff-<pid>-<seq>-<host>` with `eth0` (10.x.y.N/24) whose veth peer
sits on a bridge in the root namespace; the bridge holds 10.x.y.1, so the test process reaches
every host directly and nothing leaves the machine (the namespaces have no default route). The
/24 is picked from the pid and checked against the root namespace's routes and addresses.

Faults are real: signals to the host's processes, and link faults on its veth. `delay` uses
`tc netem` where the kernel has sch_netem and otherwise a userspace delay line on an NFQUEUE
(netqueue.py, needs `iptables`). `blackhole` is a zero-length pfifo on both ends of the veth, which
drops every packet whichever way it goes.

Teardown (context exit, or `close`) kills the processes and removes the namespaces, veths and
the bridge, also after a failed test; a new Fleet first removes what a killed earlier run (a
pid that no longer exists) left behind. Without root, `ip`, or namespace support, creating a
Fleet raises FleetError with the reason.
"""

from __future__ import annotations

import ipaddress
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from harness import memcached_command, memfleet_bin, stop_process, terminate
from typing_extensions import Self

NS_PREFIX = "mff-"
LINK_PREFIX = "mf"
NS_NAME = re.compile(r"^mff-(\d+)-")
LINK_NAME = re.compile(r"^mf(\d+)[a-z]")
NETQUEUE = Path(__file__).resolve().parent / "netqueue.py"
HOST_NAME = re.compile(r"^[a-z0-9]{1,16}$")
MAX_HOSTS = 99
_seq = 0
_netem: bool | None = None


class FleetError(RuntimeError):
    """The fleet cannot be built here (no root, no `ip`, no namespaces, no way to delay)."""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs a command (ip, tc, iptables) with a time limit; raises FleetError with its stderr."""
    try:
        r = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FleetError(f"{' '.join(argv)}: {e}") from e
    if check and r.returncode != 0:
        raise FleetError(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")
    return r


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> None:
    """Removes the namespaces (and their processes), links and directories that a fleet of a
    process that no longer exists left behind."""
    for line in sh("ip", "netns", "list").stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        m = NS_NAME.match(ns)
        if m and not pid_alive(int(m.group(1))):
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)
    for line in sh("ip", "-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        m = LINK_NAME.match(name)
        if m and not pid_alive(int(m.group(1))):
            sh("ip", "link", "del", name, check=False)
    for path in Path(tempfile.gettempdir()).glob(f"{NS_PREFIX}*"):
        m = NS_NAME.match(path.name)
        if m and path.is_dir() and not pid_alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)


def pick_subnet(salt: int) -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 derived from the pid that overlaps no route or address in the root ns."""
    taken = []
    for cmd in (("ip", "-4", "-o", "route", "show", "table", "all"), ("ip", "-4", "-o", "addr")):
        for word in sh(*cmd).stdout.split():
            try:
                taken.append(ipaddress.IPv4Network(word, strict=False))
            except ValueError:
                continue
    for i in range(256):
        h = (salt * 2654435761 + i * 40503) & 0xFFFFFFFF
        net = ipaddress.IPv4Network(f"10.{200 + (h >> 8) % 50}.{h & 0xFF}.0/24")
        if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
            return net
    raise FleetError("no free 10.x.y.0/24 for the fleet's bridge")


def netem_available(ns: str) -> bool:
    """Whether this kernel has sch_netem (tried once on a namespace's loopback)."""
    global _netem
    if _netem is None:
        if shutil.which("modprobe"):
            sh("modprobe", "sch_netem", check=False)
        r = sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root",
               "netem", "delay", "1ms", check=False)  # fmt: skip
        _netem = r.returncode == 0
        if _netem:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "lo", "root", check=False)
    return _netem


class Proc:
    """A process running in a host's namespace; its stdout and stderr go to `log_path`."""

    def __init__(self, host: Host, argv: Sequence[str], log_path: Path) -> None:
        self.host = host
        self.argv = list(argv)
        self.log_path = log_path
        with open(log_path, "wb") as log:
            # `ip netns exec` execs the command, so this pid is the command's own.
            self.popen = subprocess.Popen(
                ["ip", "netns", "exec", host.ns, *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """kill -9, reaped."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class Host:
    """One namespace of the fleet: its address, its processes and the faults on its link."""

    def __init__(self, fleet: Fleet, name: str, index: int, ip: str) -> None:
        self.fleet = fleet
        self.name = name
        self.ns = f"{NS_PREFIX}{fleet.tag}-{name}"
        self.ip = ip
        self.veth = f"{fleet.link_tag}{index}"  # root side; the host side is eth0
        self.procs: list[Proc] = []
        self._delay_line: subprocess.Popen[bytes] | None = None

    def addr(self, port: int = 11211) -> str:
        return f"{self.ip}:{port}"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs a short command inside the namespace and waits for it."""
        return sh("ip", "netns", "exec", self.ns, *argv, check=check)

    def spawn(self, argv: Sequence[str], port: int | None = None, timeout: float = 10) -> Proc:
        """Starts a long-running process here; with `port`, waits until it accepts on ip:port."""
        n = len(self.procs)
        proc = Proc(self, argv, self.fleet.dir / f"{self.name}.{n}.log")
        self.procs.append(proc)
        if port is not None:
            self.wait_for(proc, port, timeout)
        return proc

    def wait_for(self, proc: Proc, port: int, timeout: float) -> None:
        """Returns once ip:port accepts; raises at once if `proc` exits first."""
        deadline = time.monotonic() + timeout
        while True:
            if not proc.alive():
                raise FleetError(
                    f"{self.name}: {proc.argv[0]} exited ({proc.popen.returncode}): {proc.log()}"
                )
            try:
                socket.create_connection((self.ip, port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise FleetError(
                        f"{self.name}: {proc.argv[0]} not accepting on {self.ip}:{port}: "
                        + proc.log()
                    ) from None
                time.sleep(0.02)

    def live(self) -> list[Proc]:
        return [p for p in self.procs if p.alive()]

    def kill(self) -> None:
        """kill -9 every process of this host: connections to it are refused from now on."""
        for p in self.procs:
            p.kill()

    def pause(self) -> None:
        """SIGSTOP every process: the kernel still accepts and ACKs, nothing answers."""
        for p in self.live():
            stop_process(p.pid)

    def resume(self) -> None:
        for p in self.live():
            p.signal(signal.SIGCONT)

    def delay(self, ms: float, loss: float = 0.0) -> None:
        """Adds `ms` to every round trip through this host (with netem its outgoing packets
        wait `ms`, with the delay line its incoming ones) and drops `loss` percent of them.
        Replaces earlier link faults."""
        self.heal()
        if netem_available(self.ns):
            args = ["delay", f"{ms}ms"] + (["loss", f"{loss}%"] if loss else [])
            self.run("tc", "qdisc", "add", "dev", "eth0", "root", "netem", *args)
            return
        if not shutil.which("iptables"):
            raise FleetError("this kernel has no sch_netem and iptables is not installed")
        line = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, str(NETQUEUE), "0", str(ms),
             str(loss)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._delay_line = line
        assert line.stdout is not None
        ready, _, _ = select.select([line.stdout], [], [], 10)
        said = line.stdout.readline() if ready else b""
        if said.strip() != b"ready":
            self.heal()
            raise FleetError(f"{self.name}: delay line did not start: {said!r}")
        # Held on the way in, not on the way out: a packet held in the sender's own stack
        # still counts against its socket's TCP Small Queues budget (netem orphans it, an
        # NFQUEUE does not), which lets a flow of small segments have only a few KB in flight
        # per round trip, a limit no real link has. The round trip is the same either way.
        r = self.run("iptables", "-A", "INPUT", "-i", "eth0", "-j", "NFQUEUE",
                     "--queue-num", "0", check=False)  # fmt: skip
        if r.returncode != 0:
            self.heal()
            raise FleetError(f"{self.name}: iptables NFQUEUE: {r.stderr.strip()}")

    def loss(self, percent: float) -> None:
        """Drops `percent` of this host's outgoing packets."""
        self.delay(0, loss=percent)

    def blackhole(self) -> None:
        """Drops every packet to and from this host; connections hang rather than fail."""
        self.heal()
        self.run("tc", "qdisc", "add", "dev", "eth0", "root", "pfifo", "limit", "0")
        sh("tc", "qdisc", "add", "dev", self.veth, "root", "pfifo", "limit", "0")

    def heal(self) -> None:
        """Removes every link fault (delay, loss, blackhole)."""
        self.run("tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        sh("tc", "qdisc", "del", "dev", self.veth, "root", check=False)
        if self._delay_line is not None:
            self.run("iptables", "-F", "INPUT", check=False)
            terminate(self._delay_line, timeout=5)
            if self._delay_line.stdout:
                self._delay_line.stdout.close()
            self._delay_line = None

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        self.heal()


class Fleet:
    """N hosts on a private /24; use as a context manager (or call `close`)."""

    def __init__(self, name: str, hosts: Sequence[str]) -> None:
        global _seq
        if not hosts or len(hosts) > MAX_HOSTS:
            raise ValueError(f"a fleet has 1 to {MAX_HOSTS} hosts")
        for h in hosts:
            if not HOST_NAME.match(h):
                raise ValueError(f"host name {h!r}: lowercase letters and digits, at most 16")
        if len(set(hosts)) != len(hosts):
            raise ValueError("host names must differ")
        _seq += 1
        self.name = name
        self.tag = f"{os.getpid()}-{_seq}"
        self.link_tag = f"{LINK_PREFIX}{os.getpid()}{chr(ord('a') + _seq % 26)}"
        self.bridge = f"{self.link_tag}b"
        self.host_names = list(hosts)
        self.hosts: dict[str, Host] = {}
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{NS_PREFIX}{self.tag}-{label}-"))
        self.subnet: ipaddress.IPv4Network | None = None

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (where the test process talks from)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def file(self, name: str, text: str) -> Path:
        """Writes a file (a config) into the fleet's directory, which every host sees."""
        path = self.dir / name
        path.write_text(text)
        return path

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def addr(self, name: str, port: int = 11211) -> str:
        return self.hosts[name].addr(port)

    def ip(self, name: str) -> str:
        return self.hosts[name].ip

    def start(self) -> Self:
        if os.geteuid() != 0:
            raise FleetError(
                f"fleet tests need root to create network namespaces (uid {os.geteuid()})"
            )
        if not shutil.which("ip") or not shutil.which("tc"):
            raise FleetError(
                "fleet tests need iproute2's `ip` and `tc` (scripts/setup installs them)"
            )
        remove_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        self.subnet = pick_subnet(os.getpid() * 31 + _seq)
        prefix = self.subnet.prefixlen
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gateway}/{prefix}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, name in enumerate(self.host_names):
            ip = str(self.subnet.network_address + 2 + i)
            h = Host(self, name, i, ip)
            self.hosts[name] = h
            sh("ip", "netns", "add", h.ns)
            sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
            sh("ip", "link", "set", h.veth, "master", self.bridge)
            sh("ip", "link", "set", h.veth, "up")
            h.run("ip", "addr", "add", f"{ip}/{prefix}", "dev", "eth0")
            h.run("ip", "link", "set", "eth0", "up")
            h.run("ip", "link", "set", "lo", "up")

    def close(self) -> None:
        """Kills every process and removes every namespace, veth and the bridge."""
        errors = []
        for h in self.hosts.values():
            try:
                h.close()
            except (FleetError, subprocess.SubprocessError, OSError) as e:
                errors.append(f"{h.name}: {e}")
        for h in self.hosts.values():
            sh("ip", "netns", "del", h.ns, check=False)
            sh("ip", "link", "del", h.veth, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
        self.hosts.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise FleetError("fleet teardown: " + "; ".join(errors))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def memcached_argv(ip: str, port: int = 11211, *args: str) -> list[str]:
    """Debian's memcached on ip:port (TCP only, as root when we are root)."""
    return memcached_command("-l", ip, "-p", str(port), "-U", "0", *args)


def serve_argv(ip: str, port: int = 11211, *args: str) -> list[str]:
    """`memfleet serve` on ip:port (2 threads unless `args` say otherwise)."""
    extra = list(args) if "-t" in args else ["-t", "2", *args]
    return [memfleet_bin(), "serve", "-l", ip, "-p", str(port), *extra]
