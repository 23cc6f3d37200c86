"""Managed dictionaries: families, training, publishing, fetching, loss and rollover."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgpack
import pytest
import value_vectors as vv
from client_support import Server

import memfleet
from memfleet import _dicts
from memfleet.serde import FLAG_ZSTD, FLAG_ZSTD_MANAGED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from samples import feed_entry, small_profile  # noqa: E402
from unseen_shapes import friends_profile  # noqa: E402

# where the client this process imported lives (the installed wheel under scripts/test), for child processes
SRC = str(Path(memfleet.__file__).resolve().parents[1])
FAMILY = "rec:*:v"


def stored(client: Any, key: str) -> tuple[int, int]:
    """(size, flags) of the item as the server holds it."""
    host, port = client.server_for(key).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(b"mg " + key.encode() + b" s f\r\n")
        head = s.recv(4096).split(b"\r\n")[0].split()
    assert head[0] == b"HD", head
    f = {t[:1]: t[1:] for t in head[1:]}
    return int(f[b"s"]), int(f[b"f"])


def active_id(client: Any, family: str) -> str | None:
    return client.dictionaries.stats()["families"].get(family)  # type: ignore[no-any-return]


def wait_active(client: Any, family: str = FAMILY, gen: Callable[[int], Any] = small_profile, ttl: int = 0) -> str:
    """Write to ``family`` until it has a dictionary in use (a trained dictionary is published at
    the family's next write); its id."""
    deadline = time.monotonic() + 20
    while active_id(client, family) is None:
        assert time.monotonic() < deadline, client.dictionaries.stats()
        client.set(family.replace("*", "0"), gen(0), ttl=ttl)
        time.sleep(0.01)
    return active_id(client, family)  # type: ignore[return-value]


def small_policy(**kw: Any) -> memfleet.ManagedDicts:
    return memfleet.ManagedDicts(**{"min_samples": 200, "refresh_interval": 0.2, **kw})


def test_default_family_rule() -> None:
    f = memfleet.default_family
    assert f(b"user:42:profile") == b"user:*:profile"
    assert f(b"session:9f2c41") == b"session:*"
    assert f(b"feed:2024-05-01:top") == b"feed:*:top"
    assert f(b"config") == b"config"
    assert f(b"user:ada:profile") == b"user:ada:profile"


def test_a_frame_read_with_another_dictionary_of_the_same_id_fails() -> None:
    """Ids are random, so two dictionaries may share one (an item evicted everywhere, then its id
    drawn again): reading a frame with the other one should be an error. A frame of a value under
    1 KB whose sequences use the dictionary's tables carries no checksum, and another dictionary's
    tables make zstd reject it (all but about 1 in 26,000 such frames: none of these). Every other
    frame carries the checksum: one that copies a value the dictionary holds (a popular value, a
    piece of the dictionary) with zstd's default tables, which would decode, and one of 1 KB or
    more, which the checksum catches even with the same tables."""
    import zstandard

    popular = [small_profile(10**6 + k) for k in range(20)]
    samples: list[Any] = [msgpack.packb(popular[i % 20] if i % 2 else small_profile(i)) for i in range(500)]
    mine = _dicts.Dictionary(zstandard.train_dictionary(4096, samples, dict_id=77777).as_bytes(), 3)
    later = [msgpack.packb(small_profile(i)) for i in range(5000, 5500)]
    other = _dicts.Dictionary(zstandard.train_dictionary(4096, later, dict_id=77777).as_bytes(), 3)
    unchecked = 0
    for level in (3, 4):
        writer = mine.at_level(level)
        values = [msgpack.packb(small_profile(i)) for i in range(1000, 1200)]
        values += [msgpack.packb(v) for v in popular] + [mine.data[-k - 300 : -k] for k in range(1, 3000, 100)]
        for v in values:
            frame = writer.compress(v)
            assert mine.decompress(frame) == v
            checked = zstandard.get_frame_parameters(frame).has_checksum
            assert checked != _dicts.sequences_use_dictionary_tables(frame)
            unchecked += not checked
            with pytest.raises(zstandard.ZstdError):
                other.decompress(frame)
    assert unchecked >= 300  # most of the 400 profiles go without the checksum
    # the same id and entropy tables, other content: frames that copy from the changed bytes decode
    # to wrong values but for the checksum
    altered = _dicts.Dictionary(mine.data[:-400] + bytes(b ^ 0x55 for b in mine.data[-400:]), 3)
    for i in range(1000, 1100):
        v = msgpack.packb([small_profile(i + k) for k in range(4)])
        assert len(v) >= 1024
        frame = mine.compress(v)
        assert zstandard.get_frame_parameters(frame).has_checksum
        assert mine.decompress(frame) == v
        with pytest.raises(zstandard.ZstdError):
            altered.decompress(frame)


def test_which_frames_code_their_sequences_with_the_dictionary() -> None:
    """The frame parser behind the checksum rule, on frames built by hand: one compressed block,
    raw or Huffman-coded literals, then the sequence count and the three codes' modes."""

    def frame(modes: int, count: bytes = b"\x02", literals: bytes = b"\x18abc", block: int = 5) -> bytes:
        body = literals + count + bytes([modes]) + b"\x00" * 6
        head = b"\x28\xb5\x2f\xfd" + b"\x23" + (77777).to_bytes(4, "little") + b"\x40"
        return head + ((len(body) << 3) | block).to_bytes(3, "little") + body

    uses = _dicts.sequences_use_dictionary_tables
    assert uses(frame(0xFC))  # literal lengths, offsets and match lengths all "repeat"
    for modes in (0xF0, 0xCC, 0x3C, 0x00, 0xA8):  # one code or more with tables of its own
        assert not uses(frame(modes)), hex(modes)
    assert uses(frame(0xFC, count=b"\x81\x00"))  # 256 sequences: a two-byte count
    assert uses(frame(0xFC, count=b"\xff\x00\x01"))  # a three-byte count
    assert not uses(frame(0xFC, count=b"\x00"))  # no sequences: nothing came from the dictionary
    # Huffman-coded literals with the dictionary's table, 2 bytes coded: headers of 3, 4 and 5 bytes
    for size_format, head, shift in ((0, 3, 14), (2, 4, 18), (3, 5, 22)):
        literals = (3 | size_format << 2 | 2 << shift).to_bytes(head, "little") + b"xx"
        assert uses(frame(0xFC, literals=literals)), size_format
        assert not uses(frame(0xF0, literals=literals)), size_format
    assert not uses(frame(0xFC, block=1))  # a raw block
    assert not uses(frame(0xFC, block=4))  # not the last block
    assert not uses(frame(0xFC)[:15])  # cut short


def test_stored_frames_carry_the_checksum_where_they_need_it(server: Server, make_client: Any) -> None:
    """What the client writes: profiles under 1 KB without the checksum, a popular value and records
    of 1 KB or more with it."""
    import zstandard

    c = make_client([server.address], managed_dicts=small_policy())
    c.flush_all()
    popular = small_profile(10**6)
    for i in range(300):
        c.set(f"rec:{i}:v", popular if i % 2 else small_profile(i))
    wait_active(c)
    cases = {"rec:1000:v": small_profile(1000), "rec:1001:v": popular}
    cases["rec:1002:v"] = {"items": [small_profile(1002 + k) for k in range(4)]}
    for key, value in cases.items():
        c.set(key, value)
        assert c.get(key) == value
    checked = {}
    for key in cases:
        item = vv.raw_get(server.address, key.encode())
        assert item is not None and item[1] & FLAG_ZSTD_MANAGED, key
        checked[key] = zstandard.get_frame_parameters(item[0]).has_checksum
    assert checked == {"rec:1000:v": False, "rec:1001:v": True, "rec:1002:v": True}


def test_a_family_compresses_at_the_next_level_where_it_pays() -> None:
    """Training compares the held-out samples at the configured level and the next: profiles with
    a list of ids come out over 2% smaller at level 4 and take it; feed entries do not; with
    ``level_up=False`` a family stays at its level."""
    dicts = _dicts.Dictionaries(memfleet.serde.Serde(), memfleet.ManagedDicts(), 64, lambda d, publish: None)
    for gen, level in ((small_profile, 4), (feed_entry, 3)):
        fam = _dicts.Family(gen.__name__.encode())
        dicts._train(fam, [msgpack.packb(gen(i)) for i in range(500)])
        assert fam.pending is not None
        assert fam.pending.level == level, gen.__name__
        v = msgpack.packb(gen(9999))
        assert fam.pending.decompress(fam.pending.compress(v)) == v
    for policy, levels in (
        (memfleet.ManagedDicts(level_up=False), {3}),
        (memfleet.ManagedDicts(level=2), {3}),
        (memfleet.ManagedDicts(level=-1), {-1}),  # negative levels stay: "the next" is not one
    ):
        fam = _dicts.Family(b"levels")
        _dicts.Dictionaries(memfleet.serde.Serde(), policy, 64, lambda d, publish: None)._train(
            fam, [msgpack.packb(small_profile(i)) for i in range(500)]
        )
        assert fam.pending is not None and fam.pending.level in levels


def test_a_family_function_groups_keys(server: Server) -> None:
    def family(key: bytes) -> str | None:
        return None if key.startswith(b"skip") else "people"

    c = memfleet.Client([server.address], managed_dicts=small_policy(family=family))
    for i in range(150):
        c.set(f"a{i}", small_profile(i))
        c.set(f"b{i}", small_profile(i + 1000))
        c.set(f"skip{i}", small_profile(i))
    wait_active(c, "people")
    c.set("a1", small_profile(1))
    c.set("skip1", small_profile(1))
    assert stored(c, "a1")[1] & FLAG_ZSTD_MANAGED
    assert not stored(c, "skip1")[1] & FLAG_ZSTD_MANAGED
    assert list(c.dictionaries.stats()["families"]) == ["people"]
    assert c.dictionaries.stats()["levels"]["people"] in (3, 4)
    c.close()


def test_records_shrink_after_training(servers3: list[Server], make_client: Any) -> None:
    """Default settings: after 2,000 writes, small records are stored at <= 0.4x pickle (the
    client's own example, and a profile with a friends list it was not tuned on) and ~1 KB
    JSON-like records at <= 0.5x msgpack."""
    c = make_client([s.address for s in servers3])
    c.flush_all()
    for gen, limit, base in (
        (small_profile, 0.4, lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)),
        (friends_profile, 0.4, lambda v: pickle.dumps(v, protocol=5)),
        (feed_entry, 0.5, msgpack.packb),
    ):
        name = gen.__name__
        for i in range(2000):
            c.set(f"{name}:{i}:v", gen(i))
        wait_active(c, f"{name}:*:v", gen)
        size = base_size = 0
        for i in range(10_000, 10_200):
            key = f"{name}:{i}:v"
            c.set(key, gen(i))
            n, flags = stored(c, key)
            assert flags & (FLAG_ZSTD | FLAG_ZSTD_MANAGED) == FLAG_ZSTD | FLAG_ZSTD_MANAGED
            assert c.get(key) == gen(i)
            size += n
            base_size += len(base(gen(i)))
        assert size / base_size <= limit, (name, size / base_size)
    assert c.dictionaries.stats()["unreadable"] == 0


def test_second_process_reads_compressed_values(servers3: list[Server]) -> None:
    addrs = [s.address for s in servers3]
    c = memfleet.Client(addrs, managed_dicts=small_policy())
    c.flush_all()
    for i in range(300):
        c.set(f"rec:{i}:v", small_profile(i))
    wait_active(c)
    keys = [f"rec:{i}:v" for i in range(1000, 1050)]
    c.set_many({k: small_profile(i) for i, k in enumerate(keys, 1000)})
    assert all(stored(c, k)[1] & FLAG_ZSTD_MANAGED for k in keys)
    # a new process, no state, managed writes off: it still reads them (get, get_many, gets)
    script = (
        "import json, sys, memfleet\n"
        "c = memfleet.Client(sys.argv[1].split(','), managed_dicts=False)\n"
        "keys = sys.argv[2].split(',')\n"
        "one = c.get(keys[0]); many = c.get_many(keys); val, cas = c.gets(keys[1])\n"
        "print(json.dumps({'one': one, 'many': many, 'gets': val, 'stats': c.dictionaries.stats()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", script, ",".join(addrs), ",".join(keys)], env=env, capture_output=True, check=True
    )
    got = json.loads(out.stdout)
    assert got["one"] == small_profile(1000)
    assert got["gets"] == small_profile(1001)
    assert got["many"] == {k: small_profile(i) for i, k in enumerate(keys, 1000)}
    assert got["stats"]["fetched"] == 1  # once, though 52 values needed it
    assert got["stats"]["unreadable"] == 0


def test_frames_find_their_dictionary_by_id() -> None:
    """A reader keeps frames' header bytes -> dictionary: frames of several dictionaries decode with
    their own (4-byte and 2-byte ids; frames bigger than their window, whose first header bytes
    hold only part of the id), and a dictionary loaded under an id already known (its item evicted
    everywhere, the id drawn again) is the one used from then on."""
    import zstandard

    samples: list[Any] = [msgpack.packb(small_profile(i)) for i in range(500)]
    a, b, near, short = (
        _dicts.Dictionary(zstandard.train_dictionary(4096, samples[k::4], dict_id=i).as_bytes(), 3)
        for k, i in enumerate((0x40000001, 0x40000002, 0x41000001, 40000))
    )
    again = _dicts.Dictionary(zstandard.train_dictionary(2048, samples[1::2], dict_id=a.id).as_bytes(), 3)
    reader = _dicts.Dictionaries(memfleet.serde.Serde(), None, 64, lambda d, publish: None)
    for d in (a, b, near, short):
        assert reader.fetched(d.id, d.payload)

    def windowed(d: _dicts.Dictionary, v: bytes) -> bytes:
        """A frame with a window byte before the id: not single-segment."""
        params = zstandard.ZstdCompressionParameters(window_log=10, write_dict_id=1, write_content_size=1)
        c = zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(d.data), compression_params=params)
        frame = c.compress(v * 8)
        assert not frame[4] & 0x20
        return frame

    values = [msgpack.packb(small_profile(i)) for i in range(1000, 1030)]
    for _ in range(2):  # the second time from what the first remembered
        for v in values:
            for d in (a, b, near, short):
                assert reader.decompress(d.compress(v)) == v
            for d in (a, near):
                assert reader.decompress(windowed(d, v)) == v * 8
    assert reader.fetched(a.id, again.payload)
    for v in values:
        assert reader.decompress(again.compress(v)) == v
    unknown = _dicts.Dictionary(zstandard.train_dictionary(4096, samples, dict_id=0x40000009).as_bytes(), 3)
    with pytest.raises(memfleet.serde.MissingDictionary):
        reader.decompress(unknown.compress(values[0]))


def test_deleted_dictionary_reads_as_miss_and_family_retrains(server: Server, make_client: Any) -> None:
    writer = make_client([server.address], managed_dicts=small_policy())
    writer.flush_all()
    for i in range(300):
        writer.set(f"rec:{i}:v", small_profile(i))
    old = wait_active(writer)
    writer.set("rec:1:v", small_profile(1))
    assert stored(writer, "rec:1:v")[1] & FLAG_ZSTD_MANAGED
    plain = memfleet.Client([server.address], compress_threshold=None)  # stores bytes as they are
    assert plain.delete(f"memfleet-dict:{old}")  # as if evicted

    reader = make_client([server.address])
    assert reader.get("rec:1:v", "miss") == "miss"
    assert reader.get_many(["rec:1:v"]) == {}
    assert reader.gets("rec:1:v") == (None, None)
    assert reader.dictionaries.stats()["unreadable"] >= 3
    # get_or_set loads afresh instead of returning garbage or waiting
    assert reader.get_or_set("rec:1:v", lambda: "reloaded") == "reloaded"

    # the writer notices at its next refresh, samples again and publishes a new dictionary
    i = 1000
    deadline = time.monotonic() + 20
    while active_id(writer, FAMILY) in (None, old):
        assert time.monotonic() < deadline, writer.dictionaries.stats()
        writer.set(f"rec:{i}:v", small_profile(i))
        i += 1
        time.sleep(0.002)
    assert writer.dictionaries.stats()["lost"] == 1
    writer.set("rec:2:v", small_profile(2))
    assert stored(writer, "rec:2:v")[1] & FLAG_ZSTD_MANAGED
    assert make_client([server.address]).get("rec:2:v") == small_profile(2)
    plain.close()


def test_dictionary_id_collision_takes_a_new_id(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = iter([0x40000001, 0x40000001, 0x40000002, 0x40000003])
    monkeypatch.setattr(_dicts, "new_id", lambda: next(ids))
    plain = memfleet.Client([server.address], compress_threshold=None)  # stores bytes as they are
    plain.flush_all()
    someone_elses = b"MFD1" + bytes(16) + b"another client's dictionary"
    plain.set("memfleet-dict:40000001", someone_elses)
    c = memfleet.Client([server.address], managed_dicts=small_policy())
    for i in range(300):
        c.set(f"rec:{i}:v", small_profile(i))
    wait_active(c)
    assert active_id(c, FAMILY) == "40000002"
    assert plain.get("memfleet-dict:40000001") == someone_elses  # left alone
    c.set("rec:5:v", small_profile(5))
    assert memfleet.Client([server.address]).get("rec:5:v") == small_profile(5)


def test_a_dictionary_is_used_only_once_published(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id the writer draws is taken by someone else's dictionary, so publishing never
    succeeds: the writer keeps storing values without it, and a reader reads every one."""
    monkeypatch.setattr(_dicts, "new_id", lambda: 0x40000001)
    plain = memfleet.Client([server.address], compress_threshold=None)  # stores bytes as they are
    plain.flush_all()
    plain.set("memfleet-dict:40000001", b"MFD1" + bytes(16) + b"another client's dictionary")
    c = memfleet.Client([server.address], managed_dicts=small_policy())
    deadline = time.monotonic() + 20
    i = 0
    while c.dictionaries.stats()["trained"] == 0 or i < 600:
        assert time.monotonic() < deadline, c.dictionaries.stats()
        c.set(f"rec:{i % 300}:v", small_profile(i % 300))
        i += 1
        time.sleep(0.001)
    assert active_id(c, FAMILY) is None
    reader = memfleet.Client([server.address])
    assert reader.get_many([f"rec:{i}:v" for i in range(300)]) == {f"rec:{i}:v": small_profile(i) for i in range(300)}
    assert reader.dictionaries.stats()["unreadable"] == 0
    for x in (c, reader, plain):
        x.close()


def test_a_dictionary_item_that_fails_its_hash_is_refused(server: Server) -> None:
    c = memfleet.Client([server.address], managed_dicts=small_policy())
    c.flush_all()
    for i in range(300):
        c.set(f"rec:{i}:v", small_profile(i))
    wait_active(c)
    key = f"memfleet-dict:{active_id(c, FAMILY)}"
    c.set("rec:7:v", small_profile(7))
    plain = memfleet.Client([server.address], compress_threshold=None)  # stores bytes as they are
    item = plain.get(key)
    assert isinstance(item, bytes)
    # same id and length, one byte of the dictionary changed: the stored hash no longer matches
    bad = item[:-1] + bytes([item[-1] ^ 1])
    plain.set(key, bad)
    reader = memfleet.Client([server.address])
    assert reader.get("rec:7:v") is None
    assert reader.dictionaries.stats()["unreadable"] == 1


def item_ttl(server: Server, key: str) -> int:
    """Seconds the server will keep ``key`` (-1: no expiry)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
        s.sendall(b"mg " + key.encode() + b" t\r\n")
        head = s.recv(4096).split(b"\r\n")[0].split()
    assert head[0] == b"HD", head
    return int(head[1][1:])


def test_dictionary_outlives_the_values_written_with_it(server: Server, make_client: Any) -> None:
    c = make_client([server.address], managed_dicts=small_policy(dict_ttl=50))
    c.flush_all()
    for i in range(300):
        c.set(f"rec:{i}:v", small_profile(i), ttl=10)
    key = f"memfleet-dict:{wait_active(c, ttl=10)}"
    assert 0 < item_ttl(server, key) <= 50  # dict_ttl covers values of 10 s

    def ttl_after_write(ttl: int, done: Callable[[int], bool]) -> int:
        c.set("rec:1:v", small_profile(1), ttl=ttl)
        deadline = time.monotonic() + 10
        while True:  # the refresh runs in the background
            t = item_ttl(server, key)
            if done(t) or time.monotonic() > deadline:
                return t
            c.get("rec:1:v")
            time.sleep(0.01)

    assert ttl_after_write(5000, lambda t: t >= 5000) >= 5000
    # a value that never expires: neither does its dictionary
    assert ttl_after_write(0, lambda t: t == -1) == -1


def test_managed_dicts_off(server: Server) -> None:
    for options in ({"managed_dicts": False}, {"compress_threshold": None}):
        c = memfleet.Client([server.address], **options)  # type: ignore[arg-type]
        for i in range(1200):
            c.set(f"rec:{i}:v", small_profile(i))
        assert c.dictionaries.stats()["families"] == {}
        assert stored(c, "rec:1:v")[1] & FLAG_ZSTD_MANAGED == 0
        c.close()


def drifting(i: int, phase: int) -> Any:
    """Phase 0 writes small profiles; phase 1 writes feed entries into the same family."""
    return small_profile(i) if phase == 0 else feed_entry(i)


def test_rollover_under_concurrent_readers_and_writers(servers3: list[Server]) -> None:
    addrs = [s.address for s in servers3]
    policy = small_policy(drift_window=400)
    writer = memfleet.Client(addrs, managed_dicts=policy)
    writer.flush_all()
    n_keys = 400
    written: dict[int, set[int]] = {i: set() for i in range(n_keys)}  # phases written, per key
    errors: list[str] = []
    stop = threading.Event()

    def write(lo: int, hi: int) -> None:
        for phase in (0, 1):
            for _ in range(3):
                for i in range(lo, hi):
                    writer.set(f"rec:{i}:v", drifting(i, phase))
                    written[i].add(phase)

    def read(seed: int) -> None:
        reader = memfleet.Client(addrs)
        rnd = random.Random(seed)
        while not stop.is_set():
            i = rnd.randrange(n_keys)
            before = set(written[i])
            v = reader.get(f"rec:{i}:v")
            if v is None:
                if before:
                    errors.append(f"rec:{i}:v missing")
            elif v not in [drifting(i, p) for p in (0, 1)]:
                errors.append(f"rec:{i}:v wrong")
        if reader.dictionaries.stats()["unreadable"]:
            errors.append("unreadable values")
        reader.close()

    writers = [threading.Thread(target=write, args=(k * 100, k * 100 + 100)) for k in range(4)]
    readers = [threading.Thread(target=read, args=(k,)) for k in range(3)]
    for t in writers + readers:
        t.start()
    try:
        for t in writers:
            t.join()
        # keep the family busy until the drifted values have their own dictionary
        deadline = time.monotonic() + 20
        while writer.dictionaries.stats()["published"] < 2:
            assert time.monotonic() < deadline, writer.dictionaries.stats()
            i = random.randrange(n_keys)
            writer.set(f"rec:{i}:v", drifting(i, 1))
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert errors == [], errors[:5]
    fresh = memfleet.Client(addrs)
    got = fresh.get_many([f"rec:{i}:v" for i in range(n_keys)])
    assert got == {f"rec:{i}:v": drifting(i, 1) for i in range(n_keys)}
    assert fresh.dictionaries.stats()["unreadable"] == 0


def test_rollover_with_asyncio_tasks(servers3: list[Server]) -> None:
    addrs = [s.address for s in servers3]

    async def main() -> None:
        writer = memfleet.AsyncClient(addrs, managed_dicts=small_policy(drift_window=400))
        reader = memfleet.AsyncClient(addrs)
        await writer.flush_all()
        bad: list[str] = []

        async def write(phase: int, lo: int, hi: int) -> None:
            for i in range(lo, hi):
                await writer.set(f"rec:{i}:v", drifting(i, phase))
                await asyncio.sleep(0)

        async def read(phase: int) -> None:
            for i in range(400):
                v = await reader.get(f"rec:{i}:v")
                if v is not None and v not in [drifting(i, p) for p in (0, phase)]:
                    bad.append(f"rec:{i}:v")

        for phase in (0, 1):
            for _ in range(3):
                await asyncio.gather(*(write(phase, k * 100, k * 100 + 100) for k in range(4)), read(phase))
        deadline = time.monotonic() + 20
        while writer.dictionaries.stats()["published"] < 2:
            assert time.monotonic() < deadline, writer.dictionaries.stats()
            await write(1, 0, 50)
        assert bad == []
        await write(1, 0, 400)
        fresh = memfleet.AsyncClient(addrs)
        got = await fresh.get_many([f"rec:{i}:v" for i in range(400)])
        assert got == {f"rec:{i}:v": drifting(i, 1) for i in range(400)}
        assert reader.dictionaries.stats()["unreadable"] == 0
        assert fresh.dictionaries.stats()["fetched"] >= 1
        for c in (writer, reader, fresh):
            await c.close()

    asyncio.run(main())


# -- compatibility with values and dictionaries written by earlier clients, and training schedule --
OLD_VALUES = Path(__file__).resolve().parent / "data" / "managed_values_f503601.json"


def raw_set(server: Server, key: bytes, data: bytes, flags: int) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
        s.sendall(b"set %s %d 0 %d\r\n%s\r\n" % (key, flags, len(data), data))
        assert s.recv(64) == b"STORED\r\n"


def raw_get(server: Server, key: bytes) -> tuple[bytes, int]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
        s.sendall(b"get " + key + b"\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            assert chunk, buf
            buf += chunk
    head, rest = buf.split(b"\r\n", 1)
    _, _, flags, n = head.split()
    return rest[: int(n)], int(flags)


def read_as_before(server: Server, data: bytes, flags: int) -> Any:
    """A managed value read the way the client of f503601 reads it (serde.decode, then
    _dicts.Dictionaries.decompress and Dictionary.from_payload), written out with zstandard alone:
    the dictionary named by the frame's id, fetched from memfleet-dict:<id hex>, checked against
    the magic and the SHA-256 stored with it, then one-shot decompression (which needs the content
    size in the frame), then msgpack."""
    import hashlib

    import zstandard

    assert flags == FLAG_ZSTD | FLAG_ZSTD_MANAGED | memfleet.serde.FLAG_MSGPACK
    dict_id = zstandard.get_frame_parameters(data).dict_id
    payload, item_flags = raw_get(server, b"memfleet-dict:%08x" % dict_id)
    assert item_flags == 1 << 15
    magic, digest, body = payload[:4], payload[4:20], payload[20:]
    assert magic == b"MFD1" and hashlib.sha256(body).digest()[:16] == digest
    assert body[:4] == b"\x37\xa4\x30\xec" and int.from_bytes(body[4:8], "little") == dict_id
    dctx = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(body))
    return msgpack.unpackb(dctx.decompress(data), raw=False, strict_map_key=False)


def test_values_written_by_the_earlier_client_read_back(server: Server, make_client: Any) -> None:
    """Values and their dictionary as the client of f503601 stored them (tests/data) read back with
    today's defaults, the dictionary fetched from the server."""
    import base64

    from unseen_shapes import friends_profile

    old = json.loads(OLD_VALUES.read_text())
    c = make_client([server.address])
    c.flush_all()
    d = old["dictionary"]
    raw_set(server, d["key"].encode(), base64.b64decode(d["data"]), d["flags"])
    for v in old["values"]:
        raw_set(server, v["key"].encode(), base64.b64decode(v["data"]), v["flags"])
    for v in old["values"]:
        assert v["flags"] & FLAG_ZSTD_MANAGED
        assert c.get(v["key"]) == friends_profile(v["record"])
    assert c.dictionaries.stats()["fetched"] == 1


def test_values_written_now_read_as_the_earlier_client_reads_them(server: Server, make_client: Any) -> None:
    """Default settings write what the client of f503601 reads: same flags, frames naming a
    dictionary published in the same item format."""
    from unseen_shapes import friends_profile

    c = make_client([server.address])
    c.flush_all()
    for i in range(2000):
        c.set(f"new:{i}:v", friends_profile(i))
    wait_active(c, "new:*:v", friends_profile)
    for i in range(5000, 5020):
        c.set(f"new:{i}:v", friends_profile(i))
        assert read_as_before(server, *raw_get(server, f"new:{i}:v".encode())) == friends_profile(i)


def test_a_new_family_trains_after_500_writes(server: Server) -> None:
    """Default settings: a family's 500th value starts its training, and its dictionary is in use
    once trained and published (well before its 2,000th write unless training is slow)."""
    from unseen_shapes import order

    c = memfleet.Client([server.address])
    c.flush_all()
    for i in range(499):
        c.set(f"order:{i}:v", order(i))
    fam = c.dictionaries._families[b"order:*:v"]
    assert fam.sampling and c.dictionaries.counts["trained"] == 0
    c.set("order:499:v", order(499))
    assert not fam.sampling  # the 500th value went to training
    deadline = time.monotonic() + 20
    while c.dictionaries.counts["trained"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    wait_active(c, "order:*:v", order)
    c.set("order:9999:v", order(9999))
    assert stored(c, "order:9999:v")[1] & FLAG_ZSTD_MANAGED
    assert c.get("order:9999:v") == order(9999)
    c.close()
