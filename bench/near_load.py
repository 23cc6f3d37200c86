"""The `clients` part of bench/compare-near: PROCS processes with memfleet Python clients
read keys (zipf 1.1 over KEYS) with WRITE_SHARE of requests writes, with no near cache, with
the near cache kept fresh by the server (`track`), and with the TTL-only near cache. Each
process logs its writes (key, version, start, acknowledgement) and reads (key, version seen,
start); a read is stale if it returned a value acknowledged before some write of the key
started, and that write was acknowledged more than STALE_MS before the read began. Timestamps
are CLOCK_MONOTONIC, shared by the processes.

With WARM=1 (the default) each process first reads every key once, as a long-running process
has, and the server's gets are counted from when all are warm: the steady state. WARM=0 counts
from cold processes, so the figure also holds each process's first read of each key."""

from __future__ import annotations

import bisect
import itertools
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients/python/src"))

PROCS = 4
KEYS = 100_000
WRITE_SHARE = 0.05
ZIPF = 1.1
STALE_MS = 5.0
NEAR_SIZE = int(os.environ.get("NEAR_SIZE", "100000"))
WARM = os.environ.get("WARM", "1") != "0"
SWITCH_INTERVAL = float(os.environ.get("SWITCH_INTERVAL", "0.005"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def key(i: int) -> str:
    return f"nk:{i}"


def worker(
    addr: str, mode: str, seconds: float, ttl: float, seed: int, ready: Any, out: mp.Queue
) -> None:
    import memfleet

    # How long a busy thread keeps the GIL from the notice thread (Python's default 5 ms).
    sys.setswitchinterval(SWITCH_INTERVAL)
    near = mode != "none"
    c = memfleet.Client(
        [addr],
        near_cache=near,
        near_cache_size=NEAR_SIZE,
        near_cache_ttl=ttl,
        near_cache_tracking=mode == "tracked",
    )
    if WARM:
        for b in range(0, KEYS, 1000):
            c.get_many([key(i) for i in range(b, min(KEYS, b + 1000))])
    ready.wait()  # every process warm
    ready.wait()  # the server's counters read
    rng = random.Random(seed)
    weights = list(itertools.accumulate(1 / (k**ZIPF) for k in range(1, KEYS + 1)))
    total = weights[-1]
    pid = os.getpid()
    writes: list[tuple[int, str, float, float]] = []
    reads: list[tuple[int, str, float]] = []
    n = 0
    end = time.monotonic() + seconds
    while True:
        t0 = time.monotonic()
        if t0 >= end:
            break
        k = bisect.bisect_left(weights, rng.random() * total)
        if rng.random() < WRITE_SHARE:
            n += 1
            version = f"{pid}-{n}"
            c.set(key(k), version)
            writes.append((k, version, t0, time.monotonic()))
        else:
            v = c.get(key(k))
            reads.append((k, v if isinstance(v, str) else "?", t0))
    stats = c.near_cache.stats() if c.near_cache is not None else {}
    c.close()
    out.put((writes, reads, stats))


def run(bin_: str, mode: str, seconds: float, ttl: float) -> dict[str, float]:
    import memfleet

    port = free_port()
    proc = subprocess.Popen(
        [bin_, "serve", "-t", "2", "-m", "256", "-U", "0", "-l", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    addr = f"127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        with memfleet.Client([addr]) as c:
            c.set_many({key(i): "init" for i in range(KEYS)})
        q: mp.Queue = mp.Queue()
        ready = mp.Barrier(PROCS + 1)
        ps = [
            mp.Process(target=worker, args=(addr, mode, seconds, ttl, 1000 + i, ready, q))
            for i in range(PROCS)
        ]
        for p in ps:
            p.start()
        ready.wait()
        with memfleet.Client([addr]) as c:
            before = c.stats()[addr]
        ready.wait()
        results = [q.get() for _ in ps]
        for p in ps:
            p.join()
        with memfleet.Client([addr]) as c:
            after = c.stats()[addr]
    finally:
        proc.terminate()
        proc.wait(10)
    acks: dict[str, float] = {"init": 0.0}
    by_key: dict[int, list[tuple[float, float]]] = {}
    for writes, _, _ in results:
        for k, version, start, ack in writes:
            acks[version] = ack
            by_key.setdefault(k, []).append((start, ack))
    stale = 0
    worst = 0.0
    nreads = 0
    for _, reads, _ in results:
        for k, version, t0 in reads:
            nreads += 1
            seen_ack = acks.get(version)
            if seen_ack is None:
                continue
            for start, ack in by_key.get(k, ()):
                # A write begun after the value read was acknowledged is newer for sure.
                if start > seen_ack and ack < t0 - STALE_MS / 1000:
                    stale += 1
                    worst = max(worst, t0 - ack)
                    break
    server_gets = int(after["cmd_get"]) - int(before["cmd_get"])
    nwrites = sum(len(w) for w, _, _ in results)
    return {
        "reads": nreads,
        "writes": nwrites,
        "server_gets": server_gets,
        "stale": stale,
        "worst_ms": worst * 1000,
    }


def main(bin_: str, seconds: float, ttl: float) -> None:
    mp.set_start_method("fork", force=True)
    base = run(bin_, "none", seconds, ttl)
    rows = [("no near cache", base)]
    for mode, label in (("tracked", "near cache, tracked"), ("ttl", f"near cache, TTL {ttl:g} s")):
        rows.append((label, run(bin_, mode, seconds, ttl)))
    base_share = base["server_gets"] / max(1, base["reads"])
    print(
        f"clients: {PROCS} processes, zipf {ZIPF} over {KEYS:,} keys, {WRITE_SHARE:.0%} writes, "
        f"{seconds:g} s each, near cache of {NEAR_SIZE:,} entries, "
        + ("warm (every key read once first)" if WARM else "from cold")
    )
    for label, r in rows:
        share = r["server_gets"] / max(1, r["reads"])
        fall = 1 - share / base_share if base_share else 0.0
        print(
            f"  {label:24} reads {int(r['reads']):>8,}  writes {int(r['writes']):>6,}  "
            f"server gets {share:6.1%} of reads ({fall:+.1%} vs none)  stale reads (> {STALE_MS:g} ms) "
            f"{int(r['stale']):,}" + (f", worst {r['worst_ms']:.0f} ms" if r["stale"] else "")
        )
