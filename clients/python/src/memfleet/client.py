"""The blocking client."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, TypeVar

from . import _proto as P
from ._base import Key, as_list
from ._conn import Connection, Server
from ._core import ClientCore
from .errors import MemfleetConnectionError, MemfleetError, MemfleetServerError
from .near import MISSING

T = TypeVar("T")
_BATCH = 512  # keys per server per round trip in multi-key commands


def _drive(conn: Connection, gen: Any) -> Any:
    """Run a sans-I/O parser against a blocking connection."""
    try:
        need = next(gen)
        while True:
            need = gen.send(conn.readline() if need < 0 else conn.read_value(need))
    except StopIteration as stop:
        return stop.value


def lock_key(wire: bytes) -> bytes:
    k = b"memfleet-lock:" + wire
    if len(k) > P.MAX_KEY:
        k = b"memfleet-lock:" + hashlib.md5(wire).hexdigest().encode()
    return k


class Client(ClientCore[Server]):
    """memcached client with libmemcached-compatible weighted ketama.

    ``servers`` is a list of ``"host:port"``, ``"host:port:weight"``, ``(host, port)`` or
    ``(host, port, weight)``. All methods are thread-safe; each server has a pool of connections.
    """

    _server_type = Server

    # -- plumbing ------------------------------------------------------------------------------

    def close(self) -> None:
        for s in self._router.servers:
            s.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _acquire(self, server: Server) -> Connection:
        try:
            return server.acquire()
        except OSError as exc:
            self._router.failed(server)
            raise MemfleetConnectionError(f"{server.address}: {exc}") from exc

    def _call(self, server: Server, build: Callable[[bool], bytes], parse: Callable[[bool], Any]) -> Any:
        conn = self._acquire(server)
        try:
            conn.send(build(conn.meta))
            result = _drive(conn, parse(conn.meta))
        except MemfleetServerError:
            conn.close()
            raise
        except OSError as exc:
            conn.close()
            self._router.failed(server)
            raise MemfleetConnectionError(f"{server.address}: {exc}") from exc
        server.release(conn)
        if server.failures:
            server.failures = 0
        return result

    def _on_key(self, key: Key, build: Callable[[bytes, bool], bytes], parse: Callable[[bool], Any]) -> Any:
        wire, rk = self._cfg.key(key)
        server = self._router.server_for(rk)
        return self._call(server, lambda meta: build(wire, meta), parse)

    def _failed(self, default: T) -> T:
        if self.ignore_errors:
            return default
        raise

    # -- reads ---------------------------------------------------------------------------------
    def get(self, key: Key, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` on a miss."""
        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            v = near.get(wire)
            if v is not MISSING:
                return v
        server = self._router.server_for(rk)
        try:
            conn = self._acquire(server)
            try:
                if conn.meta:
                    conn.sock.sendall(b"mg " + wire + b" f v\r\n")
                    line = conn.readline()
                    if line[:3] == b"VA ":
                        parts = line.split()
                        data = conn.read_value(int(parts[1]))
                        flags = int(parts[2][1:]) if len(parts) > 2 else 0
                    elif line == b"EN":
                        data = None
                        flags = 0
                    else:
                        raise P.raise_for(line)
                else:
                    conn.sock.sendall(b"get " + wire + b"\r\n")
                    r = _drive(conn, P.parse_get(False))
                    data, flags = (None, 0) if r is None else (r[0], r[1])
            except MemfleetServerError:
                conn.close()
                raise
            except OSError as exc:
                conn.close()
                self._router.failed(server)
                raise MemfleetConnectionError(f"{server.address}: {exc}") from exc
            server.release(conn)
            if server.failures:
                server.failures = 0
        except MemfleetConnectionError:
            return self._failed(default)
        if data is None:
            return default
        value = self._serde.decode(data, flags)
        if near is not None:
            near.put(wire, value)
        return value

    def gets(self, key: Key) -> tuple[Any, int | None]:
        """(value, cas token), or (None, None) on a miss."""
        try:
            r = self._on_key(key, lambda kb, meta: P.req_get(kb, meta, cas=True), P.parse_get)
        except MemfleetConnectionError:
            return self._failed((None, None))
        if r is None:
            return None, None
        return self._serde.decode(r[0], r[1]), r[2]

    def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        """Values of the keys that exist. Requests go to every server before any reply is read."""
        cfg = self._cfg
        near = self._near
        out: dict[Key, Any] = {}
        by_wire: dict[bytes, Key] = {}
        groups: dict[Server, list[bytes]] = {}
        route = self._router.server_for
        for key in as_list(keys):
            wire, rk = cfg.key(key)
            if near is not None:
                v = near.get(wire)
                if v is not MISSING:
                    out[key] = v
                    continue
            by_wire[wire] = key
            server = route(rk)
            g = groups.get(server)
            if g is None:
                groups[server] = [wire]
            else:
                g.append(wire)
        if not groups:
            return out
        raw = self._fanout(
            {s: [w[i : i + _BATCH] for i in range(0, len(w), _BATCH)] for s, w in groups.items()},
            P.req_get_many,
            lambda meta, batch: P.parse_get_many(meta),
            lambda conn, batch: conn.read_meta_multiget() if conn.meta else _drive(conn, P.parse_get_many(False)),
        )
        decode = self._serde.decode
        for res in raw:
            for wire, (data, flags) in res.items():
                orig = by_wire.get(wire)
                if orig is None:
                    continue
                value = decode(data, flags)
                out[orig] = value
                if near is not None:
                    near.put(wire, value)
        return out

    def _fanout(
        self,
        batches: dict[Server, list[list[Any]]],
        build: Callable[[list[Any], bool], bytes],
        parse: Callable[[bool, list[Any]], Any],
        read: Callable[[Connection, list[Any]], Any] | None = None,
    ) -> list[Any]:
        """Send one batch to every server, then read every reply; repeat while batches remain.

        ``read(conn, batch)`` reads a reply directly; otherwise the sans-I/O ``parse`` is driven.
        """
        results: list[Any] = []
        error: Exception | None = None
        rounds = max(len(b) for b in batches.values())
        for r in range(rounds):
            pending: list[tuple[Server, Connection, list[Any]]] = []
            for server, server_batches in batches.items():
                if r >= len(server_batches):
                    continue
                batch = server_batches[r]
                try:
                    conn = self._acquire(server)
                except MemfleetConnectionError as exc:
                    error = exc
                    continue
                try:
                    conn.send(build(batch, conn.meta))
                except OSError as exc:
                    conn.close()
                    self._router.failed(server)
                    error = MemfleetConnectionError(f"{server.address}: {exc}")
                    continue
                pending.append((server, conn, batch))
            for server, conn, batch in pending:
                try:
                    if read is not None:
                        results.append(read(conn, batch))
                    else:
                        results.append(_drive(conn, parse(conn.meta, batch)))
                except MemfleetServerError as exc:
                    conn.close()
                    error = exc
                    continue
                except OSError as exc:
                    conn.close()
                    self._router.failed(server)
                    error = MemfleetConnectionError(f"{server.address}: {exc}")
                    continue
                server.release(conn)
                server.failures = 0
        if error is not None and not (self.ignore_errors and isinstance(error, MemfleetConnectionError)):
            raise error
        return results

    # -- writes --------------------------------------------------------------------------------
    def _store(self, cmd: bytes, key: Key, value: Any, ttl: int, cas: int = 0) -> bool:
        data, flags = self._serde.encode(value)
        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            near.discard(wire)
        server = self._router.server_for(rk)
        try:
            conn = self._acquire(server)
            try:
                conn.send_value(P.store_head(cmd, wire, len(data), flags, ttl, conn.meta, cas), data)
                line = conn.readline()
            except OSError as exc:
                conn.close()
                self._router.failed(server)
                raise MemfleetConnectionError(f"{server.address}: {exc}") from exc
        except MemfleetConnectionError:
            return self._failed(False)
        ok = P.STORED.get(line)
        if ok is None:
            conn.close()
            raise P.raise_for(line)
        server.release(conn)
        if server.failures:
            server.failures = 0
        if ok and near is not None and cmd != b"append" and cmd != b"prepend":
            near.put(wire, value)
        return ok

    def set(self, key: Key, value: Any, ttl: int = 0) -> bool:
        """Store ``value``; ``ttl`` in seconds (0 = never expires)."""
        return self._store(b"set", key, value, ttl)

    def add(self, key: Key, value: Any, ttl: int = 0) -> bool:
        """Store only if the key does not exist."""
        return self._store(b"add", key, value, ttl)

    def replace(self, key: Key, value: Any, ttl: int = 0) -> bool:
        """Store only if the key exists."""
        return self._store(b"replace", key, value, ttl)

    def append(self, key: Key, value: bytes | str) -> bool:
        """Append raw bytes (or UTF-8 text) to an existing uncompressed value."""
        raw = value.encode("utf-8") if isinstance(value, str) else value
        return self._store_raw(b"append", key, raw)

    def prepend(self, key: Key, value: bytes | str) -> bool:
        raw = value.encode("utf-8") if isinstance(value, str) else value
        return self._store_raw(b"prepend", key, raw)

    def _store_raw(self, cmd: bytes, key: Key, raw: bytes) -> bool:
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        try:
            return bool(
                self._call(
                    self._router.server_for(rk),
                    lambda meta: P.req_store(cmd, wire, raw, 0, 0, meta),
                    P.parse_store,
                )
            )
        except MemfleetConnectionError:
            return self._failed(False)

    def cas(self, key: Key, value: Any, cas: int, ttl: int = 0) -> bool:
        """Store only if the item's cas token is still ``cas`` (from :meth:`gets`)."""
        return self._store(b"cas", key, value, ttl, cas)

    def set_many(self, mapping: Mapping[Key, Any], ttl: int = 0) -> list[Key]:
        """Store several values, pipelined per server; returns the keys that failed."""
        cfg = self._cfg
        encode = self._serde.encode
        near = self._near
        groups: dict[Server, list[tuple[bytes, bytes, int]]] = {}
        by_wire: dict[bytes, Key] = {}
        for key, value in mapping.items():
            wire, rk = cfg.key(key)
            data, flags = encode(value)
            by_wire[wire] = key
            if near is not None:
                near.discard(wire)
            groups.setdefault(self._router.server_for(rk), []).append((wire, data, flags))
        if not groups:
            return []
        try:
            raw = self._fanout(
                {s: [v[i : i + _BATCH] for i in range(0, len(v), _BATCH)] for s, v in groups.items()},
                lambda batch, meta: P.req_set_many(batch, ttl, meta),
                lambda meta, batch: P.parse_set_many(meta, [b[0] for b in batch]),
            )
        except MemfleetConnectionError:
            return self._failed(list(mapping))
        failed = [by_wire[w] for res in raw for w in res if w in by_wire]
        return failed

    def delete(self, key: Key) -> bool:
        """Remove ``key``; True if it existed."""
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        try:
            return bool(self._call(self._router.server_for(rk), lambda meta: P.req_delete(wire, meta), P.parse_delete))
        except MemfleetConnectionError:
            return self._failed(False)

    def delete_many(self, keys: Iterable[Key]) -> int:
        """Remove several keys, pipelined per server; returns how many existed."""
        groups: dict[Server, list[bytes]] = {}
        for key in as_list(keys):
            wire, rk = self._cfg.key(key)
            if self._near is not None:
                self._near.discard(wire)
            groups.setdefault(self._router.server_for(rk), []).append(wire)
        if not groups:
            return 0
        try:
            raw = self._fanout(
                {s: [v[i : i + _BATCH] for i in range(0, len(v), _BATCH)] for s, v in groups.items()},
                P.req_delete_many,
                lambda meta, batch: P.parse_delete_many(meta, len(batch)),
            )
        except MemfleetConnectionError:
            return self._failed(0)
        return sum(raw)

    def _arith(self, key: Key, delta: int, decr: bool, initial: int | None, ttl: int) -> int | None:
        if delta < 0:
            raise ValueError("delta must be >= 0")
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        server = self._router.server_for(rk)
        try:
            r: int | None = self._call(
                server, lambda meta: P.req_arith(wire, delta, decr, initial, ttl, meta), P.parse_arith
            )
            if r is None and initial is not None and server.meta is False:
                # text protocol has no auto-vivify: add the initial value, or retry if someone else did
                if self._store(b"add", key, initial, ttl):
                    return initial
                r = self._call(server, lambda meta: P.req_arith(wire, delta, decr, None, ttl, meta), P.parse_arith)
            return r
        except MemfleetConnectionError:
            return self._failed(None)

    def incr(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> int | None:
        """Add ``delta``; returns the new value, or None if the key is missing and no ``initial``."""
        return self._arith(key, delta, False, initial, ttl)

    def decr(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> int | None:
        """Subtract ``delta`` (memcached stops at 0)."""
        return self._arith(key, delta, True, initial, ttl)

    def touch(self, key: Key, ttl: int) -> bool:
        """Update the TTL; True if the key exists."""
        wire, rk = self._cfg.key(key)
        try:
            return bool(
                self._call(self._router.server_for(rk), lambda meta: P.req_touch(wire, ttl, meta), P.parse_touch)
            )
        except MemfleetConnectionError:
            return self._failed(False)

    # -- stampede protection -------------------------------------------------------------------
    def invalidate(self, key: Key, stale_ttl: int | None = None) -> bool:
        """Mark ``key`` stale (meta ``md <key> I``) instead of deleting it.

        The next :meth:`get_or_set` wins the right to reload it while other callers keep getting
        the stale value. ``stale_ttl`` limits how long the stale item lives. On a text-protocol
        server this deletes the key.
        """
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        try:
            return bool(
                self._call(
                    self._router.server_for(rk),
                    lambda meta: P.req_invalidate(wire, stale_ttl) if meta else P.req_delete(wire, meta),
                    P.parse_delete,
                )
            )
        except MemfleetConnectionError:
            return self._failed(False)

    def get_or_set(
        self,
        key: Key,
        loader: Callable[[], Any],
        ttl: int = 0,
        *,
        lock_ttl: int = 30,
        recache_before: int = 0,
        wait_timeout: float = 10.0,
        poll_interval: float = 0.02,
    ) -> Any:
        """The cached value, or ``loader()`` stored with ``ttl``; one caller loads per miss.

        Uses meta get ``N`` (vivify on miss, win flag ``W``), ``R`` (win a recache
        ``recache_before`` seconds before expiry), ``X`` (stale after :meth:`invalidate`) and
        ``Z`` (someone else won). Losers return the stale value when there is one, else wait
        ``poll_interval`` and retry; after ``wait_timeout`` they run the loader themselves.
        """
        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            v = near.get(wire)
            if v is not MISSING:
                return v
        deadline = time.monotonic() + wait_timeout
        delay = poll_interval
        while True:
            server = self._router.server_for(rk)
            if server.meta is None:
                # learn the protocol first: leases need meta
                self._call(server, lambda meta: b"version\r\n", P.parse_version)
            if not server.meta:
                return self._get_or_set_text(key, wire, loader, ttl, lock_ttl, deadline, poll_interval)
            lease: P.Lease = self._call(
                server, lambda meta: P.req_lease_get(wire, lock_ttl, recache_before), P.parse_lease
            )
            if lease.win:
                try:
                    value = loader()
                except BaseException:
                    if not lease.hit:
                        # release the stub so the next caller can win
                        self._call(server, lambda meta: P.req_delete(wire, meta), P.parse_delete)
                    raise
                # Fill only over the item we won: if it was deleted meanwhile (a write
                # invalidated the row), the value loaded may predate that write.
                if lease.cas:
                    self.cas(key, value, lease.cas, ttl)
                else:
                    self.set(key, value, ttl)
                return value
            if lease.hit:
                value = self._serde.decode(lease.data, lease.flags)
                if near is not None and not lease.stale:
                    near.put(wire, value)
                return value
            if time.monotonic() >= deadline:
                value = loader()
                self.set(key, value, ttl)
                return value
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _get_or_set_text(
        self,
        key: Key,
        wire: bytes,
        loader: Callable[[], Any],
        ttl: int,
        lock_ttl: int,
        deadline: float,
        poll_interval: float,
    ) -> Any:
        """Text-protocol fallback: an ``add``-based lock key instead of meta win flags."""
        missing = object()
        lk = lock_key(wire)
        delay = poll_interval
        while True:
            value = self.get(key, missing)
            if value is not missing:
                return value
            if self._store_raw_add(lk, lock_ttl):
                try:
                    value = loader()
                    self.set(key, value, ttl)
                    return value
                finally:
                    self.delete(lk)
            if time.monotonic() >= deadline:
                value = loader()
                self.set(key, value, ttl)
                return value
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _store_raw_add(self, wire: bytes, ttl: int) -> bool:
        server = self._router.server_for(wire)
        return bool(self._call(server, lambda meta: P.req_store(b"add", wire, b"1", 0, ttl, meta), P.parse_store))

    # -- servers -------------------------------------------------------------------------------
    def _each_server(self, request: bytes, parse: Callable[[bool], Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in self._router.live:
            out[s.address] = self._call(s, lambda meta: request, parse)
        return out

    def flush_all(self) -> bool:
        """Invalidate every item on every live server."""
        if self._near is not None:
            self._near.clear()
        return all(self._each_server(b"flush_all\r\n", P.parse_ok).values())

    def version(self) -> dict[str, str]:
        return self._each_server(b"version\r\n", P.parse_version)

    def stats(self) -> dict[str, dict[str, str]]:
        return self._each_server(b"stats\r\n", P.parse_stats)


__all__ = ["Client", "MemfleetError"]
