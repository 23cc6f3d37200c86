"""Every public operation of both clients, written once as a generator of steps (see ``_steps``).

Near cache rule, the same for every operation: a read that reaches the server (``get``,
``get_many``, ``get_or_set``) fills it, unless the server's invalidation notices say it may be
stale (``NearCache.put_read``: the ticket is taken before the read is sent); every write drops
the key before it is sent (from a server without tracking, ``set``, ``add``, ``replace`` and
``cas`` then put the value they stored, for no longer than the item lives); ``flush_all`` clears
it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, TypeVar

from . import _proto as P
from ._base import Key, as_list, one_or_many
from ._base import marker_ttl as marker_ttl_check
from ._core import ClientCore, S
from ._dicts import ITEM_FLAGS, Dictionary, dict_key
from ._steps import Call, Connect, Load, Op, Round, Sleep, operation
from .errors import MemfleetConnectionError, MemfleetServerError
from .near import MISSING
from .remote import RemoteWrite, new_token
from .serde import MissingDictionary

T = TypeVar("T")
BATCH = 512  # keys per server per round trip in multi-key commands
_THIRTY_DAYS = 60 * 60 * 24 * 30
_FETCH_WAIT = 1.0  # seconds a reader waits for another caller's fetch of the same dictionary
NEEDS_DICT = object()  # _get_end's answer when the value's dictionary is not loaded yet


def lock_key(wire: bytes) -> bytes:
    """The text protocol's stand-in for a lease: a key taken with ``add``."""
    k = b"memfleet-lock:" + wire
    if len(k) > P.MAX_KEY:
        k = b"memfleet-lock:" + hashlib.md5(wire).hexdigest().encode()
    return k


def lifetime(ttl: int) -> float | None:
    """Seconds an item stored with memcached TTL ``ttl`` lives; None for ever, <= 0 if already gone."""
    if ttl == 0:
        return None
    if ttl > _THIRTY_DAYS:  # an absolute Unix time
        return ttl - time.time()
    return float(ttl)


class Operations(ClientCore[S]):
    """The operations; :class:`Client` and :class:`AsyncClient` add a driver that runs them."""

    _background: Callable[[Op[Any]], None]  # the driver's: run an operation without waiting for it

    # -- shapes shared by several operations ---------------------------------------------------
    def _on_key(
        self,
        key: Key,
        build: Callable[[bytes, bool], bytes],
        parse: Callable[[bool], P.Parser],
        default: T,
        write: bool,
    ) -> Op[Any]:
        """One request about one key; a ``write`` drops the key from the near cache first."""
        wire, rk = self._cfg.key(key)
        if write and self._near is not None:
            self._near.discard(wire)
        try:
            return (yield Call(self._router.server_for(rk), lambda meta: build(wire, meta), parse))
        except MemfleetConnectionError:
            if self.ignore_errors:
                return default
            raise

    def _fanout(self, groups: dict[S, list[T]], call: Callable[[S, list[T]], Call]) -> Op[list[Any]]:
        """One call per server and batch; a round sends every server's batch before reading replies."""
        batches = {s: [items[i : i + BATCH] for i in range(0, len(items), BATCH)] for s, items in groups.items()}
        results: list[Any] = []
        error: BaseException | None = None
        for r in range(max(len(b) for b in batches.values())):
            outcomes = yield Round([call(s, b[r]) for s, b in batches.items() if r < len(b)])
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    error = outcome
                else:
                    results.append(outcome)
        if error is not None and not (self.ignore_errors and isinstance(error, MemfleetConnectionError)):
            raise error
        return results

    def _each_server(self, request: bytes, parse: Callable[[bool], P.Parser]) -> Op[dict[str, Any]]:
        live = self._router.live
        outcomes = yield Round([Call(s, lambda meta: request, parse) for s in live])
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return {s.address: r for s, r in zip(live, outcomes)}

    # -- reads ---------------------------------------------------------------------------------
    def _get(self, key: Key, default: Any = None) -> Op[Any]:
        """The value of ``key``, or ``default`` on a miss."""
        wire, server, ticket = self._get_start(key)
        if server is None:
            return wire  # a near cache hit
        try:
            r = yield Call(server, lambda meta: P.req_get(wire, meta), P.parse_get)
        except MemfleetConnectionError:
            if self.ignore_errors:
                return default
            raise
        if r is None:
            return default
        value = self._get_end(wire, r[0], r[1], default, server, ticket)
        if value is NEEDS_DICT:
            value = yield from self._get_fetching(wire, r[0], r[1], default, server, ticket)
        return value

    # get and set in two halves around their one request, so that the blocking client's fast
    # path (Client.get, Client.set) shares everything but the I/O with the generator
    def _get_start(self, key: Key) -> tuple[Any, S | None, int]:
        """(wire key, its server, near cache ticket), or (the near cache's value, None, 0)."""
        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            v = near.get(wire)
            if v is not MISSING:
                return v, None, 0
            return wire, self._router.server_for(rk), near.ticket()
        return wire, self._router.server_for(rk), 0

    def _get_end(self, wire: bytes, data: bytes | None, flags: int, default: Any, server: S, ticket: int) -> Any:
        """The decoded value, or NEEDS_DICT: then finish with :meth:`_get_fetching`."""
        if data is None:
            return default
        try:
            value = self._serde.decode(data, flags)
        except MissingDictionary:
            return NEEDS_DICT
        if self._near is not None:
            self._near.put_read(wire, value, server.source, ticket)
        return value

    def _get_fetching(self, wire: bytes, data: bytes, flags: int, default: Any, server: S, ticket: int) -> Op[Any]:
        value = yield from self._decode(data, flags, MISSING)
        if value is MISSING:
            return default
        if self._near is not None:
            self._near.put_read(wire, value, server.source, ticket)
        return value

    get = operation(_get)

    def _gets(self, key: Key) -> Op[tuple[Any, int | None]]:
        """(value, cas token), or (None, None) on a miss."""
        r = yield from self._on_key(key, lambda kb, meta: P.req_get(kb, meta, cas=True), P.parse_get, None, False)
        if r is None:
            return None, None
        value = yield from self._decode(r[0], r[1], MISSING)
        return (None, None) if value is MISSING else (value, r[2])

    gets = operation(_gets)

    def _get_many(self, keys: Iterable[Key]) -> Op[dict[Key, Any]]:
        """Values of the keys that exist. Requests go to every server before any reply is read."""
        near = self._near
        out: dict[Key, Any] = {}
        ticket = 0 if near is None else near.ticket()
        keys = as_list(keys)
        key = self._cfg.key
        pairs = [key(k) for k in keys]
        if near is not None:
            missed: list[Key] = []
            missed_pairs: list[tuple[bytes, bytes]] = []
            for k, pair in zip(keys, pairs):
                v = near.get(pair[0])
                if v is MISSING:
                    missed.append(k)
                    missed_pairs.append(pair)
                else:
                    out[k] = v
            keys, pairs = missed, missed_pairs
        if not pairs:
            return out
        wires = [w for w, _ in pairs]
        by_wire = dict(zip(wires, keys))
        groups = self._router.group([rk for _, rk in pairs], wires)
        raw = yield from self._fanout(
            groups, lambda s, batch: Call(s, lambda meta: P.req_get_many(batch, meta), P.parse_get_many)
        )
        # the server of a value, for the near cache: where its key was sent
        server_of = {w: s for s, batch in groups.items() for w in batch} if near is not None else {}
        decode = self._serde.decode
        later: list[tuple[Key, bytes, bytes, int]] = []  # values whose dictionary is not loaded yet
        for res in raw:
            for wire, (data, flags) in res.items():
                orig = by_wire.get(wire)
                if orig is None:
                    continue
                try:
                    value = decode(data, flags)
                except MissingDictionary:
                    later.append((orig, wire, data, flags))
                    continue
                out[orig] = value
                if near is not None:
                    near.put_read(wire, value, server_of[wire].source, ticket)
        if later and not server_of:
            server_of = {w: s for s, batch in groups.items() for w in batch}
        for orig, wire, data, flags in later:
            value = yield from self._get_fetching(wire, data, flags, MISSING, server_of[wire], ticket)
            if value is not MISSING:
                out[orig] = value
        return out

    get_many = operation(_get_many)

    # -- writes --------------------------------------------------------------------------------
    def _store(self, cmd: bytes, key: Key, value: Any, ttl: int, cas: int = 0, near: bool = True) -> Op[bool]:
        """One store; ``near=False`` leaves the value out of the near cache."""
        wire, server, data, flags = self._store_start(key, value, ttl)
        try:
            ok: bool = yield Call(
                server, lambda meta: P.store_head(cmd, wire, len(data), flags, ttl, meta, cas), P.parse_store, data
            )
        except MemfleetConnectionError:
            if self.ignore_errors:
                return False
            raise
        return self._store_end(wire, value, ttl, ok, server) if near else ok

    def _store_start(self, key: Key, value: Any, ttl: int) -> tuple[bytes, S, bytes, int]:
        """(wire key, server, encoded value, flags); the key leaves the near cache."""
        wire, rk = self._cfg.key(key)
        data, flags = self._encode(rk, value, ttl)
        if self._near is not None:
            self._near.discard(wire)
        return wire, self._router.server_for(rk), data, flags

    def _store_end(self, wire: bytes, value: Any, ttl: int, ok: bool, server: S) -> bool:
        if ok and self._near is not None:
            self._near.put_written(wire, value, server.source, lifetime(ttl))
        return ok

    def _set(self, key: Key, value: Any, ttl: int = 0) -> Op[bool]:
        """Store ``value``; ``ttl`` in seconds (0 = never expires)."""
        return (yield from self._store(b"set", key, value, ttl))

    set = operation(_set)

    def _add(self, key: Key, value: Any, ttl: int = 0) -> Op[bool]:
        """Store only if the key does not exist."""
        return (yield from self._store(b"add", key, value, ttl))

    add = operation(_add)

    def _replace(self, key: Key, value: Any, ttl: int = 0) -> Op[bool]:
        """Store only if the key exists."""
        return (yield from self._store(b"replace", key, value, ttl))

    replace = operation(_replace)

    def _cas(self, key: Key, value: Any, cas: int, ttl: int = 0) -> Op[bool]:
        """Store only if the item's cas token is still ``cas`` (from :meth:`gets`)."""
        return (yield from self._store(b"cas", key, value, ttl, cas))

    cas = operation(_cas)

    def _store_raw(self, cmd: bytes, key: Key, value: bytes | str) -> Op[bool]:
        raw = value.encode("utf-8") if isinstance(value, str) else value

        def build(kb: bytes, meta: bool) -> bytes:
            return P.req_store(cmd, kb, raw, 0, 0, meta)

        return bool((yield from self._on_key(key, build, P.parse_store, False, True)))

    def _append(self, key: Key, value: bytes | str) -> Op[bool]:
        """Append raw bytes (or UTF-8 text) to an existing uncompressed value."""
        return (yield from self._store_raw(b"append", key, value))

    append = operation(_append)

    def _prepend(self, key: Key, value: bytes | str) -> Op[bool]:
        """Prepend raw bytes (or UTF-8 text) to an existing uncompressed value."""
        return (yield from self._store_raw(b"prepend", key, value))

    prepend = operation(_prepend)

    def _set_many(self, mapping: Mapping[Key, Any], ttl: int = 0) -> Op[list[Key]]:
        """Store several values, pipelined per server; returns the keys that failed."""
        cfg = self._cfg
        encode = self._encode
        near = self._near
        groups: dict[S, list[tuple[bytes, bytes, int]]] = {}
        by_wire: dict[bytes, Key] = {}
        for key, value in mapping.items():
            wire, rk = cfg.key(key)
            data, flags = encode(rk, value, ttl)
            by_wire[wire] = key
            if near is not None:
                near.discard(wire)
            groups.setdefault(self._router.server_for(rk), []).append((wire, data, flags))
        if not groups:
            return []
        try:
            raw = yield from self._fanout(
                groups,
                lambda s, batch: Call(
                    s,
                    lambda meta: P.req_set_many(batch, ttl, meta),
                    lambda meta: P.parse_set_many(meta, [b[0] for b in batch]),
                ),
            )
        except MemfleetConnectionError:
            if self.ignore_errors:
                return list(mapping)
            raise
        return [by_wire[w] for res in raw for w in res if w in by_wire]

    set_many = operation(_set_many)

    def _delete(self, key: Key) -> Op[bool]:
        """Remove ``key``; True if it existed."""
        return bool((yield from self._on_key(key, P.req_delete, P.parse_delete, False, True)))

    delete = operation(_delete)

    def _delete_many(self, keys: Iterable[Key]) -> Op[int]:
        """Remove several keys, pipelined per server; returns how many existed."""
        groups: dict[S, list[bytes]] = {}
        for key in as_list(keys):
            wire, rk = self._cfg.key(key)
            if self._near is not None:
                self._near.discard(wire)
            groups.setdefault(self._router.server_for(rk), []).append(wire)
        if not groups:
            return 0
        try:
            raw = yield from self._fanout(
                groups,
                lambda s, batch: Call(
                    s, lambda meta: P.req_delete_many(batch, meta), lambda meta: P.parse_delete_many(meta, len(batch))
                ),
            )
        except MemfleetConnectionError:
            if self.ignore_errors:
                return 0
            raise
        return sum(raw)

    delete_many = operation(_delete_many)

    def _arith(self, key: Key, delta: int, decr: bool, initial: int | None, ttl: int) -> Op[int | None]:
        if delta < 0:
            raise ValueError("delta must be >= 0")
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        server = self._router.server_for(rk)
        try:
            r: int | None = yield Call(
                server, lambda meta: P.req_arith(wire, delta, decr, initial, ttl, meta), P.parse_arith
            )
            if r is None and initial is not None and server.meta is False:
                # text protocol has no auto-vivify: add the initial value, or retry if someone else did
                if (yield from self._store(b"add", key, initial, ttl)):
                    return initial
                r = yield Call(server, lambda meta: P.req_arith(wire, delta, decr, None, ttl, meta), P.parse_arith)
            return r
        except MemfleetConnectionError:
            if self.ignore_errors:
                return None
            raise

    def _incr(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> Op[int | None]:
        """Add ``delta``; returns the new value, or None if the key is missing and no ``initial``."""
        return (yield from self._arith(key, delta, False, initial, ttl))

    incr = operation(_incr)

    def _decr(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> Op[int | None]:
        """Subtract ``delta`` (memcached stops at 0)."""
        return (yield from self._arith(key, delta, True, initial, ttl))

    decr = operation(_decr)

    def _touch(self, key: Key, ttl: int) -> Op[bool]:
        """Update the TTL; True if the key exists."""
        r = yield from self._on_key(key, lambda kb, meta: P.req_touch(kb, ttl, meta), P.parse_touch, False, True)
        return bool(r)

    touch = operation(_touch)

    # -- stampede protection -------------------------------------------------------------------
    def _invalidate(self, key: Key, stale_ttl: int | None = None) -> Op[bool]:
        """Mark ``key`` stale (meta ``md <key> I``) instead of deleting it.

        The next :meth:`get_or_set` wins the right to reload it while other callers keep getting
        the stale value. ``stale_ttl`` limits how long the stale item lives. On a text-protocol
        server this deletes the key.
        """
        r = yield from self._on_key(
            key,
            lambda kb, meta: P.req_invalidate(kb, stale_ttl) if meta else P.req_delete(kb, meta),
            P.parse_delete,
            False,
            True,
        )
        return bool(r)

    invalidate = operation(_invalidate)

    def _get_or_set(
        self,
        key: Key,
        loader: Callable[[], Any],
        ttl: int = 0,
        *,
        lock_ttl: int = 30,
        recache_before: int = 0,
        wait_timeout: float = 10.0,
        poll_interval: float = 0.02,
        master_loader: Callable[[], Any] | None = None,
    ) -> Op[Any]:
        """The cached value, or ``loader()`` stored with ``ttl``; one caller loads per miss.

        Uses meta get ``N`` (vivify on miss, win flag ``W``), ``R`` (win a recache
        ``recache_before`` seconds before expiry), ``X`` (stale after :meth:`invalidate`) and
        ``Z`` (someone else won). Losers return the stale value when there is one, else wait
        ``poll_interval`` and retry; after ``wait_timeout`` they run the loader themselves.
        On a text-protocol server an ``add``-based lock key stands in for the lease. The
        asyncio client also accepts an ``async`` loader.

        With ``master_loader``, a caller about to load first looks for the key's remote marker
        (see ``remote_write``): if it is there, ``master_loader()`` runs instead of ``loader()``.
        Its value is stored only over the lease this caller won (meta protocol), and never kept
        in the near cache.
        """
        return (
            yield from self._get_or_set_from(
                None, key, loader, ttl, lock_ttl, recache_before, wait_timeout, poll_interval, master_loader
            )
        )

    get_or_set = operation(_get_or_set)

    def _get_or_set_from(
        self,
        lease0: P.Lease | None,
        key: Key,
        loader: Callable[[], Any],
        ttl: int,
        lock_ttl: int,
        recache_before: int,
        wait_timeout: float,
        poll_interval: float,
        master_loader: Callable[[], Any] | None,
    ) -> Op[Any]:
        """:meth:`_get_or_set` given the answer to its first lease get, if one was sent already."""
        wire, rk = self._cfg.key(key)
        marker = None if master_loader is None else self._marker(key)
        # with the marker on the key's server: the lease get and the marker's, in one request
        both = b""
        if marker is not None:
            both = P.req_lease_get(wire, lock_ttl, recache_before) + P.req_exists(marker[0], True)
        near = self._near
        if near is not None:
            v = near.get(wire)
            if v is not MISSING:
                return v
        deadline = time.monotonic() + wait_timeout
        delay = poll_interval
        missing = object()
        while True:
            server = self._router.server_for(rk)
            if server.meta is None:
                yield Connect(server)  # learn the protocol first: leases need meta
            if not server.meta:
                value = yield from self._get(key, missing)
                if value is not missing:
                    return value
                won, value = yield from self._load_locked(key, wire, loader, ttl, lock_ttl, marker, master_loader)
                if won:
                    return value
            else:
                ticket = 0 if near is None else near.ticket()
                marked: bool | None = None  # the marker, once looked at
                lease: P.Lease
                if lease0 is not None:
                    lease, lease0 = lease0, None
                elif marker is not None and self._router.server_for(marker[1]) is server:
                    # the marker is read after the lease is taken: a marker set before sees this
                    # load go to the master, one set after comes with a delete that kills the fill
                    lease, marked = yield Call(server, lambda meta: both, P.parse_lease_exists)
                else:
                    lease = yield Call(
                        server, lambda meta: P.req_lease_get(wire, lock_ttl, recache_before), P.parse_lease
                    )
                if lease.win:
                    try:
                        if marker is not None and marked is None:
                            marked = yield from self._marked(marker)
                        value = yield Load(master_loader if marked and master_loader is not None else loader)
                    except BaseException:
                        if not lease.hit:
                            # release the stub so the next caller can win
                            yield Call(server, lambda meta: P.req_delete(wire, meta), P.parse_delete)
                        raise
                    # Fill only over the item we won: if it was deleted meanwhile (a write
                    # invalidated the row), the value loaded may predate that write. The same
                    # rule makes the master's value safe to store: the delete that comes once
                    # the local replica has the write removes it, or makes this cas fail.
                    if lease.cas:
                        yield from self._store(b"cas", key, value, ttl, lease.cas, near=not marked)
                    elif not marked:
                        yield from self._store(b"set", key, value, ttl)
                    return value
                if lease.hit:
                    value = yield from self._decode(lease.data, lease.flags, MISSING)
                    if value is MISSING:
                        # unreadable for good (its dictionary is gone): drop it, and win the reload
                        yield Call(server, lambda meta: P.req_delete(wire, meta), P.parse_delete)
                        continue
                    if near is not None and not lease.stale:
                        near.put_read(wire, value, server.source, ticket)
                    return value
            if time.monotonic() >= deadline:
                # No lease to store under: a plain set could land after the delete of a write
                # made meanwhile and keep the old row cached, so the value is only returned.
                if marker is not None and master_loader is not None and (yield from self._marked(marker)):
                    return (yield Load(master_loader))
                return (yield Load(loader))
            yield Sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _load_locked(
        self,
        key: Key,
        wire: bytes,
        loader: Callable[[], Any],
        ttl: int,
        lock_ttl: int,
        marker: tuple[bytes, bytes] | None = None,
        master_loader: Callable[[], Any] | None = None,
    ) -> Op[tuple[bool, Any]]:
        """Text protocol's stand-in for a lease: load only if ``add`` takes the lock key."""
        lk = lock_key(wire)
        lock_server = self._router.server_for(lk)
        if not (yield Call(lock_server, lambda meta: P.req_store(b"add", lk, b"1", 0, lock_ttl, meta), P.parse_store)):
            return False, None
        try:
            # A loader that held the lock until just now stored its value before releasing
            # the lock: read once more, or this caller would load the same miss again.
            missing = object()
            value = yield from self._get(key, missing)
            if value is not missing:
                return True, value
            if marker is not None and master_loader is not None and (yield from self._marked(marker)):
                # without a lease a plain set could land after the delete of a later write:
                # the master's value is returned, not stored
                return True, (yield Load(master_loader))
            value = yield Load(loader)
            yield from self._store(b"set", key, value, ttl)
            return True, value
        finally:
            yield Call(lock_server, lambda meta: P.req_delete(lk, meta), P.parse_delete)

    # -- writes from a replica region (remote markers) -------------------------------------------
    def _marker(self, key: Key) -> tuple[bytes, bytes]:
        """(wire key, routing key) of ``key``'s remote marker: placed as any key is, hashed
        without the client's key_prefix."""
        wire, rk = self._cfg.key(key)
        mwire = self._rm_prefix + wire
        if len(mwire) > P.MAX_KEY:
            raise ValueError(
                f"key {key!r}: its remote marker would be {len(mwire)} bytes, over memcached's {P.MAX_KEY}"
            )
        return mwire, self._rm_prefix + rk

    def _marked(self, marker: tuple[bytes, bytes]) -> Op[bool]:
        """Is the remote marker there? (Its server is looked up now: servers may have been
        ejected since the marker's key was made.)"""
        mwire = marker[0]
        server = self._router.server_for(marker[1])
        return bool((yield Call(server, lambda meta: P.req_exists(mwire, meta), P.parse_exists)))

    def _set_remote_markers(
        self, keys: Key | Iterable[Key], marker_ttl: int | None = None, token: str | None = None
    ) -> Op[list[Key]]:
        """Set the remote marker of each key (one pipeline per server) for ``marker_ttl`` seconds
        (default: the client's ``remote_marker_ttl``); returns the keys whose marker was **not**
        set. The keys leave the near cache. Call it before writing to the master database, and
        ``delete_many(keys)`` after; ``remote_write`` does both. With ``token``, the marker holds
        it beside the tokens of other writes in flight (``" <token> <token>..."``, appended) and
        its TTL starts again; without, the marker is set to ``1``."""
        ttl = self._rm_ttl if marker_ttl is None else marker_ttl_check(marker_ttl)
        value = b"1" if token is None else token.encode()
        if not value or len(value) > 64 or not value.isascii() or any(c <= 32 or c == 127 for c in value):
            raise ValueError(f"a marker token must be 1 to 64 printable ASCII bytes without spaces, not {token!r}")
        near = self._near
        groups: dict[S, list[tuple[bytes, bytes, int]]] = {}
        key_of: dict[bytes, Key] = {}
        for key in one_or_many(keys):
            mwire, mrk = self._marker(key)
            server = self._router.server_for(mrk)
            if near is not None:
                near.discard(self._cfg.key(key)[0])
            key_of[mwire] = key
            groups.setdefault(server, []).append((mwire, value, 0))
        if not groups:
            return []

        def call(server: S, batch: list[tuple[bytes, bytes, int]]) -> Call:
            if token is not None:
                kbs = [m[0] for m in batch]
                return Call(
                    server,
                    lambda meta: P.req_add_token_many(kbs, value, ttl, meta),
                    lambda meta: P.parse_add_token_many(meta, kbs),
                )
            return Call(
                server,
                lambda meta: P.req_set_many(batch, ttl, meta),
                lambda meta: P.parse_set_many(meta, [m[0] for m in batch]),
            )

        # as _fanout, but every marker sent to a server that did not answer counts as not set
        batches = {s: [items[i : i + BATCH] for i in range(0, len(items), BATCH)] for s, items in groups.items()}
        unset: list[Key] = []
        error: BaseException | None = None
        for r in range(max(len(b) for b in batches.values())):
            sent = [(s, b[r]) for s, b in batches.items() if r < len(b)]
            outcomes = yield Round([call(s, batch) for s, batch in sent])
            for (_, batch), outcome in zip(sent, outcomes):
                if isinstance(outcome, BaseException):
                    if not (self.ignore_errors and isinstance(outcome, MemfleetConnectionError)):
                        error = outcome
                    unset.extend(key_of[m[0]] for m in batch)
                else:
                    unset.extend(key_of[w] for w in outcome)
        if error is not None:
            raise error
        return unset

    set_remote_markers = operation(_set_remote_markers)

    def _set_remote_marker(self, key: Key, marker_ttl: int | None = None, token: str | None = None) -> Op[bool]:
        """``set_remote_markers`` for one key: True if its marker was set."""
        return not (yield from self._set_remote_markers([key], marker_ttl, token))

    set_remote_marker = operation(_set_remote_marker)

    def _begin_remote_write(self, keys: list[Key], marker_ttl: int | None) -> Op[RemoteWrite]:
        """``remote_write``'s markers, each holding a new token: one not set is an error, unless
        ``ignore_errors``."""
        token = new_token()
        unset = yield from self._set_remote_markers(keys, marker_ttl, token)
        if unset:
            # A marker that came or went between the append and the add: once more.
            unset = yield from self._set_remote_markers(unset, marker_ttl, token)
        if unset and not self.ignore_errors:
            raise MemfleetServerError(f"remote markers not set for {unset!r}, so the block did not run")
        wire = tuple(self._cfg.key(k)[0].decode("utf-8", "surrogateescape") for k in keys)
        return RemoteWrite(wire, token)

    # -- servers -------------------------------------------------------------------------------
    def _flush_all(self) -> Op[bool]:
        """Invalidate every item on every live server."""
        if self._near is not None:
            self._near.clear()
        return all((yield from self._each_server(b"flush_all\r\n", P.parse_ok)).values())

    flush_all = operation(_flush_all)

    def _version(self) -> Op[dict[str, str]]:
        """Each live server's version."""
        return (yield from self._each_server(b"version\r\n", P.parse_version))

    version = operation(_version)

    def _stats(self) -> Op[dict[str, dict[str, str]]]:
        """Each live server's general statistics."""
        return (yield from self._each_server(b"stats\r\n", P.parse_stats))

    stats = operation(_stats)

    # -- managed dictionaries (see _dicts) -------------------------------------------------------
    def _decode(self, data: bytes, flags: int, miss: Any) -> Op[Any]:
        """Decode a value, fetching its dictionary first if this client has not loaded it; a value
        whose dictionary is on no server reads as ``miss``."""
        try:
            return self._serde.decode(data, flags)
        except MissingDictionary as exc:
            dict_id = exc.dict_id
        yield from self._fetch_dict(dict_id)
        try:
            return self._serde.decode(data, flags)
        except MissingDictionary:
            self._dicts.unreadable(dict_id)
            return miss

    def _fetch_dict(self, dict_id: int) -> Op[None]:
        """Load dictionary ``dict_id`` from the first server that has it intact (one fetch at a
        time per dictionary; other callers wait for it)."""
        dicts = self._dicts
        deadline = time.monotonic() + _FETCH_WAIT
        while dict_id in dicts.fetching and time.monotonic() < deadline:
            yield Sleep(0.002)
        if not dicts.wanted(dict_id):
            return
        dicts.fetching.add(dict_id)
        try:
            key = dict_key(dict_id)
            outcomes = yield Round([Call(s, lambda meta: P.req_get(key, meta), P.parse_get) for s in self._router.live])
            if not any(isinstance(o, tuple) and dicts.fetched(dict_id, o[0]) for o in outcomes):
                dicts.not_found(dict_id)
        finally:
            dicts.fetching.discard(dict_id)

    def _start_dict_op(self, d: Dictionary, publish: bool) -> None:
        self._background(self._publish_dict(d) if publish else self._refresh_dict(d))

    def _publish_dict(self, d: Dictionary) -> Op[None]:
        """Store ``d`` with ``add`` on every live server, then start using it. A server that already
        has a different dictionary under that id makes it take a new id."""
        dicts = self._dicts
        try:
            for _attempt in range(3):
                ttl = dicts.item_ttl(d)
                outcome = yield from self._add_dict(d, ttl)
                if outcome is None:
                    d = d.renumbered()
                elif outcome:
                    dicts.published(d, ttl)
                    return
                else:
                    break
        except MemfleetConnectionError:
            pass
        dicts.publish_failed(d)

    def _add_dict(self, d: Dictionary, ttl: int) -> Op[bool | None]:
        """One attempt: True if some server now holds ``d``, False if none answered, None if a
        server holds another dictionary under its id (then ``d`` is removed where it was added)."""
        live = self._router.live
        outcomes = yield Round(self._dict_adds(live, d, ttl))
        key = d.key
        for s, o in zip(live, outcomes):
            if o is False:
                r = yield Call(s, lambda meta: P.req_get(key, meta), P.parse_get)
                if r is not None and r[0] != d.payload:
                    yield Round(
                        [
                            Call(s, lambda meta: P.req_delete(key, meta), P.parse_delete)
                            for s, o in zip(live, outcomes)
                            if o is True
                        ]
                    )
                    return None
        return any(o is True or o is False for o in outcomes)

    @staticmethod
    def _dict_adds(servers: list[S], d: Dictionary, ttl: int) -> list[Call]:
        key, payload = d.key, d.payload
        return [
            Call(s, lambda meta: P.store_head(b"add", key, len(payload), ITEM_FLAGS, ttl, meta), P.parse_store, payload)
            for s in servers
        ]

    @staticmethod
    def _dict_touches(servers: list[S], key: bytes, ttl: int) -> list[Call]:
        return [Call(s, lambda meta: P.req_touch(key, ttl, meta), P.parse_touch) for s in servers]

    def _refresh_dict(self, d: Dictionary) -> Op[None]:
        """Touch ``d`` on every live server so it outlives the values written with it; put it back
        where it was evicted; if no server has it any more, its family retrains. Values written
        meanwhile that live longer make it go round again."""
        dicts = self._dicts
        try:
            while True:
                ttl = dicts.item_ttl(d)
                live = self._router.live
                outcomes = yield Round(self._dict_touches(live, d.key, ttl))
                gone = [s for s, o in zip(live, outcomes) if o is False]
                if gone and not any(o is True for o in outcomes):
                    dicts.lost(d)
                    return
                if gone:
                    yield Round(self._dict_adds(gone, d, ttl))
                dicts.covered(d, ttl)
                if d.need_until <= d.covered_until:
                    return
        finally:
            d.refreshing = False
