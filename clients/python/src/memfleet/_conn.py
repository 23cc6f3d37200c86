"""Blocking connections, per-server pools and dead-host bookkeeping."""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
import weakref
from typing import Any, Callable

from . import _proto as P
from ._native import Conn
from ._router import ServerBase
from .errors import MemfleetConnectionError, MemfleetServerError
from .near import NearCache, Source

_RECV = 65536
BACKOFF_MIN = 0.05  # seconds before the first attempt to reopen a lost listener, doubling up to
BACKOFF_MAX = 2.0


def _tls_socket(host: str, port: int, connect_timeout: float | None, timeout: float | None, tls: ssl.SSLContext) -> Any:
    """A connected TLS socket: the handshake runs here, within connect_timeout; the host name is
    the SNI and what the server certificate is checked against."""
    try:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
    except OSError as exc:
        raise MemfleetConnectionError(f"connect to {host}:{port} failed: {exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        tsock = tls.wrap_socket(sock, server_hostname=host)
    except OSError as exc:  # ssl.SSLError and handshake timeouts are OSErrors
        sock.close()
        raise MemfleetConnectionError(f"TLS handshake with {host}:{port} failed: {exc}") from exc
    tsock.settimeout(timeout)
    return tsock


def connect(
    host: str, port: int, connect_timeout: float | None, timeout: float | None, tls: ssl.SSLContext | None
) -> Connection:
    """A new connection; plain TCP is the Rust wire layer's own socket, TLS a Python one it uses."""
    if tls is None:
        return Connection(host, port, connect_timeout, timeout)
    return Connection(host, port, connect_timeout, timeout, _tls_socket(host, port, connect_timeout, timeout, tls))


class Connection(Conn):
    """One connection of the Rust wire layer (``memfleet._native.Conn``: its socket, read buffer
    and the I/O of fetches and stores, done with the GIL released). Not thread-safe: a pool
    hands it to one user at a time."""

    __slots__ = ()

    def reply(self, parse: Callable[[bool], P.Parser], meta: bool) -> Any:
        """Read and parse one reply."""
        return self.read_reply(parse(meta))

    def probe(self) -> bool | None:
        """Does the server speak meta (``P.parse_probe``)? None: it closed the connection."""
        try:
            self.send(P.PROBE)
            return bool(self.reply(P.parse_probe, True))
        except ConnectionError:  # closed or reset; a timeout is not one
            return None


class _NoticeSocket:
    """A tracking listener's connection: a plain or TLS socket that its thread polls."""

    __slots__ = ("sock", "buf", "pos")

    def __init__(self, server: Server) -> None:
        s = server
        if s.tls is not None:
            self.sock = _tls_socket(s.host, s.port, s.connect_timeout, s.timeout, s.tls)
        else:
            try:
                self.sock = socket.create_connection((s.host, s.port), timeout=s.connect_timeout)
            except OSError as exc:
                raise MemfleetConnectionError(f"connect to {s.address} failed: {exc}") from exc
            self.sock.settimeout(s.timeout)
        self.buf = b""
        self.pos = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def readline(self) -> bytes:
        """The first line (the reply to ``track listen``); what follows it stays in buf."""
        buf = b""
        while True:
            i = buf.find(b"\r\n")
            if i >= 0:
                self.buf, self.pos = buf, i + 2
                return buf[:i]
            chunk = self.sock.recv(_RECV)
            if not chunk:
                raise MemfleetConnectionError("server closed the connection")
            buf += chunk


class Server(ServerBase[Connection]):
    """A configured server: its pool of idle blocking connections and failure state."""

    listener: Listener | None = None

    def acquire(self) -> Connection:
        """An idle connection, or a new one (the first one learns the server's protocol)."""
        try:
            return self._idle.pop()
        except IndexError:
            pass
        conn = connect(self.host, self.port, self.connect_timeout, self.timeout, self.tls)
        if self.meta is None:
            try:
                reconnect = self.learn_protocol(conn.probe())
            except OSError as exc:
                conn.close()
                raise MemfleetConnectionError(f"{self.address}: {exc}") from exc
            if reconnect:
                conn.close()
                conn = connect(self.host, self.port, self.connect_timeout, self.timeout, self.tls)
        conn.meta = bool(self.meta)
        return conn

    def start_listener(self, near: NearCache) -> None:
        """Open this server's tracking listener unless one is open or being opened (another
        thread does not wait for it: its reads are just not cached meanwhile)."""
        assert self.source is not None
        with self._lock:
            if self.listener is not None:
                return
            listener = self.listener = Listener(self, near, self.source)
        try:
            listener.start()
        except BaseException:
            with self._lock:
                if self.listener is listener:
                    self.listener = None  # the next request tries again
            raise

    def stop_listener(self) -> None:
        with self._lock:
            listener, self.listener = self.listener, None
        if listener is not None:
            listener.stop()

    abandon = stop_listener


class Listener:
    """The connection that receives one server's invalidation notices, read by a daemon thread.

    When it closes or errs, the near cache drops that server's values and caches nothing from it
    until the thread has opened a new one (retrying with backoff) and data connections track it.
    """

    def __init__(self, server: Server, near: NearCache, source: Source) -> None:
        self.server = server
        self.near = near
        self.source = source
        self._lock = threading.Lock()
        self._stopped = False
        self._wake = threading.Event()  # set when stopped: ends a backoff wait
        self._conn: _NoticeSocket | None = None
        self._id: int | None = None
        # Held while notices are taken off the socket and applied, by the thread or by a
        # near-cache hit (drain): received notices are then either still in the socket or
        # applied before the lock is released, never in between for a reader to miss.
        self._reading = threading.Lock()
        self._poll: Any = None  # select.poll objects of the open listener connection
        self._peek: Any = None
        self._partial = b""  # a notice received in part

    def _open(self) -> tuple[_NoticeSocket, int] | None:
        """A listener connection and its id; None if the server has no tracking. OSError if it
        cannot be reached."""
        s = self.server
        conn = _NoticeSocket(s)
        try:
            conn.send(P.TRACK_LISTEN)
            lid = P.parse_tracking(conn.readline())
        except ConnectionError:  # closed on an unknown command (twemproxy)
            lid = None
        except MemfleetServerError as exc:  # SERVER_ERROR: try again later
            conn.close()
            raise MemfleetConnectionError(f"{s.address}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        if lid is None:
            conn.close()
            return None
        # notices are read without blocking, after a wait for them (see _follow and drain)
        conn.sock.setblocking(False)
        return conn, lid

    def _install(self, opened: tuple[_NoticeSocket, int] | None) -> bool:
        """Record what an attempt to open found; False if the thread has nothing to follow."""
        with self._lock:
            if self._stopped:
                if opened is not None:
                    opened[0].close()
                return False
            if opened is None:
                self.near.untracked(self.source)
                return False
            conn = opened[0]
            with self._reading:
                # one poll object each for the thread's wait and drain's look (Python
                # refuses concurrent calls on one)
                self._poll, self._peek = select.poll(), select.poll()
                self._poll.register(conn.sock, select.POLLIN)
                self._peek.register(conn.sock, select.POLLIN)
                self._partial = conn.buf[conn.pos :]
            self._conn, self._id = opened
            self.near.listening(self.source, opened[1])
            self.source.drain = self.drain
            return True

    def start(self) -> None:
        """The first attempt runs in the calling thread, so that its request already knows
        whether the server tracks; then a daemon thread follows the notices."""
        _listeners.add(self)
        try:
            opened = self._open()
        except OSError:
            self.near.lost(self.source)  # unreachable for now: keep trying in the thread
        else:
            if not self._install(opened):
                return
        threading.Thread(target=self._run, name=f"memfleet-track-{self.server.address}", daemon=True).start()

    def _run(self) -> None:
        delay = BACKOFF_MIN
        while True:
            conn = self._conn
            if conn is None:
                if self._stopped:
                    return
                try:
                    opened = self._open()
                except OSError:
                    self._wait(delay)
                    delay = min(delay * 2, BACKOFF_MAX)
                    continue
                if not self._install(opened):
                    return
                conn = self._conn
                assert conn is not None
                delay = BACKOFF_MIN
            try:
                self._follow(conn)
            except (OSError, ValueError):
                pass
            conn.close()
            with self._lock:
                if self._conn is conn:
                    self._conn = None
                    self._id = None
                    if not self._stopped:
                        self.near.lost(self.source)
            if self._stopped:
                return
            self._wait(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    def _wait(self, seconds: float) -> None:
        self._wake.wait(seconds)

    def _follow(self, conn: _NoticeSocket) -> None:
        """Wait for notices and apply them until the connection closes."""
        sock = conn.sock
        poll = self._poll
        while True:
            if not _decrypted(sock):
                poll.poll()
            with self._reading:
                # what reached the socket before this is applied once _pull returns: only
                # then may hits skip their own look (see drain)
                began = time.monotonic()
                if not self._pull(conn):
                    return
                self.source.looked = began

    def drain(self) -> None:
        """Apply the notices already received (called on a near-cache hit, at most once per
        ``near.DRAIN_EVERY``: a value is not served more than that after its notice reached this
        host, however late this thread runs)."""
        with self._reading:
            conn = self._conn
            if conn is None:
                return
            began = time.monotonic()
            if not _decrypted(conn.sock) and not self._peek.poll(0):
                self.source.looked = began
                return
            try:
                open_ = self._pull(conn)
            except (OSError, ValueError):
                open_ = False
            self.source.looked = began
            if not open_:
                # the thread sees the same and reopens; meanwhile trust nothing from here
                with self._lock:
                    if self._conn is conn:
                        self.near.lost(self.source)

    def _pull(self, conn: _NoticeSocket) -> bool:
        """Take what the socket holds and apply each complete notice; False once it closed.
        Called with ``_reading`` held."""
        chunks = [self._partial]
        recv = conn.sock.recv
        open_ = True
        while True:
            try:
                chunk = recv(_RECV)
            except (BlockingIOError, ssl.SSLWantReadError):
                break
            if not chunk:
                open_ = False
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        lines = data.split(b"\r\n")
        self._partial = lines.pop()
        near = self.near
        source = self.source
        parse = P.parse_notice
        for line in lines:
            key = parse(line)
            if key is None:
                near.invalidate_all(source)
            else:
                near.invalidate(key)
        return open_

    def gone(self, listener_id: int) -> None:
        """A data connection was told the server has no listener ``listener_id``: if that is
        this one, it is lost (the thread then reopens it)."""
        with self._lock:
            conn = self._conn
            if conn is None or self._id != listener_id:
                return
            self.near.lost(self.source)
        _shutdown(conn)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            conn = self._conn
        self._wake.set()
        if conn is not None:
            _shutdown(conn)
        self.near.detach(self.source)


_listeners: weakref.WeakSet[Listener] = weakref.WeakSet()


def _after_fork() -> None:
    # the child has no listener threads: forget the parent's, and the values they vouched for
    for listener in list(_listeners):
        listener._stopped = True
        listener.server.listener = None
        listener.source.drain = None
        listener.near.detach(listener.source)
    _listeners.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _decrypted(sock: socket.socket) -> bool:
    """Whether TLS holds bytes already taken off the socket (a poll would not see them)."""
    return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0


def _shutdown(conn: _NoticeSocket) -> None:
    """Wake the thread blocked reading ``conn``; it closes the connection."""
    try:
        conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
