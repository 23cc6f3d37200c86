"""A small in-memory server that speaks mcrouter's lease commands, which memcached does not:
`lease-get` (a miss hands out a token), `lease-set` (stores only with the key's current
token), and the text commands a route sends along with them (get, gets, set, cas, delete).
Items whose exptime is negative are removed, as memcached expires them at once."""

from __future__ import annotations

import itertools
import socketserver
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from harness import free_port


@dataclass
class Item:
    flags: int
    value: bytes
    cas: int


@dataclass
class Store:
    items: dict[bytes, Item] = field(default_factory=dict)
    tokens: dict[bytes, int] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, key: bytes, flags: int, exptime: int, value: bytes) -> None:
        if exptime < 0:
            self.items.pop(key, None)
        else:
            self.items[key] = Item(flags, value, next(self.counter))
        self.tokens.pop(key, None)

    def handle(self, words: list[bytes], data: bytes | None) -> bytes:
        cmd = words[0]
        if cmd in (b"get", b"gets"):
            out = b""
            for key in words[1:]:
                item = self.items.get(key)
                if item is None:
                    continue
                cas = b" %d" % item.cas if cmd == b"gets" else b""
                out += b"VALUE %s %d %d%s\r\n%s\r\n" % (
                    key,
                    item.flags,
                    len(item.value),
                    cas,
                    item.value,
                )
            return out + b"END\r\n"
        if cmd == b"lease-get":
            key = words[1]
            item = self.items.get(key)
            if item is not None:
                return b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (
                    key,
                    item.flags,
                    len(item.value),
                    item.value,
                )
            token = self.tokens.setdefault(key, next(self.counter))
            return b"LVALUE %s %d 0 0\r\n\r\nEND\r\n" % (key, token)
        if cmd == b"delete":
            return b"DELETED\r\n" if self.items.pop(words[1], None) else b"NOT_FOUND\r\n"
        assert data is not None
        key, flags, exptime = words[1], int(words[2]), int(words[3])
        if cmd == b"set":
            self.put(key, flags, exptime, data)
            return b"STORED\r\n"
        if cmd == b"lease-set":
            # lease-set <key> <token> <flags> <exptime> <bytes>
            token, flags, exptime = int(words[2]), int(words[3]), int(words[4])
            if self.tokens.get(key) != token:
                return b"NOT_STORED\r\n"
            self.put(key, flags, exptime, data)
            return b"STORED\r\n"
        if cmd == b"cas":
            item = self.items.get(key)
            if item is None:
                return b"NOT_FOUND\r\n"
            if item.cas != int(words[5]):
                return b"EXISTS\r\n"
            self.put(key, flags, exptime, data)
            return b"STORED\r\n"
        return b"ERROR\r\n"


def data_length(words: list[bytes]) -> int | None:
    """The length of the data block a storage command carries."""
    if words[0] in (b"set", b"cas"):
        return int(words[4])
    if words[0] == b"lease-set":
        return int(words[5])
    return None


class LeaseServer:
    """The server on a test port, in a thread; `store` is its content."""

    def __init__(self) -> None:
        self.port = free_port()
        self.store = Store()
        store = self.store

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while line := self.rfile.readline():
                    words = line.strip().split()
                    if not words:
                        continue
                    length = data_length(words)
                    data = None
                    if length is not None:
                        data = self.rfile.read(length + 2)[:length]
                    with store.lock:
                        reply = store.handle(words, data)
                    self.wfile.write(reply)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
