"""Values and key placement shared with pylibmc and pymemcache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pylibmc
import pytest
from pymemcache import serde as pm_serde
from pymemcache.client.base import Client as PymemcacheClient
from pymemcache.client.hash import HashClient  # noqa: F401  (documented alternative, not ketama)

import memfleet

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "ketama.json"

SHARED_VALUES: list[Any] = [b"bytes \x00\xff", "text é", 42, -7, 2**65, {"pickled": [1, 2]}, 1.25, None]


def _pylibmc(addresses: list[str]) -> Any:
    return pylibmc.Client(addresses, binary=False, behaviors={"ketama_weighted": True})


def test_memfleet_reads_pylibmc_values(server: Any, make_client: Any) -> None:
    mc = _pylibmc([server.address])
    m = make_client([server.address], allow_pickle=True)
    for i, value in enumerate(SHARED_VALUES + [True, "z" * 3000]):
        mc.set(f"pl{i}", value)
        got = m.get(f"pl{i}")
        if value is True:
            assert got == 1  # pylibmc stores bools as the integer 1
        else:
            assert got == value and type(got) is type(value)
    mc.set("plz", "compressed " * 500, min_compress_len=10)
    assert m.get("plz") == "compressed " * 500


def test_pylibmc_reads_memfleet_values(server: Any, make_client: Any) -> None:
    mc = _pylibmc([server.address])
    m = make_client([server.address], serializer="pickle")
    for i, value in enumerate(SHARED_VALUES):
        m.set(f"mf{i}", value)
        got = mc.get(f"mf{i}")
        assert got == value and type(got) is type(value)


def test_memfleet_and_pymemcache_both_ways(server: Any, make_client: Any) -> None:
    host, port = server.address.split(":")
    pm = PymemcacheClient((host, int(port)), serde=pm_serde.pickle_serde, default_noreply=False)
    pmz = PymemcacheClient(
        (host, int(port)), serde=pm_serde.CompressedSerde(min_compress_len=10), default_noreply=False
    )
    m = make_client([server.address], serializer="pickle")
    for i, value in enumerate(SHARED_VALUES):
        pm.set(f"pm{i}", value)
        got = m.get(f"pm{i}")
        assert got == value and type(got) is type(value)
        m.set(f"mp{i}", value)
        got = pm.get(f"mp{i}")
        assert got == value and type(got) is type(value)
    pmz.set("pmz", "zlib " * 400)
    assert m.get("pmz") == "zlib " * 400


def test_memfleet_finds_every_key_pylibmc_stored(servers3: list[Any], make_client: Any) -> None:
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    keys = list(next(c for c in data["cases"] if c["implementation"] == "libmemcached-ketama-weighted")["keys"])
    addresses = [s.address for s in servers3]
    mc = _pylibmc(addresses)
    m = make_client(addresses)
    m.flush_all()
    for k in keys:
        mc.set(k, "v:" + k)
    per_server = [memfleet.Client([a]) for a in addresses]
    for k in keys:
        # the server memfleet picks really holds what pylibmc stored
        holder = per_server[addresses.index(m.server_for(k))]
        assert holder.get(k) == "v:" + k, k
    assert m.get_many(keys) == {k: "v:" + k for k in keys}
    # and the other way round
    m.flush_all()
    m.set_many({k: k for k in keys})
    assert mc.get_multi(keys[:200]) == {k: k for k in keys[:200]}


@pytest.mark.parametrize("weights", [(1, 2, 5)])
def test_weighted_placement_matches_pylibmc(servers3: list[Any], weights: Any, make_client: Any) -> None:
    specs = [f"{s.address}:{w}" for s, w in zip(servers3, weights)]
    tuples = [(s.address.split(":")[0], int(s.address.split(":")[1]), w) for s, w in zip(servers3, weights)]
    mc = _pylibmc(specs)
    m = make_client(tuples)
    m.flush_all()
    keys = [f"weighted-key-{i}" for i in range(500)]
    for k in keys:
        mc.set(k, k)
    per_server = {s.address: memfleet.Client([s.address]) for s in servers3}
    assert all(per_server[m.server_for(k)].get(k) == k for k in keys)
