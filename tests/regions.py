"""Two regions on one machine, as NSDI'13 section 5 lays them out: region A holds the PostgreSQL
primary, region B a streaming standby whose replay the test can slow or pause; each region has a
cache server and the web tier's processes (regions_worker.py), and the link between the regions
is a delay line (fleet.py: one network namespace per region, `delay` on both ends).

    with RegionPair(make_fleet, "naive") as rp:
        rp.primary.sql("...")            # region A's database
        rp.set_replay_delay(500)         # B's replica applies each commit 500 ms late
        rp.pause_replay(); rp.resume_replay()
        rp.invalidator("a", config)      # `memfleet invalidate` inside region A
        rp.worker("b", "read", ...)      # readers inside region B
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fleet import Fleet, Host, Proc, serve_argv
from harness import memfleet_bin, stat_listener
from pg_harness import PASSWORD, Postgres
from typing_extensions import Self

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "regions_worker.py"
PG_PORT = 5432
CACHE_PORT = 11211
# An invalidator's stats listener, in its region's namespace (one invalidator per region).
STATS_PORT = 11300
KEYS = 200
# Rows written from region B by write_read, each once per run.
REMOTE_ROWS = 2000
TABLE = "items"


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class NsPostgres(Postgres):
    """A Postgres (pg_harness) whose postmaster runs inside a fleet host's namespace, listening on
    the host's address; psql reaches it through its unix socket, which namespaces do not hide."""

    def __init__(self, host: Host, data_from: NsPostgres | None = None) -> None:
        self.host = host
        if data_from is None:
            super().__init__(PG_PORT)
            # The other region connects over the fleet's subnet.
            with open(self.data / "pg_hba.conf", "a") as f:
                f.write(f"host all all {host.fleet.subnet} scram-sha-256\n")
                f.write(f"host replication all {host.fleet.subnet} scram-sha-256\n")
        else:
            self._base_backup(data_from)

    def _base_backup(self, primary: NsPostgres) -> None:
        """A standby's data directory: pg_basebackup over the primary's socket; replication
        itself then runs across the delay line (primary_conninfo names the primary's address)."""
        import tempfile

        self.port = PG_PORT
        self.bindir = primary.bindir
        self.dir = Path(tempfile.mkdtemp(prefix="memfleet-pg-standby-"))
        self.data = self.dir / "data"
        self.proc = None
        self.log = self.dir / "postgres.log"
        pw = pwd.getpwnam("postgres")
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        subprocess.run(
            [str(self.bindir / "pg_basebackup"), "-h", str(primary.dir), "-p", str(primary.port),
             "-U", "postgres", "-D", str(self.data), "-X", "stream", "--no-sync"],
            user="postgres", group="postgres", extra_groups=[], check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        (self.data / "standby.signal").touch()
        conninfo = f"host={primary.host.ip} port={primary.port} user=postgres password={PASSWORD}"
        with open(self.data / "postgresql.auto.conf", "a") as f:
            f.write(f"primary_conninfo = '{conninfo}'\n")
            f.write("hot_standby = on\n")
            f.write("recovery_min_apply_delay = 0\n")
        os.chown(self.data / "postgresql.auto.conf", pw.pw_uid, pw.pw_gid)

    @property
    def dsn(self) -> str:
        return f"host={self.host.ip} port={self.port} user=postgres password={PASSWORD} dbname=postgres"

    def start(self) -> NsPostgres:
        argv = [
            "setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", "--",
            str(self.bindir / "postgres"), "-D", str(self.data),
            "-c", f"port={self.port}",
            "-c", f"listen_addresses={self.host.ip}",
            "-c", f"unix_socket_directories={self.dir}",
            "-c", "wal_level=logical",
            "-c", "max_wal_senders=10",
            "-c", "max_replication_slots=10",
            "-c", "wal_receiver_status_interval=1",
            "-c", "fsync=off",
            "-c", "full_page_writes=off",
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            # `ip netns exec` and `setpriv` both exec: the pid is the postmaster's own.
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.host.ns, *argv], stdout=log, stderr=log
            )  # type: ignore[assignment]
        wait_until(self._answers, 30, "postgres in " + self.host.name)
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError("postgres exited: " + self.log.read_text()[-2000:])
        r = subprocess.run(self._psql("SELECT 1"), capture_output=True, check=False)
        return r.returncode == 0

    def reload(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGHUP)


class RegionPair:
    """The two regions, their databases and caches; processes started through it are stopped
    (and namespaces removed) when the fleet closes."""

    def __init__(
        self,
        make_fleet: Callable[[str, list[str]], Fleet],
        name: str,
        link_ms: int = 40,
        congestion_control: str | None = None,
        sysctls: Sequence[str] = (),
    ) -> None:
        self.fleet = make_fleet(name, ["a", "b"])
        self.a = self.fleet.host("a")
        self.b = self.fleet.host("b")
        self.link_ms = link_ms
        if congestion_control:
            # Before any socket exists: accepted connections take their listener's algorithm.
            for h in (self.a, self.b):
                h.run("sysctl", "-w", f"net.ipv4.tcp_congestion_control={congestion_control}")
        for h in (self.a, self.b):
            for kv in sysctls:
                h.run("sysctl", "-w", kv)
        self.primary = NsPostgres(self.a)
        self.replica: NsPostgres | None = None
        self.caches: dict[str, Proc] = {}
        self.invalidators: list[Proc] = []

    def __enter__(self) -> Self:
        self.primary.start()
        self.primary.script(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, v bigint NOT NULL);\n"
            # Rows from KEYS on are written only from region B (write_read), each once.
            f"INSERT INTO {TABLE} SELECT g, 0 FROM generate_series(0, {KEYS + REMOTE_ROWS - 1}) g;\n"
        )
        self.replica = NsPostgres(self.b, data_from=self.primary).start()
        # Each region is `link_ms` away from the other, each way.
        self.a.delay(ms=self.link_ms)
        self.b.delay(ms=self.link_ms)
        for region in ("a", "b"):
            h = self.fleet.host(region)
            self.caches[region] = h.spawn(serve_argv(h.ip, CACHE_PORT, "-m", "64"), port=CACHE_PORT)
        self.wait_replica_caught_up()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.invalidators:
            p.signal(signal.SIGTERM)
        for pg in (self.replica, self.primary):
            if pg is not None:
                try:
                    pg.destroy()
                except (OSError, subprocess.SubprocessError):
                    pass

    @property
    def replica_dsn(self) -> str:
        assert self.replica is not None
        return self.replica.dsn

    def host(self, region: str) -> Host:
        return self.fleet.host(region)

    def cache_addr(self, region: str) -> str:
        return self.fleet.host(region).addr(CACHE_PORT)

    # -- the replica's replay ---------------------------------------------------------------
    def set_replay_delay(self, ms: int) -> None:
        """B's replica applies each commit `ms` after it was made (recovery_min_apply_delay)."""
        assert self.replica is not None
        conf = self.replica.data / "postgresql.auto.conf"
        lines = [
            ln
            for ln in conf.read_text().splitlines()
            if not ln.startswith("recovery_min_apply_delay")
        ]
        lines.append(f"recovery_min_apply_delay = {ms}")
        conf.write_text("\n".join(lines) + "\n")
        self.replica.reload()

    def pause_replay(self) -> None:
        assert self.replica is not None
        self.replica.sql("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        assert self.replica is not None
        self.replica.sql("SELECT pg_wal_replay_resume()")

    def wait_replica_caught_up(self, timeout: float = 60) -> None:
        assert self.replica is not None
        target = self.primary.sql("SELECT pg_current_wal_lsn()")[0][0]
        replica = self.replica

        def caught_up() -> bool:
            rows = replica.sql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
            return rows == [["t"]]

        wait_until(caught_up, timeout, "the replica to replay up to " + target)

    # -- processes ----------------------------------------------------------------------------
    def invalidator(self, region: str, name: str, config: dict[str, object]) -> Proc:
        """`memfleet invalidate` inside `region` with its own slot and publication."""
        config = {
            "spool_dir": str(self.fleet.dir / f"spool-{name}"),
            "retry_interval_ms": 200,
            "stats": f"{self.fleet.host(region).ip}:{STATS_PORT}",
            **config,
        }
        path = self.fleet.file(f"invalidate-{name}.yml", json.dumps(config))
        p = self.fleet.host(region).spawn([memfleet_bin(), "invalidate", "-c", str(path)])
        self.invalidators.append(p)
        slot = config["source"]["slot"]  # type: ignore[index]
        wait_until(
            lambda: (
                self.primary.sql(
                    f"SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}'"
                )
                == [["t"]]
            ),
            30,
            f"invalidator {name} to stream",
        )
        return p

    def restart_invalidator(self, name: str, kill: bool) -> Proc:
        """Stops invalidator `name` (kill -9 with `kill`) and starts it again, same config."""
        old = next(p for p in self.invalidators if p.argv[-1].endswith(f"invalidate-{name}.yml"))
        region = old.host.name
        if kill:
            old.kill()
        else:
            old.signal(signal.SIGTERM)
            old.popen.wait(timeout=30)
        self.invalidators.remove(old)
        p = self.fleet.host(region).spawn(old.argv)
        self.invalidators.append(p)
        return p

    def source(self, name: str) -> dict[str, str]:
        return {"dsn": self.primary.dsn, "slot": f"s_{name}", "publication": f"p_{name}"}

    def worker(self, region: str, role: str, out: str, **args: object) -> Proc:
        """regions_worker.py inside `region` (readers or writers of the web tier); its result is
        written as JSON to the fleet directory's `out`."""
        argv = [sys.executable, str(WORKER), role, "--out", str(self.fleet.dir / out)]
        for k, v in args.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        # the client the tests run with (scripts/test's installed wheel), else the checkout's
        spec = importlib.util.find_spec("memfleet")
        src = ROOT / "clients" / "python" / "src"
        if spec is not None and spec.origin:
            src = Path(spec.origin).parents[1]
        env_path = str(src)
        return self.fleet.host(region).spawn(["env", f"PYTHONPATH={env_path}", *argv])

    def result(self, proc: Proc, out: str, timeout: float = 120) -> dict[str, object]:
        proc.popen.wait(timeout=timeout)
        if proc.popen.returncode != 0:
            raise RuntimeError(f"worker {out} failed: {proc.log()[-3000:]}")
        data: dict[str, object] = json.loads((self.fleet.dir / out).read_text())
        return data

    def invalidator_stats(self, region: str) -> dict[str, str]:
        """The STAT lines of the invalidator running in `region`."""
        return stat_listener(self.fleet.host(region).ip, STATS_PORT)

    # -- the check ----------------------------------------------------------------------------
    def database(self) -> dict[int, int]:
        return {int(i): int(v) for i, v in self.primary.sql(f"SELECT id, v FROM {TABLE}")}

    def stale_keys(self, region: str) -> list[tuple[int, int, int]]:
        """(id, cached, database) for every key whose cached value is not the primary's."""
        from memfleet import Client

        truth = self.database()
        with Client([self.cache_addr(region)]) as c:
            cached = c.get_many([f"item:{i}" for i in truth])
        out = []
        for i, v in truth.items():
            got = cached.get(f"item:{i}")
            if got is not None and int(got) != v:
                out.append((i, int(got), v))
        return out

    def logs(self) -> str:
        parts = []
        for p in self.invalidators:
            parts.append(f"--- {' '.join(p.argv[:4])}\n{p.log()[-2000:]}")
        return "\n".join(parts)


# Replay lag schedule of B's replica while the writers run: (apply delay in ms, seconds).
LAGS = [(100, 2.0), (500, 2.0), (2000, 3.0)]
PAUSE_SECONDS = 10.0


def sentinel_delivered(rp: RegionPair, slots: list[str]) -> None:
    """Commits a no-op change to row 0 and waits until every slot has confirmed it: each
    invalidator has delivered the deletes of every earlier commit (a gated one only after the
    replica replayed them)."""
    before = rp.primary.sql(
        "BEGIN; UPDATE items SET v = v WHERE id = 0; SELECT pg_current_wal_insert_lsn(); COMMIT;"
    )
    lsn = [r for r in before if r and r[0]][-1][0]
    names = ", ".join(f"'{s}'" for s in slots)

    def confirmed() -> bool:
        rows = rp.primary.sql(
            f"SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ({names}) "
            f"AND confirmed_flush_lsn > '{lsn}'::pg_lsn"
        )
        return rows == [[str(len(slots))]]

    wait_until(confirmed, 60, f"slots {names} to confirm past {lsn}")


def lagging_replica(rp: RegionPair) -> None:
    """B's replica lagging 100 ms to 2 s, then paused for 10 s, then caught up."""
    for ms, seconds in LAGS:
        rp.set_replay_delay(ms)
        time.sleep(seconds)
    rp.pause_replay()
    time.sleep(PAUSE_SECONDS)
    rp.set_replay_delay(0)
    rp.resume_replay()


def run_workload(
    rp: RegionPair,
    slots: list[str],
    markers: bool = False,
    meanwhile: Callable[[RegionPair], None] = lagging_replica,
) -> dict[str, object]:
    """Readers in both regions and writers in A while `meanwhile` runs (by default B's replica
    lags 100 ms to 2 s and is then paused for 10 s); then quiescence. Returns the stale keys
    per region and the workers' counts."""
    stop = rp.fleet.dir / "stop-writers"
    stop_readers = rp.fleet.dir / "stop-readers"
    master = rp.primary.dsn
    readers = {
        "a": rp.worker("a", "read", "read-a.json", cache=rp.cache_addr("a"), db=master,
                       threads=4, until=stop_readers),
        "b": rp.worker("b", "read", "read-b.json", cache=rp.cache_addr("b"), db=rp.replica_dsn,
                       threads=4, until=stop_readers,
                       **({"master_db": master} if markers else {})),
    }  # fmt: skip
    writer = rp.worker("a", "write", "write-a.json", db=master, rate=50, until=stop)
    meanwhile(rp)
    Path(stop).touch()
    writes = rp.result(writer, "write-a.json")
    rp.wait_replica_caught_up()
    sentinel_delivered(rp, slots)
    time.sleep(0.5)
    Path(stop_readers).touch()
    reads = {r: rp.result(p, f"read-{r}.json") for r, p in readers.items()}
    inv = {}
    for region in ("a", "b"):
        try:
            st = rp.invalidator_stats(region)
        except OSError:
            continue
        inv[region] = {k: st.get(k) for k in ("transactions", "deleted", "visibility_waits", "held_transactions",
                                              "latency_p50_us", "latency_p99_us", "markers_deleted",
                                              "marker_tokens", "markers_released", "markers_superseded",
                                              "markers_gone", "markers_release_dropped")}  # fmt: skip
    return {
        "invalidators": inv,
        "stale": {r: rp.stale_keys(r) for r in ("a", "b")},
        "writes": writes,
        "reads": reads,
    }


def gated_invalidators(rp: RegionPair, markers: bool = False) -> list[str]:
    """Region A's invalidator deletes in A (its database is the primary itself); region B's
    reads the primary's changes through its own slot and deletes in B once B's replica has
    replayed them (and, with `markers`, removes each remote marker once B's replica has the
    transaction that set it, if no later write set it again)."""
    tables = {"public.items": ["item:{id}"]}
    rp.invalidator("a", "ga", {"source": rp.source("ga"), "targets": [{"memcached": rp.cache_addr("a")}],
                               "tables": tables})  # fmt: skip
    b: dict[str, object] = {
        "source": {**rp.source("gb"), "replica_dsn": rp.replica_dsn},
        "targets": [{"memcached": rp.cache_addr("b")}],
        "tables": tables,
    }
    if markers:
        b["remote_markers"] = "rm:"
        b["remote_markers_release"] = "message"
    rp.invalidator("b", "gb", b)
    return ["s_ga", "s_gb"]


def write_read(
    rp: RegionPair, markers: bool, count: int, out: str, first: int = KEYS
) -> dict[str, object]:
    """`count` writes made from region B, each read back at once in B, each on a row of its
    own."""
    p = rp.worker("b", "write-read", out, cache=rp.cache_addr("b"), db=rp.replica_dsn, master_db=rp.primary.dsn,
                  count=count, threads=10, markers=int(markers), first=first)  # fmt: skip
    return rp.result(p, out, timeout=300)


def faults(rp: RegionPair) -> None:
    """B's replica stopped for 30 s, B's invalidator killed -9 mid-stream and started again,
    the link between the regions blackholed for 5 s; each recovered before the next."""
    rp.set_replay_delay(200)
    time.sleep(1)
    assert rp.replica is not None
    rp.replica.stop()
    time.sleep(REPLICA_DOWN_SECONDS)
    rp.replica.start()
    time.sleep(2)
    rp.restart_invalidator("gb", kill=True)
    time.sleep(2)
    rp.b.blackhole()
    time.sleep(5)
    rp.b.heal()
    rp.b.delay(ms=rp.link_ms)
    time.sleep(2)
    rp.set_replay_delay(0)


REPLICA_DOWN_SECONDS = 30.0
