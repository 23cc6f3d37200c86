"""asyncio connections and per-server pools."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Callable

from . import _proto as P
from ._conn import BACKOFF_MAX, BACKOFF_MIN
from ._native import Reader
from ._router import ServerBase
from .errors import MemfleetConnectionError, MemfleetServerError
from .near import NearCache, Source

_RECV = 65536  # bytes a connection receives at a time


class AsyncConnection(asyncio.BufferedProtocol):
    """One connection, an asyncio protocol: the transport receives into the connection's own
    buffer, whose bytes go to the Rust wire layer's ``Reader``, which parses the reply waited for
    as they come (one call per chunk) and says when it is whole. Not shared: a pool hands it to
    one task at a time."""

    def __init__(self, timeout: float | None) -> None:
        self.transport: asyncio.Transport | None = None
        self.meta = True
        self.timeout = timeout
        # the tracking listener this connection's reads are registered for
        self.track_id: int | None = None
        self._reader = Reader()
        self._buffer = bytearray(_RECV)
        self._waiter: asyncio.Future[Any] | None = None
        self._lost: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def writer(self) -> asyncio.Transport:
        assert self.transport is not None
        return self.transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> bytearray:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        waiter = self._waiter
        try:
            if not self._reader.feed_from(self._buffer, nbytes) or waiter is None:
                return
            result = self._reader.result()
        except Exception as exc:  # the reply cannot be one (MemfleetServerError)
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            return
        if not waiter.done():
            waiter.set_result(result)

    def connection_lost(self, exc: Exception | None) -> None:
        lost: BaseException
        if exc is None:
            lost = MemfleetConnectionError("server closed the connection")
        else:
            lost = exc
        self._lost = lost
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(lost)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def start(
        self, request: bytes, value: bytes | None, parse: Callable[[bool], P.Parser], timed: bool = True
    ) -> asyncio.Future[Any]:
        """Send a request (and a value with its CRLF); the future gets its reply, parsed, or the
        error (a timeout: TimeoutError, unless not ``timed``: then the caller times it). Call
        :meth:`finish` once it is done or given up on."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if self._lost is not None:
            waiter.set_exception(MemfleetConnectionError("server closed the connection"))
            return waiter
        transport = self.transport
        assert transport is not None
        if value is None:
            transport.write(request)
        else:
            transport.writelines((request, value, b"\r\n"))
        if timed and self.timeout is not None:
            self._timer = loop.call_later(self.timeout, _time_out, waiter)
        try:
            if self._reader.begin(parse(self.meta)):  # bytes received before the request
                waiter.set_result(self._reader.result())
        except Exception as exc:  # noqa: BLE001  (the future carries it)
            waiter.set_exception(exc)
        return waiter

    def finish(self) -> None:
        self._waiter = None
        self._reader.drop_reply()
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()

    async def run(self, request: bytes, value: bytes | None, parse: Callable[[bool], P.Parser]) -> Any:
        """Send a request (and a value with its CRLF), then wait for its reply, parsed."""
        try:
            return await self.start(request, value, parse)
        finally:
            self.finish()

    async def probe(self) -> bool | None:
        """As :meth:`memfleet._conn.Connection.probe`."""
        try:
            return bool(await self.run(P.PROBE, None, P.parse_probe))
        except ConnectionError:
            return None


def _time_out(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())


def time_out_all(waiters: list[asyncio.Future[Any]]) -> None:
    for waiter in waiters:
        _time_out(waiter)


class _NoticeStream:
    """A tracking listener's connection: a stream pair its task reads notices from."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        try:
            self.writer.close()
        except (OSError, RuntimeError):
            pass


class AsyncServer(ServerBase[AsyncConnection]):
    listener: AsyncListener | None = None

    async def _open(self) -> AsyncConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: AsyncConnection(self.timeout),
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                ),
                self.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise MemfleetConnectionError(f"connect to {self.address} failed: {exc!r}") from exc
        _nodelay(conn.writer)
        return conn

    async def _open_stream(self) -> _NoticeStream:
        """A stream connection, for a tracking listener's line-at-a-time notices."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    limit=1 << 20,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                ),
                self.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise MemfleetConnectionError(f"connect to {self.address} failed: {exc!r}") from exc
        _nodelay(writer)
        return _NoticeStream(reader, writer)

    async def acquire(self) -> AsyncConnection:
        """An idle connection, or a new one (the first one learns the server's protocol)."""
        try:
            return self._idle.pop()
        except IndexError:
            pass
        conn = await self._open()
        if self.meta is None:
            try:
                reconnect = self.learn_protocol(await conn.probe())
            except (OSError, asyncio.TimeoutError) as exc:
                conn.close()
                raise MemfleetConnectionError(f"{self.address}: {exc!r}") from exc
            if reconnect:
                conn.close()
                conn = await self._open()
        conn.meta = bool(self.meta)
        return conn

    async def start_listener(self, near: NearCache) -> None:
        """As :meth:`memfleet._conn.Server.start_listener`."""
        assert self.source is not None
        if self.listener is not None:
            return
        listener = self.listener = AsyncListener(self, near, self.source)
        try:
            await listener.start()
        except BaseException:
            if self.listener is listener:
                self.listener = None  # the next request tries again
            raise

    async def stop_listener(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            await listener.stop()

    def abandon(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.abandon()


def _nodelay(transport: asyncio.BaseTransport | asyncio.StreamWriter) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class AsyncListener:
    """The connection that receives one server's invalidation notices, read by a task on the
    client's event loop (notices are applied when the loop runs); as the blocking client's
    :class:`memfleet._conn.Listener` otherwise."""

    def __init__(self, server: AsyncServer, near: NearCache, source: Source) -> None:
        self.server = server
        self.near = near
        self.source = source
        self._stopped = False
        self._conn: _NoticeStream | None = None
        self._id: int | None = None
        self._task: asyncio.Task[None] | None = None

    async def _open(self) -> tuple[_NoticeStream, int] | None:
        """As :meth:`memfleet._conn.Listener._open`."""
        conn = await self.server._open_stream()
        try:
            conn.writer.write(P.TRACK_LISTEN)
            line = await asyncio.wait_for(conn.reader.readuntil(b"\r\n"), self.server.timeout)
            lid = P.parse_tracking(line[:-2])
        except (ConnectionError, asyncio.IncompleteReadError):
            lid = None
        except MemfleetServerError as exc:  # SERVER_ERROR: try again later
            conn.close()
            raise MemfleetConnectionError(f"{self.server.address}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        if lid is None:
            conn.close()
            return None
        return conn, lid

    def _install(self, opened: tuple[_NoticeStream, int] | None) -> bool:
        if self._stopped:
            if opened is not None:
                opened[0].close()
            return False
        if opened is None:
            self.near.untracked(self.source)
            return False
        self._conn, self._id = opened
        self.near.listening(self.source, opened[1])
        return True

    async def start(self) -> None:
        try:
            opened = await self._open()
        except (OSError, asyncio.TimeoutError):
            self.near.lost(self.source)
        else:
            if not self._install(opened):
                return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        delay = BACKOFF_MIN
        while True:
            conn = self._conn
            if conn is None:
                try:
                    opened = await self._open()
                except (OSError, asyncio.TimeoutError):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, BACKOFF_MAX)
                    continue
                if not self._install(opened):
                    return
                conn = self._conn
                assert conn is not None
                delay = BACKOFF_MIN
            try:
                await self._follow(conn)
            except Exception:  # closed, reset, or a line that is not a notice
                pass
            conn.close()
            if self._conn is conn:
                self._conn = None
                self._id = None
                if not self._stopped:
                    self.near.lost(self.source)
            if self._stopped:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    async def _follow(self, conn: _NoticeStream) -> None:
        near = self.near
        source = self.source
        parse = P.parse_notice
        readuntil = conn.reader.readuntil
        while True:
            key = parse((await readuntil(b"\r\n"))[:-2])
            if key is None:
                near.invalidate_all(source)
            else:
                near.invalidate(key)

    def gone(self, listener_id: int) -> None:
        """As :meth:`memfleet._conn.Listener.gone`."""
        conn = self._conn
        if conn is None or self._id != listener_id:
            return
        self.near.lost(self.source)
        conn.close()

    def abandon(self) -> None:
        """Stop from outside the loop (the client was garbage-collected): closing the connection
        ends the task."""
        self._stopped = True
        if self._conn is not None:
            self._conn.close()
        self.near.detach(self.source)

    async def stop(self) -> None:
        self._stopped = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.near.detach(self.source)
