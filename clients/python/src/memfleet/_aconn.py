"""asyncio connections and per-server pools."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Callable

from . import _proto as P
from ._router import ServerBase
from .errors import MemfleetConnectionError


class AsyncConnection:
    """One stream pair. Not shared: a pool hands it to one task at a time."""

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

    async def run(self, request: bytes, value: bytes | None, parse: Callable[[bool], P.Parser]) -> Any:
        """Send a request (and a value with its CRLF), then read and parse the reply."""
        if value is None:
            self.writer.write(request)
        else:
            self.writer.writelines((request, value, b"\r\n"))
        return await asyncio.wait_for(self._reply(parse(self.meta)), self.timeout)

    async def _reply(self, gen: P.Parser) -> Any:
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

    async def probe(self) -> bool | None:
        """As :meth:`memfleet._conn.Connection.probe`."""
        try:
            return bool(await self.run(P.PROBE, None, P.parse_probe))
        except ConnectionError:
            return None


class AsyncServer(ServerBase[AsyncConnection]):
    async def _open(self) -> AsyncConnection:
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
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return AsyncConnection(reader, writer, self.timeout)

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
