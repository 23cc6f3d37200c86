#!/usr/bin/env python3
"""Stored size, with managed dictionaries on default settings, of record shapes the client was not
tuned on (and of its own example records, for comparison), against their pickle size.

Starts a memcached (``--server-cmd``, default Debian's ``memcached``) on a free loopback port,
then for each shape writes 2,000 records through a ``memfleet.Client`` with default settings and
stores 200 new ones twice: right after the 2,000 writes ("at 2,000"), and again once the shape's
family has a dictionary in use ("settled"). Sizes are what the server holds (``mg KEY s``), against
``len(pickle.dumps(record, protocol=5))``. Prints Markdown.

    PYTHONPATH=clients/python/src python3 clients/python/bench/unseen_shapes.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import random
import socket
import string
import sys
import time
from collections import Counter
from typing import Any, Callable

import msgpack

import memfleet

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from samples import feed_entry, small_profile  # noqa: E402

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from client_support import cache_server  # noqa: E402

_FIRST = ["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis"]
_LAST = ["Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie"]


def friends_profile(i: int) -> dict[str, Any]:
    """``small_profile``'s kind of user, with a sorted friends list of 50 ids out of 5,000 and
    nested settings."""
    rnd = random.Random(i)
    first, last = rnd.choice(_FIRST), rnd.choice(_LAST)
    return {
        "id": 100000 + i,
        "username": f"{first.lower()}{i}",
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{i}@example.com",
        "active": rnd.random() < 0.9,
        "plan": rnd.choice(["free", "pro", "team"]),
        "country": rnd.choice(["FR", "DE", "US", "GB", "JP"]),
        "created_at": "2024-%02d-%02dT%02d:%02d:00Z"
        % (rnd.randint(1, 12), rnd.randint(1, 28), rnd.randint(0, 23), rnd.randint(0, 59)),
        "last_login": 1_700_000_000 + rnd.randrange(10_000_000),
        "friends": sorted(rnd.sample(range(5000), 50)),
        "settings": {
            "theme": rnd.choice(["light", "dark", "system"]),
            "locale": rnd.choice(["en-US", "fr-FR", "de-DE", "ja-JP"]),
            "notifications": {"email": rnd.random() < 0.7, "push": rnd.random() < 0.5},
        },
    }


def order(i: int) -> dict[str, Any]:
    """An e-commerce order with one to four line items."""
    rnd = random.Random(i)
    items: list[dict[str, Any]] = [
        {
            "sku": "%s-%04d" % (rnd.choice(["TS", "MG", "BK", "HD"]), rnd.randrange(10000)),
            "name": rnd.choice(["T-shirt", "Mug", "Notebook", "Hoodie", "Sticker pack"]),
            "qty": rnd.randint(1, 4),
            "unit_price": rnd.choice([4.99, 9.99, 14.5, 24.0, 39.9]),
            "discount": rnd.choice([0, 0, 0, 10, 15]),
        }
        for _ in range(rnd.randint(1, 4))
    ]
    return {
        "order_id": 9_000_000 + i,
        "customer_id": rnd.randrange(1, 500_000),
        "status": rnd.choice(["placed", "paid", "shipped", "delivered", "cancelled"]),
        "currency": rnd.choice(["EUR", "USD", "GBP"]),
        "placed_at": "2025-%02d-%02dT%02d:%02d:%02dZ"
        % (rnd.randint(1, 12), rnd.randint(1, 28), rnd.randrange(24), rnd.randrange(60), rnd.randrange(60)),
        "items": items,
        "shipping": {
            "method": rnd.choice(["standard", "express"]),
            "country": rnd.choice(["FR", "DE", "US", "GB"]),
            "postcode": "%05d" % rnd.randrange(100000),
        },
        "total": round(sum(it["qty"] * it["unit_price"] for it in items), 2),
    }


def _ip(rnd: random.Random) -> str:
    return "%d.%d.%d.%d" % (rnd.randrange(1, 224), rnd.randrange(256), rnd.randrange(256), rnd.randrange(1, 255))


def log_event(i: int) -> dict[str, Any]:
    """An HTTP access log event: millisecond timestamp, IP, path with an id, a 128-bit request id."""
    rnd = random.Random(i)
    return {
        "ts": 1_735_000_000_000 + i * 37 + rnd.randrange(37),
        "level": rnd.choice(["INFO", "INFO", "INFO", "WARN", "ERROR"]),
        "service": rnd.choice(["api", "auth", "billing", "search"]),
        "host": "web-%02d.eu-west-1" % rnd.randrange(24),
        "ip": _ip(rnd),
        "method": rnd.choice(["GET", "GET", "POST", "PUT", "DELETE"]),
        "path": "/v2/%s/%d" % (rnd.choice(["users", "orders", "items", "carts"]), rnd.randrange(1_000_000)),
        "status": rnd.choice([200, 200, 200, 201, 204, 301, 404, 500]),
        "latency_ms": round(rnd.lognormvariate(3, 1), 2),
        "request_id": "%032x" % rnd.getrandbits(128),
        "user_agent": rnd.choice(
            [
                "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
                "Mozilla/5.0 (Macintosh) Safari/605.1.15",
                "curl/8.5.0",
                "okhttp/4.12.0",
            ]
        ),
    }


_TOKEN = string.ascii_letters + string.digits + "-_"


def session(i: int) -> dict[str, Any]:
    """A web session: a 256-bit URL-safe token and a 256-bit CSRF token (random: incompressible)."""
    rnd = random.Random(i)
    created = 1_735_000_000 + rnd.randrange(1_000_000)
    return {
        "user_id": rnd.randrange(1, 2_000_000),
        "token": "".join(rnd.choice(_TOKEN) for _ in range(43)),
        "csrf": "%064x" % rnd.getrandbits(256),
        "created": created,
        "expires": created + 86400 * 14,
        "ip": _ip(rnd),
        "mfa": rnd.random() < 0.3,
    }


_FLAGS = [
    "new_checkout", "dark_mode", "beta_search", "fast_cart", "ai_suggest", "promo_banner", "v2_api",
    "inline_edit", "smart_sort", "lazy_images", "push_v2", "multi_currency", "gift_cards", "live_chat",
    "recs_v3", "export_csv",
]  # fmt: skip


def feature_flags(i: int) -> dict[str, Any]:
    """A tenant's feature-flag config: 8-14 flags, booleans or rollouts, and limits."""
    rnd = random.Random(i)
    flags: dict[str, Any] = {}
    for f in rnd.sample(_FLAGS, rnd.randint(8, 14)):
        if rnd.random() < 0.5:
            flags[f] = {"enabled": rnd.random() < 0.5, "rollout": rnd.choice([0, 5, 10, 25, 50, 100])}
        else:
            flags[f] = rnd.random() < 0.5
    return {
        "tenant": "t%06d" % rnd.randrange(1_000_000),
        "version": rnd.randrange(1, 5000),
        "updated_at": 1_735_000_000 + rnd.randrange(10_000_000),
        "flags": flags,
        "limits": {
            "rps": rnd.choice([50, 100, 500, 1000]),
            "burst": rnd.choice([10, 20, 50]),
            "max_users": rnd.choice([5, 25, 100, 1000]),
        },
    }


def sparse_counters(i: int) -> dict[int, int]:
    """15-30 counters keyed by item ids out of 100,000, counts heavy-tailed."""
    rnd = random.Random(i)
    return {rnd.randrange(100_000): max(1, int(rnd.paretovariate(1.2))) for _ in range(rnd.randint(15, 30))}


UNSEEN: list[Callable[[int], Any]] = [friends_profile, order, log_event, session, feature_flags, sparse_counters]
OWN: list[Callable[[int], Any]] = [small_profile, feed_entry]


def stored_size(address: str, key: str) -> tuple[int, int]:
    """(size, client flags) of ``key`` as the server holds it."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(b"mg " + key.encode() + b" s f\r\n")
        head = s.recv(4096).split(b"\r\n")[0].split()
    if head[0] != b"HD":
        raise RuntimeError(f"{key}: {head!r}")
    f = {t[:1]: t[1:] for t in head[1:]}
    return int(f[b"s"]), int(f[b"f"])


def store_new(client: memfleet.Client, address: str, gen: Callable[[int], Any], start: int) -> dict[str, float]:
    """Store 200 new records from ``start``: their size over pickle's, and the share written with a
    dictionary."""
    size = pickled = managed = 0
    for i in range(start, start + 200):
        key = f"{gen.__name__}:{i}:v"
        record = gen(i)
        client.set(key, record)
        n, flags = stored_size(address, key)
        if client.get(key) != record:
            raise RuntimeError(f"{key} did not read back")
        size += n
        pickled += len(pickle.dumps(record, protocol=5))
        managed += bool(flags & memfleet.serde.FLAG_ZSTD_MANAGED)
    return {"ratio": size / pickled, "bytes": size / 200, "pickle": pickled / 200, "managed": managed / 200}


def measure(address: str, gen: Callable[[int], Any], serializer: str, level: int) -> dict[str, Any]:
    client = memfleet.Client([address], serializer=serializer, managed_dicts=memfleet.ManagedDicts(level=level))
    family = f"{gen.__name__}:*:v"
    try:
        t0 = time.perf_counter()
        for i in range(2000):
            client.set(f"{gen.__name__}:{i}:v", gen(i))
        write_s = time.perf_counter() - t0
        at_2000 = store_new(client, address, gen, 100_000)
        deadline = time.monotonic() + 10
        while client.dictionaries.stats()["families"].get(family) is None and time.monotonic() < deadline:
            client.set(f"{gen.__name__}:0:v", gen(0))
            time.sleep(0.01)
        settled = store_new(client, address, gen, 200_000)
        records = [gen(i) for i in range(200_000, 200_200)]
        msgpacked = sum(len(msgpack.packb(r, use_bin_type=True)) for r in records) / 200
        return {
            "shape": gen.__name__,
            "write_2000_s": write_s,
            "at_2000": at_2000,
            "settled": settled,
            "msgpack": msgpacked,
            "stats": client.dictionaries.stats(),
        }
    finally:
        client.close()


def _order0_bytes(blobs: list[bytes]) -> float:
    """Bytes per blob at the order-0 entropy of their pooled bytes: the floor of a code that
    codes each byte on its own, as zstd's literals are."""
    counts = Counter(b for blob in blobs for b in blob)
    n = sum(counts.values())
    return -sum(c * math.log2(c / n) for c in counts.values()) / 8 / len(blobs)


def bounds() -> list[str]:
    """What the random parts of two shapes cost at best, and as msgpack coded byte by byte."""
    friends = [msgpack.packb(friends_profile(i)["friends"]) for i in range(2000)]
    counters = [sparse_counters(i) for i in range(2000)]
    packed = [msgpack.packb(c) for c in counters]
    # an id out of 100,000 and a count of about 2.5 bits (the Pareto counts' entropy, roughly)
    info = sum(len(c) for c in counters) / len(counters) * (math.log2(100_000) + 2.5) / 8
    return [
        f"friends list: {math.log2(math.comb(5000, 50)) / 8:.0f} B of information, "
        f"{sum(map(len, friends)) / len(friends):.0f} B as msgpack, order-0 entropy {_order0_bytes(friends):.0f} B",
        f"sparse counters: about {info:.0f} B of information, "
        f"{sum(map(len, packed)) / len(packed):.0f} B as msgpack, order-0 entropy {_order0_bytes(packed):.0f} B",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-cmd", default=None, help="server command prefix (default: Debian's memcached)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--serializer",
        default="msgpack",
        help='the client\'s serializer (default msgpack; "msgpack-delta" is not read by earlier clients)',
    )
    ap.add_argument(
        "--level",
        type=int,
        default=memfleet.ManagedDicts().level,
        help="the zstd level of managed dictionaries (ManagedDicts(level=...); default the client's)",
    )
    args = ap.parse_args()
    server = cache_server("-m", "256", command=args.server_cmd).start()
    try:
        results = [measure(server.address, gen, args.serializer, args.level) for gen in UNSEEN + OWN]
    finally:
        server.kill()
    print(
        f"memfleet from {os.path.dirname(memfleet.__file__)}, serializer {args.serializer}, zstd level {args.level}\n"
    )
    print(
        "| record | pickle B | msgpack | at 2,000 writes: stored (with a dictionary) "
        "| settled: stored B | settled / pickle | level in use |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        a, s = r["at_2000"], r["settled"]
        own = " (own example)" if r["shape"] in {g.__name__ for g in OWN} else ""
        level = r["stats"]["levels"].get(f"{r['shape']}:*:v")
        print(
            f"| `{r['shape']}`{own} | {s['pickle']:.0f} | {r['msgpack'] / s['pickle']:.2f}× "
            f"| {a['ratio']:.3f}× ({a['managed']:.0%}) | {s['bytes']:.0f} | **{s['ratio']:.3f}×** "
            f"| {'-' if level is None else level} |"
        )
    print()
    for line in bounds():
        print(f"- {line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
