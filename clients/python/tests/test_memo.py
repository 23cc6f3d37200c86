"""The client's memo dicts: one per thread on free-threaded CPython, a plain dict elsewhere."""

from __future__ import annotations

import socket
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest
from client_support import Server

import memfleet
from memfleet import _memo
from memfleet._memo import ThreadMemo
from memfleet.serde import FLAG_ZSTD_MANAGED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from samples import small_profile  # noqa: E402


def stored_flags(client: memfleet.Client, key: str) -> int:
    """The client flags ``key`` has on the server the client placed it on."""
    address = client.server_for(key)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"mg " + key.encode() + b" f\r\n")
        head = s.recv(4096).split(b"\r\n")[0].split()
    assert head[0] == b"HD", head
    return int(head[1][1:])


def in_thread(f: object) -> object:
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(f()))  # type: ignore[operator]
    t.start()
    t.join()
    return out[0]


def test_each_thread_sees_only_its_own_entries() -> None:
    m: ThreadMemo[bytes, int] = ThreadMemo()
    m[b"a"] = 1
    assert m.get(b"a") == 1 and len(m) == 1
    assert in_thread(lambda: m.get(b"a", -1)) == -1
    assert in_thread(lambda: (m.__setitem__(b"b", 2), m.get(b"b"), len(m))[1:]) == (2, 1)
    assert m.get(b"b") is None and len(m) == 1


def test_clear_empties_every_threads_memo() -> None:
    m: ThreadMemo[str, str] = ThreadMemo()
    ready, cleared, done = threading.Event(), threading.Event(), threading.Event()
    seen: list[str | None] = []

    def other() -> None:
        m["k"] = "other"
        ready.set()
        cleared.wait(10)
        seen.append(m.get("k"))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    ready.wait(10)
    m["k"] = "main"
    m.clear()
    cleared.set()
    done.wait(10)
    t.join()
    assert seen == [None]
    assert m.get("k") is None and len(m) == 0


def test_a_client_works_through_per_thread_memos(servers3: list[Server], monkeypatch: pytest.MonkeyPatch) -> None:
    """The client as it runs on free-threaded CPython, here on any build: threads sharing it, keys
    made anew for each call (equal, never the same object), values with and without a dictionary."""
    monkeypatch.setattr(_memo, "FREE_THREADED", True)
    c = memfleet.Client(
        [s.address for s in servers3], managed_dicts=memfleet.ManagedDicts(min_samples=100, refresh_interval=0.05)
    )
    other = memfleet.Client([s.address for s in servers3])
    try:
        assert isinstance(c._cfg._keys, ThreadMemo) and isinstance(c._router._state[2], ThreadMemo)
        assert isinstance(c._dicts._by_key, ThreadMemo) and isinstance(c._dicts._by_head, ThreadMemo)
        deadline = time.monotonic() + 20
        i = 0
        while c.dictionaries.stats()["families"].get("user:*:profile") is None:
            assert time.monotonic() < deadline, c.dictionaries.stats()
            c.set("user:%d:profile" % (i % 300), small_profile(i % 300))
            i += 1
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for j in range(100):
                    key = "user:%d:profile" % (1000 * n + j)
                    assert c.set(key, small_profile(j))
                    assert c.get("user:%d:profile" % (1000 * n + j)) == small_profile(j)
                    assert other.get(key) == small_profile(j)  # written with the dictionary
                    assert c.get_many(["user:%d:profile" % (1000 * n + j)]) == {key: small_profile(j)}
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[:3]
        assert stored_flags(c, "user:1000:profile") & FLAG_ZSTD_MANAGED
    finally:
        c.close()
        other.close()


def test_the_build_picks_the_memo() -> None:
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert _memo.FREE_THREADED is free_threaded
    assert isinstance(_memo.memo(), ThreadMemo if free_threaded else dict)
