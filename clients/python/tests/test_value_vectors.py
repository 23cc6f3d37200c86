"""Values stored by the pure-Python client (before the Rust wire layer) read back with today's
client, and today's client stores what that one did: tests/vectors/python-client-values.json
(written by make_value_vectors.py with the old client; the file says from which commit).

Both directions go through a real server: the vectors' raw items are put there over the text
protocol and read through the client, and the client's writes are read back raw. The raw side and
the decoder that checks it (value_vectors.py) use no memfleet code.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import value_vectors as vv
import zstandard
from client_support import Server

import memfleet

DOC = vv.load()
VECTORS: list[dict[str, Any]] = DOC["vectors"]
DICTS = {name: bytes.fromhex(d["hex"]) for name, d in DOC["dictionaries"].items()}
MANAGED = [v for v in VECTORS if v["flags"] & vv.ZSTD_MANAGED]
PLAIN = [v for v in VECTORS if not v["flags"] & vv.ZSTD_MANAGED]


def client_options(opts: dict[str, Any]) -> dict[str, Any]:
    out = dict(opts)
    if "zstd_dictionary" in out:
        out["zstd_dictionary"] = DICTS[out["zstd_dictionary"]]
    if isinstance(out.get("managed_dicts"), dict):
        out["managed_dicts"] = memfleet.ManagedDicts(**out["managed_dicts"])
    return out


def expected(v: dict[str, Any]) -> Any:
    """What the old client's get returned, in the typed JSON form (so True is not 1)."""
    return v.get("read_back", v["value"])


def depends_on(v: dict[str, Any], flags: int) -> list[str]:
    """The libraries whose version the exact bytes depend on (compressed and pickled values)."""
    deps = []
    if v["format"] == "php-memcached":
        if flags & vv.PHP_ZLIB:
            deps.append("zlib")
        if flags & vv.PHP_ZSTD:
            deps.append("zstd")
        return deps
    if flags & (vv.ZSTD | vv.ZSTD_DICT | vv.ZSTD_MANAGED):
        deps.append("zstd")
    if flags & ~vv.COMPRESSION == vv.PICKLE:
        deps.append("pickle")
    return deps


def independent(v: dict[str, Any], data: bytes, flags: int) -> Any:
    user_dict = DICTS[v["options"]["zstd_dictionary"]] if "zstd_dictionary" in v["options"] else None
    return vv.tag(vv.decode(v["format"], data, flags, user_dict=user_dict))


def test_the_vectors_cover_every_kind_and_agree_with_the_flags_table() -> None:
    """Each vector's bytes decode, by the table alone, to what the old client read back."""
    kinds = {v["flags"] for v in VECTORS if v["format"] == "memfleet"}
    for need in (
        0,
        vv.TEXT,
        vv.INTEGER,
        vv.MSGPACK,
        vv.JSON,
        vv.PICKLE,
        vv.TEXT | vv.ZSTD,
        vv.MSGPACK | vv.ZSTD,
        vv.MSGPACK | vv.ZSTD | vv.ZSTD_DICT,
        vv.MSGPACK | vv.ZSTD | vv.ZSTD_MANAGED,
        vv.PICKLE | vv.ZSTD,
    ):
        assert need in kinds, need
    php = {v["flags"] for v in VECTORS if v["format"] == "php-memcached"}
    assert {vv.PHP_MSGPACK, vv.PHP_COMPRESSED | vv.PHP_ZLIB, vv.PHP_COMPRESSED | vv.PHP_ZSTD} <= php
    managed = {}
    for item in DOC["items"]:
        body = vv.dictionary_from_item(bytes.fromhex(item["hex"]))
        managed[int.from_bytes(body[4:8], "little")] = body
        assert item["flags"] == vv.DICT_ITEM
    for v in VECTORS:
        data = bytes.fromhex(v["hex"])
        user_dict = DICTS[v["options"]["zstd_dictionary"]] if "zstd_dictionary" in v["options"] else None
        got = vv.decode(v["format"], data, v["flags"], user_dict=user_dict, managed=managed)
        assert vv.tag(got) == expected(v), v["name"]


def test_old_values_read_back_with_todays_client(server: Server, make_client: Any) -> None:
    """The old client's items, put on the server byte for byte, read through get and get_many (and
    the managed dictionary fetched from the server by the id in the frames)."""
    plain = memfleet.Client([server.address])
    plain.flush_all()
    plain.close()
    for item in DOC["items"]:
        vv.raw_set(server.address, item["key"].encode(), item["flags"], bytes.fromhex(item["hex"]))
    groups: dict[str, list[dict[str, Any]]] = {}
    for v in VECTORS:
        vv.raw_set(server.address, v["key"].encode(), v["flags"], bytes.fromhex(v["hex"]))
        groups.setdefault(json.dumps(v["read_options"], sort_keys=True), []).append(v)
    for opts, vs in groups.items():
        c = make_client([server.address], **client_options(json.loads(opts)))
        for v in vs:
            assert vv.tag(c.get(v["key"])) == expected(v), v["name"]
        many = c.get_many([v["key"] for v in vs])
        assert {k: vv.tag(x) for k, x in many.items()} == {v["key"]: expected(v) for v in vs}, opts


@pytest.mark.parametrize("v", PLAIN, ids=[v["name"] for v in PLAIN])
def test_todays_client_stores_what_the_old_one_did(server: Server, v: dict[str, Any]) -> None:
    """Same flags and, where the libraries the bytes depend on are the versions the vectors were
    made with, the same bytes. zstd's, zlib's and pickle's output may change with their versions
    (the format does not), so elsewhere the bytes are decoded by the flags table instead."""
    c = memfleet.Client([server.address], **client_options(v["options"]))
    try:
        assert c.set(v["key"], vv.untag(v["value"]))
    finally:
        c.close()
    got = vv.raw_get(server.address, v["key"].encode())
    assert got is not None
    data, flags = got
    assert flags == v["flags"], v["name"]
    assert independent(v, data, flags) == expected(v)
    current = vv.versions()
    if all(current[d] == DOC["versions"][d] for d in depends_on(v, flags)):
        assert data.hex() == v["hex"], v["name"]


@pytest.mark.parametrize("v", MANAGED, ids=[v["name"] for v in MANAGED])
def test_todays_managed_values_decode_by_the_table(server: Server, v: dict[str, Any]) -> None:
    """A managed dictionary is trained from whatever values the client sampled and gets a random id,
    so its frames cannot equal the vectors'; they must decode with the dictionary item the client
    published, by the table, the way the old client read them."""
    c = memfleet.Client([server.address], **client_options(v["options"]))
    family = "compat:rec:*"
    records = [vv.untag(x["value"]) for x in MANAGED]
    try:
        deadline = time.monotonic() + 30
        i = 0
        while c.dictionaries.stats()["families"].get(family) is None:
            assert time.monotonic() < deadline, c.dictionaries.stats()
            r = dict(records[i % len(records)], id=i)
            c.set(family.replace("*", str(i % 1000)), r)
            i += 1
            if i > 300:
                time.sleep(0.002)  # the dictionary trains in the background
        assert c.set(v["key"], vv.untag(v["value"]))
    finally:
        c.close()
    got = vv.raw_get(server.address, v["key"].encode())
    assert got is not None
    data, flags = got
    assert flags == v["flags"]
    dict_id = zstandard.get_frame_parameters(data).dict_id
    item = vv.raw_get(server.address, b"%s%08x" % (vv.DICT_KEY_PREFIX, dict_id))
    assert item is not None and item[1] == vv.DICT_ITEM
    dictionary = vv.dictionary_from_item(item[0])
    value = vv.decode("memfleet", data, flags, managed={dict_id: dictionary})
    assert vv.tag(value) == expected(v)
