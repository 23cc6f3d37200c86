"""The blocking client: the operations of ``_ops`` driven over pooled blocking sockets."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, NoReturn

from . import _proto as P
from ._base import Key, as_list, one_or_many
from ._conn import Connection, Server
from ._native import plan_fetch
from ._ops import BATCH, NEEDS_DICT, Operations
from ._proto import Parser
from ._steps import Call, Connect, Load, Op, Round, Sleep
from .errors import MemfleetConnectionError, MemfleetError, MemfleetServerError
from .near import MISSING, UNSTARTED, Source
from .remote import RemoteWrite
from .serde import MissingDictionary, Serde


class Client(Operations[Server]):
    """memcached client with libmemcached-compatible weighted ketama.

    ``servers`` is a list of ``"host:port"``, ``"host:port:weight"``, ``(host, port)`` or
    ``(host, port, weight)``. All methods are thread-safe; each server has a pool of connections.
    """

    _server_type = Server

    def close(self) -> None:
        """Close idle connections and tracking listeners (the client opens new ones if used again)."""
        for s in self._router.servers:
            s.close()
            s.stop_listener()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def remote_write(self, keys: Key | Iterable[Key], marker_ttl: int | None = None) -> Iterator[RemoteWrite]:
        """Around a write to the master database made from a replica region: sets the remote
        marker of each key (``remote_marker_prefix`` + key, for ``marker_ttl`` seconds, default
        ``remote_marker_ttl``) to a new token, runs the block, then deletes the keys here. The
        markers stay: the region's invalidator removes them once the local replica has the
        write. The block gets a :class:`memfleet.RemoteWrite`: run ``cur.execute(*w.pg_message())``
        in the transaction that writes the rows, and the invalidator (``remote_markers_release:
        message``) removes only the markers this write set. If the block raises, the keys are
        deleted all the same (the master may have been written) and the exception goes on. A
        marker that could not be set raises before the block runs."""
        keys = one_or_many(keys)
        w = self._run(self._begin_remote_write(keys, marker_ttl))
        try:
            yield w
        finally:
            self.delete_many(keys)

    # -- the driver ----------------------------------------------------------------------------
    def _bind(self, op: Callable[..., Op[Any]]) -> Callable[..., Any]:
        fast = _FAST.get(op.__name__)
        if fast is not None:
            # the operation's blocking fast path: same signature and behaviour, fewer layers
            return _BoundFast(fast, self)
        run = self._run

        def method(*args: Any, **kwargs: Any) -> Any:
            return run(op(self, *args, **kwargs))

        return method

    def _background(self, op: Op[Any]) -> None:
        self._dicts.submit(lambda: self._run(op))

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
            conn = server.acquire()
        except MemfleetConnectionError:
            self._router.failed(server)
            raise
        except OSError as exc:
            self._router.failed(server)
            raise MemfleetConnectionError(f"{server.address}: {exc}") from exc
        source = server.source
        if source is not None and conn.track_id != source.listener_id:
            self._track(server, conn, source)
        return conn

    def _track(self, server: Server, conn: Connection, source: Source) -> None:
        """Have ``conn``'s reads tracked for the server's current listener (opened on first use)."""
        if source.listener_id == UNSTARTED:
            assert self._near is not None
            server.start_listener(self._near)
        lid = source.listener_id
        if lid is None or lid == UNSTARTED:
            return  # no listener to track for: the near cache takes nothing from this server
        try:
            conn.send(P.req_track(lid))
            line = conn.readline()
        except OSError as exc:
            self._lost(server, conn, exc)
        if line == b"OK":
            conn.track_id = lid
        elif line == b"NOT_FOUND":
            listener = server.listener
            if listener is not None:
                listener.gone(lid)
        else:
            conn.close()
            raise P.raise_for(line)

    def _call(self, call: Call) -> Any:
        return self._exchange(call.server, call.build, call.parse, call.value)  # type: ignore[arg-type]

    def _exchange(
        self, server: Server, build: Callable[[bool], bytes], parse: Callable[[bool], Parser], value: bytes | None
    ) -> Any:
        """One request and its reply on a pooled connection (a Call, unpacked: the hot path)."""
        conn = self._acquire(server)
        try:
            if value is None:
                conn.send(build(conn.meta))
            else:
                conn.send_value(build(conn.meta), value)
        except OSError as exc:
            self._lost(server, conn, exc)
        return self._reply(server, conn, parse)

    def _lost(self, server: Server, conn: Connection, exc: OSError) -> NoReturn:
        conn.close()
        self._router.failed(server)
        raise MemfleetConnectionError(f"{server.address}: {exc}") from exc

    def _settle(self, server: Server, conn: Connection, read: Callable[[], Any]) -> Any:
        """What ``read`` reads off ``conn``; the connection goes back to the pool, or is closed
        when the reply failed."""
        try:
            result = read()
        except MemfleetServerError:
            conn.close()  # the rest of the reply is unread
            raise
        except OSError as exc:
            self._lost(server, conn, exc)
        server.release(conn)
        if server.failures:
            server.failures = 0
        return result

    def _reply(self, server: Server, conn: Connection, parse: Callable[[bool], Parser]) -> Any:
        return self._settle(server, conn, lambda: conn.reply(parse, conn.meta))

    def _round(self, calls: list[Call]) -> list[Any]:
        """Send every call, then read every reply; failures become outcomes."""
        outcomes: list[Any] = [None] * len(calls)
        sent: list[tuple[int, Server, Connection]] = []
        for i, call in enumerate(calls):
            server: Server = call.server  # type: ignore[assignment]
            try:
                conn = self._acquire(server)
            except MemfleetError as exc:
                outcomes[i] = exc
                continue
            try:
                if call.value is None:
                    conn.send(call.build(conn.meta))
                else:
                    conn.send_value(call.build(conn.meta), call.value)
            except OSError as exc:
                conn.close()
                self._router.failed(server)
                outcomes[i] = MemfleetConnectionError(f"{server.address}: {exc}")
                continue
            sent.append((i, server, conn))
        for i, server, conn in sent:
            try:
                outcomes[i] = self._reply(server, conn, calls[i].parse)
            except MemfleetError as exc:
                outcomes[i] = exc
        return outcomes

    # -- fast path: get and set skip the generator and the driver's layers. What they do besides
    # I/O is the operation's own (Operations._get_start/_get_end, _store_start/_store_end), and
    # the tests run every case through both this path and the asyncio client's generator path.
    def get(self, key: Key, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` on a miss."""
        wire, server, ticket = self._get_start(key)
        if server is None:
            return wire  # a near cache hit
        try:
            conn = self._acquire(server)
            try:
                r = conn.get(wire)
            except MemfleetServerError:
                conn.close()
                raise
            except OSError as exc:
                self._lost(server, conn, exc)
        except MemfleetConnectionError:
            if self.ignore_errors:
                return default
            raise
        data, flags = (None, 0) if r is None else r
        server.release(conn)
        if server.failures:
            server.failures = 0
        value = self._get_end(wire, data, flags, default, server, ticket)
        if value is NEEDS_DICT:
            value = self._run(self._get_fetching(wire, data, flags, default, server, ticket))  # type: ignore[arg-type]
        return value

    def _get_many_now(self, keys: Iterable[Key]) -> dict[Key, Any]:
        """Values of the keys that exist. Requests go to every server before any reply is read."""
        keys = as_list(keys)
        if self._near is not None or not keys or len(keys) > BATCH:
            return self._run(self._get_many(keys))  # type: ignore[no-any-return]
        live, ring = self._router.placement()
        plan = plan_fetch(ring, keys, self._cfg.key_prefix)
        if plan is None:  # a key to convert or refuse: the general path does both
            return self._run(self._get_many(keys))  # type: ignore[no-any-return]
        servers = [live[i] for i in plan.servers]
        conns: list[Connection | None] = []
        error: MemfleetError | None = None
        for server in servers:
            try:
                conns.append(self._acquire(server))
            except MemfleetError as exc:
                conns.append(None)
                error = exc
        try:
            out, raw, errors = plan.fetch(conns, keys, self._text_multiget, isinstance(self._serde, Serde))
        except BaseException:
            for c in conns:
                if c is not None:
                    c.close()
            raise
        for server, conn, failure in zip(servers, conns, errors):
            if conn is None:
                continue
            if failure is None:
                server.release(conn)
                if server.failures:
                    server.failures = 0
                continue
            conn.close()  # the rest of its reply is unread
            if isinstance(failure, MemfleetError):
                error = failure
            else:
                self._router.failed(server)
                error = MemfleetConnectionError(f"{server.address}: {failure}")
        if error is not None and not (self.ignore_errors and isinstance(error, MemfleetConnectionError)):
            raise error
        decode = self._serde.decode
        for key, data, flags in raw:
            try:
                out[key] = decode(data, flags)
            except MissingDictionary:
                value = self._run(self._decode(data, flags, MISSING))
                if value is not MISSING:
                    out[key] = value
        return out

    def _ask(self, server: Server, request: Callable[[bool], bytes], parse: Callable[[bool], P.Parser]) -> Any:
        """One request and its parsed reply on a pooled connection (a Call without the driver)."""
        conn = self._acquire(server)
        return self._settle(server, conn, lambda: conn.call(request(conn.meta), parse(conn.meta)))

    def _delete_now(self, key: Key) -> bool:
        """Remove ``key``; True if it existed."""
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        try:
            return bool(self._ask(self._router.server_for(rk), lambda meta: P.req_delete(wire, meta), P.parse_delete))
        except MemfleetConnectionError:
            if self.ignore_errors:
                return False
            raise

    def _touch_now(self, key: Key, ttl: int) -> bool:
        """Update the TTL; True if the key exists."""
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        try:
            return bool(
                self._ask(self._router.server_for(rk), lambda meta: P.req_touch(wire, ttl, meta), P.parse_touch)
            )
        except MemfleetConnectionError:
            if self.ignore_errors:
                return False
            raise

    def _counter(self, key: Key, delta: int, decr: bool) -> int | None:
        """incr or decr without an initial value: the text command, answered by one line."""
        if delta < 0:
            raise ValueError("delta must be >= 0")
        wire, rk = self._cfg.key(key)
        if self._near is not None:
            self._near.discard(wire)
        request = b"%b %b %d\r\n" % (b"decr" if decr else b"incr", wire, delta)
        try:
            value: int | None = self._ask(
                self._router.server_for(rk), lambda meta: request, lambda meta: P.parse_arith(False)
            )
        except MemfleetConnectionError:
            if self.ignore_errors:
                return None
            raise
        return value

    def _incr_now(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> int | None:
        if initial is not None:
            return self._run(self._incr(key, delta, initial, ttl))  # type: ignore[no-any-return]
        return self._counter(key, delta, False)

    def _decr_now(self, key: Key, delta: int = 1, initial: int | None = None, ttl: int = 0) -> int | None:
        if initial is not None:
            return self._run(self._decr(key, delta, initial, ttl))  # type: ignore[no-any-return]
        return self._counter(key, delta, True)

    def _get_or_set_now(
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
    ) -> Any:
        lease: P.Lease | None = None
        if self._near is None and master_loader is None:
            # the hit of a lease get is returned here; anything else goes on in the operation
            wire, rk = self._cfg.key(key)
            server = self._router.server_for(rk)
            if server.meta:
                request = P.req_lease_get(wire, lock_ttl, recache_before)
                lease = self._ask(server, lambda meta: request, P.parse_lease)
                if lease.hit and not lease.win:
                    try:
                        return self._serde.decode(lease.data, lease.flags)
                    except MissingDictionary:
                        pass
        return self._run(
            self._get_or_set_from(
                lease, key, loader, ttl, lock_ttl, recache_before, wait_timeout, poll_interval, master_loader
            )
        )

    def set(self, key: Key, value: Any, ttl: int = 0) -> bool:
        """Store ``value``; ``ttl`` in seconds (0 = never expires)."""
        wire, server, data, flags = self._store_start(key, value, ttl)
        try:
            conn = self._acquire(server)
            try:
                ok = conn.store(P.store_head(b"set", wire, len(data), flags, ttl, conn.meta), data)
            except MemfleetServerError:
                conn.close()
                raise
            except OSError as exc:
                self._lost(server, conn, exc)
        except MemfleetConnectionError:
            if self.ignore_errors:
                return False
            raise
        server.release(conn)
        if server.failures:
            server.failures = 0
        return self._store_end(wire, value, ttl, ok, server)


class _BoundFast(partial):  # type: ignore[type-arg]
    """A fast path bound to its client: a partial, as a closure would cost a Python frame per call."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<bound method {getattr(self, '__qualname__', self.func.__name__)} of {self.args[0]!r}>"


# operations whose blocking client skips the generator (see Client._bind)
_FAST: dict[str, Callable[..., Any]] = {
    "_get_many": Client._get_many_now,
    "_delete": Client._delete_now,
    "_touch": Client._touch_now,
    "_incr": Client._incr_now,
    "_decr": Client._decr_now,
    "_get_or_set": Client._get_or_set_now,
}

__all__ = ["Client", "MemfleetError"]
