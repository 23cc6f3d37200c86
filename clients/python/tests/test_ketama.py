from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memfleet.ketama import Ring, key_hash, point_name, points_for

# tests/ -> clients/python -> clients -> repo root; the vectors are kept in the repo under tests/vectors/
VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "ketama.json"
IMPLEMENTATIONS = ("libmemcached-ketama-weighted", "twemproxy:ketama:md5")


def _cases() -> list[dict[str, Any]]:
    if not VECTORS.exists():
        raise FileNotFoundError(f"ketama vectors not found at {VECTORS}")
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    return [c for c in data["cases"] if c["implementation"] in IMPLEMENTATIONS]


CASES = _cases()


def test_vector_file_has_the_weighted_cases() -> None:
    weighted = [c for c in CASES if c["implementation"] == "libmemcached-ketama-weighted"]
    assert len(weighted) == 6
    assert sum(len(c["keys"]) for c in weighted) == 5 * 625 + 4


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ketama_vectors(case: dict[str, Any]) -> None:
    servers = case["servers"]
    names = [s.get("name") or point_name(s["host"], s["port"]) for s in servers]
    ring = Ring(names, [s["weight"] for s in servers])
    wrong = {k: i for k, i in case["keys"].items() if ring.index_for(k.encode("utf-8")) != i}
    assert not wrong, f"{len(wrong)} of {len(case['keys'])} keys on the wrong server"


def test_points_per_server_use_float32_arithmetic() -> None:
    assert [points_for(w, 3, 3) for w in (1, 1, 1)] == [160, 160, 160]
    assert [points_for(w, 8, 3) for w in (1, 2, 5)] == [60, 120, 300]


def test_point_name_omits_default_port() -> None:
    assert point_name("10.0.0.1", 11211) == "10.0.0.1"
    assert point_name("10.0.0.1", 11212) == "10.0.0.1:11212"


def test_key_hash_is_md5_little_endian() -> None:
    # md5("a") = 0cc175b9c0f1b6a8...; first four bytes little-endian
    assert key_hash(b"a") == 0xB975C10C
