"""Caches in two regions kept consistent with a database whose replica lags (docs/regions.md),
proven on a fleet: region A (PostgreSQL primary, a cache, readers, writers) and region B (a
streaming standby whose replay the test slows and pauses, a cache, readers) in their own network
namespaces, 40 ms apart each way (regions.py).

The same workload runs three ways:
1. naive: one invalidator at the primary deletes in both regions; B's readers refill B's cache
   from B's replica before it has the change, and the old row stays cached. The test requires
   stale keys here: without them it would not be exercising the race.
2. replica-gated: B's own invalidator deletes in B only once B's replica has replayed the commit.
3. gated, plus remote markers for writes made from region B (read-your-writes), on the rows
   region A writes too, several writes of a row within the replica's lag.
"""

from __future__ import annotations

from collections.abc import Callable

from fleet import Fleet
from regions import (
    KEYS,
    REMOTE_ROWS,
    RegionPair,
    faults,
    gated_invalidators,
    lagging_replica,
    run_workload,
    sentinel_delivered,
    write_read,
)

MakeFleet = Callable[[str, list[str]], Fleet]


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
        print(got["writes"], got["reads"], got["invalidators"])
        stale = got["stale"]
        assert isinstance(stale, dict)
        # Region B refilled from a replica that had not replayed the change.
        assert len(stale["b"]) > 0, got
        print(f"naive: stale keys {len(stale['a'])} in region A, {len(stale['b'])} in region B")


def test_replica_gated_invalidation_leaves_no_old_row_cached(make_fleet: MakeFleet) -> None:
    with RegionPair(make_fleet, "gated") as rp:
        slots = gated_invalidators(rp)
        got = run_workload(rp, slots)
        print(got["writes"], got["reads"], got["invalidators"])
        stale = got["stale"]
        assert isinstance(stale, dict)
        assert stale == {"a": [], "b": []}, (got, rp.logs())


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
        # usual workload runs in both regions (B's readers given the master too). B's writes
        # hit random rows of those A writes, so a row is often written again (from either
        # region) before B's replica has its last write: each marker must stay until the
        # transaction that set it is replayed.
        p = rp.worker("b", "write-read", "wr-markers.json", cache=rp.cache_addr("b"), db=rp.replica_dsn,
                      master_db=rp.primary.dsn, count=1000, threads=10, markers=1, first=0, rows=KEYS)  # fmt: skip
        with_markers: dict[str, object] = {}

        def lagging_until_written(rp: RegionPair) -> None:
            # A's writers go on until B's writes are done: the check at quiescence comes after.
            lagging_replica(rp)
            with_markers.update(rp.result(p, "wr-markers.json", timeout=300))

        got = run_workload(rp, slots, markers=True, meanwhile=lagging_until_written)
        print("with markers:", with_markers, got["writes"], got["reads"], got["invalidators"])
        assert with_markers["writes"] == 1000, with_markers
        assert with_markers["stale"] == 0, with_markers
        assert with_markers["master_loads"] > 0, with_markers  # type: ignore[operator]
        # Quiescence: nothing stale, and B's invalidator removed every marker once B's replica
        # had the write (their TTL would only have bounded them).
        sentinel_delivered(rp, slots)
        assert got["stale"] == {"a": [], "b": []}, (got, rp.logs())
        from memfleet import Client

        with Client([rp.cache_addr("b")]) as c:
            left = c.get_many([f"rm:item:{i}" for i in range(KEYS + REMOTE_ROWS)])
        assert left == {}, (left, got["invalidators"], rp.logs())


def test_faults_lose_nothing_and_leave_nothing_stale(make_fleet: MakeFleet) -> None:
    with RegionPair(make_fleet, "faults") as rp:
        slots = gated_invalidators(rp)
        got = run_workload(rp, slots, meanwhile=faults)
        print(got["writes"], got["reads"], got["invalidators"])
        assert got["stale"] == {"a": [], "b": []}, (got, rp.logs())
