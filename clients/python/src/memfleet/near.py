"""In-process LRU in front of the remote cache."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

_MISSING = object()


class NearCache:
    """Bounded LRU with a short TTL; values are the decoded objects, so treat them as read-only."""

    def __init__(self, max_items: int = 1024, ttl: float = 1.0) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self.max_items = max_items
        self.ttl = ttl
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[bytes, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Any:
        """The cached value or the module's ``MISSING`` sentinel."""
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                if entry[0] > time.monotonic():
                    self._data.move_to_end(key)
                    self.hits += 1
                    return entry[1]
                del self._data[key]
            self.misses += 1
            return _MISSING

    def put(self, key: bytes, value: Any, max_age: float | None = None) -> None:
        """Keep ``value`` for ``ttl`` seconds, or ``max_age`` if shorter (<= 0: drop the key)."""
        age = self.ttl if max_age is None or max_age > self.ttl else max_age
        with self._lock:
            if age <= 0:
                self._data.pop(key, None)
                return
            self._data[key] = (time.monotonic() + age, value)
            self._data.move_to_end(key)
            if len(self._data) > self.max_items:
                self._data.popitem(last=False)

    def discard(self, key: bytes) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "items": len(self._data)}


MISSING: Any = _MISSING
