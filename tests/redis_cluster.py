"""Real Redis Cluster and Sentinel deployments on loopback ports, for the router's cluster and
sentinel pools: `Cluster` (primaries with replicas, made with `redis-cli --cluster create`) and
`SentinelSet` (a primary, its replica and three Sentinels). Every wait is bounded."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from harness import free_port, terminate, wait_for_port

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
PHP = shutil.which("php")

N_SLOTS = 16384


def require(*tools: str) -> None:
    """Skips the test when a tool is missing, but fails it under CI=true, where scripts/setup
    installs them all and a missing one is a broken machine, not a choice."""
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    why = f"not installed: {', '.join(missing)} (scripts/setup installs them)"
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def php_has_redis() -> bool:
    if PHP is None:
        return False
    out = subprocess.run([PHP, "-m"], capture_output=True, text=True, check=False).stdout
    return "redis" in out.split()


def require_php_redis() -> None:
    require("php")
    if not php_has_redis():
        if os.environ.get("CI") == "true":
            pytest.fail("php-redis not installed (scripts/setup installs it)", pytrace=False)
        pytest.skip("php-redis not installed")


def wait_until(check: Callable[[], bool], what: str, limit: float) -> None:
    """Polls `check` every 0.1 s for at most `limit` s; a check that raises a connection error
    counts as not yet."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"not within {limit} s: {what}")


def connect(port: int, password: str | None = None) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        password=password,
        protocol=2,
        decode_responses=True,
        socket_timeout=5,
    )


@dataclass(frozen=True)
class Auth:
    """Passwords on the data nodes: `password` for the default user (the harness, replication,
    redis-cli) and an ACL user `user` with `user_password` and every right (for the router)."""

    password: str
    user: str
    user_password: str

    def flags(self) -> list[str]:
        return [
            "--requirepass",
            self.password,
            "--masterauth",
            self.password,
            "--user",
            self.user,
            "on",
            f">{self.user_password}",
            "~*",
            "&*",
            "+@all",
        ]


class RedisProcess:
    """One redis-server (data node or Sentinel) with its files in `workdir`."""

    def __init__(self, workdir: Path, *flags: str, conf: Path | None = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log = workdir / f"redis-{self.port}.log"
        argv = [REDIS_SERVER or "redis-server"]
        if conf is not None:
            argv.append(str(conf))
        argv += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(workdir)]
        argv += ["--daemonize", "no", "--logfile", str(self.log), *flags]
        self.argv = argv
        self.password: str | None = None  # what client() authenticates with
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for_port(self.port, proc=self.proc)
        except Exception:
            self.stop()
            raise
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: a crash, nothing flushed or handed over."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            terminate(self.proc)

    def client(self) -> redis.Redis:
        return connect(self.port, self.password)


def data_node(workdir: Path, *flags: str, auth: Auth | None = None) -> RedisProcess:
    node = RedisProcess(
        workdir, "--save", "", "--appendonly", "no", *(auth.flags() if auth else []), *flags
    )
    # A replica saves what its primary sends to its RDB file even without `save`: one file
    # each, or a node started later loads another's keys (and claims their slots).
    node.argv += ["--dbfilename", f"dump-{node.port}.rdb"]
    node.password = auth.password if auth else None
    return node


def command_calls(node: RedisProcess) -> dict[str, int]:
    """Calls per command (lower case) the node executed since its last `CONFIG RESETSTAT`."""
    with node.client() as r:
        info = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def reset_command_calls(nodes: list[RedisProcess]) -> None:
    for n in nodes:
        with n.client() as r:
            r.config_resetstat()


def calls_of(nodes: list[RedisProcess], *commands: str) -> int:
    """Calls of `commands` summed over `nodes`."""
    return sum(command_calls(n).get(c, 0) for n in nodes for c in commands)


def caught_up(replica: RedisProcess) -> bool:
    """Whether `replica` has everything its primary sent (offsets equal, link up)."""
    with replica.client() as r:
        mine = r.info("replication")
    if mine.get("master_link_status") != "up":
        return False
    with connect(int(mine["master_port"]), replica.password) as r:
        theirs = r.info("replication")
    return int(mine["slave_repl_offset"]) >= int(theirs["master_repl_offset"])


@dataclass(frozen=True)
class NodeInfo:
    """One line of CLUSTER NODES."""

    id: str
    port: int
    role: str  # "primary" or "replica"
    primary_id: str | None
    slots: frozenset[int]
    failed: bool


def parse_cluster_nodes(text: str) -> list[NodeInfo]:
    nodes: list[NodeInfo] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        node_id, addr, flags, primary = parts[0], parts[1], parts[2].split(","), parts[3]
        slots: set[int] = set()
        for s in parts[8:]:
            if s.startswith("["):  # a slot being imported or migrated, still owned as listed
                continue
            lo, _, hi = s.partition("-")
            slots.update(range(int(lo), int(hi or lo) + 1))
        nodes.append(
            NodeInfo(
                id=node_id,
                port=int(addr.split("@")[0].rsplit(":", 1)[1]),
                role="primary" if "master" in flags else "replica",
                primary_id=None if primary == "-" else primary,
                slots=frozenset(slots),
                failed="fail" in flags or "noaddr" in flags,
            )
        )
    return nodes


class Cluster:
    """A Redis Cluster of `primaries` primaries with `replicas` replicas each, in cluster mode
    on free loopback ports; up and agreed on the slot map when the constructor returns."""

    def __init__(
        self,
        primaries: int = 3,
        replicas: int = 1,
        timeout: float = 30.0,
        auth: Auth | None = None,
    ) -> None:
        self.auth = auth
        self.workdir = Path(tempfile.mkdtemp(prefix="redis-cluster-"))
        self.nodes: list[RedisProcess] = []
        self.killed: set[int] = set()  # ports of nodes killed on purpose
        # Each killed primary with the ids of its replicas then.
        self.victims: list[tuple[NodeInfo, set[str]]] = []
        try:
            for _ in range(primaries * (replicas + 1)):
                self.nodes.append(self._start_node())
            self._cli(
                "--cluster",
                "create",
                *(n.address for n in self.nodes),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
                timeout=timeout,
            )
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise

    def _start_node(self) -> RedisProcess:
        node = data_node(
            self.workdir,
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "2000",
            auth=self.auth,
        )
        node.argv += ["--cluster-config-file", str(self.workdir / f"nodes-{node.port}.conf")]
        # The bus port defaults to port + 10000, past 65535 for a test port: name one.
        node.argv += ["--cluster-port", str(free_port())]
        return node.start()

    def cli_argv(self, *args: str) -> list[str]:
        login = ["-a", self.auth.password, "--no-auth-warning"] if self.auth else []
        return [REDIS_CLI or "redis-cli", *login, *args]

    def _cli(self, *args: str, timeout: float = 30.0) -> str:
        out = subprocess.run(
            self.cli_argv(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0 or "[ERR]" in out.stdout:
            raise RuntimeError(f"redis-cli {' '.join(args)}: {out.stdout[-2000:]}{out.stderr}")
        return out.stdout

    @property
    def live(self) -> list[RedisProcess]:
        return [n for n in self.nodes if n.alive()]

    @property
    def seeds(self) -> list[str]:
        """Addresses of every live node, for a client's or router's seed list."""
        return [n.address for n in self.live]

    def topology(self) -> list[NodeInfo]:
        """The cluster as a live node sees it (killed nodes left out)."""
        with self.live[0].client() as r:
            nodes = parse_cluster_nodes(r.execute_command("CLUSTER", "NODES"))
        return [n for n in nodes if n.port not in self.killed]

    def primaries(self) -> list[NodeInfo]:
        return sorted(
            (n for n in self.topology() if n.role == "primary" and n.slots),
            key=lambda n: min(n.slots),
        )

    def replicas(self) -> list[NodeInfo]:
        return [n for n in self.topology() if n.role == "replica"]

    def _slot_map(self, node: RedisProcess) -> dict[int, str] | None:
        """slot -> owner id as `node` sees it, None unless that node says the cluster is ok."""
        with node.client() as r:
            if "cluster_state:ok" not in r.execute_command("CLUSTER", "INFO"):
                return None
            nodes = parse_cluster_nodes(r.execute_command("CLUSTER", "NODES"))
        owner = {s: n.id for n in nodes if n.role == "primary" for s in n.slots}
        if len(owner) != N_SLOTS or any(n.port in self.killed for n in nodes if n.slots):
            return None
        return owner

    def agreed(self) -> bool:
        """Every live node says cluster_state:ok and all of them map every slot alike, to a
        primary that is not a killed node; every replica's link to its primary is up."""
        maps = [self._slot_map(n) for n in self.live]
        if any(m is None for m in maps) or any(m != maps[0] for m in maps):
            return False
        for n in self.live:
            with n.client() as r:
                info = r.info("replication")
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def wait_ok(self, timeout: float = 30.0) -> None:
        wait_until(self.agreed, "every node at cluster_state:ok with one slot map", timeout)

    def reshard(self, n_slots: int, src: str, dst: str) -> subprocess.Popen[str]:
        """Starts moving `n_slots` slots (with their keys) from node id `src` to `dst` with
        `redis-cli --cluster reshard`; returns the running process."""
        return subprocess.Popen(
            self.cli_argv(
                "--cluster",
                "reshard",
                self.live[0].address,
                "--cluster-from",
                src,
                "--cluster-to",
                dst,
                "--cluster-slots",
                str(n_slots),
                "--cluster-yes",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def add_replica(self, primary_id: str | None = None, timeout: float = 30.0) -> NodeInfo:
        """A new node joined as a replica (of `primary_id`, else of the primary with fewest),
        returned once it is in sync and every node agrees."""
        node = self._start_node()
        self.nodes.append(node)
        args = ["--cluster", "add-node", node.address, self.live[0].address, "--cluster-slave"]
        if primary_id:
            args += ["--cluster-master-id", primary_id]
        self._cli(*args, timeout=timeout)

        def known_everywhere() -> bool:
            for n in self.live:
                with n.client() as r:
                    nodes = parse_cluster_nodes(r.execute_command("CLUSTER", "NODES"))
                if not any(x.port == node.port and x.role == "replica" for x in nodes):
                    return False
            return self.agreed()

        wait_until(known_everywhere, f"replica {node.address} known to every node", timeout)
        return next(n for n in self.topology() if n.port == node.port)

    def kill_primary(self, i: int) -> NodeInfo:
        """kill -9 the i-th primary (by lowest slot); returns it as it was."""
        victim = self.primaries()[i]
        self.victims.append((victim, {n.id for n in self.replicas() if n.primary_id == victim.id}))
        proc = next(n for n in self.nodes if n.port == victim.port)
        self.killed.add(victim.port)
        proc.kill()
        return victim

    def wait_failover(self, timeout: float = 30.0) -> list[NodeInfo]:
        """Until, for each killed primary, one of its replicas is a primary serving all its
        slots, and every live node agrees; returns those promoted replicas."""
        promoted: list[NodeInfo] = []

        def done() -> bool:
            if not self.agreed():
                return False
            primaries = self.primaries()
            promoted[:] = [
                p
                for victim, replicas in self.victims
                for p in primaries
                if p.id in replicas and victim.slots <= p.slots
            ]
            return len(promoted) == len(self.victims)

        wait_until(done, "a replica took over each killed primary's slots", timeout)
        return promoted

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class SentinelSet:
    """A primary, `replicas` replicas of it, and three Sentinels watching it as `name`; with
    `sentinel_password`, the Sentinels want it from their clients (and each other)."""

    def __init__(
        self,
        name: str = "mymaster",
        replicas: int = 1,
        timeout: float = 30.0,
        auth: Auth | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.name = name
        self.auth = auth
        self.sentinel_password = sentinel_password
        self.workdir = Path(tempfile.mkdtemp(prefix="redis-sentinel-"))
        self.primary: RedisProcess | None = None
        self.replicas: list[RedisProcess] = []
        self.sentinels: list[RedisProcess] = []
        try:
            self.primary = data_node(self.workdir, auth=auth).start()
            for _ in range(replicas):
                r = data_node(
                    self.workdir, "--replicaof", "127.0.0.1", str(self.primary.port), auth=auth
                )
                self.replicas.append(r.start())
            for i in range(3):
                self.sentinels.append(self._start_sentinel(i))
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _start_sentinel(self, i: int) -> RedisProcess:
        assert self.primary is not None
        # Sentinel rewrites its config file (what it learns): one writable file each.
        conf = self.workdir / f"sentinel-{i}.conf"
        conf.write_text(
            f"sentinel monitor {self.name} 127.0.0.1 {self.primary.port} 2\n"
            f"sentinel down-after-milliseconds {self.name} 1000\n"
            f"sentinel failover-timeout {self.name} 5000\n"
            + (f"sentinel auth-pass {self.name} {self.auth.password}\n" if self.auth else "")
            # Sentinel logs in to the other Sentinels with its own requirepass.
            + (f"requirepass {self.sentinel_password}\n" if self.sentinel_password else "")
        )
        sentinel = RedisProcess(self.workdir, "--sentinel", conf=conf)
        sentinel.password = self.sentinel_password
        return sentinel.start()

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.sentinels]

    def named_primary(self, sentinel: RedisProcess) -> int | None:
        """The port `sentinel` names as the primary."""
        with sentinel.client() as r:
            addr = r.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
        return int(addr[1]) if addr else None

    def ready(self) -> bool:
        """Each Sentinel knows the other two and every replica, and the replicas are in sync:
        what a failover needs."""
        for s in self.sentinels:
            with s.client() as r:
                if len(r.execute_command("SENTINEL", "SENTINELS", self.name)) != 2:
                    return False
                if len(r.execute_command("SENTINEL", "REPLICAS", self.name)) != len(self.replicas):
                    return False
        for rep in self.replicas:
            with rep.client() as r:
                if r.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_until(self.ready, f"sentinels watching {self.name} with its replicas", timeout)

    def kill_primary(self) -> RedisProcess:
        assert self.primary is not None
        old = self.primary
        old.kill()
        return old

    def wait_switch(self, timeout: float = 30.0) -> RedisProcess:
        """Until every Sentinel names a replica as the primary and it says it is one; that
        node becomes `self.primary` and the returned value."""
        old = self.primary
        assert old is not None

        def switched() -> bool:
            named = {self.named_primary(s) for s in self.sentinels}
            if len(named) != 1 or old.port in named:
                return False
            (port,) = named
            node = next((r for r in self.replicas if r.port == port), None)
            if node is None:
                return False
            with node.client() as r:
                return r.info("replication")["role"] == "master"

        wait_until(switched, f"sentinels switched {self.name} from {old.address}", timeout)
        port = self.named_primary(self.sentinels[0])
        new = next(r for r in self.replicas if r.port == port)
        self.replicas = [r for r in self.replicas if r is not new]
        self.primary = new
        return new

    def stop(self) -> None:
        for p in [*self.sentinels, *self.replicas, *([self.primary] if self.primary else [])]:
            p.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
