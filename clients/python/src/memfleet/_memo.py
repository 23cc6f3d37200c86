"""The client's memo dicts (keys, placements, families, dictionary headers), one per thread on
free-threaded CPython.

There (3.13.5 measured), looking up a key in a dict that another thread made, when the key is
equal to the stored one but not the same object, takes ~15 µs instead of ~30 ns: a shared memo
then costs a multithreaded ``get`` more than it saves (8 threads on 2 CPUs: 24,000 gets/s with
one shared memo, 95,000-99,000 with one per thread). With the GIL a plain dict is both safe and
fastest.
"""

from __future__ import annotations

import sysconfig
import threading
from typing import Generic, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


class ThreadMemo(Generic[K, V]):
    """The part of a dict's interface the memos use, on a dict of the calling thread's own
    (each holds up to the memo's limit: memory grows with the threads that use the client).
    ``len()`` counts the calling thread's entries; ``clear()`` empties every thread's, each at
    its next call."""

    __slots__ = ("_local", "_generation")

    def __init__(self) -> None:
        self._local = threading.local()
        # a new object at each clear(): unlike a counter, racing clears cannot bring back an old one
        self._generation = object()

    def _dict(self) -> dict[K, V]:
        local = self._local
        generation = self._generation
        d: dict[K, V] | None = getattr(local, "d", None)
        if d is None or local.generation is not generation:
            d = local.d = {}
            local.generation = generation
        return d

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._dict().get(key, default)

    def __setitem__(self, key: K, value: V) -> None:
        self._dict()[key] = value

    def __len__(self) -> int:
        return len(self._dict())

    def clear(self) -> None:
        self._generation = object()


def memo() -> dict[K, V]:
    """A new memo: a dict, or on free-threaded CPython a :class:`ThreadMemo` (typed as the dict
    whose interface it offers)."""
    if FREE_THREADED:
        return cast("dict[K, V]", ThreadMemo())
    return {}
