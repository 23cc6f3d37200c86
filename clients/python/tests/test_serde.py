"""Value encoding, flags, compression and dictionaries."""

from __future__ import annotations

import json
import pickle
import random
import sys
from pathlib import Path
from typing import Any

import pytest

import memfleet
from memfleet.serde import (
    FLAG_BYTES,
    FLAG_CUSTOM,
    FLAG_INTEGER,
    FLAG_JSON,
    FLAG_MSGPACK,
    FLAG_MSGPACK_DELTA,
    FLAG_PICKLE,
    FLAG_TEXT,
    FLAG_ZSTD,
    FLAG_ZSTD_DICT,
    Serde,
)

# The benchmark's values (bench/samples.py): the size targets are asserted on them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from samples import user_profile  # noqa: E402

LEGACY_BITS = 1 | 2 | 4 | 8 | 16
MEMFLEET_BITS = [FLAG_MSGPACK, FLAG_JSON, FLAG_CUSTOM, FLAG_MSGPACK_DELTA, FLAG_ZSTD, FLAG_ZSTD_DICT]


def profile(i: int) -> dict[str, Any]:
    rnd = random.Random(i)
    return {
        "id": 100000 + i,
        "username": f"user{i}",
        "email": f"user{i}@example.com",
        "active": rnd.random() > 0.2,
        "score": round(rnd.random() * 1000, 2),
        "roles": rnd.sample(["admin", "editor", "viewer", "billing", "support"], 2),
        "address": {"city": rnd.choice(["Paris", "Berlin", "Lagos", "Lima"]), "zip": f"{rnd.randint(10000, 99999)}"},
        "preferences": {"theme": rnd.choice(["dark", "light"]), "language": "en", "notifications": True},
    }


def test_memfleet_bits_do_not_collide_with_pylibmc_or_pymemcache() -> None:
    for bit in MEMFLEET_BITS:
        assert bit & LEGACY_BITS == 0
    assert len(set(MEMFLEET_BITS)) == len(MEMFLEET_BITS)


@pytest.mark.parametrize(
    "value,flags",
    [(b"b", FLAG_BYTES), ("s", FLAG_TEXT), (7, FLAG_INTEGER), ({"a": 1}, FLAG_MSGPACK), (1.5, FLAG_MSGPACK)],
)
def test_type_flags(value: Any, flags: int) -> None:
    assert Serde().encode(value)[1] == flags


def test_reads_legacy_long_and_zlib() -> None:
    import zlib

    s = Serde()
    assert s.decode(b"12", 4) == 12
    assert s.decode(zlib.compress(b"hello" * 100), 8 | 16) == "hello" * 100
    assert s.decode(b"unknown", 1 << 20) == b"unknown"


def test_serializers() -> None:
    value = {"a": [1, 2, {"b": None}], "c": "é"}
    for name, flag in [("msgpack", FLAG_MSGPACK), ("json", FLAG_JSON), ("pickle", FLAG_PICKLE)]:
        s = Serde(serializer=name)
        data, flags = s.encode(value)
        assert flags == flag
        assert s.decode(data, flags) == value
    assert json.loads(Serde(serializer="json").encode(value)[0]) == value
    custom = Serde(serializer=(lambda v: repr(v).encode(), lambda b: eval(b)))  # noqa: S307
    data, flags = custom.encode(value)
    assert flags == FLAG_CUSTOM and custom.decode(data, flags) == value


def test_pickle_is_refused_unless_allowed() -> None:
    data = pickle.dumps({"x": 1})
    with pytest.raises(memfleet.SerializationError):
        Serde().decode(data, FLAG_PICKLE)
    assert Serde(allow_pickle=True).decode(data, FLAG_PICKLE) == {"x": 1}


def test_unserializable_value() -> None:
    with pytest.raises(memfleet.SerializationError):
        Serde().encode({1, 2})


def test_compression_threshold_and_ten_percent_rule() -> None:
    s = Serde(compress_threshold=1000)
    small = "a" * 999
    assert s.encode(small)[1] == FLAG_TEXT
    data, flags = s.encode("a" * 5000)
    assert flags == FLAG_TEXT | FLAG_ZSTD and len(data) < 100
    assert s.decode(data, flags) == "a" * 5000
    noise = random.Random(1).randbytes(5000)
    assert s.encode(noise) == (noise, FLAG_BYTES)  # incompressible: stored as is
    assert Serde(compress_threshold=None).encode("a" * 5000)[1] == FLAG_TEXT


def test_trained_dictionary_compresses_small_records() -> None:
    samples = [profile(i) for i in range(2000)]
    zdict = memfleet.train_dictionary(samples, size=8192)
    plain = Serde()
    with_dict = Serde(zstd_dictionary=zdict)
    value = profile(99999)
    raw, raw_flags = plain.encode(value)
    packed, flags = with_dict.encode(value)
    assert raw_flags == FLAG_MSGPACK  # too small for plain compression
    assert flags == FLAG_MSGPACK | FLAG_ZSTD | FLAG_ZSTD_DICT
    assert len(packed) * 2 < len(raw)
    assert with_dict.decode(packed, flags) == value
    with pytest.raises(memfleet.SerializationError):
        plain.decode(packed, flags)


def test_profile_is_smaller_than_pickle() -> None:
    ratios = []
    for i in range(20):
        value = user_profile(i)
        ratios.append(len(Serde().encode(value)[0]) / len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
    assert sum(ratios) / len(ratios) <= 0.6
    assert max(ratios) <= 0.62


def test_profile_with_dictionary_is_far_smaller_than_pickle() -> None:
    zdict = memfleet.train_dictionary([user_profile(i) for i in range(1000, 3000)], size=16384)
    s = Serde(zstd_dictionary=zdict)
    for i in range(20):
        value = user_profile(i)
        assert len(s.encode(value)[0]) <= 0.35 * len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def test_compression_through_the_server(mclient: memfleet.Client) -> None:
    page: list[Any] = ["<div class='row'>item %d</div>" % i for i in range(2000)]
    mclient.set("page", "".join(page))
    assert mclient.get("page") == "".join(page)
    zdict = memfleet.train_dictionary([profile(i) for i in range(1000)], size=4096)
    c = memfleet.Client(mclient.servers, zstd_dictionary=zdict)
    c.set("p", profile(5))
    assert c.get("p") == profile(5)
    assert c.get_many(["p", "page"]) == {"p": profile(5), "page": "".join(page)}


_THREADS_SCRIPT = """
import sys, threading
from memfleet._php import PhpSerde
from memfleet.serde import Serde
sys.path.insert(0, sys.argv[1])
from samples import html_page, user_profile
zdict = __import__("memfleet").train_dictionary([user_profile(i) for i in range(200)], size=4096)
# big values: a call spends long enough without the GIL for another thread to enter the context
values = [html_page() * 2 + str(i) for i in range(16)]
serdes = [Serde(), Serde(zstd_dictionary=zdict), PhpSerde(compression="zstd", compress_threshold=100)]
wrong = []
def hammer(k):
    for r in range(40):
        for s in serdes:
            v = values[(k * 31 + r) % len(values)]
            data, flags = s.encode(v)
            if s.decode(data, flags) != v:
                wrong.append((k, r))
threads = [threading.Thread(target=hammer, args=(k,)) for k in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("wrong", len(wrong))
"""


def test_zstd_contexts_are_per_thread() -> None:
    """Threads encoding and decoding through one Serde (plain zstd, a dictionary, PHP's format) at
    once: python-zstandard's contexts release the GIL while they work, so a shared one crashes.
    Runs in a child process, so that a crash fails this test rather than ending the run."""
    import subprocess

    bench = str(Path(__file__).resolve().parents[1] / "bench")
    out = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, bench], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["wrong", "0"]


def test_msgpack_delta_codes_sorted_int_lists_as_differences() -> None:
    """serializer="msgpack-delta": sorted lists of 8+ ints are stored as their differences, every
    value reads back as msgpack's would (tuples as lists), and clients on the default read it."""
    import msgpack

    rnd = random.Random(5)
    friends = sorted(rnd.sample(range(5000), 50))
    value = {
        "friends": friends,
        "as_tuple": tuple(range(100, 900, 100)),
        "nested": [{"ids": [-(2**63), -5, 0, 0, 7, 2**20, 2**40, 2**64 - 1]}],
        "unsorted": [3, 1, 2, 4, 5, 6, 7, 8],
        "short": [1, 2, 3],
        "bools": [False] * 4 + [True] * 4,
        "mixed": [1, 2, 3, 4, 5, 6, 7, 8.5],
        "overflow": [-(2**63)] + [2**64 - 1] * 7,  # a difference beyond 64 bits
        "empty": [],
    }
    expected = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
    delta = Serde(serializer="msgpack-delta", compress_threshold=None)
    data, flags = delta.encode(value)
    assert flags == FLAG_MSGPACK_DELTA
    assert delta.decode(data, flags) == expected
    assert Serde().decode(data, flags) == expected
    # the friends list became small differences: much shorter than the plain list
    plain = Serde(compress_threshold=None).encode(value)[0]
    assert len(plain) - len(data) > len(msgpack.packb(friends)) // 3
    raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    assert isinstance(raw["friends"], msgpack.ExtType) and isinstance(raw["nested"][0]["ids"], msgpack.ExtType)
    for k in ("unsorted", "short", "bools", "mixed", "overflow", "empty"):
        assert raw[k] == value[k]
    # other extension types still come back as they are
    other = msgpack.packb(msgpack.ExtType(9, b"x"))
    assert Serde().decode(other, FLAG_MSGPACK_DELTA) == msgpack.ExtType(9, b"x")
    with pytest.raises(memfleet.serde.SerializationError):
        delta.encode({"big": [2**64, 2**65] * 4})
