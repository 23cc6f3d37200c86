#!/usr/bin/env python3
"""What a frame does when read with another dictionary that has its id (an id whose item was evicted
everywhere, drawn again by a new dictionary): how many decode at all, as the client writes them and
if no frame carried zstd's content checksum.

For each kind of record A and each kind B, trains dictionary A on A's records and dictionary B on
B's (other seeds), gives B A's id, compresses values with A as the client does
(``memfleet._dicts.Dictionary.compress``, at the default level and the next, which a family may
take) and reads them with B. Values: new records; popular records (half the writes A was trained
on are one of 20 records, and these 20 are read); 300-byte pieces of dictionary A (a value that is
all shared structure); JSON text; lists of 3-30 records (0.8-13 KB). Then, per kind, 8
dictionaries of that kind, each read with the 7 others: the likeliest collision (a family that
retrained) and where a wrong decode is likeliest. No server.

    PYTHONPATH=clients/python/src python3 clients/python/bench/same_id_dicts.py [--records 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any, Callable

import msgpack
import zstandard

import memfleet
from memfleet._dicts import Dictionary, train

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from samples import feed_entry, small_profile  # noqa: E402
from unseen_shapes import feature_flags, friends_profile, log_event, order, session  # noqa: E402

Gen = Callable[[int], Any]
KINDS: list[Gen] = [friends_profile, small_profile, feed_entry, order, log_event, session, feature_flags]


def lists_of(gen: Gen, lo: int, hi: int) -> Gen:
    def many(i: int) -> list[Any]:
        return [gen(i * 100 + j) for j in range(random.Random(i).randint(lo, hi))]

    many.__name__ = f"{gen.__name__} x{lo}-{hi}"
    return many


def values_of(case: str, gen: Gen, a: Dictionary, popular: list[Any], records: int) -> list[bytes]:
    encode: Callable[[Any], bytes] = (lambda r: json.dumps(r).encode()) if case == "JSON text" else msgpack.packb
    if case in ("popular records", "JSON text"):
        return [encode(r) for r in popular]
    if case == "pieces of the dictionary":
        return [a.data[-k - 300 : -k] for k in range(1, 6000, 6000 // 20)]
    return [v for v in (msgpack.packb(gen(200_000 + i)) for i in range(records)) if len(v) < 16 * 1024]


def count(case: str, kinds: list[Gen], records: int, level: int) -> list[int]:
    """[frames, written without the checksum, decoded by B as written, decoded by B without it]."""
    out = [0, 0, 0, 0]
    trained = memfleet.ManagedDicts().level
    encode: Callable[[Any], bytes] = (lambda r: json.dumps(r).encode()) if case == "JSON text" else msgpack.packb
    for a_gen in kinds:
        popular = [a_gen(10**6 + k) for k in range(20)]
        if case in ("popular records", "JSON text"):
            samples = [encode(popular[i % 20] if i % 2 else a_gen(i)) for i in range(450)]
        else:
            samples = [encode(a_gen(i)) for i in range(450)]
        a = train(samples, 8192, trained).at_level(level)
        for b_gen in kinds:
            b = train([encode(b_gen(100_000 + i)) for i in range(450)], 8192, trained)
            other = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(b.data[:4] + a.data[4:8] + b.data[8:])
            )
            for value in values_of(case, a_gen, a, popular, records):
                written, bare = a.compress(value), a.compressor().compress(value)
                out[0] += 1
                out[1] += not zstandard.get_frame_parameters(written).has_checksum
                for i, frame in ((2, written), (3, bare)):
                    try:
                        other.decompress(frame)
                        out[i] += 1
                    except zstandard.ZstdError:
                        pass
    return out


def same_kind(gen: Gen, records: int, level: int) -> list[int]:
    """Like :func:`count` for new records, with 8 dictionaries of ``gen``'s kind read with each
    other; a fifth item: decoded to other bytes."""
    out = [0, 0, 0, 0, 0]
    trained = memfleet.ManagedDicts().level
    dicts = [train([msgpack.packb(gen(10**7 * (s + 1) + i)) for i in range(450)], 8192, trained) for s in range(8)]
    values = [msgpack.packb(gen(5 * 10**8 + i)) for i in range(records)]
    for a in dicts:
        writer = a.at_level(level)
        frames = [(v, writer.compress(v), writer.compressor().compress(v)) for v in values]
        for b in dicts:
            if b is a:
                continue
            other = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(b.data[:4] + a.data[4:8] + b.data[8:])
            )
            for value, written, bare in frames:
                out[0] += 1
                out[1] += not zstandard.get_frame_parameters(written).has_checksum
                for i, frame in ((2, written), (3, bare)):
                    try:
                        decoded = other.decompress(frame)
                    except zstandard.ZstdError:
                        continue
                    out[i] += 1
                    out[4] += i == 2 and decoded != value
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200, help="new records per pair of kinds")
    args = ap.parse_args()
    level = memfleet.ManagedDicts().level
    lists = [lists_of(feed_entry, 3, 15), lists_of(log_event, 4, 30), lists_of(small_profile, 4, 12)]
    print(f"{args.records} new records per pair of kinds\n")
    print(
        "| values | zstd level | frames | written without the checksum "
        "| decoded by the other dictionary: as written | if none had the checksum |"
    )
    print("|---|---|---|---|---|---|")
    for case, kinds in (
        ("new records", KINDS),
        ("popular records", KINDS),
        ("pieces of the dictionary", KINDS),
        ("JSON text", KINDS),
        ("lists of records", lists),
    ):
        for lvl in (level, level + 1):
            frames, bare, decoded, decoded_bare = count(case, kinds, args.records, lvl)
            print(f"| {case} | {lvl} | {frames:,} | {bare:,} | {decoded:,} | {decoded_bare:,} |")
    print(
        "\n| kind: 8 dictionaries, each read with the 7 others | zstd level | frames "
        "| written without the checksum | decoded by the other: as written (to other bytes) "
        "| if none had the checksum |"
    )
    print("|---|---|---|---|---|---|")
    total = [0, 0, 0, 0, 0]
    for gen in KINDS:
        for lvl in (level, level + 1):
            row = same_kind(gen, args.records, lvl)
            total = [t + r for t, r in zip(total, row)]
            frames, bare, decoded, decoded_bare, wrong = row
            print(f"| {gen.__name__} | {lvl} | {frames:,} | {bare:,} | {decoded:,} ({wrong:,}) | {decoded_bare:,} |")
    frames, bare, decoded, decoded_bare, wrong = total
    print(f"| all | | {frames:,} | {bare:,} | {decoded:,} ({wrong:,}) | {decoded_bare:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
