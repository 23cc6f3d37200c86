"""`memfleet invalidate` with `source.replica_dsn`: deletes wait until a real streaming
standby (PostgreSQL 15, pg_basebackup -R of the primary) has replayed the transaction, so a
reader of the standby cannot put the old row back into the cache after the delete. Driven
against Debian's memcached; the standby's replay is paused, the standby stopped, and the
invalidator killed while deletes wait."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import memfleet
import psycopg
import pytest
from harness import Server, free_port, memcached, memfleet_bin, terminate, wait_for_port
from harness import memfleet as memfleet_serve
from pg_harness import Postgres, Standby
from test_invalidate import Cache, Invalidator, base_config, drop_slot, refusal, wait_until


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    p = Postgres(free_port()).start()
    yield p
    p.destroy()


@pytest.fixture(scope="module")
def standby(pg: Postgres) -> Iterator[Standby]:
    s = Standby(pg, free_port()).start()
    yield s
    s.destroy()


@pytest.fixture
def cache() -> Iterator[Server]:
    with memcached("-m", "64") as s:
        yield s


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def invalidators() -> Iterator[list[Invalidator]]:
    started: list[Invalidator] = []
    yield started
    for inv in started:
        inv.stop()


def lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def caught_up(pg: Postgres, standby: Standby) -> None:
    """Waits until the standby has replayed everything the primary has written so far."""
    target = lsn(pg.sql("SELECT pg_current_wal_lsn()")[0][0])
    assert wait_until(lambda: lsn(standby.replay_lsn()) >= target, 30, 0.05)


def held_for_a_while(cache: Cache, key: str, seconds: float = 1.5) -> None:
    """The key stays cached for `seconds` (checked every 50 ms): its delete is held."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert cache.get(key) == "old", f"{key} was deleted while its delete should wait"
        time.sleep(0.05)


class GatedCase:
    """A 100-row table whose `g:{id}` keys an invalidator gated on the standby follows."""

    def __init__(
        self,
        pg: Postgres,
        standby: Standby,
        cache: Server,
        workdir: Path,
        invalidators: list[Invalidator],
        name: str,
        **settings: Any,
    ) -> None:
        self.pg, self.standby, self.name, self.table = pg, standby, name, f"g_{name}"
        pg.script(
            f"DROP TABLE IF EXISTS {self.table};"
            f"CREATE TABLE {self.table} (id int PRIMARY KEY, v int NOT NULL);"
            f"INSERT INTO {self.table} SELECT i, 0 FROM generate_series(1, 100) i;"
        )
        cfg = base_config(pg, name, cache.port or 0, {self.table: ["g:{id}"]})
        cfg["source"]["replica_dsn"] = standby.dsn
        cfg["source"].update(settings.pop("source", {}))
        self.inv = Invalidator({**cfg, **settings}, workdir).start()
        invalidators.append(self.inv)
        self.cache = Cache(cache.port or 0)
        caught_up(pg, standby)

    def stat(self, name: str) -> int:
        return int(self.inv.stats()[name])

    def update(self, *ids: int) -> int:
        """Commits one transaction updating `ids`; the primary's WAL position after it."""
        self.pg.script(
            f"UPDATE {self.table} SET v = v + 1 WHERE id IN ({', '.join(map(str, ids))});"
        )
        return lsn(self.pg.sql("SELECT pg_current_wal_lsn()")[0][0])

    def finish(self) -> None:
        self.inv.stop()
        drop_slot(self.pg, self.name)


@contextmanager
def routed(backend: Server, workdir: Path) -> Iterator[Server]:
    """`memfleet route` with a one-server pool in front of `backend`: a Server-like port."""
    port = free_port()
    conf = workdir / "route.yml"
    conf.write_text(
        "pool:\n"
        f"  listen: 127.0.0.1:{port}\n"
        "  hash: fnv1a_64\n  distribution: ketama\n"
        f"  servers:\n    - 127.0.0.1:{backend.port}:1\n"
    )
    argv = [memfleet_bin(), "route", "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1"]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=10)
        yield cast(Server, SimpleNamespace(port=port))
    finally:
        terminate(proc)


@pytest.fixture(params=["memcached", "memfleet", "route"])
def marker_cache(request: pytest.FixtureRequest, workdir: Path) -> Iterator[tuple[str, Server]]:
    """The cache the markers live in, and its kind: Debian's memcached, `memfleet serve`, or
    memcached behind `memfleet route`."""
    if request.param == "memfleet":
        with memfleet_serve() as s:
            yield request.param, s
        return
    with memcached("-m", "64") as s:
        if request.param == "route":
            with routed(s, workdir) as r:
                yield request.param, r
        else:
            yield request.param, s


def test_a_marker_is_released_only_by_the_transaction_that_set_it(
    pg: Postgres,
    standby: Standby,
    marker_cache: tuple[str, Server],
    workdir: Path,
    invalidators: list[Invalidator],
) -> None:
    """Two writes of one row from the replica region, overlapping: the first transaction's
    replay leaves the second's marker (and so does a plain write of the row meanwhile); the
    second's replay removes it, and only then. And two writes whose transactions commit in the
    other order than their markers were set: the first commit's replay leaves the other's."""
    kind, server = marker_cache
    case = GatedCase(
        pg, standby, server, workdir, invalidators, f"tied_{kind}",
        remote_markers="rm:", remote_markers_release="message",
    )  # fmt: skip
    c = case.cache
    client = memfleet.Client([f"127.0.0.1:{server.port}"])
    first, second = psycopg.connect(pg.dsn), psycopg.connect(pg.dsn)

    def update(i: int) -> str:
        return f"UPDATE {case.table} SET v = v + 1 WHERE id = {i}"

    try:
        with client.remote_write("g:1") as w1, first.transaction(), first.cursor() as cur:
            cur.execute(update(1))
            cur.execute(*w1.pg_message())
            # The second write sets its marker and emits its message before the first
            # commits; its row change comes after.
            with client.remote_write("g:1") as w2:
                second.execute(*w2.pg_message())
            assert c.get("rm:g:1") == f" {w1.token} {w2.token}"
        # The first transaction replayed: its token leaves the marker, the second's stays.
        assert wait_until(lambda: c.get("rm:g:1") == f" {w2.token}", step=0.02), c.get("rm:g:1")
        # A write of the row from the master region sets no marker and removes none.
        c.set_many({"g:1": "old"})
        case.update(1)
        assert wait_until(lambda: c.get("g:1") is None, step=0.02)
        assert c.get("rm:g:1") == f" {w2.token}"
        standby.pause_replay()
        try:
            second.execute(update(1))
            second.commit()
            assert wait_until(lambda: case.stat("held_transactions") == 1, step=0.02)
            for _ in range(20):
                assert c.get("rm:g:1") == f" {w2.token}", (
                    "the marker went before its transaction replayed"
                )
                time.sleep(0.05)
        finally:
            standby.resume_replay()
        assert wait_until(lambda: c.get("rm:g:1") is None, step=0.02)

        # Markers set in one order, transactions committed in the other.
        with client.remote_write("g:2") as w3, first.transaction(), first.cursor() as cur:
            cur.execute(*w3.pg_message())
            with client.remote_write("g:2") as w4, second.transaction():
                second.execute(update(2))
                second.execute(*w4.pg_message())
            assert wait_until(lambda: c.get("rm:g:2") == f" {w3.token}", step=0.02), c.get("rm:g:2")
            cur.execute(update(2))
        assert wait_until(lambda: c.get("rm:g:2") is None, step=0.02)

        # Six writes of one key replayed together (after a pause): all released at once.
        standby.pause_replay()
        try:
            for _ in range(6):
                with client.remote_write("g:3") as w, first.transaction(), first.cursor() as cur:
                    cur.execute(update(3))
                    cur.execute(*w.pg_message())
            assert len((c.get("rm:g:3") or "").split()) == 6
        finally:
            standby.resume_replay()
        assert wait_until(lambda: c.get("rm:g:3") is None, step=0.02), c.get("rm:g:3")
        st = case.inv.stats()
        assert (st["marker_tokens"], st["markers_released"], st["markers_superseded"]) == (
            "10",
            "10",
            "0",
        ), st
        assert (st["markers_deleted"], st["markers_release_dropped"], st["bad_marker_lines"]) == (
            "0",
            "0",
            "0",
        ), st
    finally:
        first.close()
        second.close()
        client.close()
    case.finish()


def test_paused_replay_holds_the_delete(
    pg: Postgres, standby: Standby, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    case = GatedCase(pg, standby, cache, workdir, invalidators, "pause")
    c = case.cache
    # Unpaused, a change goes through.
    c.set_many({"g:1": "old"})
    case.update(1)
    assert wait_until(lambda: c.get("g:1") is None)
    assert case.stat("replica_up") == 1

    c.set_many({"g:2": "old", "g:3": "old"})
    standby.pause_replay()
    try:
        after = case.update(2)
        # Received (counted), and then not deleted:
        assert wait_until(lambda: case.stat("row_changes") == 2, step=0.02)
        held_for_a_while(c, "g:2")
        assert case.stat("held_transactions") == 1
        st = case.inv.stats()
        assert st["held_keys"] == "1"
        assert int(st["replica_lag_bytes"]) > 0
        assert lsn(st["replica_replay_lsn"]) < after
    finally:
        standby.resume_replay()
    assert wait_until(lambda: c.get("g:2") is None)
    assert c.get("g:3") == "old"
    assert wait_until(lambda: case.stat("held_transactions") == 0)
    st = case.inv.stats()
    assert (st["held_keys"], st["replica_lag_bytes"], st["replica_errors"]) == ("0", "0", "0")
    assert int(st["latency_count"]) == 2
    case.finish()


def test_transaction_larger_than_a_batch_waits_whole(
    pg: Postgres, standby: Standby, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """A transaction whose keys fill several batches (`max_batch_keys` 16): the batches cut
    before its Commit arrives wait too, for the commit the Begin announced."""
    case = GatedCase(pg, standby, cache, workdir, invalidators, "big", max_batch_keys=16)
    c = case.cache
    keys = {f"g:{i}": "old" for i in range(1, 101)}
    c.set_many(keys)
    standby.pause_replay()
    try:
        case.update(*range(1, 101))
        assert wait_until(lambda: case.stat("row_changes") == 100, step=0.02)
        held_for_a_while(c, "g:1")
        assert c.present(list(keys)) == set(keys)
        assert case.stat("held_keys") == 100
    finally:
        standby.resume_replay()
    assert wait_until(lambda: not c.present(list(keys))), sorted(c.present(list(keys)))
    case.finish()


def test_stopped_standby_holds_then_delivers(
    pg: Postgres, standby: Standby, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    case = GatedCase(pg, standby, cache, workdir, invalidators, "stop")
    c = case.cache
    keys = {f"g:{i}": "old" for i in range(1, 11)}
    c.set_many(keys)
    standby.stop()
    try:
        for i in range(1, 11):
            case.update(i)
        assert wait_until(lambda: case.stat("row_changes") == 10, step=0.02)
        held_for_a_while(c, "g:1")
        assert c.present(list(keys)) == set(keys)
        assert case.stat("held_transactions") == 10
        assert case.stat("replica_up") == 0
        assert case.stat("replica_errors") > 0
    finally:
        standby.start()
    assert wait_until(lambda: not c.present(list(keys))), c.present(list(keys))
    assert wait_until(lambda: case.stat("replica_up") == 1)
    log = case.inv.log.read_text()
    # Once per outage, however many polls failed; and its end.
    assert log.count("deletes are held until it answers") == 1, log
    assert "is back" in log, log
    case.finish()


def test_kill9_while_holding_loses_nothing(
    pg: Postgres, standby: Standby, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """The slot is not confirmed past a held transaction, though later WAL (another table's
    writes, which keepalives report) moves on: after kill -9 and a restart the held
    transaction comes again from the slot and its key is deleted."""
    case = GatedCase(pg, standby, cache, workdir, invalidators, "kill")
    c = case.cache
    pg.script("DROP TABLE IF EXISTS elsewhere; CREATE TABLE elsewhere (n int);")
    caught_up(pg, standby)
    c.set_many({"g:5": "old"})
    standby.pause_replay()
    try:
        after = case.update(5)
        assert wait_until(lambda: case.stat("row_changes") == 1, step=0.02)
        for n in range(15):
            pg.script(f"INSERT INTO elsewhere VALUES ({n});")
            time.sleep(0.1)
        held_for_a_while(c, "g:5")
        confirmed = pg.sql(
            f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's_{case.name}'"
        )
        assert lsn(confirmed[0][0]) < after, (confirmed, after)
        case.inv.kill9()
    finally:
        standby.resume_replay()
    assert c.get("g:5") == "old"
    case.inv.start()
    assert wait_until(lambda: c.get("g:5") is None)
    case.finish()


def test_held_keys_are_bounded(
    pg: Postgres, standby: Standby, cache: Server, workdir: Path, invalidators: list[Invalidator]
) -> None:
    """With `replica_max_held_keys` reached the stream is no longer read (the slot keeps the
    rest); once the standby replays, everything is delivered."""
    case = GatedCase(
        pg, standby, cache, workdir, invalidators, "bound", source={"replica_max_held_keys": 10}
    )
    c = case.cache
    keys = {f"g:{i}": "old" for i in range(1, 51)}
    c.set_many(keys)
    standby.pause_replay()
    try:
        # One transaction at a time, so each arrives in a batch of its own.
        pg.script(
            "".join(
                f"UPDATE {case.table} SET v = 1 WHERE id = {i}; SELECT pg_sleep(0.01);"
                for i in range(1, 51)
            )
        )
        assert wait_until(lambda: case.stat("row_changes") > 0, step=0.02)
        time.sleep(1.0)
        assert c.present(list(keys)) == set(keys)
        st = case.inv.stats()
        assert int(st["row_changes"]) < 50, st
        assert int(st["held_keys"]) + int(st["held_transactions"]) <= 12, st
    finally:
        standby.resume_replay()
    assert wait_until(lambda: not c.present(list(keys))), sorted(c.present(list(keys)))
    assert case.stat("row_changes") == 50
    case.finish()


def test_replica_dsn_must_be_a_standby(
    pg: Postgres, standby: Standby, cache: Server, workdir: Path
) -> None:
    pg.script("DROP TABLE IF EXISTS chk; CREATE TABLE chk (id int PRIMARY KEY);")
    cfg: dict[str, Any] = base_config(pg, "chk", cache.port or 0, {"chk": ["chk:{id}"]})
    cfg["source"]["replica_dsn"] = pg.dsn
    err = refusal(cfg, workdir)
    assert (
        f"source.replica_dsn points at 127.0.0.1 port {pg.port}, which is not in recovery" in err
    ), err

    # A standby, but of another cluster: its LSNs say nothing about the source's.
    other = Postgres(free_port()).start()
    try:
        other_standby = Standby(other, free_port()).start()
        try:
            cfg["source"]["replica_dsn"] = other_standby.dsn
            err = refusal(cfg, workdir)
            assert (
                f"source.replica_dsn points at 127.0.0.1 port {other_standby.port}, a standby of another cluster"
                in err
            )
        finally:
            other_standby.destroy()
    finally:
        other.destroy()

    cfg["source"]["replica_dsn"] = standby.dsn
    path = workdir / "ok.yml"
    path.write_text(json.dumps({"spool_dir": str(workdir / "spool"), **cfg}))
    r = subprocess.run(
        [memfleet_bin(), "invalidate", "-c", str(path), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert f"deletes wait for replica 127.0.0.1 port {standby.port}" in r.stderr, r.stderr

    # --check needs the standby to answer.
    cfg["source"]["replica_dsn"] = (
        f"host=127.0.0.1 port={free_port()} user=postgres dbname=postgres"
    )
    path.write_text(json.dumps({"spool_dir": str(workdir / "spool"), **cfg}))
    r = subprocess.run(
        [memfleet_bin(), "invalidate", "-c", str(path), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    assert "cannot connect to the replica (source.replica_dsn)" in r.stderr, r.stderr
    drop_slot(pg, "chk")
