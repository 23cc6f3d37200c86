"""Blocking connections, per-server pools and dead-host bookkeeping."""

from __future__ import annotations

import socket
import ssl
from typing import Any, Callable

from . import _proto as P
from ._router import ServerBase
from .errors import MemfleetConnectionError

_RECV = 65536
_GATHER_FROM = 16384


class Connection:
    """One TCP connection with a read buffer. Not thread-safe: a pool hands it to one user at a time."""

    __slots__ = ("sock", "buf", "pos", "meta", "tls")

    def __init__(
        self,
        host: str,
        port: int,
        connect_timeout: float | None,
        timeout: float | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise MemfleetConnectionError(f"connect to {host}:{port} failed: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                # the handshake runs here, within connect_timeout; the host name is the SNI
                # and what the server certificate is checked against
                sock = tls.wrap_socket(sock, server_hostname=host)
            except OSError as exc:  # ssl.SSLError and handshake timeouts are OSErrors
                sock.close()
                raise MemfleetConnectionError(f"TLS handshake with {host}:{port} failed: {exc}") from exc
        sock.settimeout(timeout)
        self.tls = tls is not None
        self.sock = sock
        # bytes, not bytearray: a reply usually arrives in one recv and is sliced without copies
        self.buf = b""
        self.pos = 0
        self.meta = True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_value(self, head: bytes, data: bytes) -> None:
        """Send header, value and CRLF with one write; big values go out by scatter-gather, uncopied."""
        if len(data) < _GATHER_FROM or self.tls:  # an SSL socket has no sendmsg
            self.sock.sendall(b"".join((head, data, b"\r\n")))
            return
        total = len(head) + len(data) + 2
        sent = self.sock.sendmsg((head, data, b"\r\n"))
        if sent < total:
            # the kernel took part of it: send the rest (rare, when the socket buffer is full)
            with memoryview(b"".join((head, data, b"\r\n"))) as rest:
                self.sock.sendall(rest[sent:])

    def readline(self) -> bytes:
        """Next response line without its CRLF."""
        buf = self.buf
        pos = self.pos
        i = buf.find(b"\r\n", pos)
        if i >= 0:
            self.pos = i + 2
            return buf[pos:i]
        return self._readline_slow()

    def _readline_slow(self) -> bytes:
        buf = self.buf[self.pos :]
        recv = self.sock.recv
        while True:
            start = max(0, len(buf) - 1)
            chunk = recv(_RECV)
            if not chunk:
                raise MemfleetConnectionError("server closed the connection")
            buf = buf + chunk if buf else chunk
            i = buf.find(b"\r\n", start)
            if i >= 0:
                self.buf = buf
                self.pos = i + 2
                return buf[:i]

    def read_value(self, n: int) -> bytes:
        """n data bytes followed by CRLF."""
        buf = self.buf
        p = self.pos
        end = p + n
        if len(buf) >= end + 2:
            self.pos = end + 2
            return buf[p:end]
        rest = buf[p:]
        need = n + 2
        if need >= _RECV:
            # large value: receive straight into a buffer of the right size
            out = bytearray(need)
            got = len(rest)
            out[:got] = rest
            with memoryview(out) as mv:
                recv_into = self.sock.recv_into
                while got < need:
                    k = recv_into(mv[got:])
                    if not k:
                        raise MemfleetConnectionError("server closed the connection")
                    got += k
            self.buf = b""
            self.pos = 0
            del out[n:]
            return bytes(out)
        chunks = [rest]
        have = len(rest)
        recv = self.sock.recv
        while have < need:
            chunk = recv(_RECV)
            if not chunk:
                raise MemfleetConnectionError("server closed the connection")
            chunks.append(chunk)
            have += len(chunk)
        buf = b"".join(chunks)
        self.buf = buf
        self.pos = need
        return buf[:n]

    def reply(self, parse: Callable[[bool], P.Parser], meta: bool) -> Any:
        """Read and parse one reply; store replies skip the generator parser."""
        if parse is P.parse_store:
            line = self.readline()
            ok = P.STORED.get(line)
            if ok is None:
                raise P.raise_for(line)
            return ok
        gen = parse(meta)
        send = gen.send
        readline = self.readline
        read_value = self.read_value
        try:
            need = next(gen)
            while True:
                need = send(readline() if need < 0 else read_value(need))
        except StopIteration as stop:
            return stop.value

    def probe(self) -> bool | None:
        """Does the server speak meta (``P.parse_probe``)? None: it closed the connection."""
        try:
            self.send(P.PROBE)
            return bool(self.reply(P.parse_probe, True))
        except ConnectionError:  # closed or reset; a timeout is not one
            return None


class Server(ServerBase[Connection]):
    """A configured server: its pool of idle blocking connections and failure state."""

    def acquire(self) -> Connection:
        """An idle connection, or a new one (the first one learns the server's protocol)."""
        try:
            return self._idle.pop()
        except IndexError:
            pass
        conn = Connection(self.host, self.port, self.connect_timeout, self.timeout, self.tls)
        if self.meta is None:
            try:
                reconnect = self.learn_protocol(conn.probe())
            except OSError as exc:
                conn.close()
                raise MemfleetConnectionError(f"{self.address}: {exc}") from exc
            if reconnect:
                conn.close()
                conn = Connection(self.host, self.port, self.connect_timeout, self.timeout, self.tls)
        conn.meta = bool(self.meta)
        return conn
