"""`memfleet invalidate` against a real PostgreSQL 15 (logical replication) and Debian's
memcached: committed row changes delete their cache keys, and nothing is lost when the
invalidator is killed or the cache server stops answering."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import (
    Server,
    free_port,
    memcached,
    memfleet,
    memfleet_bin,
    stat_listener,
    terminate,
    wait_for_port,
)
from pg_harness import PASSWORD, Postgres

ROWS = 10_000
TXNS = 500


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    p = Postgres(free_port()).start()
    yield p
    p.destroy()


@pytest.fixture
def cache() -> Iterator[Server]:
    with memcached("-m", "256") as s:
        yield s


def wait_until(cond: Callable[[], bool], timeout: float = 90.0, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Cache:
    """Bulk sets and presence checks against one memcached, over one pipelined socket."""

    def __init__(self, port: int) -> None:
        self.port = port

    def _roundtrip(self, payload: bytes, until: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(payload)
            buf = b""
            while not buf.endswith(until):
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("memcached closed the connection")
                buf += chunk
            return buf

    def set_many(self, items: dict[str, str]) -> None:
        cmds = b"".join(
            f"set {k} 0 0 {len(v)} noreply\r\n{v}\r\n".encode() for k, v in items.items()
        )
        self._roundtrip(cmds + b"mn\r\n", b"MN\r\n")

    def present(self, keys: list[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(keys), 200):
            reply = self._roundtrip(f"get {' '.join(keys[i : i + 200])}\r\n".encode(), b"END\r\n")
            for line in reply.split(b"\r\n"):
                if line.startswith(b"VALUE "):
                    found.add(line.split()[1].decode())
        return found

    def get(self, key: str) -> str | None:
        reply = self._roundtrip(f"get {key}\r\n".encode(), b"END\r\n")
        if not reply.startswith(b"VALUE "):
            return None
        return reply.split(b"\r\n")[1].decode()


class Invalidator:
    """`memfleet invalidate -c FILE` with its log in a file and a stats port."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        self.stats_port = free_port()
        config = {
            "stats": f"127.0.0.1:{self.stats_port}",
            "spool_dir": str(workdir / "spool"),
            **config,
        }
        self.path = workdir / "invalidate.yml"
        # JSON is YAML: the file is written with json.dumps.
        self.path.write_text(json.dumps(config, indent=2))
        self.log = workdir / "invalidate.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Invalidator:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [memfleet_bin(), "invalidate", "-c", str(self.path)], stderr=log
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("invalidator exited: " + self.log.read_text())
            try:
                wait_for_port(self.stats_port, timeout=0.2)
                return self
            except TimeoutError:
                pass
        raise TimeoutError("invalidator did not start: " + self.log.read_text())

    def stats(self) -> dict[str, str]:
        return stat_listener("127.0.0.1", self.stats_port)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            terminate(self.proc, timeout=15)
        self.proc = None


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="memfleet-inv-") as d:
        yield Path(d)


@pytest.fixture
def invalidators() -> Iterator[list[Invalidator]]:
    started: list[Invalidator] = []
    yield started
    for inv in started:
        inv.stop()


def base_config(pg: Postgres, name: str, cache_port: int, tables: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": {"dsn": pg.dsn, "slot": f"s_{name}", "publication": f"p_{name}"},
        "targets": [{"memcached": f"127.0.0.1:{cache_port}"}],
        "tables": tables,
        "ack_timeout_ms": 500,
        "retry_interval_ms": 300,
    }


def make_users(pg: Postgres, table: str) -> None:
    pg.script(
        f"""
        DROP TABLE IF EXISTS {table};
        CREATE TABLE {table} (id int PRIMARY KEY, email text NOT NULL, name text);
        ALTER TABLE {table} REPLICA IDENTITY FULL;
        INSERT INTO {table} SELECT i, 'u' || i || '@x', 'n0' FROM generate_series(1, {ROWS}) i;
        """
    )


def fill_cache(cache: Cache) -> tuple[list[str], list[str]]:
    """Caches each row's keys (and each changed row's new email key) plus control keys no
    change touches; returns (keys the updates must delete, keys that must stay)."""
    affected = [f"user:{i}" for i in range(1, ROWS + 1)]
    affected += [f"email:u{i}@x" for i in range(1, ROWS + 1)]
    affected += [f"email:v{i}@y" for i in range(1, ROWS + 1) if i % 10 == 0]
    control = [f"ctl:{i}" for i in range(1, 1001)]
    cache.set_many({k: "cached" for k in affected + control})
    assert cache.present(affected + control) == set(affected + control)
    return affected, control


def update_script(table: str, pause: float = 0.0) -> str:
    """10,000 single-row updates in 500 transactions; every tenth row changes its email."""
    out = []
    per = ROWS // TXNS
    for t in range(TXNS):
        out.append("BEGIN;")
        for i in range(t * per + 1, (t + 1) * per + 1):
            if i % 10 == 0:
                out.append(f"UPDATE {table} SET name = 'n1', email = 'v{i}@y' WHERE id = {i};")
            else:
                out.append(f"UPDATE {table} SET name = 'n1' WHERE id = {i};")
        out.append("COMMIT;")
        if pause:
            out.append(f"SELECT pg_sleep({pause});")
    return "\n".join(out) + "\n"


def drop_slot(pg: Postgres, name: str) -> None:
    """Drops the slot once its walsender has gone: PostgreSQL notices a stopped
    invalidator's connection close a moment after the process exits."""
    sql = f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 's_{name}'"
    deadline = time.monotonic() + 10
    while True:
        try:
            pg.sql(sql)
            return
        except RuntimeError as e:
            if "is active for PID" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class UsersCase:
    """A users table of ROWS rows, its keys cached, and an invalidator following it."""

    def __init__(
        self,
        pg: Postgres,
        cache: Server,
        workdir: Path,
        invalidators: list[Invalidator],
        name: str,
        **settings: Any,
    ) -> None:
        self.pg, self.name, self.table = pg, name, f"users_{name}"
        make_users(pg, self.table)
        self.cache = Cache(cache.port or 0)
        cfg = base_config(
            pg, name, cache.port or 0, {f"public.{self.table}": ["user:{id}", "email:{email}"]}
        )
        self.inv = Invalidator({**cfg, **settings}, workdir).start()
        invalidators.append(self.inv)
        self.affected, self.control = fill_cache(self.cache)

    def write(self, pause: float) -> subprocess.Popen[str]:
        return self.pg.script_async(update_script(self.table, pause))

    def wait_transactions(self, n: int) -> None:
        assert wait_until(lambda: int(self.inv.stats()["transactions"]) >= n, step=0.02)

    def check_all_invalidated(self) -> None:
        c = self.cache
        assert wait_until(lambda: not c.present(self.affected)), sorted(c.present(self.affected))[
            :10
        ]
        assert c.present(self.control) == set(self.control)

    def finish(self) -> None:
        self.inv.stop()
        drop_slot(self.pg, self.name)


def test_updates_delete_every_affected_key(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    case = UsersCase(pg, cache, workdir, invalidators, "a")
    pg.script(update_script(case.table))
    case.check_all_invalidated()
    # The counters move once a batch's deletes are acknowledged, after the cache has run
    # them. Every row's user and old email key, and the new email of every tenth row:
    assert wait_until(lambda: int(case.inv.stats()["keys_sent"]) >= len(case.affected))
    assert wait_until(lambda: int(case.inv.stats()["transactions"]) >= TXNS)
    st = case.inv.stats()
    assert int(st["row_changes"]) == ROWS
    assert int(st["keys_sent"]) == len(case.affected)
    case.finish()


def test_kill9_midstream_loses_nothing(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    # Small batches, so the kill lands between many confirmed and unconfirmed ones.
    case = UsersCase(pg, cache, workdir, invalidators, "b", max_batch_keys=64)
    writer = case.write(pause=0.004)
    case.wait_transactions(100)
    case.inv.kill9()
    # Changes keep committing while no invalidator runs.
    time.sleep(1.0)
    case.inv.start()
    assert writer.wait(timeout=120) == 0
    case.check_all_invalidated()
    case.finish()


def test_sighup_does_not_stop_it(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """A stray HUP (a terminal closing) leaves it streaming: nothing is missed."""
    case = UsersCase(pg, cache, workdir, invalidators, "hup")
    writer = case.write(pause=0.004)
    case.wait_transactions(20)
    assert case.inv.proc is not None
    case.inv.proc.send_signal(signal.SIGHUP)
    assert writer.wait(timeout=120) == 0
    assert case.inv.proc.poll() is None, "stopped by SIGHUP"
    case.check_all_invalidated()
    case.finish()


def test_stopped_cache_server_loses_nothing(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    case = UsersCase(pg, cache, workdir, invalidators, "c")
    writer = case.write(pause=0.01)
    case.wait_transactions(50)
    assert cache.proc is not None
    with cache.paused():
        time.sleep(10)
    assert writer.wait(timeout=120) == 0
    case.check_all_invalidated()
    st = case.inv.stats()
    # The outage was noticed and bridged through the spool.
    assert int(st["target_failures"]) > 0
    assert int(st["spooled"]) > 0
    assert int(st["replayed"]) > 0
    case.finish()


def test_postgres_restart_loses_nothing(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """PostgreSQL stops mid-stream (the writer dies with it) and comes back: every row
    whose update committed has its keys deleted, and no other row's keys are touched."""
    case = UsersCase(pg, cache, workdir, invalidators, "h")
    writer = case.write(pause=0.01)
    case.wait_transactions(50)
    pg.stop()
    writer.wait(timeout=60)
    pg.start()
    # A change after the restart, on rows the interrupted writer never reached.
    pg.script(f"UPDATE {case.table} SET name = 'n1' WHERE id > {ROWS - 5};")
    emails = {int(i): e for i, e in pg.sql(f"SELECT id, email FROM {case.table} WHERE name = 'n1'")}
    updated = set(emails)
    assert 0 < len(updated) < ROWS
    # Each updated row's id key, its first email, and its email now (changed or not).
    gone = [k for i, e in emails.items() for k in (f"user:{i}", f"email:u{i}@x", f"email:{e}")]
    kept = [
        k for i in range(1, ROWS + 1) if i not in updated for k in (f"user:{i}", f"email:u{i}@x")
    ]
    c = case.cache
    assert wait_until(lambda: not c.present(gone)), sorted(c.present(gone))[:10]
    assert c.present(kept) == set(kept)
    assert "reconnecting" in case.inv.log.read_text()
    case.finish()


def test_unix_socket_dsn(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """`host=/dir` in the DSN: both the SQL and the replication connection use the socket."""
    pg.script(
        "DROP TABLE IF EXISTS sock; CREATE TABLE sock (id int PRIMARY KEY); INSERT INTO sock VALUES (1);"
    )
    c = Cache(cache.port or 0)
    cfg = base_config(pg, "u", cache.port or 0, {"sock": ["sock:{id}"]})
    cfg["source"]["dsn"] = f"host={pg.dir} port={pg.port} user=postgres dbname=postgres"
    inv = Invalidator(cfg, workdir).start()
    invalidators.append(inv)
    c.set_many({"sock:1": "v", "sock:2": "v"})
    pg.script("UPDATE sock SET id = 2;")
    assert wait_until(lambda: not c.present(["sock:1", "sock:2"]))
    inv.stop()
    drop_slot(pg, "u")


def test_deletes_sent_unconfirmed_go_out_again_once_visible(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """The question whether the primary shows a transaction yet goes unanswered (the
    invalidator's role may no longer log in, and its connection was closed): the deletes go
    out at once, and again once the primary answers, removing a value a reader put back in
    between."""
    pg.script(
        "DROP TABLE IF EXISTS vis; CREATE TABLE vis (id int PRIMARY KEY, v int);"
        "INSERT INTO vis SELECT i, 0 FROM generate_series(1, 3) i;"
        "DROP ROLE IF EXISTS vis_inv; CREATE ROLE vis_inv LOGIN REPLICATION PASSWORD 'vis';"
        "DROP PUBLICATION IF EXISTS p_vis; CREATE PUBLICATION p_vis FOR TABLE vis;"
    )
    try:
        c = Cache(cache.port or 0)
        cfg = base_config(pg, "vis", cache.port or 0, {"vis": ["vis:{id}"]})
        cfg["source"]["dsn"] = (
            f"host=127.0.0.1 port={pg.port} user=vis_inv password=vis dbname=postgres"
        )
        inv = Invalidator(cfg, workdir)
        invalidators.append(inv)
        inv.start()

        # One change seen normally, so the check's connection is open.
        c.set_many({"vis:1": "old"})
        pg.script("UPDATE vis SET v = 1 WHERE id = 1;")
        assert wait_until(lambda: c.get("vis:1") is None)
        before = inv.stats()
        unconfirmed = int(before["visibility_unconfirmed"])
        resent = int(before["visibility_resent"])

        pg.script(
            "ALTER ROLE vis_inv NOLOGIN;"
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE usename = 'vis_inv' AND backend_type = 'client backend';"
        )
        c.set_many({"vis:2": "old"})
        pg.script("UPDATE vis SET v = 2 WHERE id = 2;")
        # Not held back by the unanswered question.
        assert wait_until(lambda: c.get("vis:2") is None, timeout=15)
        st = inv.stats()
        assert int(st["visibility_unconfirmed"]) == unconfirmed + 1, st
        assert st["visibility_pending"] == "1", st
        # A reader's refill between the delete and the answer.
        c.set_many({"vis:2": "refilled"})
        time.sleep(1.0)
        assert c.get("vis:2") == "refilled", "sent again before the primary answered"

        pg.script("ALTER ROLE vis_inv LOGIN;")
        assert wait_until(lambda: c.get("vis:2") is None, timeout=30)
        assert wait_until(lambda: inv.stats()["visibility_pending"] == "0"), inv.stats()
        assert int(inv.stats()["visibility_resent"]) == resent + 1
        log = inv.log.read_text()
        assert "cannot ask the primary" in log, log
        assert "answers which transactions it shows again" in log, log
        inv.stop()
        drop_slot(pg, "vis")
    finally:
        pg.script("DROP PUBLICATION IF EXISTS p_vis;")
        for inv in invalidators:
            inv.stop()
        pg.sql(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = 's_vis' AND NOT active"
        )
        pg.script("DROP ROLE IF EXISTS vis_inv;")


def test_overlong_key_is_counted_not_sent(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    pg.script(
        "DROP TABLE IF EXISTS docs; CREATE TABLE docs (id int PRIMARY KEY, slug text);"
        "INSERT INTO docs VALUES (1, 'short'), (2, repeat('x', 300));"
    )
    c = Cache(cache.port or 0)
    cfg = base_config(pg, "d", cache.port or 0, {"docs": ["doc:{slug}", "docid:{id}"]})
    inv = Invalidator(cfg, workdir).start()
    invalidators.append(inv)
    c.set_many({"doc:short": "v", "docid:1": "v", "docid:2": "v"})
    pg.script("UPDATE docs SET slug = slug WHERE id IN (1, 2);")
    assert wait_until(lambda: not c.present(["doc:short", "docid:1", "docid:2"]))
    st = inv.stats()
    assert st["keys_too_long"] == "1"
    assert int(st["refused"]) == 0
    assert "longer than 250 bytes" in inv.log.read_text()
    inv.stop()
    drop_slot(pg, "d")


def refusal(config: dict[str, Any], workdir: Path) -> str:
    path = workdir / "bad.yml"
    path.write_text(json.dumps({"spool_dir": str(workdir / "spool"), **config}))
    r = subprocess.run(
        [memfleet_bin(), "invalidate", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0, r.stderr
    return r.stderr


def test_bad_input_is_refused_at_start(pg: Postgres, cache: Server, workdir: Path) -> None:
    pg.script(
        "DROP TABLE IF EXISTS accts; CREATE TABLE accts (id int PRIMARY KEY, email text);"
        "DROP TABLE IF EXISTS other; CREATE TABLE other (id int PRIMARY KEY);"
        "DROP PUBLICATION IF EXISTS p_e; CREATE PUBLICATION p_e FOR TABLE accts;"
    )
    port = cache.port or 0
    cfg = base_config(pg, "e", port, {"accts": ["acct:{id}", "email:{emial}"]})
    assert 'names column "emial", which the table does not have' in refusal(cfg, workdir)

    cfg = base_config(pg, "e", port, {"accts": ["acct:{id}"], "other": ["o:{id}"]})
    assert "table public.other is not in publication p_e" in refusal(cfg, workdir)

    cfg = base_config(pg, "e", port, {"accts": ["acct:{id}"]})
    cfg["source"]["dsn"] = pg.dsn.replace(PASSWORD, "wrong")
    assert 'password authentication failed for user "postgres"' in refusal(cfg, workdir)

    # A slot held by another consumer (pg_recvlogical streaming from it).
    cfg = base_config(pg, "e", port, {"accts": ["acct:{id}"]})
    pg.sql("SELECT pg_create_logical_replication_slot('s_e', 'pgoutput')")
    holder = subprocess.Popen(
        [
            str(pg.bindir / "pg_recvlogical"),
            "-d",
            f"host={pg.dir} port={pg.port} user=postgres dbname=postgres",
            "-S",
            "s_e",
            "--start",
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=p_e",
            "-f",
            "/dev/null",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        assert wait_until(
            lambda: (
                pg.sql("SELECT active FROM pg_replication_slots WHERE slot_name = 's_e'") == [["t"]]
            ),
            30,
        )
        assert "replication slot s_e is in use by another consumer" in refusal(cfg, workdir)
    finally:
        holder.terminate()
        holder.wait()
    assert wait_until(
        lambda: (
            pg.sql("SELECT active FROM pg_replication_slots WHERE slot_name = 's_e'") == [["f"]]
        ),
        30,
    )
    drop_slot(pg, "e")


def test_config_errors_name_the_problem(workdir: Path) -> None:
    cfg = {
        "source": {"dsn": "host=127.0.0.1"},
        "targets": [{"memcached": "127.0.0.1:1"}],
        "tables": {"t": ["k:{id"]},
    }
    assert "unclosed" in refusal(cfg, workdir)


def test_leases_leave_no_stale_value(
    pg: Postgres, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """The NSDI'13 race: a reader misses, loads the row, and fills the cache while a writer
    commits a newer version and the invalidator deletes the key. With lease fills
    (`get_or_set`) no stale value may survive once the writers stop."""
    import random
    import threading

    from memfleet import Client

    rows = 20
    pg.script(
        "DROP TABLE IF EXISTS kv; CREATE TABLE kv (id int PRIMARY KEY, v int NOT NULL);"
        f"INSERT INTO kv SELECT i, 0 FROM generate_series(1, {rows}) i;"
    )
    cfg = base_config(pg, "f", cache.port or 0, {"kv": ["kv:{id}"]})
    inv = Invalidator(cfg, workdir).start()
    invalidators.append(inv)

    def writes(seed: int) -> str:
        rnd = random.Random(seed)
        out = []
        for _ in range(300):
            out.append(f"UPDATE kv SET v = v + 1 WHERE id = {rnd.randint(1, rows)};")
            out.append("SELECT pg_sleep(0.005);")
        return "\n".join(out) + "\n"

    writers = [pg.script_async(writes(seed)) for seed in (1, 2)]
    stop = threading.Event()
    errors: list[BaseException] = []
    loads = [0]

    def read(seed: int) -> None:
        rnd = random.Random(seed)
        client = Client([f"127.0.0.1:{cache.port}"])
        try:
            while not stop.is_set():
                i = rnd.randint(1, rows)

                def load(i: int = i) -> int:
                    loads[0] += 1
                    return int(pg.sql(f"SELECT v FROM kv WHERE id = {i}")[0][0])

                client.get_or_set(f"kv:{i}", load)
        except (OSError, RuntimeError, ValueError) as e:  # surfaced by the main thread
            errors.append(e)
        finally:
            client.close()

    readers = [threading.Thread(target=read, args=(s,)) for s in range(4)]
    for t in readers:
        t.start()
    try:
        for w in writers:
            assert w.wait(timeout=180) == 0
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not errors, errors
    assert loads[0] > 0
    truth = {int(i): int(v) for i, v in pg.sql("SELECT id, v FROM kv")}

    def stale() -> dict[int, tuple[int, int]]:
        client = Client([f"127.0.0.1:{cache.port}"])
        try:
            got = {i: client.get(f"kv:{i}") for i in truth}
        finally:
            client.close()
        return {i: (c, truth[i]) for i, c in got.items() if c is not None and c != truth[i]}

    # Once the invalidator has caught up nothing stale may be left; a lost invalidation
    # stays stale for good, so waiting cannot hide one.
    assert wait_until(lambda: not stale(), step=1.0), f"cached (stale, current) by id: {stale()}"
    inv.stop()
    drop_slot(pg, "f")


def set_acked(port: int, keys: list[str]) -> None:
    """Sets each key (value "v") through any memcached-protocol listener, waiting for every
    STORED."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(f"set {k} 0 0 1\r\nv\r\n".encode() for k in keys))
        buf = b""
        while buf.count(b"\r\n") < len(keys):
            chunk = s.recv(1 << 20)
            assert chunk, "connection closed"
            buf += chunk
    assert buf == b"STORED\r\n" * len(keys), buf[:200]


def test_pool_target_hashes_like_the_router(
    pg: Postgres, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """Keys cached through `memfleet route` (ketama over three servers) are deleted by an
    invalidator that talks to the servers directly, hashing as the router does."""
    from proxy_harness import Proxy, pool_yaml

    rows = 2000
    pg.script(
        "DROP TABLE IF EXISTS acct; CREATE TABLE acct (id int PRIMARY KEY, n int);"
        f"INSERT INTO acct SELECT i, 0 FROM generate_series(1, {rows}) i;"
    )
    backends = [memcached().start() for _ in range(3)]
    servers = [f"127.0.0.1:{b.port}:1" for b in backends]
    port = free_port()
    router = Proxy(
        pool_yaml("alpha", f"127.0.0.1:{port}", servers, hash="md5", distribution="ketama"), port
    )
    try:
        router.start()
        cfg = base_config(pg, "g", 0, {"acct": ["acct:{id}"]})
        cfg["targets"] = [{"pool": {"servers": servers, "hash": "md5", "distribution": "ketama"}}]
        inv = Invalidator(cfg, workdir).start()
        invalidators.append(inv)
        keys = [f"acct:{i}" for i in range(1, rows + 1)]
        set_acked(port, keys)
        # Every server holds a share, so a delete sent to the wrong one leaves a key behind.
        assert all(Cache(b.port or 0).present(keys) for b in backends)
        pg.script(
            "BEGIN; UPDATE acct SET n = 1 WHERE id <= 1000; COMMIT; UPDATE acct SET n = 1 WHERE id > 1000;"
        )
        via_router = Cache(port)
        assert wait_until(lambda: not via_router.present(keys)), sorted(via_router.present(keys))[
            :10
        ]
        assert inv.stats()["not_found"] == "0"
        inv.stop()
        drop_slot(pg, "g")
    finally:
        router.stop()
        for b in backends:
            b.stop()


DOC = Path(__file__).resolve().parent.parent / "docs" / "invalidate.md"


def doc_block(name: str) -> str:
    """The fenced block after `<!-- invalidate-setup: NAME -->` in docs/invalidate.md, as
    written there (indentation of the list item removed)."""
    m = re.search(
        rf"<!-- invalidate-setup: {re.escape(name)} -->\n( *)```\w+\n(.*?)\n *```",
        DOC.read_text(),
        re.DOTALL,
    )
    assert m, f"docs/invalidate.md has no block marked invalidate-setup: {name}"
    return textwrap.dedent("\n".join(line[len(m.group(1)) :] for line in m.group(2).splitlines()))


class DocDatabase:
    """Database `app` of the docs, its users table owned by role `app`, as an application
    would have it; `drop` drops it and everything the setup created."""

    def __init__(self, pg: Postgres) -> None:
        self.pg = pg
        # The database is the superuser's: owning it would give role app (and its members)
        # CREATE on it, hiding a missing grant.
        pg.script("CREATE ROLE app; CREATE DATABASE app;")
        pg.script(
            "CREATE TABLE public.users (id int PRIMARY KEY, email text NOT NULL);"
            "ALTER TABLE public.users OWNER TO app;"
            "ALTER TABLE public.users REPLICA IDENTITY FULL;",
            database="app",
        )

    def drop(self) -> None:
        self.pg.script(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = 'app';"
            "DROP DATABASE IF EXISTS app WITH (FORCE); DROP ROLE IF EXISTS memfleet; DROP ROLE IF EXISTS app;"
        )


def documented_check(
    pg: Postgres, cache: Server, workdir: Path
) -> subprocess.CompletedProcess[str]:
    """The docs' configuration, pointed at this PostgreSQL (its socket directory and port)
    and this memcached, then the docs' --check command run by a shell in its directory."""
    config = doc_block("config")
    config = re.sub(r"host=/run/postgresql port=5432", f"host={pg.dir} port={pg.port}", config)
    config = config.replace("127.0.0.1:11211", f"127.0.0.1:{cache.port}")
    assert f"port={pg.port} user=memfleet dbname=app" in config, config
    (workdir / "invalidate.yml").write_text(config + f"\nspool_dir: {workdir / 'spool'}\n")
    bindir = str(Path(memfleet_bin()).parent)
    return subprocess.run(
        ["bash", "-euc", doc_block("check")],
        cwd=workdir,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("setup", ["precreated", "self-created"])
def test_documented_setup_works(pg: Postgres, cache: Server, workdir: Path, setup: str) -> None:
    db = DocDatabase(pg)
    try:
        pg.script(doc_block(setup), database="app")
        r = documented_check(pg, cache, workdir)
        assert r.returncode == 0, r.stderr
        assert "created replication slot memfleet" in r.stderr, r.stderr
        slots = pg.sql(
            "SELECT database, plugin FROM pg_replication_slots WHERE slot_name = 'memfleet'"
        )
        assert slots == [["app", "pgoutput"]]
        tables = pg.sql(
            "SELECT tablename FROM pg_publication_tables WHERE pubname = 'memfleet'", database="app"
        )
        assert tables == [["users"]]
    finally:
        db.drop()


def test_missing_grant_is_named(pg: Postgres, cache: Server, workdir: Path) -> None:
    """The role of the docs without what creating the publication needs: the refusal says
    which grant is missing."""
    db = DocDatabase(pg)
    try:
        pg.script("CREATE ROLE memfleet LOGIN REPLICATION PASSWORD 'change-me';", database="app")
        r = documented_check(pg, cache, workdir)
        assert r.returncode != 0
        assert "permission denied for database app" in r.stderr, r.stderr
        assert "GRANT CREATE ON DATABASE app TO memfleet" in r.stderr, r.stderr

        pg.script("GRANT CREATE ON DATABASE app TO memfleet;", database="app")
        r = documented_check(pg, cache, workdir)
        assert r.returncode != 0
        assert "must be owner of table users" in r.stderr, r.stderr
        assert "GRANT app TO memfleet" in r.stderr, r.stderr
    finally:
        db.drop()


def meta(port: int, request: str) -> tuple[str, bytes | None]:
    """One meta request's reply: its first line, and the value when one comes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode() + b"\r\n")
        buf = b""
        while b"\r\n" not in buf or (buf.startswith(b"VA ") and buf.count(b"\r\n") < 2):
            chunk = s.recv(65536)
            assert chunk, "connection closed"
            buf += chunk
    head, _, rest = buf.partition(b"\r\n")
    return head.decode(), rest.split(b"\r\n")[0] if head.startswith(b"VA ") else None


def stale_target(kind: str, started: list[Server]) -> int:
    """A cache to invalidate: memcached 1.6, `memfleet serve`, or `memfleet route` (a
    nutcracker config or an mcrouter config) over one of each; the port to use."""
    from mcrouter_harness import McRouter
    from proxy_harness import Proxy, pool_yaml

    if kind == "memcached":
        started.append(memcached().start())
        return started[-1].port or 0
    started.append(memcached().start())
    started.append(memfleet().start())
    if kind == "serve":
        return started[-1].port or 0
    backends = [started[-2].address, started[-1].address]
    if kind == "route-nutcracker":
        port = free_port()
        servers = [f"{a}:1" for a in backends]
        started.append(Proxy(pool_yaml("alpha", f"127.0.0.1:{port}", servers), port).start())
        return port
    router = McRouter({"pools": {"A": {"servers": backends}}, "route": "PoolRoute|A"})
    started.append(router.start())
    return router.port or 0


@pytest.mark.parametrize("target", ["memcached", "serve", "route-nutcracker", "route-mcrouter"])
def test_mark_stale_serves_the_old_value_to_all_but_one(
    pg: Postgres, workdir: Path, invalidators: list[Invalidator], target: str
) -> None:
    """`invalidate_with: stale`: after an UPDATE the key is still there, marked stale; the
    first reader wins the refill (W), the others are served the old value (Z X), and the
    winner's fill replaces it. The row's remote marker is deleted with it."""
    from memfleet import Client

    started: list[Server] = []
    name = "st_" + target.replace("-", "_")
    try:
        port = stale_target(target, started)
        pg.script(
            f"DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (id int PRIMARY KEY, v text NOT NULL);"
            f"INSERT INTO {name} SELECT i, 'old' FROM generate_series(1, 20) i;"
        )
        cfg = base_config(pg, name, port, {name: ["st:{id}"]})
        cfg |= {"invalidate_with": "stale", "stale_ttl": 60, "remote_markers": "rm:"}
        inv = Invalidator(cfg, workdir).start()
        invalidators.append(inv)
        client = Client([f"127.0.0.1:{port}"])
        try:
            for i in range(1, 21):
                client.set(f"st:{i}", "old")
                client.set(f"rm:st:{i}", "1")
            client.set("rm:other", "1")
            pg.script(f"UPDATE {name} SET v = 'new' WHERE id <= 10;")
            assert wait_until(
                lambda: int(inv.stats()["markers_sent"]) >= 10, timeout=30, step=0.05
            ), inv.stats()
            st = inv.stats()
            assert (st["marked_stale"], st["deleted"], st["not_found"]) == ("10", "10", "0"), st
            assert (st["markers_sent"], st["markers_deleted"], st["stale_as_delete"]) == (
                "10",
                "10",
                "0",
            ), st

            head, value = meta(port, "mg st:1 v c N30")
            assert value == b"old" and set(head.split()[2:]) >= {"X", "W"}, (head, value)
            head, value = meta(port, "mg st:1 v c N30")
            assert value == b"old" and set(head.split()[2:]) >= {"X", "Z"}, (head, value)
            # An unchanged row's key is neither stale nor leased.
            head, value = meta(port, "mg st:11 v")
            assert (head, value) == ("VA 3", b"old")

            def load(i: int) -> str:
                return pg.sql(f"SELECT v FROM {name} WHERE id = {i}")[0][0]

            # st:1's refill is someone else's: the stale value is served meanwhile.
            assert client.get_or_set("st:1", lambda: load(1)) == "old"
            # st:2's is ours: loaded, and stored over the stale item.
            assert client.get_or_set("st:2", lambda: load(2)) == "new"
            assert meta(port, "mg st:2 v") == ("VA 3", b"new")

            assert [client.get(f"rm:st:{i}") for i in range(1, 12)] == [None] * 10 + ["1"]
            assert client.get("rm:other") == "1"
        finally:
            client.close()
        inv.stop()
        drop_slot(pg, name)
    finally:
        for s in reversed(started):
            s.stop()


def test_spooled_mark_stales_are_replayed_as_mark_stales(
    pg: Postgres, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """A target that stops answering: its mark-stales are spooled and, once it is back,
    replayed as mark-stales (the keys stay, stale), not as deletes."""
    with memfleet() as cache:
        port = cache.port or 0
        pg.script(
            "DROP TABLE IF EXISTS st_spool; CREATE TABLE st_spool (id int PRIMARY KEY, v int);"
            "INSERT INTO st_spool SELECT i, 0 FROM generate_series(1, 50) i;"
        )
        cfg = base_config(pg, "st_spool", port, {"st_spool": ["sp:{id}"]})
        cfg |= {"invalidate_with": "stale", "remote_markers": "rm:"}
        inv = Invalidator(cfg, workdir).start()
        invalidators.append(inv)
        set_acked(port, [f"sp:{i}" for i in range(1, 51)] + [f"rm:sp:{i}" for i in range(1, 51)])
        with cache.paused():
            pg.script("UPDATE st_spool SET v = 1;")
            assert wait_until(lambda: int(inv.stats()["spooled"]) >= 100, step=0.05), inv.stats()
        assert wait_until(lambda: int(inv.stats()["replayed"]) >= 100, step=0.05), inv.stats()
        st = inv.stats()
        for i in range(1, 51):
            head, value = meta(port, f"mg sp:{i} v")
            assert value == b"v" and "X" in head.split(), (i, head, st)
        assert Cache(port).present([f"rm:sp:{i}" for i in range(1, 51)]) == set()
        inv.stop()
        drop_slot(pg, "st_spool")


def test_pool_target_marks_stale_and_deletes_markers_where_they_hash(
    pg: Postgres, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """A pool target in stale mode: each key is marked stale on its server and each marker
    (a key of its own) deleted on the server the marker hashes to."""
    from proxy_harness import Proxy, pool_yaml

    rows = 300
    pg.script(
        "DROP TABLE IF EXISTS st_pool; CREATE TABLE st_pool (id int PRIMARY KEY, n int);"
        f"INSERT INTO st_pool SELECT i, 0 FROM generate_series(1, {rows}) i;"
    )
    backends = [memcached().start(), memfleet().start(), memcached().start()]
    servers = [f"127.0.0.1:{b.port}:1" for b in backends]
    port = free_port()
    router = Proxy(
        pool_yaml("alpha", f"127.0.0.1:{port}", servers, hash="md5", distribution="ketama"), port
    )
    try:
        router.start()
        cfg = base_config(pg, "st_pool", 0, {"st_pool": ["pk:{id}"]})
        cfg["targets"] = [{"pool": {"servers": servers, "hash": "md5", "distribution": "ketama"}}]
        cfg |= {"invalidate_with": "stale", "remote_markers": "rm:"}
        inv = Invalidator(cfg, workdir).start()
        invalidators.append(inv)
        keys = [f"pk:{i}" for i in range(1, rows + 1)]
        markers = [f"rm:{k}" for k in keys]
        set_acked(port, keys + markers)
        pg.script("UPDATE st_pool SET n = 1;")
        assert wait_until(
            lambda: int(inv.stats()["markers_sent"]) >= rows, timeout=30, step=0.05
        ), inv.stats()
        st = inv.stats()
        # Found on the server the ring picked: every key marked, every marker deleted.
        assert (st["marked_stale"], st["not_found"], st["markers_deleted"]) == (
            str(rows),
            "0",
            str(rows),
        ), st
        assert Cache(port).present(markers) == set()
        assert Cache(port).present(keys) == set(keys)
        assert all("X" in meta(port, f"mg {k} v")[0].split() for k in keys[:20])
        inv.stop()
        drop_slot(pg, "st_pool")
    finally:
        router.stop()
        for b in backends:
            b.stop()
