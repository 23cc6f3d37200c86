"""In-process LRU in front of the remote cache, kept fresh by a time-to-live or by the server's
invalidation notices (memfleet's ``track`` extension); no I/O here.

Each server a client talks to is a :class:`Source`. While its notices are followed (state
``TRACKED``), a value read from it is cached only if no notice that could concern it was applied
between sending the read and caching the reply: every notice gets a sequence number, the last
``IV`` of each key is remembered (a bounded record: a read older than what the record covers is
not cached), and each source remembers the number of its last ``IV_ALL`` or listener change.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable

_MISSING = object()

# Source states
PROBING = "probing"  # the listener is being opened for the first time: cache nothing
TRACKED = "tracked"  # notices are followed: cache reads, not writes
UNTRACKED = "ttl"  # the server has no tracking: cache reads and writes for the TTL
DOWN = "down"  # the listener was lost: cache nothing until a new one is open
UNSTARTED = -1  # Source.listener_id before the listener is first opened

_IV_RECORD = 65536  # keys whose last notice is remembered
# A hit looks for received notices unless a look started this recently (seconds): a system
# call per hit would triple a hit's cost, and a notice still counts within a millisecond.
DRAIN_EVERY = 0.001


class Source:
    """One server's side of the near cache, as one client's listener sees it."""

    __slots__ = ("name", "state", "listener_id", "changed", "drain", "looked", "__weakref__")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = PROBING
        # the listener's id while TRACKED; None when there is none to track for; UNSTARTED
        # until the client first opens one
        self.listener_id: int | None = UNSTARTED
        # sequence number of this source's last IV_ALL or state change
        self.changed = 0
        # applies the notices this host already received; a hit on a value from this source
        # calls it first (None where notices are applied as they come, as in asyncio)
        self.drain: Callable[[], None] | None = None
        # when the last look that has been applied in full began (time.monotonic)
        self.looked = 0.0

    def __repr__(self) -> str:
        return f"<Source {self.name} {self.state} listener={self.listener_id}>"


class NearCache:
    """Bounded LRU; values are the decoded objects, so treat them as read-only.

    ``ttl`` bounds how long a value is kept from a server without tracking (and a value put with
    :meth:`put`); ``tracked_ttl`` bounds it while the server's notices are followed.
    """

    def __init__(self, max_items: int = 1024, ttl: float = 1.0, tracked_ttl: float = 60.0) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self.max_items = max_items
        self.ttl = ttl
        self.tracked_ttl = tracked_ttl
        self.hits = 0
        self.misses = 0
        self.invalidations = 0  # IV notices applied
        self.flushes = 0  # IV_ALL notices applied
        self.losses = 0  # listener connections lost
        self.refused = 0  # replies not cached: a notice raced the read, or no listener
        self._data: OrderedDict[bytes, tuple[float, Any, Source | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._seq = 0  # number of the last notice or state change applied
        self._iv: OrderedDict[bytes, int] = OrderedDict()  # key -> number of its last IV
        self._floor = 0  # the record holds every IV numbered above this
        self._sources: weakref.WeakSet[Source] = weakref.WeakSet()  # a client's go with it

    # -- lookups and fills ---------------------------------------------------------------------
    def get(self, key: bytes) -> Any:
        """The cached value or the module's ``MISSING`` sentinel."""
        with self._lock:
            entry = self._data.get(key)
            now = time.monotonic()
            if entry is not None and entry[0] <= now:
                del self._data[key]
                entry = None
            if entry is None:
                self.misses += 1
                return _MISSING
            source = entry[2]
            drain = None if source is None or now - source.looked < DRAIN_EVERY else source.drain
            if drain is None:
                self._data.move_to_end(key)
                self.hits += 1
                return entry[1]
        # a notice for the key may be waiting on the listener socket: apply it first
        drain()
        with self._lock:
            if self._data.get(key) is entry:
                self._data.move_to_end(key)
                self.hits += 1
                return entry[1]
            self.misses += 1
            return _MISSING

    def put(self, key: bytes, value: Any, max_age: float | None = None) -> None:
        """Keep ``value`` for ``ttl`` seconds, or ``max_age`` if shorter (<= 0: drop the key)."""
        with self._lock:
            self._store(key, value, self.ttl if max_age is None or max_age > self.ttl else max_age, None)

    def ticket(self) -> int:
        """Taken before a read is sent; :meth:`put_read` needs it to tell which notices came since."""
        return self._seq

    def put_read(self, key: bytes, value: Any, source: Source | None, ticket: int) -> None:
        """Cache a value read from ``source`` with a request sent after ``ticket`` was taken."""
        with self._lock:
            state = UNTRACKED if source is None else source.state
            if state == UNTRACKED:
                self._store(key, value, self.ttl, None)
            elif (
                state == TRACKED
                and ticket >= self._floor
                and source is not None
                and source.changed <= ticket
                and self._iv.get(key, -1) <= ticket
            ):
                self._store(key, value, self.tracked_ttl, source)
            else:
                self._data.pop(key, None)
                self.refused += 1

    def put_written(self, key: bytes, value: Any, source: Source | None, max_age: float | None) -> None:
        """After this client stored ``value``: keep it only where notices are not followed (a
        tracked server registers keys on reads, not writes, so a written value would never be
        invalidated)."""
        if source is None or source.state == UNTRACKED:
            self.put(key, value, max_age)
        else:
            self.discard(key)

    def _store(self, key: bytes, value: Any, age: float, source: Source | None) -> None:
        if age <= 0:
            self._data.pop(key, None)
            return
        self._data[key] = (time.monotonic() + age, value, source)
        self._data.move_to_end(key)
        if len(self._data) > self.max_items:
            self._data.popitem(last=False)

    def discard(self, key: bytes) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        """Drop everything; a reply to a read sent before is not cached either."""
        with self._lock:
            self._data.clear()
            self._seq += 1
            for s in self._sources:
                s.changed = self._seq

    # -- notices and listener changes (from the listener's thread or task) ----------------------
    def add_source(self, name: str) -> Source:
        source = Source(name)
        with self._lock:
            self._sources.add(source)
        return source

    def invalidate(self, key: bytes) -> None:
        """``IV <key>``: the item changed on the server."""
        with self._lock:
            self._seq += 1
            self.invalidations += 1
            iv = self._iv
            iv[key] = self._seq
            iv.move_to_end(key)
            if len(iv) > _IV_RECORD:
                self._floor = iv.popitem(last=False)[1]
            self._data.pop(key, None)

    def invalidate_all(self, source: Source) -> None:
        """``IV_ALL``: drop every value read from ``source``."""
        with self._lock:
            self.flushes += 1
            self._drop_source(source)

    def listening(self, source: Source, listener_id: int) -> None:
        """A new listener is open: data connections must track ``listener_id`` before their reads
        are cached (until then a read's ticket predates this change)."""
        with self._lock:
            self._drop_source(source)
            source.state = TRACKED
            source.listener_id = listener_id

    def untracked(self, source: Source) -> None:
        """The server has no tracking: fall back to the TTL."""
        with self._lock:
            self._drop_source(source)
            source.state = UNTRACKED
            source.listener_id = None

    def lost(self, source: Source) -> None:
        """The listener connection closed or erred: nothing from ``source`` is trusted any more."""
        with self._lock:
            if source.state == TRACKED:
                self.losses += 1
            self._drop_source(source)
            source.state = DOWN
            source.listener_id = None

    def detach(self, source: Source) -> None:
        """The client closed its listener: drop its values; the next use opens a new one."""
        with self._lock:
            self._drop_source(source)
            source.state = PROBING
            source.listener_id = UNSTARTED

    def _drop_source(self, source: Source) -> None:
        self._seq += 1
        source.changed = self._seq
        data = self._data
        for key in [k for k, e in data.items() if e[2] is source]:
            del data[key]

    # -- introspection -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict[str, Any]:
        """Counters; ``servers`` maps each server to ``tracked``, ``ttl`` (no tracking: the TTL
        applies), ``down`` (listener lost, reconnecting) or ``probing``; ``tracked`` is True when
        every server's notices are followed."""
        with self._lock:
            servers = {s.name: s.state for s in self._sources}
        return {
            "hits": self.hits,
            "misses": self.misses,
            "items": len(self._data),
            "invalidations": self.invalidations,
            "flushes": self.flushes,
            "losses": self.losses,
            "refused": self.refused,
            "tracked": bool(servers) and all(st == TRACKED for st in servers.values()),
            "servers": servers,
        }


MISSING: Any = _MISSING
