"""A memcached text client for tests that move large or binary values: it reads get replies
by their announced lengths (a value may hold any bytes, `END\\r\\n` included)."""

from __future__ import annotations

import socket

from typing_extensions import Self


class ValueClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            assert chunk, "connection closed"
            self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill(len(self.buf) + 1)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def call(self, req: bytes) -> bytes:
        self.sock.sendall(req)
        return self.line()

    def store(self, cmd: str, key: str, value: bytes, flags: int = 0, extra: str = "") -> bytes:
        head = f"{cmd} {key} {flags} 0 {len(value)}{extra}\r\n".encode()
        return self.call(head + value + b"\r\n")

    def get(self, key: str, cmd: str = "get") -> list[tuple[str, int, bytes, str]]:
        """The VALUEs of a get reply: (key, flags, data, cas)."""
        self.sock.sendall(f"{cmd} {key}\r\n".encode())
        out = []
        while True:
            line = self.line()
            if line == b"END":
                return out
            parts = line.decode().split()
            assert parts[0] == "VALUE", line
            n = int(parts[3])
            self._fill(n + 2)
            data, self.buf = self.buf[:n], self.buf[n + 2 :]
            out.append((parts[1], int(parts[2]), data, parts[4] if len(parts) > 4 else ""))

    def item(self, key: str) -> tuple[int, bytes] | None:
        """(flags, data) of `key`, or None on a miss."""
        got = self.get(key)
        assert len(got) <= 1 and all(k == key for k, *_ in got), got
        return (got[0][1], got[0][2]) if got else None
