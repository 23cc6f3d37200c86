"""`memfleet route` with a bucketized PoolRoute (mcrouter's McBucketRoute) in front of real
memcached servers: each key must be on the server mcrouter puts it on
(tests/vectors/mcrouter-bucketize.json, from mcrouter's own hash code), stored under the
key the client sent, as mcrouter sends it to a plain memcached.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcrouter_harness import McRouter, fetch, servers, store

__all__ = ["servers"]

VECTORS = Path(__file__).parent / "vectors" / "mcrouter-bucketize.json"


def bucketized(addresses: list[str], case: dict) -> dict:
    return {
        "pools": {"A": {"servers": addresses, "weights": case["weights"]}},
        "route": {
            "type": "PoolRoute",
            "pool": "A",
            "bucketize": True,
            "total_buckets": case["total_buckets"],
            "total_buckets_by_prefix": case["total_buckets_by_prefix"],
            "bucketization_keyspace": "main",
            "hash": {"salt": case["salt"]},
        },
    }


def test_keys_land_where_mcrouter_puts_them(servers) -> None:
    doc = json.loads(VECTORS.read_text())
    # Config 1: five weighted servers and buckets by prefix.
    case = doc["configs"][1]
    group = servers(len(case["weights"]))
    picked = [
        v for v in doc["vectors"] if v["key"].replace(":", "").isalnum() and v["key"][:1] in "aqu1"
    ][:150]
    with McRouter(bucketized([s.address for s in group], case)).start() as r:
        for v in picked:
            assert store(r.port, v["key"], "x") == b"STORED\r\n", v["key"]
        for v in picked:
            key = v["key"]
            want = v["server"][1]
            # The server has the client's key as it was sent; no other server has it.
            for i, s in enumerate(group):
                held = fetch(s.port, key) == f"VALUE {key} 0 1\r\nx\r\nEND\r\n".encode()
                assert held == (i == want), (key, i, want)
        assert len({v["server"][1] for v in picked}) == len(group)
        # mcrouter's get_bucket service-info get names each key's bucket and keyspace.
        for v in picked[:20]:
            key = v["key"]
            line = f"{key}\t{v['bucket'][1]}\tmain\tnull".encode()
            want = b"VALUE __mcrouter__.get_bucket(%s) 0 %d\r\n%s\r\nEND\r\n" % (
                key.encode(),
                len(line),
                line,
            )
            assert fetch(r.port, f"__mcrouter__.get_bucket({key})") == want


def test_one_bucket_puts_every_key_on_one_server(servers) -> None:
    group = servers(3)
    case = {"weights": [1, 1, 1], "total_buckets": 1, "total_buckets_by_prefix": {}, "salt": ""}
    with McRouter(bucketized([s.address for s in group], case)).start() as r:
        keys = [f"k{i}" for i in range(40)]
        for k in keys:
            assert store(r.port, k) == b"STORED\r\n"
        on = [sum(fetch(s.port, k) != b"END\r\n" for k in keys) for s in group]
        assert sorted(on) == [0, 0, 40], on
        assert fetch(r.port, "k7") == b"VALUE k7 0 1\r\nv\r\nEND\r\n"
