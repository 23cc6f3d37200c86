"""The asyncio client: the operations of ``_ops`` driven over asyncio streams, every method a coroutine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Callable

from . import _proto as P
from ._aconn import AsyncConnection, AsyncServer, time_out_all
from ._base import Key, one_or_many
from ._ops import Operations
from ._steps import Call, Connect, Load, Op, Round, Sleep
from .errors import MemfleetConnectionError, MemfleetServerError
from .near import UNSTARTED, Source
from .remote import RemoteWrite


class AsyncClient(Operations[AsyncServer]):
    """asyncio memcached client; constructor arguments and methods as :class:`memfleet.Client`.

    ``get_or_set`` also accepts an ``async`` loader. Use one client per event loop.
    """

    _server_type = AsyncServer

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in self._router.servers:
            s.close()
            await s.stop_listener()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def remote_write(
        self, keys: Key | Iterable[Key], marker_ttl: int | None = None
    ) -> AsyncIterator[RemoteWrite]:
        """As :meth:`memfleet.Client.remote_write`, with ``async with``."""
        keys = one_or_many(keys)
        w = await self._run(self._begin_remote_write(keys, marker_ttl))
        try:
            yield w
        finally:
            await self.delete_many(keys)

    # -- the driver ----------------------------------------------------------------------------
    def _bind(self, op: Callable[..., Op[Any]]) -> Callable[..., Any]:
        run = self._run

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await run(op(self, *args, **kwargs))

        return method

    async def _run(self, op: Op[Any]) -> Any:
        """Run an operation to its end: do each step it yields, then resume it with the outcome
        (or throw in the exception the step raised)."""
        outcome: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = op.send(outcome) if error is None else op.throw(error)
            except StopIteration as stop:
                return stop.value
            try:
                outcome, error = await self._DO[type(step)](self, step), None
            except BaseException as exc:
                outcome, error = None, exc

    @property
    def _tasks(self) -> set[asyncio.Task[Any]]:
        """Background operations in flight (publishing or refreshing dictionaries)."""
        tasks: set[asyncio.Task[Any]] | None = self.__dict__.get("_bg_tasks")
        if tasks is None:
            tasks = self.__dict__["_bg_tasks"] = set()
        return tasks

    def _background(self, op: Op[Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(op))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _round(self, step: Round) -> list[Any]:
        # every request is sent before any reply is awaited; a call whose server has an idle
        # connection ready is sent from here (the replies under one timer: they were all asked
        # for at once), the others (connecting, tracking) run as tasks
        started: list[tuple[Call, AsyncConnection | None, Any]] = []
        waiters: list[asyncio.Future[Any]] = []
        timeout: float | None = None
        for call in step.calls:
            server: AsyncServer = call.server  # type: ignore[assignment]
            conn = self._idle(server)
            if conn is None:
                started.append((call, None, asyncio.ensure_future(self._call(call))))
                continue
            try:
                waiter = self._start(conn, call, False)
            except Exception as exc:  # a request that cannot be built: this call's outcome
                failed = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
                started.append((call, None, failed))
                continue
            started.append((call, conn, waiter))
            waiters.append(waiter)
            if conn.timeout is not None and (timeout is None or conn.timeout < timeout):
                timeout = conn.timeout
        timer = None
        if waiters and timeout is not None:
            timer = asyncio.get_running_loop().call_later(timeout, time_out_all, waiters)
        outcomes: list[Any] = []
        try:
            for call, conn, fut in started:
                try:
                    if conn is None:
                        outcomes.append(await fut)
                    else:
                        outcomes.append(await self._end(call.server, conn, fut))  # type: ignore[arg-type]
                except Exception as exc:
                    outcomes.append(exc)
        except BaseException:
            # cancelled: the replies not read leave their connections out of step
            for _, conn, fut in started[len(outcomes) + 1 :]:
                if conn is None:
                    fut.cancel()
                else:
                    conn.finish()
                    conn.close()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return outcomes

    async def _load(self, step: Load) -> Any:
        value = step.loader()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        return value

    async def _sleep(self, step: Sleep) -> None:
        await asyncio.sleep(step.seconds)

    async def _connect(self, step: Connect) -> None:
        server: AsyncServer = step.server  # type: ignore[assignment]
        server.release(await self._acquire(server))

    async def _acquire(self, server: AsyncServer) -> Any:
        try:
            conn = await server.acquire()
        except MemfleetConnectionError:
            self._router.failed(server)
            raise
        source = server.source
        if source is not None and conn.track_id != source.listener_id:
            await self._track(server, conn, source)
        return conn

    async def _track(self, server: AsyncServer, conn: AsyncConnection, source: Source) -> None:
        """As :meth:`memfleet.Client._track`."""
        if source.listener_id == UNSTARTED:
            assert self._near is not None
            await server.start_listener(self._near)
        lid = source.listener_id
        if lid is None or lid == UNSTARTED:
            return
        try:
            line = await conn.run(P.req_track(lid), None, P.parse_line)
        except (OSError, asyncio.TimeoutError) as exc:
            conn.close()
            self._router.failed(server)
            raise MemfleetConnectionError(f"{server.address}: {exc!r}") from exc
        except BaseException:
            conn.close()
            raise
        if line == b"OK":
            conn.track_id = lid
        elif line == b"NOT_FOUND":
            listener = server.listener
            if listener is not None:
                listener.gone(lid)
        else:
            conn.close()
            raise P.raise_for(line)

    def _idle(self, server: AsyncServer) -> AsyncConnection | None:
        """An idle connection of ``server`` that needs no tracking request first, or None."""
        idle = server._idle
        if not idle:
            return None
        source = server.source
        if source is not None and idle[-1].track_id != source.listener_id:
            return None
        return idle.pop()

    @staticmethod
    def _start(conn: AsyncConnection, call: Call, timed: bool = True) -> asyncio.Future[Any]:
        try:
            return conn.start(call.build(conn.meta), call.value, call.parse, timed)
        except BaseException:
            conn.finish()
            conn.close()
            raise

    async def _end(self, server: AsyncServer, conn: AsyncConnection, reply: asyncio.Future[Any]) -> Any:
        """The outcome of a request ``conn`` sent: its reply, or the error, the connection closed."""
        try:
            result = await reply
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
        finally:
            conn.finish()
        server.release(conn)
        server.failures = 0
        return result

    async def _call(self, call: Call) -> Any:
        server: AsyncServer = call.server  # type: ignore[assignment]
        conn = self._idle(server) or await self._acquire(server)
        return await self._end(server, conn, self._start(conn, call))

    _DO: dict[type, Callable[[AsyncClient, Any], Awaitable[Any]]] = {
        Call: _call,
        Round: _round,
        Load: _load,
        Sleep: _sleep,
        Connect: _connect,
    }
