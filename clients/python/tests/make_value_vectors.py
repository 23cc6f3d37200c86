#!/usr/bin/env python3
"""Writes tests/vectors/python-client-values.json: what the pure-Python memfleet client (the last
one before the Rust wire layer) stored for each kind of value, and what it read back.

Run once, with that client on the path and a memcached to write to:

    git worktree add /tmp/wt-oldclient 2dc04cb^      # the client before memfleet._native
    memcached -l 127.0.0.1 -p 61511 -U 0 &
    PYTHONPATH=/tmp/wt-oldclient/clients/python/src \\
        python3 clients/python/tests/make_value_vectors.py 127.0.0.1:61511 --client-commit <sha>

Each value is written through the client's ``set`` and read back raw from the server (key, flags,
bytes), then read through the client's ``get``. test_value_vectors.py checks today's client
against the file, so the tests never need this history.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import value_vectors as vv  # noqa: E402

import memfleet  # noqa: E402  (the old client, from PYTHONPATH)


def record(i: int) -> dict[str, Any]:
    """A small user record (~150 bytes of msgpack): what managed and trained dictionaries are for."""
    rnd = random.Random(i)
    first = rnd.choice(["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken"])
    return {
        "id": 500000 + i,
        "name": f"{first} {rnd.choice(['Lovelace', 'Turing', 'Hopper', 'Liskov'])}",
        "email": f"{first.lower()}{i}@example.org",
        "plan": rnd.choice(["free", "pro", "team"]),
        "active": rnd.random() < 0.8,
        "logins": rnd.randint(0, 5000),
        "tags": rnd.sample(["beta", "admin", "staff", "eu", "us", "mobile"], 2),
    }


def page(n: int) -> str:
    rnd = random.Random(n)
    return "".join(
        f'<li class="item-{i % 3}"><a href="/p/{rnd.randint(1, 99999)}">Product {i}</a> '
        f"{rnd.randint(1, 500)} EUR</li>\n"
        for i in range(n)
    )


def noise(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


# (name, description, writer options, reader options or None for the writer's, key, value)
Case = tuple[str, str, dict[str, Any], "dict[str, Any] | None", str, Any]

MEMFLEET: list[Case] = [
    ("bytes", "bytes stored as they are (flags 0)", {}, None, "compat:bytes", b"\x00\x01\x02 bin\xff\xfe\r\n"),
    ("bytes-empty", "empty bytes", {}, None, "compat:bytes-empty", b""),
    ("str", "ASCII str as UTF-8 (FLAG_TEXT)", {}, None, "compat:str", "hello, world"),
    ("str-unicode", "non-ASCII str as UTF-8", {}, None, "compat:str-unicode", "héllo wörld ☃ 日本語 \U0001f600"),
    ("str-empty", "empty str", {}, None, "compat:str-empty", ""),
    ("int", "int as ASCII digits (FLAG_INTEGER)", {}, None, "compat:int", 42),
    ("int-negative", "negative int", {}, None, "compat:int-negative", -17),
    ("int-zero", "zero", {}, None, "compat:int-zero", 0),
    ("int-big", "int beyond 64 bits", {}, None, "compat:int-big", 2**200 + 12345),
    ("int-big-negative", "negative int beyond 64 bits", {}, None, "compat:int-big-negative", -(10**40) - 7),
    (
        "msgpack-dict",
        "dict through msgpack (FLAG_MSGPACK): str, int, float, bool, None, bytes, nested list",
        {},
        None,
        "compat:msgpack-dict",
        {
            "name": "Ada",
            "roles": ["admin", "dev"],
            "id": 42,
            "score": 0.25,
            "active": True,
            "manager": None,
            "avatar": b"\x89PNG\x00",
        },
    ),
    (
        "msgpack-list",
        "list through msgpack, with 64-bit edge ints and nesting",
        {},
        None,
        "compat:msgpack-list",
        [1, "two", 3.5, [4, [5]], {"six": 6}, None, False, 2**63 - 1, -(2**63), 2**64 - 1],
    ),
    (
        "msgpack-int-keys",
        "dict with int and negative keys (msgpack allows any key)",
        {},
        None,
        "compat:msgpack-int-keys",
        {1: "one", 2: [b"x"], -3: {"nested": True}},
    ),
    ("msgpack-tuple", "tuple through msgpack: reads back as a list", {}, None, "compat:msgpack-tuple", (1, 2, "three")),
    ("msgpack-float", "float through msgpack", {}, None, "compat:msgpack-float", 3.141592653589793),
    ("msgpack-bool", "bool through msgpack (not an int)", {}, None, "compat:msgpack-bool", True),
    ("msgpack-none", "None through msgpack", {}, None, "compat:msgpack-none", None),
    (
        "str-zstd",
        "str above the compression threshold (512): zstd level 3 (FLAG_TEXT|FLAG_ZSTD)",
        {},
        None,
        "compat:str-zstd",
        page(120),
    ),
    (
        "msgpack-zstd",
        "msgpack list of records above the threshold: zstd (FLAG_MSGPACK|FLAG_ZSTD)",
        {},
        None,
        "compat:msgpack-zstd",
        [record(i) for i in range(40)],
    ),
    (
        "bytes-zstd",
        "compressible bytes above the threshold: zstd (FLAG_ZSTD)",
        {},
        None,
        "compat:bytes-zstd",
        page(30).encode() * 2,
    ),
    (
        "str-zstd-sampled",
        "str of 32 KB and more (the 2 KB sample compresses, so the whole value is): zstd",
        {},
        None,
        "compat:str-zstd-sampled",
        page(560),
    ),
    (
        "bytes-incompressible",
        "random bytes above the threshold: compression saves under 10%, stored raw (flags 0)",
        {},
        None,
        "compat:bytes-incompressible",
        noise(3000, 1),
    ),
    (
        "bytes-incompressible-sampled",
        "random bytes of 32 KB and more: the 2 KB sample does not compress, stored raw",
        {},
        None,
        "compat:bytes-incompressible-sampled",
        noise(32800, 2),
    ),
    (
        "str-below-threshold",
        "compressible str below the threshold: not compressed",
        {},
        None,
        "compat:str-below-threshold",
        "abc" * 150,
    ),
    (
        "threshold-off",
        "compress_threshold=None: a big compressible str stays raw",
        {"compress_threshold": None},
        {},
        "compat:threshold-off",
        page(60),
    ),
    (
        "level-19",
        "compress_level=19",
        {"compress_level": 19},
        {},
        "compat:level-19",
        page(61),
    ),
    # a user dictionary (zstd_dictionary=): trained below from records, kept in the file
    (
        "zstd-dict-record",
        "small record with the trained dictionary (FLAG_MSGPACK|FLAG_ZSTD|FLAG_ZSTD_DICT)",
        {"zstd_dictionary": "records"},
        None,
        "compat:zstd-dict-record",
        record(1001),
    ),
    (
        "zstd-dict-str",
        "str from dict_min_size (64) up with the trained dictionary",
        {"zstd_dictionary": "records"},
        None,
        "compat:zstd-dict-str",
        "Grace Hopper, grace1002@example.org, plan team, active, 4821 logins, tags staff and eu",
    ),
    (
        "zstd-dict-small",
        "value below dict_min_size: not compressed even with a dictionary",
        {"zstd_dictionary": "records"},
        None,
        "compat:zstd-dict-small",
        {"id": 7},
    ),
    (
        "zstd-dict-big",
        "big value with the dictionary: the dictionary is used above the plain threshold too",
        {"zstd_dictionary": "records"},
        None,
        "compat:zstd-dict-big",
        [record(i) for i in range(2000, 2030)],
    ),
    (
        "json-dict",
        'serializer="json" (FLAG_JSON)',
        {"serializer": "json"},
        None,
        "compat:json-dict",
        {"name": "Ada", "n": [1, 2.5, None, True], "ü": "ß"},
    ),
    ("json-list", 'serializer="json", a list', {"serializer": "json"}, None, "compat:json-list", [1, "a", {"b": []}]),
    (
        "json-zstd",
        'serializer="json" above the threshold: zstd (FLAG_JSON|FLAG_ZSTD)',
        {"serializer": "json"},
        None,
        "compat:json-zstd",
        [record(i) for i in range(3000, 3020)],
    ),
    ("json-str", 'serializer="json": str is still FLAG_TEXT', {"serializer": "json"}, None, "compat:json-str", "plain"),
    (
        "pickle-tuple",
        'serializer="pickle" (FLAG_PICKLE), read with allow_pickle=True: a tuple and a frozenset survive',
        {"serializer": "pickle"},
        {"allow_pickle": True},
        "compat:pickle-tuple",
        {"t": (1, "two", b"3"), "s": frozenset([3, 1, 2]), "f": 1.5},
    ),
    (
        "pickle-zstd",
        'serializer="pickle" above the threshold (FLAG_PICKLE|FLAG_ZSTD), read with allow_pickle=True',
        {"serializer": "pickle"},
        {"allow_pickle": True},
        "compat:pickle-zstd",
        [(i, f"row {i}", i * 0.5) for i in range(200)],
    ),
    (
        "pickle-int",
        'serializer="pickle": an int is still digits',
        {"serializer": "pickle"},
        {"allow_pickle": True},
        "compat:pickle-int",
        123456789,
    ),
]

PHP = {"value_format": "php-memcached"}
PHP_CASES: list[Case] = [
    ("php-str", "php-memcached string (type 0)", PHP, None, "compat:php-str", "bonjour ☃"),
    (
        "php-bytes",
        "php-memcached: non-UTF-8 bytes are a string, read back as bytes",
        PHP,
        None,
        "compat:php-bytes",
        b"\xff\xfe\x00",
    ),
    ("php-long", "php-memcached integer (type 1)", PHP, None, "compat:php-long", -123456789012),
    ("php-double", "php-memcached float (type 2)", PHP, None, "compat:php-double", 2.5e-7),
    ("php-double-inf", "php-memcached float Infinity", PHP, None, "compat:php-double-inf", float("-inf")),
    ("php-bool-true", "php-memcached bool true (type 3)", PHP, None, "compat:php-bool-true", True),
    ("php-bool-false", "php-memcached bool false: empty data", PHP, None, "compat:php-bool-false", False),
    (
        "php-msgpack",
        "php-memcached msgpack array (type 7)",
        PHP,
        None,
        "compat:php-msgpack",
        {"user": "ada", "ids": [1, 2, 3], "nested": {"k": None}},
    ),
    (
        "php-json",
        'php-memcached with serializer="json" (type 6)',
        {**PHP, "serializer": "json"},
        None,
        "compat:php-json",
        {"user": "ada", "ids": [1, 2, 3]},
    ),
    (
        "php-zlib",
        "php-memcached str above 2000 bytes: zlib with the 4-byte length (16|32)",
        PHP,
        None,
        "compat:php-zlib",
        page(100),
    ),
    (
        "php-zlib-msgpack",
        "php-memcached msgpack above 2000 bytes: zlib",
        PHP,
        None,
        "compat:php-zlib-msgpack",
        [record(i) for i in range(4000, 4030)],
    ),
    (
        "php-zstd",
        'php-memcached with php_compression="zstd" (16|128)',
        {**PHP, "php_compression": "zstd"},
        None,
        "compat:php-zstd",
        page(101),
    ),
    (
        "php-incompressible",
        "php-memcached random bytes above 2000: stored uncompressed",
        PHP,
        None,
        "compat:php-incompressible",
        noise(2500, 3),
    ),
]


def options(opts: dict[str, Any], dictionaries: dict[str, bytes]) -> dict[str, Any]:
    out = dict(opts)
    if "zstd_dictionary" in out:
        out["zstd_dictionary"] = dictionaries[out["zstd_dictionary"]]
    return out


def vector(
    name: str,
    description: str,
    fmt: str,
    wopts: dict[str, Any],
    ropts: dict[str, Any],
    key: str,
    flags: int,
    data: bytes,
    value: Any,
    got: Any,
) -> dict[str, Any]:
    v = {
        "name": name,
        "description": description,
        "format": fmt,
        "options": wopts,
        "read_options": ropts,
        "key": key,
        "flags": flags,
        "hex": data.hex(),
        "value": vv.tag(value),
    }
    if vv.tag(got) != v["value"]:
        v["read_back"] = vv.tag(got)  # only where it differs from what was written
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("server", help="host:port of a memcached to write to (it is flushed)")
    ap.add_argument("--client-commit", required=True, help="the commit the client on PYTHONPATH is from")
    ap.add_argument("--out", default=str(vv.VECTORS))
    args = ap.parse_args()
    if hasattr(memfleet, "_native") or Path(memfleet.__file__).with_name("_native.pyi").exists():
        sys.exit(f"{memfleet.__file__} is a client with the Rust wire layer; put the pure-Python one on PYTHONPATH")
    address = args.server

    dictionaries = {"records": memfleet.train_dictionary([record(i) for i in range(600)], size=4096)}
    vectors: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []

    def write(case: Case, fmt: str) -> None:
        name, description, wopts, ropts, key, value = case
        writer = memfleet.Client([address], **options(wopts, dictionaries))
        reader_opts = wopts if ropts is None else ropts
        reader = memfleet.Client([address], **options(reader_opts, dictionaries))
        assert writer.set(key, value), name
        raw = vv.raw_get(address, key.encode())
        assert raw is not None, name
        data, flags = raw
        got = reader.get(key)
        writer.close()
        reader.close()
        vectors.append(vector(name, description, fmt, wopts, reader_opts, key, flags, data, value, got))

    mc = memfleet.Client([address])
    mc.flush_all()
    for case in MEMFLEET:
        write(case, "memfleet")
    for case in PHP_CASES:
        write(case, "php-memcached")

    # managed dictionaries: a family written until its dictionary is trained and published, then
    # records compressed with it (FLAG_ZSTD_MANAGED); the dictionary's item is kept with them
    policy = memfleet.ManagedDicts(min_samples=300, dict_size=4096)  # as the vectors' options say
    m = memfleet.Client([address], managed_dicts=policy)
    deadline = time.monotonic() + 60
    i = 0
    while m.dictionaries.stats()["families"].get("compat:rec:*") is None:
        assert time.monotonic() < deadline, m.dictionaries.stats()
        m.set(f"compat:rec:{i % 1000}", record(i))
        i += 1
        time.sleep(0.002 if i > 300 else 0)
    for n in (9001, 9002, 9003):
        key = f"compat:rec:{n}"
        assert m.set(key, record(n))
        data, flags = vv.raw_get(address, key.encode()) or (b"", 0)
        assert flags & vv.ZSTD_MANAGED, (key, flags)
        description = (
            "record compressed with a managed dictionary (FLAG_MSGPACK|FLAG_ZSTD|FLAG_ZSTD_MANAGED); its "
            "dictionary is in items"
        )
        opts = {"managed_dicts": {"min_samples": 300, "dict_size": 4096}}
        got = m.get(key)
        vectors.append(vector(f"managed-{n}", description, "memfleet", opts, {}, key, flags, data, record(n), got))
    dict_id = m.dictionaries.stats()["families"]["compat:rec:*"]
    dkey = vv.DICT_KEY_PREFIX + dict_id.encode()
    ddata, dflags = vv.raw_get(address, dkey) or (b"", 0)
    items.append(
        {
            "key": dkey.decode(),
            "flags": dflags,
            "hex": ddata.hex(),
            "description": "the managed dictionary the managed-* vectors were compressed with",
        }
    )
    m.close()
    mc.close()

    doc = {
        "description": (
            "Values stored by memfleet's pure-Python client (before its Rust wire layer), as the "
            "server held them: key, client flags, data (hex). 'value' is what was written and "
            "'read_back' what that client's get returned, in a typed JSON form "
            "(clients/python/tests/value_vectors.py: tag/untag; 'read_back' only where it differs). "
            "'options' are the writer's Client arguments, 'read_options' the reader's; "
            "zstd_dictionary names an entry of 'dictionaries'. "
            "'items' are raw items the values need on the server (managed dictionaries). 'versions' "
            "are the libraries whose output the compressed and pickled bytes depend on. Written by "
            "clients/python/tests/make_value_vectors.py; checked by test_value_vectors.py."
        ),
        "client_commit": args.client_commit,
        "versions": vv.versions(),
        "dictionaries": {k: {"hex": v.hex()} for k, v in dictionaries.items()},
        "items": items,
        "vectors": vectors,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(vectors)} vectors, {len(items)} items -> {args.out}")


if __name__ == "__main__":
    main()
