"""The client's memo dicts: one per thread on free-threaded CPython, a plain dict elsewhere."""

from __future__ import annotations

import sysconfig
import threading

from memfleet import _memo
from memfleet._memo import ThreadMemo


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


def test_the_build_picks_the_memo() -> None:
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert _memo.FREE_THREADED is free_threaded
    assert isinstance(_memo.memo(), ThreadMemo if free_threaded else dict)
