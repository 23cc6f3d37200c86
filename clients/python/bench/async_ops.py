#!/usr/bin/env python3
"""AsyncClient speed: get_many of 100 keys over 3 servers, get and set, in µs per call.

Starts three ``memcached -U 0`` on free loopback ports unless ``--servers`` is given. With
``--compare SRC_A SRC_B ...`` it runs itself once per client source tree (a ``PYTHONPATH`` holding
``memfleet``), the trees interleaved round after round, and prints each figure's best and spread
per tree; the machine may be busy, so read the spread. ``--instructions CALLS`` also counts the
client process's instructions per call under valgrind's callgrind (runs of CALLS and
3 x CALLS calls after the same warm-up: the difference over 2 x CALLS), which the
machine's load does not move; the kernel's share of the I/O is not in it.

    python3 clients/python/bench/async_ops.py [--servers h:p,h:p,h:p] [--repeats 7]
    python3 clients/python/bench/async_ops.py --compare /tmp/before/src clients/python/src --rounds 5
    python3 clients/python/bench/async_ops.py --compare /tmp/before/src clients/python/src --instructions 100 --rounds 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ("get_many_100", "get", "set")


async def per_call(fn: Callable[[], Any], n: int, repeats: int) -> float:
    """µs per call, best of ``repeats`` runs of ``n`` calls."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            await fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


async def measure(addresses: list[str], n: int, repeats: int) -> dict[str, float]:
    import memfleet

    c = memfleet.AsyncClient(addresses)
    value = "v" * 100
    keys = [f"bench:{i}" for i in range(100)]
    await c.set_many(dict.fromkeys(keys, value))
    assert len(await c.get_many(keys)) == 100
    out = {
        "get_many_100": await per_call(lambda: c.get_many(keys), max(1, n // 10), repeats),
        "get": await per_call(lambda: c.get(keys[0]), n, repeats),
        "set": await per_call(lambda: c.set(keys[1], value), n, repeats),
    }
    await c.close()
    return out


async def run_calls(addresses: list[str], case: str, calls: int) -> None:
    """The process callgrind counts: a warm-up, then ``calls`` calls of ``case``."""
    import memfleet

    c = memfleet.AsyncClient(addresses)
    value = "v" * 100
    keys = [f"bench:{i}" for i in range(100)]
    await c.set_many(dict.fromkeys(keys, value))
    fn = {
        "get_many_100": lambda: c.get_many(keys),
        "get": lambda: c.get(keys[0]),
        "set": lambda: c.set(keys[1], value),
    }[case]
    for _ in range(50 + calls):
        await fn()
    await c.close()


def instructions(tree: str, addresses: list[str], case: str, calls: int) -> float:
    """Instructions per call of ``case`` with the client of ``tree``."""
    counts = []
    for n in (calls, 3 * calls):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cg.out")
            argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
            argv += ["--servers", ",".join(addresses), "--run", case, "-n", str(n)]
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out) as f:
                m = re.search(r"^summary: (\d+)", f.read(), re.M)
            assert m, "no summary in callgrind output"
            counts.append(int(m.group(1)))
    return (counts[1] - counts[0]) / (2 * calls)


def start_servers() -> tuple[list[str], list[subprocess.Popen[bytes]]]:
    sys.path.append(os.path.join(HERE, "..", "tests"))
    from client_support import cache_server

    servers = [cache_server(command="memcached").start() for _ in range(3)]
    return [s.address for s in servers], servers  # type: ignore[return-value]


def compare(trees: list[str], addresses: list[str], rounds: int, n: int, repeats: int, calls: int) -> None:
    if calls:
        print(f"AsyncClient, instructions per call (callgrind, {calls} and {3 * calls} calls)")
        print("| tree | " + " | ".join(CASES) + " |")
        print("|---|" + "---|" * len(CASES))
        for tree in trees:
            print(f"| {tree} | " + " | ".join(f"{instructions(tree, addresses, c, calls):,.0f}" for c in CASES) + " |")
        if not rounds:
            return
    figures: dict[str, dict[str, list[float]]] = {t: {c: [] for c in CASES} for t in trees}
    for _ in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            cmd = [sys.executable, __file__, "--servers", ",".join(addresses), "-n", str(n), "--repeats", str(repeats)]
            res = json.loads(subprocess.run(cmd + ["--json"], env=env, check=True, capture_output=True).stdout)
            for c in CASES:
                figures[tree][c].append(res[c])
    print(f"AsyncClient, µs/call (best of {repeats} x {n} calls per round, {rounds} interleaved rounds)")
    print("| tree | " + " | ".join(CASES) + " |")
    print("|---|" + "---|" * len(CASES))
    for tree in trees:
        cells = []
        for c in CASES:
            xs = figures[tree][c]
            cells.append(f"{min(xs):.1f} (median {statistics.median(xs):.1f}, max {max(xs):.1f})")
        print(f"| {tree} | " + " | ".join(cells) + " |")
    base = trees[0]
    for tree in trees[1:]:
        ratios = ", ".join(f"{c} {min(figures[tree][c]) / min(figures[base][c]):.2f}x" for c in CASES)
        print(f"{tree} / {base} (best vs best): {ratios}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", help="three host:port, comma separated")
    ap.add_argument("-n", type=int, default=2000, help="calls per run (get_many: a tenth)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare", nargs="+", metavar="SRC", help="client source trees to compare")
    ap.add_argument("--instructions", type=int, default=0, metavar="CALLS", help="count instructions too (valgrind)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run", choices=CASES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    started: list[Any] = []
    if args.servers:
        addresses = args.servers.split(",")
    else:
        addresses, started = start_servers()
    try:
        if args.run:
            asyncio.run(run_calls(addresses, args.run, args.n))
            return 0
        if args.compare:
            compare(args.compare, addresses, args.rounds, args.n, args.repeats, args.instructions)
            return 0
        res = asyncio.run(measure(addresses, args.n, args.repeats))
        if args.json:
            print(json.dumps(res))
        else:
            import memfleet

            print(f"memfleet from {os.path.dirname(memfleet.__file__)}")
            for c in CASES:
                print(f"AsyncClient {c}: {res[c]:.1f} µs/call")
    finally:
        for s in started:
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
