"""Blocking connections, per-server pools and dead-host bookkeeping."""

from __future__ import annotations

import socket
from collections import deque

from ._router import ServerBase
from .errors import MemfleetConnectionError, MemfleetServerError

_RECV = 65536
_GATHER_FROM = 16384


class Connection:
    """One TCP connection with a read buffer. Not thread-safe: a pool hands it to one user at a time."""

    __slots__ = ("sock", "buf", "pos", "meta")

    def __init__(self, host: str, port: int, connect_timeout: float | None, timeout: float | None) -> None:
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise MemfleetConnectionError(f"connect to {host}:{port} failed: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        self.sock = sock
        self.buf = bytearray()
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
        if len(data) < _GATHER_FROM:
            self.sock.sendall(b"".join((head, data, b"\r\n")))
            return
        total = len(head) + len(data) + 2
        sent = self.sock.sendmsg((head, data, b"\r\n"))
        if sent < total:
            # the kernel took part of it: send the rest (rare, when the socket buffer is full)
            with memoryview(b"".join((head, data, b"\r\n"))) as rest:
                self.sock.sendall(rest[sent:])

    def _fill(self, need: int) -> None:
        buf = self.buf
        if self.pos:
            del buf[: self.pos]
            self.pos = 0
        recv = self.sock.recv
        while len(buf) < need:
            chunk = recv(max(_RECV, need - len(buf)))
            if not chunk:
                raise MemfleetConnectionError("server closed the connection")
            buf += chunk

    def readline(self) -> bytes:
        """Next response line without its CRLF."""
        buf = self.buf
        i = buf.find(b"\r\n", self.pos)
        while i < 0:
            start = len(buf) - self.pos
            if self.pos:
                del buf[: self.pos]
                self.pos = 0
            chunk = self.sock.recv(_RECV)
            if not chunk:
                raise MemfleetConnectionError("server closed the connection")
            buf += chunk
            i = buf.find(b"\r\n", max(0, start - 1))
        line = bytes(buf[self.pos : i])
        self.pos = i + 2
        return line

    def read_value(self, n: int) -> bytes:
        """n data bytes followed by CRLF."""
        buf = self.buf
        p = self.pos
        avail = len(buf) - p
        if avail >= n + 2:
            if n < 4096:
                data = bytes(buf[p : p + n])
            else:
                with memoryview(buf) as mv:
                    data = bytes(mv[p : p + n])
            self.pos = p + n + 2
            return data
        if n < _RECV:
            self._fill(n + 2)
            data = bytes(self.buf[:n])
            self.pos = n + 2
            return data
        # large value: receive straight into a buffer of the right size
        out = bytearray(n + 2)
        out[:avail] = buf[p:]
        del buf[:]
        self.pos = 0
        got = avail
        with memoryview(out) as mv:
            recv_into = self.sock.recv_into
            while got < n + 2:
                k = recv_into(mv[got:])
                if not k:
                    raise MemfleetConnectionError("server closed the connection")
                got += k
        del out[n:]
        return bytes(out)

    def read_meta_multiget(self) -> dict[bytes, tuple[bytes, int]]:
        """Replies to pipelined ``mg <key> f v k q`` ... ``mn``: {key: (data, flags)} of the hits."""
        out: dict[bytes, tuple[bytes, int]] = {}
        readline = self.readline
        read_value = self.read_value
        while True:
            line = readline()
            if line == b"MN":
                return out
            if line[:3] != b"VA ":
                if line == b"EN":
                    continue
                raise MemfleetServerError(line.decode("utf-8", "replace"))
            parts = line.split()
            data = read_value(int(parts[1]))
            flags = 0
            key = b""
            for t in parts[2:]:
                c = t[0]
                if c == 102:  # f
                    flags = int(t[1:])
                elif c == 107:  # k
                    key = t[1:]
            out[key] = (data, flags)


class Server(ServerBase):
    """A configured server: its pool of idle blocking connections and failure state."""

    def __init__(
        self,
        host: str,
        port: int,
        weight: int,
        *,
        connect_timeout: float | None,
        timeout: float | None,
        max_pool_size: int,
        protocol: str,
    ) -> None:
        super().__init__(host, port, weight, connect_timeout, timeout, max_pool_size, protocol)
        self._idle: deque[Connection] = deque()

    def acquire(self) -> Connection:
        try:
            return self._idle.pop()
        except IndexError:
            pass
        conn = Connection(self.host, self.port, self.connect_timeout, self.timeout)
        if self.meta is None:
            self.meta = self._probe(conn)
        conn.meta = self.meta
        return conn

    def _probe(self, conn: Connection) -> bool:
        """Does the server speak the meta protocol? ``mn`` answers ``MN``; old servers say ERROR."""
        try:
            conn.send(b"mn\r\n")
            line = conn.readline()
        except OSError as exc:
            conn.close()
            raise MemfleetConnectionError(f"{self.address}: {exc}") from exc
        return line == b"MN"

    def release(self, conn: Connection) -> None:
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
