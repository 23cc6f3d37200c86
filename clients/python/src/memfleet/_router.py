"""Server failure state and the ketama router over live servers."""

from __future__ import annotations

import ssl
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from ._memo import memo
from .errors import NoServersError
from .ketama import Ring, point_name
from .near import Source

_INF = float("inf")
_MEMO_MAX = 65536


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class ServerBase(Generic[C]):
    """Address, weight, the pool of idle connections and libmemcached-style failure counting,
    shared by the blocking and the asyncio server (which say how to open a connection)."""

    def __init__(
        self,
        host: str,
        port: int,
        weight: int,
        connect_timeout: float | None,
        timeout: float | None,
        max_pool_size: int,
        protocol: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if protocol not in ("auto", "meta", "text"):
            raise ValueError("protocol must be 'auto', 'meta' or 'text'")
        self.host = host
        self.port = port
        self.weight = weight
        self.address = f"{host}:{port}"
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_pool_size = max_pool_size
        # connections speak TLS with this context (its certificate checks and client certificate)
        self.tls = tls
        # None until the first connection tells whether the server speaks meta
        self.meta: bool | None = None if protocol == "auto" else protocol == "meta"
        self.failures = 0
        self.dead_until = 0.0
        self._lock = threading.Lock()
        self._idle: deque[C] = deque()
        # this server in the near cache, when it has one that follows invalidation notices
        self.source: Source | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address} weight={self.weight}>"

    def learn_protocol(self, probe: bool | None) -> bool:
        """Record what the probe of a first connection found; True if that connection is unusable.

        ``None`` means the server closed the connection on ``mn``, as twemproxy does: it speaks the
        text protocol only, and the caller opens a new connection.
        """
        self.meta = bool(probe)
        return probe is None

    def release(self, conn: C) -> None:
        if len(self._idle) < self.max_pool_size:
            self._idle.append(conn)
        else:
            conn.close()

    def abandon(self) -> None:
        """The client is gone: stop following notices without waiting for anything."""

    def close(self) -> None:
        """Drop idle connections."""
        while True:
            try:
                self._idle.pop().close()
            except IndexError:
                break

    def mark_failed(self, limit: int, retry_timeout: float) -> bool:
        """Count a failure; returns True when this failure ejects the server."""
        with self._lock:
            self.failures += 1
            if limit > 0 and self.failures >= limit and self.dead_until == 0.0:
                self.dead_until = time.monotonic() + retry_timeout
                return True
        return False


S = TypeVar("S", bound="ServerBase[Any]")


class Router(Generic[S]):
    """Maps keys to live servers like libmemcached with remove_failed_servers.

    After ``failure_limit`` consecutive failures a server is left out of the ring for
    ``retry_timeout`` seconds (its keys remap to the others); then it is put back.
    """

    def __init__(self, servers: Sequence[S], failure_limit: int, retry_timeout: float) -> None:
        self.servers: list[S] = list(servers)
        self.failure_limit = failure_limit
        self.retry_timeout = retry_timeout
        self._lock = threading.Lock()
        self._next_check = _INF
        # live servers, their ring and a key -> server memo, swapped as one tuple so that
        # readers in other threads never pair a new server list with an old ring
        self._state: tuple[list[S], Ring | None, dict[bytes, S]] = ([], None, {})
        self._rebuild()

    def _rebuild(self) -> None:
        with self._lock:
            now = time.monotonic()
            live: list[S] = []
            next_check = _INF
            for s in self.servers:
                if s.dead_until and s.dead_until <= now:
                    s.dead_until = 0.0
                    s.failures = 0
                if s.dead_until:
                    next_check = min(next_check, s.dead_until)
                else:
                    live.append(s)
            ring = Ring([point_name(s.host, s.port) for s in live], [s.weight for s in live]) if live else None
            self._state = (live, ring, memo())
            self._next_check = next_check

    @property
    def live(self) -> list[S]:
        if self._next_check != _INF and time.monotonic() >= self._next_check:
            self._rebuild()
        return self._state[0]

    def server_for(self, key: bytes) -> S:
        if self._next_check != _INF and time.monotonic() >= self._next_check:
            self._rebuild()
        live, ring, memo = self._state
        if len(live) == 1:
            return live[0]
        server = memo.get(key)
        if server is not None:
            return server
        if ring is None:
            raise NoServersError("all servers are marked dead")
        server = live[ring.index_for(key)]
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = server
        return server

    def group(self, rks: list[bytes], wires: list[bytes]) -> dict[S, list[bytes]]:
        """``wires`` by the server of each one's routing key (``rks[i]`` places ``wires[i]``)."""
        if self._next_check != _INF and time.monotonic() >= self._next_check:
            self._rebuild()
        live, ring, _ = self._state
        if len(live) == 1:
            return {live[0]: wires}
        if ring is None:
            raise NoServersError("all servers are marked dead")
        return {live[i]: batch for i, batch in ring.group(rks, wires)}

    def placement(self) -> tuple[list[S], Ring | None]:
        """The live servers and their ring; no ring when one server takes every key."""
        if self._next_check != _INF and time.monotonic() >= self._next_check:
            self._rebuild()
        live, ring, _ = self._state
        if not live:
            raise NoServersError("all servers are marked dead")
        return live, ring if len(live) > 1 else None

    def failed(self, server: S) -> None:
        if server.mark_failed(self.failure_limit, self.retry_timeout):
            server.close()
            self._rebuild()
