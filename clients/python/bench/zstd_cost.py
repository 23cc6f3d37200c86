#!/usr/bin/env python3
"""What zstd's own call costs the client per value, with the caches warm and with them cold.

Trains a dictionary as the client does (a family's training in ``memfleet._dicts``, with
``ManagedDicts()``'s samples, size and level, and the next level where it pays) on records of
each kind, then times the client's compress and decompress calls (the client's ``Dictionary``,
its parameters) on 100 other records: best of 5 passes, µs per call. "cold" writes a
4 MB buffer before every call, as the kernel and a server sharing the CPU do between two requests.
No server, no network: this is the floor under what a managed ``set`` or ``get`` adds.

    PYTHONPATH=clients/python/src python3 clients/python/bench/zstd_cost.py [--level N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import msgpack

import memfleet
from memfleet._dicts import Dictionaries, Family
from memfleet.serde import Serde

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from samples import feed_entry, small_profile  # noqa: E402

_CACHE_SWEEP = bytearray(4 << 20)


def best_us(call: Callable[[bytes], bytes], inputs: list[bytes], cold: bool) -> float:
    best = float("inf")
    for _ in range(5):
        total = 0.0
        for data in inputs:
            if cold:
                _CACHE_SWEEP[::64] = b"\x01" * (len(_CACHE_SWEEP) // 64)
            t0 = time.perf_counter()
            call(data)
            total += time.perf_counter() - t0
        best = min(best, total / len(inputs) * 1e6)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", type=int, default=memfleet.ManagedDicts().level, help="ManagedDicts(level=...)")
    ap.add_argument("--no-level-up", action="store_true", help="ManagedDicts(level_up=False)")
    args = ap.parse_args()
    policy = memfleet.ManagedDicts(level=args.level, level_up=not args.no_level_up)
    dicts = Dictionaries(Serde(), policy, 64, lambda d, publish: None)
    print(f"zstd level {policy.level}, level_up={policy.level_up}\n")
    print("| record | level | msgpack B | stored B | compress µs, warm / cold | decompress µs, warm / cold |")
    print("|---|---|---|---|---|---|")
    for gen in (small_profile, feed_entry):
        family = Family(gen.__name__.encode())
        dicts._train(family, [msgpack.packb(gen(10_000 + i)) for i in range(policy.min_samples)])
        d = family.pending
        assert d is not None, "no dictionary trained"
        values = [msgpack.packb(gen(i)) for i in range(100)]
        frames = [d.compress(v) for v in values]
        plain = sum(map(len, values)) / len(values)
        stored = sum(map(len, frames)) / len(frames)
        c = [best_us(d.compress, values, cold) for cold in (False, True)]
        u = [best_us(d.decompress, frames, cold) for cold in (False, True)]
        print(
            f"| {gen.__name__} | {d.level} | {plain:.0f} | {stored:.0f} | {c[0]:.2f} / {c[1]:.2f} "
            f"| {u[0]:.2f} / {u[1]:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
