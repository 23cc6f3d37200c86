"""A PoolRoute's `max_outstanding` through `memfleet route`: requests past the limit wait in
the router rather than fail, at most N are ever in flight to a server (one router thread
here), every client gets its own reply, and a waiting request is answered with the error
mcrouter gives once the server stops answering, never left waiting."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from harness import Conn, listening_socket
from mcrouter_harness import McRouter

DELAY = 0.03


def value_of(key: bytes) -> bytes:
    return b"value-of-" + key


class SlowBackend:
    """A memcached stand-in that answers each `get` line `DELAY` seconds after it arrives
    (in order, as memcached does), or never when `answers` is False. It reads eagerly, so
    it sees every request the router has sent and not had answered: `most` is the largest
    number of such requests (a merged get counts one per key) it ever held at once."""

    def __init__(self, answers: bool = True) -> None:
        self.answers = answers
        self.listener = listening_socket()
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.outstanding = 0
        self.most = 0
        self.received = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.accept, daemon=True)]
        self.threads[0].start()

    def accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                continue
            t = threading.Thread(target=self.serve, args=(sock,), daemon=True)
            self.threads.append(t)
            t.start()

    def arrived(self, n: int) -> None:
        with self.lock:
            self.received += n
            self.outstanding += n
            self.most = max(self.most, self.outstanding)

    def serve(self, sock: socket.socket) -> None:
        due: deque[tuple[float, list[bytes]]] = deque()
        try:
            self.converse(sock, due)
        finally:
            sock.close()
            # The router dropped the connection: what it had sent is no longer in flight.
            with self.lock:
                self.outstanding -= sum(len(keys) for _, keys in due)

    def converse(self, sock: socket.socket, due: deque[tuple[float, list[bytes]]]) -> None:
        buf = b""
        while not self.stop.is_set():
            wait = 0.05
            if due and self.answers:
                wait = max(0.001, due[0][0] - time.monotonic())
            sock.settimeout(wait)
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            except TimeoutError:
                pass
            except OSError:
                return
            while b"\r\n" in buf:
                line, buf = buf.split(b"\r\n", 1)
                words = line.split()
                if words[:1] in ([b"get"], [b"gets"]):
                    self.arrived(len(words) - 1)
                    due.append((time.monotonic() + DELAY, words[1:]))
                else:
                    sock.sendall(b"ERROR\r\n")
            while self.answers and due and due[0][0] <= time.monotonic():
                _, keys = due.popleft()
                with self.lock:
                    self.outstanding -= len(keys)
                out = b"".join(
                    b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(value_of(k)), value_of(k)) for k in keys
                )
                sock.sendall(out + b"END\r\n")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        self.listener.close()


@contextmanager
def limited(backend: SlowBackend, limit: int) -> Iterator[McRouter]:
    config = {
        "pools": {"A": {"servers": [f"127.0.0.1:{backend.port}"]}},
        "route": {"type": "PoolRoute", "pool": "A", "max_outstanding": limit},
    }
    try:
        with McRouter(config, "--num-proxies", "1") as r:
            yield r
    finally:
        backend.close()


def pipelined(port: int, keys: list[str], results: dict[str, bytes]) -> None:
    """Sends gets of `keys` in one write and records each reply by its key."""
    with Conn(port, timeout=20) as c:
        c.send(b"".join(f"get {k}\r\n".encode() for k in keys))
        for k in keys:
            results[k] = c.read_until(b"END\r\n", b"\r\n")


def test_requests_past_the_limit_wait_and_all_succeed() -> None:
    backend = SlowBackend()
    with limited(backend, 1) as r:
        results: dict[str, bytes] = {}
        # Some keys carry a routing prefix: those go through an execution, the others
        # straight to the server; both wait under the one limit.
        batches = [
            [f"c{c}k{i}" if (c + i) % 2 else f"/././c{c}k{i}" for i in range(3)] for c in range(12)
        ]
        threads = [
            threading.Thread(target=pipelined, args=(r.port, keys, results)) for keys in batches
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for keys in batches:
        for k in keys:
            v = value_of(k.removeprefix("/././").encode())
            want = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k.encode(), len(v), v)
            assert results[k] == want, (k, results[k])
    assert backend.received == 36
    assert backend.most == 1, f"{backend.most} requests in flight at once"


def test_waiting_requests_get_the_error_when_the_server_stops_answering() -> None:
    backend = SlowBackend(answers=False)
    with limited(backend, 1) as r:
        results: dict[str, bytes] = {}
        threads = [
            threading.Thread(
                target=pipelined, args=(r.port, [f"c{c}k{i}" for i in range(2)], results)
            )
            for c in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 8
    assert set(results.values()) <= {
        b"SERVER_ERROR timeout\r\n",
        b"SERVER_ERROR unavailable\r\n",
    }, results
    assert b"SERVER_ERROR timeout\r\n" in results.values()
    assert backend.most == 1
