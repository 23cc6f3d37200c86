"""The asyncio client: same API as :class:`memfleet.Client`, every method a coroutine."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, Callable, Union

from . import _proto as P
from ._base import Key, as_list
from ._core import ClientCore
from ._router import ServerBase
from .client import lock_key
from .errors import MemfleetConnectionError, MemfleetServerError
from .near import MISSING

Loader = Callable[[], Union[Any, Awaitable[Any]]]


class _AConn:
    __slots__ = ("reader", "writer", "meta", "timeout")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float | None) -> None:
        self.reader = reader
        self.writer = writer
        self.meta = True
        self.timeout = timeout

    def close(self) -> None:
        try:
            self.writer.close()
        except (OSError, RuntimeError):
            pass

    async def run(self, request: bytes, gen: Any) -> Any:
        self.writer.write(request)
        return await asyncio.wait_for(self._drive(gen), self.timeout)

    async def _drive(self, gen: Any) -> Any:
        await self.writer.drain()
        reader = self.reader
        try:
            need = next(gen)
            while True:
                try:
                    if need < 0:
                        chunk = (await reader.readuntil(b"\r\n"))[:-2]
                    else:
                        chunk = (await reader.readexactly(need + 2))[:-2]
                except asyncio.IncompleteReadError as exc:
                    raise MemfleetConnectionError("server closed the connection") from exc
                need = gen.send(chunk)
        except StopIteration as stop:
            return stop.value


class AsyncServer(ServerBase):
    def __init__(self, host: str, port: int, weight: int, **kw: Any) -> None:
        super().__init__(host, port, weight, **kw)
        self._idle: deque[_AConn] = deque()

    async def acquire(self) -> _AConn:
        try:
            return self._idle.pop()
        except IndexError:
            pass
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20), self.connect_timeout
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise MemfleetConnectionError(f"connect to {self.address} failed: {exc!r}") from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _AConn(reader, writer, self.timeout)
        if self.meta is None:
            try:
                self.meta = bool(await conn.run(b"mn\r\n", _probe()))
            except (OSError, asyncio.TimeoutError) as exc:
                conn.close()
                raise MemfleetConnectionError(f"{self.address}: {exc!r}") from exc
        conn.meta = self.meta
        return conn

    def release(self, conn: _AConn) -> None:
        if len(self._idle) < self.max_pool_size:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.pop().close()
            except IndexError:
                break


def _probe() -> Any:
    line = yield P.LINE
    return line == b"MN"


class AsyncClient(ClientCore[AsyncServer]):
    """asyncio memcached client; constructor arguments as :class:`memfleet.Client`."""

    _server_type = AsyncServer

    async def close(self) -> None:
        for s in self._router.servers:
            s.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, server: AsyncServer, build: Callable[[bool], bytes], parse: Callable[[bool], Any]) -> Any:
        try:
            conn = await server.acquire()
        except MemfleetConnectionError:
            self._router.failed(server)
            raise
        try:
            result = await conn.run(build(conn.meta), parse(conn.meta))
        except MemfleetServerError:
            conn.close()
            raise
        except (OSError, asyncio.TimeoutError) as exc:
            conn.close()
            self._router.failed(server)
            raise MemfleetConnectionError(f"{server.address}: {exc!r}") from exc
        except BaseException:
            # cancelled mid-reply: the connection's stream position is unknown
            conn.close()
            raise
        server.release(conn)
        server.failures = 0
        return result

    async def _key_call(self, key: Key, build: Callable[[bytes, bool], bytes], parse: Callable[[bool], Any]) -> Any:
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        return await self._call(self._router.server_for(rk), lambda meta: build(wire, meta), parse)

    def _failed(self, default: Any) -> Any:
        if self.ignore_errors:
            return default
        raise

    # -- reads ---------------------------------------------------------------------------------
    async def get(self, key: Key, default: Any = None) -> Any:
        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            v = near.get(wire)
            if v is not MISSING:
                return v
        try:
            r = await self._call(self._router.server_for(rk), lambda meta: P.req_get(wire, meta), P.parse_get)
        except MemfleetConnectionError:
            return self._failed(default)
        if r is None:
            return default
        value = self._serde.decode(r[0], r[1])
        if near is not None:
            near.put(wire, value)
        return value

    async def gets(self, key: Key) -> tuple[Any, int | None]:
        wire, rk = self._cfg.key(key)
        try:
            r = await self._call(self._router.server_for(rk), lambda meta: P.req_get(wire, meta, cas=True), P.parse_get)
        except MemfleetConnectionError:
            return self._failed((None, None))  # type: ignore[no-any-return]
        if r is None:
            return None, None
        return self._serde.decode(r[0], r[1]), r[2]

    async def _fanout(
        self,
        groups: dict[AsyncServer, list[Any]],
        build: Callable[[list[Any], bool], bytes],
        parse: Callable[[bool, list[Any]], Any],
    ) -> list[Any]:
        async def one(server: AsyncServer, items: list[Any]) -> list[Any]:
            out = []
            for i in range(0, len(items), 512):
                batch = items[i : i + 512]
                out.append(
                    await self._call(
                        server,
                        lambda meta, batch=batch: build(batch, meta),  # type: ignore[misc]
                        lambda meta, batch=batch: parse(meta, batch),  # type: ignore[misc]
                    )
                )
            return out

        results = await asyncio.gather(*(one(s, items) for s, items in groups.items()), return_exceptions=True)
        flat: list[Any] = []
        error: BaseException | None = None
        for r in results:
            if isinstance(r, BaseException):
                error = r
            else:
                flat.extend(r)
        if error is not None and not (self.ignore_errors and isinstance(error, MemfleetConnectionError)):
            raise error
        return flat

    async def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        cfg = self._cfg
        near = self._near
        out: dict[Key, Any] = {}
        by_wire: dict[bytes, Key] = {}
        groups: dict[AsyncServer, list[bytes]] = {}
        for key in as_list(keys):
            wire, rk = cfg.key(key)
            if near is not None:
                v = near.get(wire)
                if v is not MISSING:
                    out[key] = v
                    continue
            by_wire[wire] = key
            groups.setdefault(self._router.server_for(rk), []).append(wire)
        if not groups:
            return out
        raw = await self._fanout(groups, P.req_get_many, lambda meta, batch: P.parse_get_many(meta))
        for res in raw:
            for wire, (data, flags) in res.items():
                orig = by_wire.get(wire)
                if orig is None:
                    continue
                value = self._serde.decode(data, flags)
                out[orig] = value
                if near is not None:
                    near.put(wire, value)
        return out

    # -- writes --------------------------------------------------------------------------------
    async def _store(self, cmd: bytes, key: Key, value: Any, ttl: int, cas: int = 0) -> bool:
        data, flags = self._serde.encode(value)
        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            near.discard(wire)
        try:
            ok = bool(
                await self._call(
                    self._router.server_for(rk),
                    lambda meta: P.req_store(cmd, wire, data, flags, ttl, meta, cas),
                    P.parse_store,
                )
            )
        except MemfleetConnectionError:
            return bool(self._failed(False))
        if ok and near is not None and cmd in (b"set", b"add", b"replace", b"cas"):
            near.put(wire, value)
        return ok

    async def set(self, key: Key, value: Any, ttl: int = 0) -> bool:
        return await self._store(b"set", key, value, ttl)

    async def add(self, key: Key, value: Any, ttl: int = 0) -> bool:
        return await self._store(b"add", key, value, ttl)

    async def replace(self, key: Key, value: Any, ttl: int = 0) -> bool:
        return await self._store(b"replace", key, value, ttl)

    async def cas(self, key: Key, value: Any, cas: int, ttl: int = 0) -> bool:
        return await self._store(b"cas", key, value, ttl, cas)

    async def _store_raw(self, cmd: bytes, key: Key, value: bytes | str) -> bool:
        raw = value.encode("utf-8") if isinstance(value, str) else value
        try:
            return bool(
                await self._key_call(key, lambda kb, meta: P.req_store(cmd, kb, raw, 0, 0, meta), P.parse_store)
            )
        except MemfleetConnectionError:
            return bool(self._failed(False))

    async def append(self, key: Key, value: bytes | str) -> bool:
        return await self._store_raw(b"append", key, value)

    async def prepend(self, key: Key, value: bytes | str) -> bool:
        return await self._store_raw(b"prepend", key, value)

    async def set_many(self, mapping: Mapping[Key, Any], ttl: int = 0) -> list[Key]:
        groups: dict[AsyncServer, list[tuple[bytes, bytes, int]]] = {}
        by_wire: dict[bytes, Key] = {}
        for key, value in mapping.items():
            wire, rk = self._cfg.key(key)
            data, flags = self._serde.encode(value)
            by_wire[wire] = key
            if self._near is not None:
                self._near.discard(wire)
            groups.setdefault(self._router.server_for(rk), []).append((wire, data, flags))
        if not groups:
            return []
        try:
            raw = await self._fanout(
                groups,
                lambda batch, meta: P.req_set_many(batch, ttl, meta),
                lambda meta, batch: P.parse_set_many(meta, [b[0] for b in batch]),
            )
        except MemfleetConnectionError:
            return list(self._failed(list(mapping)))
        return [by_wire[w] for res in raw for w in res if w in by_wire]

    async def delete(self, key: Key) -> bool:
        try:
            return bool(await self._key_call(key, P.req_delete, P.parse_delete))
        except MemfleetConnectionError:
            return bool(self._failed(False))

    async def delete_many(self, keys: Iterable[Key]) -> int:
        groups: dict[AsyncServer, list[bytes]] = {}
        for key in as_list(keys):
            wire, rk = self._cfg.key(key)
            if self._near is not None:
                self._near.discard(wire)
            groups.setdefault(self._router.server_for(rk), []).append(wire)
        if not groups:
            return 0
        try:
            raw = await self._fanout(
                groups, P.req_delete_many, lambda meta, batch: P.parse_delete_many(meta, len(batch))
            )
        except MemfleetConnectionError:
            return int(self._failed(0))
        return sum(raw)

    async def _arith(self, key: Key, delta: int, decr: bool, initial: int | None, ttl: int) -> int | None:
        if delta < 0:
            raise ValueError("delta must be >= 0")
        wire, rk = self._cfg.key(key)
        server = self._router.server_for(rk)
        try:
            r: int | None = await self._key_call(
                key, lambda kb, meta: P.req_arith(kb, delta, decr, initial, ttl, meta), P.parse_arith
            )
            if r is None and initial is not None and server.meta is False:
                if await self._store(b"add", key, initial, ttl):
                    return initial
                r = await self._key_call(
                    key, lambda kb, meta: P.req_arith(kb, delta, decr, None, ttl, meta), P.parse_arith
                )
            return r
        except MemfleetConnectionError:
            return self._failed(None)  # type: ignore[no-any-return]

    async def incr(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> int | None:
        return await self._arith(key, delta, False, initial, ttl)

    async def decr(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> int | None:
        return await self._arith(key, delta, True, initial, ttl)

    async def touch(self, key: Key, ttl: int) -> bool:
        try:
            return bool(await self._key_call(key, lambda kb, meta: P.req_touch(kb, ttl, meta), P.parse_touch))
        except MemfleetConnectionError:
            return bool(self._failed(False))

    async def invalidate(self, key: Key, stale_ttl: int | None = None) -> bool:
        try:
            return bool(
                await self._key_call(
                    key,
                    lambda kb, meta: P.req_invalidate(kb, stale_ttl) if meta else P.req_delete(kb, meta),
                    P.parse_delete,
                )
            )
        except MemfleetConnectionError:
            return bool(self._failed(False))

    async def get_or_set(
        self,
        key: Key,
        loader: Loader,
        ttl: int = 0,
        *,
        lock_ttl: int = 30,
        recache_before: int = 0,
        wait_timeout: float = 10.0,
        poll_interval: float = 0.02,
    ) -> Any:
        """As :meth:`memfleet.Client.get_or_set`; ``loader`` may be a plain or an async function."""

        async def load() -> Any:
            v = loader()
            if asyncio.iscoroutine(v) or isinstance(v, asyncio.Future):
                v = await v
            return v

        wire, rk = self._cfg.key(key)
        near = self._near
        if near is not None:
            cached = near.get(wire)
            if cached is not MISSING:
                return cached
        deadline = time.monotonic() + wait_timeout
        delay = poll_interval
        missing = object()
        while True:
            server = self._router.server_for(rk)
            if server.meta is None:
                await self._call(server, lambda meta: b"version\r\n", P.parse_version)
            if not server.meta:
                value = await self.get(key, missing)
                if value is not missing:
                    return value
                lk = lock_key(wire)
                got = await self._call(
                    self._router.server_for(lk),
                    lambda meta, lk=lk: P.req_store(b"add", lk, b"1", 0, lock_ttl, meta),  # type: ignore[misc]
                    P.parse_store,
                )
                if got:
                    try:
                        value = await load()
                        await self.set(key, value, ttl)
                        return value
                    finally:
                        await self._call(
                            self._router.server_for(lk),
                            lambda meta, lk=lk: P.req_delete(lk, meta),  # type: ignore[misc]
                            P.parse_delete,
                        )
            else:
                lease: P.Lease = await self._call(
                    server, lambda meta: P.req_lease_get(wire, lock_ttl, recache_before), P.parse_lease
                )
                if lease.win:
                    try:
                        value = await load()
                    except BaseException:
                        if not lease.hit:
                            await self._call(server, lambda meta: P.req_delete(wire, meta), P.parse_delete)
                        raise
                    # Fill only over the item we won (see Client.get_or_set).
                    if lease.cas:
                        await self.cas(key, value, lease.cas, ttl)
                    else:
                        await self.set(key, value, ttl)
                    return value
                if lease.hit:
                    value = self._serde.decode(lease.data, lease.flags)
                    if near is not None and not lease.stale:
                        near.put(wire, value)
                    return value
            if time.monotonic() >= deadline:
                value = await load()
                await self.set(key, value, ttl)
                return value
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    # -- servers -------------------------------------------------------------------------------
    async def _each_server(self, request: bytes, parse: Callable[[bool], Any]) -> dict[str, Any]:
        live = self._router.live
        results = await asyncio.gather(*(self._call(s, lambda meta: request, parse) for s in live))
        return {s.address: r for s, r in zip(live, results)}

    async def flush_all(self) -> bool:
        if self._near is not None:
            self._near.clear()
        return all((await self._each_server(b"flush_all\r\n", P.parse_ok)).values())

    async def version(self) -> dict[str, str]:
        return await self._each_server(b"version\r\n", P.parse_version)

    async def stats(self) -> dict[str, dict[str, str]]:
        return await self._each_server(b"stats\r\n", P.parse_stats)
