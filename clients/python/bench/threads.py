#!/usr/bin/env python3
"""Calls/s of ``get`` (100 B) and ``get_many`` (100 keys over 3 servers) with 1 and with 8 threads
sharing one client, memfleet's and pylibmc's (through a ``ClientPool`` of 8), against three
memcached servers the script starts (``MEMFLEET_TEST_SERVER`` picks another server command).
Each count runs twice for ``--seconds`` and the better run is kept.

    PYTHONPATH=clients/python/src python3 clients/python/bench/threads.py

``--no-pylibmc`` leaves pylibmc out (and unimported): on free-threaded CPython it would turn the
GIL back on. The script prints whether the GIL is on.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from client_support import cache_server  # noqa: E402

import memfleet  # noqa: E402


def rate(threads: int, call: Callable[[], Any], seconds: float) -> float:
    """Calls per second of `call` made by `threads` threads at once."""
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def work(i: int) -> None:
        n = 0
        while time.monotonic() < stop:
            for _ in range(20):
                call()
            n += 20
        counts[i] = n

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / seconds


def pylibmc_cases(addrs: list[str], keys: list[str], threads: int) -> dict[str, Callable[[], Any]]:
    import pylibmc

    behaviors = {"tcp_nodelay": True, "ketama_weighted": True}
    pool = pylibmc.ClientPool(pylibmc.Client(addrs, binary=False, behaviors=behaviors), threads)
    with pool.reserve() as pl:
        pl.set_multi({k: "v" * 100 for k in keys})

    def pl_get() -> None:
        with pool.reserve() as pl:
            pl.get("multi:1")

    def pl_many() -> None:
        with pool.reserve() as pl:
            pl.get_multi(keys)

    return {"pylibmc get": pl_get, "pylibmc get_many": pl_many}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--no-pylibmc", action="store_true", help="measure memfleet only")
    args = ap.parse_args()
    gil = getattr(sys, "_is_gil_enabled", lambda: True)
    print(f"Python {sys.version.split()[0]}, GIL {'on' if gil() else 'off'}", flush=True)
    servers = [cache_server("-m", "256").start() for _ in range(3)]
    try:
        addrs = [s.address for s in servers]
        keys = [f"multi:{i}" for i in range(100)]
        mf = memfleet.Client(addrs)
        mf.set_many({k: "v" * 100 for k in keys})
        cases: dict[str, Callable[[], Any]] = {
            "memfleet get": lambda: mf.get("multi:1"),
            "memfleet get_many": lambda: mf.get_many(keys),
        }
        if not args.no_pylibmc:
            cases.update(pylibmc_cases(addrs, keys, args.threads))
        for name, call in cases.items():
            one = max(rate(1, call, args.seconds) for _ in range(2))
            many = max(rate(args.threads, call, args.seconds) for _ in range(2))
            print(f"{name}: 1 thread {one:.0f}/s, {args.threads} threads {many:.0f}/s, {many / one:.2f}x", flush=True)
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
