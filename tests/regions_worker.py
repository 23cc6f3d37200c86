"""The web tier of one region in tests/test_regions.py, run inside that region's namespace.

    read        threads that read `item:<id>` through the cache with leases (get_or_set),
                loading misses from the region's database
    write       UPDATEs of random rows on the primary at a steady rate
    write-read  writes made from this region, each followed at once by a read of the same key
                (read-your-writes), with or without remote markers; each on a row of its own,
                or (`--rows`) on random rows of a range that other writes hit too

Each role runs until `--until` names a file that exists (or `--count` writes are done) and writes
its counts as JSON to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from typing import Any

import psycopg
from memfleet import Client

TABLE = "items"


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def row(db: psycopg.Connection[Any], i: int) -> int:
    with db.cursor() as cur:
        cur.execute(f"SELECT v FROM {TABLE} WHERE id = %s", (i,))
        got = cur.fetchone()
        assert got is not None
        return int(got[0])


def bump(db: psycopg.Connection[Any], i: int) -> int:
    with db.cursor() as cur:
        cur.execute(f"UPDATE {TABLE} SET v = v + 1 WHERE id = %s RETURNING v", (i,))
        got = cur.fetchone()
        assert got is not None
        return int(got[0])


def stopped(args: argparse.Namespace, started: float) -> bool:
    return os.path.exists(args.until) or time.monotonic() - started > args.max_seconds


def read(args: argparse.Namespace) -> dict[str, int]:
    counts = {"reads": 0, "loads": 0, "master_loads": 0, "errors": 0}
    lock = threading.Lock()
    started = time.monotonic()
    client = Client([args.cache])

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        db = connect(args.db)
        master = connect(args.master_db) if args.master_db else None
        mine = {"reads": 0, "loads": 0, "master_loads": 0, "errors": 0}
        while not stopped(args, started):
            i = rnd.randrange(args.keys)

            def load(i: int = i) -> int:
                mine["loads"] += 1
                return row(db, i)

            try:
                if master is not None:

                    def load_master(i: int = i) -> int:
                        mine["master_loads"] += 1
                        return row(master, i)

                    client.get_or_set(f"item:{i}", load, master_loader=load_master)
                else:
                    client.get_or_set(f"item:{i}", load)
                mine["reads"] += 1
            except Exception:  # noqa: BLE001 - counted; the run goes on
                mine["errors"] += 1
                time.sleep(0.01)
        with lock:
            for k, v in mine.items():
                counts[k] += v

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def write(args: argparse.Namespace) -> dict[str, int]:
    db = connect(args.db)
    rnd = random.Random(7)
    started = time.monotonic()
    writes = 0
    while not stopped(args, started):
        bump(db, rnd.randrange(args.keys))
        writes += 1
        # A steady rate: the next write is due at writes / rate.
        due = started + writes / args.rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return {"writes": writes}


def write_read(args: argparse.Namespace) -> dict[str, int]:
    """Writes from this region (the master is far away), each followed at once by a
    get_or_set of the key: a read returning less than the value just written is stale (the
    rows only grow, so a later write by anyone reads as fresh)."""
    client = Client([args.cache])
    counts = {"writes": 0, "stale": 0, "master_loads": 0}
    lock = threading.Lock()
    per_thread = args.count // args.threads

    def writer(n: int) -> None:
        db = connect(args.db)
        master = connect(args.master_db)
        mine = {"writes": 0, "stale": 0, "master_loads": 0}
        rnd = random.Random(1000 + n)
        # Each write on a row of its own, or with `--rows` on rows that this region's other
        # threads and region A's writers write too, while earlier writes are being replayed.
        own = range(args.first + n * per_thread, args.first + (n + 1) * per_thread)
        rows = [args.first + rnd.randrange(args.rows) for _ in own] if args.rows else list(own)
        for i in rows:
            key = f"item:{i}"
            if args.markers:
                # The marker's token goes in the write's own transaction: only its replay
                # removes the marker.
                with client.remote_write(key) as w, master.transaction():
                    v = bump(master, i)
                    master.execute(*w.pg_message())
            else:
                v = bump(master, i)
                client.delete(key)

            def load(i: int = i) -> int:
                return row(db, i)

            def load_master(i: int = i) -> int:
                mine["master_loads"] += 1
                return row(master, i)

            if args.markers:
                got = client.get_or_set(key, load, master_loader=load_master)
            else:
                got = client.get_or_set(key, load)
            mine["writes"] += 1
            if int(got) < v:
                mine["stale"] += 1
        with lock:
            for k, x in mine.items():
                counts[k] += x

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["read", "write", "write-read"])
    p.add_argument("--out", required=True)
    p.add_argument("--cache", default="")
    p.add_argument("--db", required=True)
    p.add_argument("--master-db", default="")
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rate", type=float, default=50)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--first", type=int, default=0, help="write-read: the first row of its range")
    p.add_argument(
        "--rows", type=int, default=0, help="write-read: random rows of the range's first ROWS"
    )
    p.add_argument("--markers", type=int, default=0)
    p.add_argument("--until", default="/nonexistent")
    p.add_argument("--max-seconds", type=float, default=120)
    args = p.parse_args()
    role = {"read": read, "write": write, "write-read": write_read}[args.role]
    result = role(args)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
