"""The blocking client: the operations of ``_ops`` driven over pooled blocking sockets."""

from __future__ import annotations

import time
from typing import Any, Callable

from . import _proto as P
from ._base import Key
from ._conn import Connection, Server
from ._ops import Operations
from ._proto import Parser
from ._steps import Call, Connect, Load, Op, Round, Sleep
from .errors import MemfleetConnectionError, MemfleetError, MemfleetServerError


class Client(Operations[Server]):
    """memcached client with libmemcached-compatible weighted ketama.

    ``servers`` is a list of ``"host:port"``, ``"host:port:weight"``, ``(host, port)`` or
    ``(host, port, weight)``. All methods are thread-safe; each server has a pool of connections.
    """

    _server_type = Server

    def close(self) -> None:
        for s in self._router.servers:
            s.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the driver ----------------------------------------------------------------------------
    def _bind(self, op: Callable[..., Op[Any]]) -> Callable[..., Any]:
        run = self._run

        def method(*args: Any, **kwargs: Any) -> Any:
            return run(op(self, *args, **kwargs))

        return method

    def _run(self, op: Op[Any]) -> Any:
        """Run an operation to its end: do each step it yields and send the outcome back."""
        try:
            step = op.send(None)
            while True:
                try:
                    if type(step) is Call:
                        outcome = self._call(step)
                    elif type(step) is Round:
                        outcome = self._round(step.calls)
                    elif type(step) is Load:
                        outcome = step.loader()
                    elif type(step) is Sleep:
                        time.sleep(step.seconds)
                        outcome = None
                    else:
                        assert type(step) is Connect
                        server: Server = step.server  # type: ignore[assignment]
                        server.release(self._acquire(server))
                        outcome = None
                except BaseException as exc:
                    step = op.throw(exc)
                else:
                    step = op.send(outcome)
        except StopIteration as stop:
            return stop.value

    def _acquire(self, server: Server) -> Connection:
        try:
            return server.acquire()
        except MemfleetConnectionError:
            self._router.failed(server)
            raise
        except OSError as exc:
            self._router.failed(server)
            raise MemfleetConnectionError(f"{server.address}: {exc}") from exc

    def _call(self, call: Call) -> Any:
        return self._exchange(call.server, call.build, call.parse, call.value)  # type: ignore[arg-type]

    def _exchange(
        self, server: Server, build: Callable[[bool], bytes], parse: Callable[[bool], Parser], value: bytes | None
    ) -> Any:
        """One request and its reply on a pooled connection (a Call, unpacked: the hot path)."""
        conn = self._acquire(server)
        self._send(server, conn, build, value)
        return self._reply(server, conn, parse)

    def _send(self, server: Server, conn: Connection, build: Callable[[bool], bytes], value: bytes | None) -> None:
        try:
            if value is None:
                conn.send(build(conn.meta))
            else:
                conn.send_value(build(conn.meta), value)
        except OSError as exc:
            self._lost(server, conn, exc)

    def _lost(self, server: Server, conn: Connection, exc: OSError) -> None:
        conn.close()
        self._router.failed(server)
        raise MemfleetConnectionError(f"{server.address}: {exc}") from exc

    def _reply(self, server: Server, conn: Connection, parse: Callable[[bool], Parser]) -> Any:
        try:
            result = conn.reply(parse, conn.meta)
        except MemfleetServerError:
            conn.close()  # the rest of the reply is unread
            raise
        except OSError as exc:
            self._lost(server, conn, exc)
        server.release(conn)
        if server.failures:
            server.failures = 0
        return result

    def _round(self, calls: list[Call]) -> list[Any]:
        """Send every call, then read every reply; failures become outcomes."""
        outcomes: list[Any] = [None] * len(calls)
        sent: list[tuple[int, Server, Connection]] = []
        for i, call in enumerate(calls):
            server: Server = call.server  # type: ignore[assignment]
            try:
                conn = self._acquire(server)
                self._send(server, conn, call.build, call.value)
            except MemfleetError as exc:
                outcomes[i] = exc
                continue
            sent.append((i, server, conn))
        for i, server, conn in sent:
            try:
                outcomes[i] = self._reply(server, conn, calls[i].parse)
            except MemfleetError as exc:
                outcomes[i] = exc
        return outcomes

    # -- fast path: get and set skip the generator; the halves around their request are the
    # operation's own (Operations._get_start/_get_end, _store_start/_store_end)
    def get(self, key: Key, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` on a miss."""
        wire, server = self._get_start(key)
        if server is None:
            return wire  # a near cache hit
        try:
            r = self._exchange(server, lambda meta: P.req_get(wire, meta), P.parse_get, None)
        except MemfleetConnectionError:
            if self.ignore_errors:
                return default
            raise
        return self._get_end(wire, r, default)

    def set(self, key: Key, value: Any, ttl: int = 0) -> bool:
        """Store ``value``; ``ttl`` in seconds (0 = never expires)."""
        wire, server, data, flags = self._store_start(key, value)
        try:
            ok = self._exchange(
                server, lambda meta: P.store_head(b"set", wire, len(data), flags, ttl, meta), P.parse_store, data
            )
        except MemfleetConnectionError:
            if self.ignore_errors:
                return False
            raise
        return self._store_end(wire, value, ttl, ok)


__all__ = ["Client", "MemfleetError"]
