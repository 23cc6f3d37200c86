"""Caches in two regions kept consistent with a database whose replica lags (docs/regions.md),
proven on a fleet: region A (PostgreSQL primary, a cache, readers, writers) and region B (a
streaming standby whose replay the test slows and pauses, a cache, readers) in their own network
namespaces, 40 ms apart each way (regions.py).

The same workload runs three ways:
1. naive: one invalidator at the primary deletes in both regions; B's readers refill B's cache
   from B's replica before it has the change, and the old row stays cached. The test requires
   stale keys here: without them it would not be exercising the race.
2. replica-gated: B's own invalidator deletes in B only once B's replica has replayed the commit.
3. gated, plus remote markers for writes made from region B (read-your-writes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from fleet import Fleet
from regions import RegionPair, wait_until

MakeFleet = Callable[[str, list[str]], Fleet]

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
    return {
        "stale": {r: rp.stale_keys(r) for r in ("a", "b")},
        "writes": writes,
        "reads": reads,
    }


def test_naive_layout_leaves_old_rows_in_the_far_region(make_fleet: MakeFleet) -> None:
    with RegionPair(make_fleet, "naive") as rp:
        rp.invalidator(
            "a",
            "naive",
            {
                "source": rp.source("naive"),
                "targets": [{"memcached": rp.cache_addr("a")}, {"memcached": rp.cache_addr("b")}],
                "tables": {"public.items": ["item:{id}"]},
            },
        )
        got = run_workload(rp, ["s_naive"])
        print(got["writes"], got["reads"])
        stale = got["stale"]
        assert isinstance(stale, dict)
        # Region A reads the primary itself: nothing stale there.
        assert stale["a"] == [], (stale["a"][:10], rp.logs())
        # Region B refilled from a replica that had not replayed the change.
        assert len(stale["b"]) > 0, got
        print(f"naive: {len(stale['b'])} stale keys in region B")


def gated_invalidators(rp: RegionPair, markers: bool = False) -> list[str]:
    """Region A's invalidator deletes in A (its database is the primary itself); region B's
    reads the primary's changes through its own slot and deletes in B once B's replica has
    replayed them (and, with `markers`, removes the remote markers of those keys too)."""
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
    rp.invalidator("b", "gb", b)
    return ["s_ga", "s_gb"]


def test_replica_gated_invalidation_leaves_no_old_row_cached(make_fleet: MakeFleet) -> None:
    with RegionPair(make_fleet, "gated") as rp:
        slots = gated_invalidators(rp)
        got = run_workload(rp, slots)
        print(got["writes"], got["reads"])
        stale = got["stale"]
        assert isinstance(stale, dict)
        assert stale == {"a": [], "b": []}, (got, rp.logs())


def write_read(rp: RegionPair, markers: bool, count: int, out: str) -> dict[str, object]:
    p = rp.worker("b", "write-read", out, cache=rp.cache_addr("b"), db=rp.replica_dsn,
                  master_db=rp.primary.dsn, count=count, threads=10, markers=int(markers))  # fmt: skip
    return rp.result(p, out, timeout=300)


def test_writes_from_the_far_region_read_back_with_remote_markers(make_fleet: MakeFleet) -> None:
    with RegionPair(make_fleet, "markers") as rp:
        slots = gated_invalidators(rp, markers=True)
        rp.set_replay_delay(200)
        # Without markers, a write made from B and read back at once in B reads B's replica,
        # which has not replayed it yet.
        without = write_read(rp, markers=False, count=200, out="wr-plain.json")
        print("without markers:", without)
        assert without["stale"] > 0, without  # type: ignore[operator]
        # With markers the read goes to the master while the marker is there; meanwhile the
        # usual workload runs in both regions (B's readers given the master too).
        p = rp.worker("b", "write-read", "wr-markers.json", cache=rp.cache_addr("b"), db=rp.replica_dsn,
                      master_db=rp.primary.dsn, count=1000, threads=10, markers=1)  # fmt: skip
        got = run_workload(rp, slots, markers=True)
        with_markers = rp.result(p, "wr-markers.json", timeout=300)
        print("with markers:", with_markers, got["writes"], got["reads"])
        assert with_markers["writes"] == 1000, with_markers
        assert with_markers["stale"] == 0, with_markers
        assert with_markers["master_loads"] > 0, with_markers  # type: ignore[operator]
        # Quiescence: nothing stale, and B's invalidator removed every marker once B's replica
        # had the write (their TTL would only have bounded them).
        sentinel_delivered(rp, slots)
        assert got["stale"] == {"a": [], "b": []}, (got, rp.logs())
        from memfleet import Client

        with Client([rp.cache_addr("b")]) as c:
            left = c.get_many([f"rm:item:{i}" for i in range(200)])
        assert left == {}, left


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


def test_faults_lose_nothing_and_leave_nothing_stale(make_fleet: MakeFleet) -> None:
    with RegionPair(make_fleet, "faults") as rp:
        slots = gated_invalidators(rp)
        got = run_workload(rp, slots, meanwhile=faults)
        print(got["writes"], got["reads"])
        assert got["stale"] == {"a": [], "b": []}, (got, rp.logs())
