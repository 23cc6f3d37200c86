"""`memfleet route` in front of a backend that answers wrongly: garbage, a reply of another
request kind, items of keys nobody asked for, one reply too many (which shifts every later
one), an absurd value length. The backend is a test peer playing a broken server; the client
side is a real client connection. Whatever the backend sends, a client gets either a reply
to its own request or `SERVER_ERROR`, never another key's value, and never waits for a line
end that cannot help."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import proxy_harness
import pytest
from harness import Conn, Server, eventually, free_port, listening_socket, memfleet_bin
from mcrouter_harness import McRouter
from proxy_harness import pool_yaml

INVALID = b"SERVER_ERROR invalid reply from server\r\n"
STORAGE = (b"set", b"add", b"replace", b"append", b"prepend", b"cas")


Proxy = proxy_harness.Proxy


def my_port() -> int:
    return free_port()


def connect(server: Server, timeout: float) -> Conn:
    """A client connection to the router."""
    assert server.port is not None
    return Conn(server.port, timeout=timeout)


def value_of(key: bytes) -> bytes:
    return b"value-of-" + key


def honest(request: bytes) -> bytes:
    """What a memcached holding `value_of(k)` for every key answers (gets), else a plain
    success."""
    words = request.split(b"\r\n", 1)[0].split()
    cmd = words[0]
    if cmd in (b"get", b"gets"):
        out = b"".join(
            b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(value_of(k)), value_of(k)) for k in words[1:]
        )
        return out + b"END\r\n"
    if cmd in STORAGE:
        return b"STORED\r\n"
    return {b"delete": b"DELETED\r\n", b"touch": b"TOUCHED\r\n", b"incr": b"1\r\n"}.get(
        cmd, b"ERROR\r\n"
    )


# answer(connection number, requests received on it so far) -> bytes to send now.
Answer = Callable[[int, list[bytes]], bytes]


class FakeBackend:
    """A memcached stand-in on a free port: parses each request (storage commands with their
    data block) and sends what `answer` returns for it."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.listener = listening_socket()
        self.port = self.listener.getsockname()[1]
        self.received: list[bytes] = []
        self.connections = 0
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
            self.connections += 1
            t = threading.Thread(target=self.serve, args=(sock, self.connections), daemon=True)
            self.threads.append(t)
            t.start()

    def serve(self, sock: socket.socket, n: int) -> None:
        sock.settimeout(0.1)
        buf = b""
        requests: list[bytes] = []
        with sock:
            while not self.stop.is_set():
                while (request := take_request(buf)) is not None:
                    buf = buf[len(request) :]
                    requests.append(request)
                    self.received.append(request)
                    sock.sendall(self.answer(n, requests))
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        self.listener.close()


def take_request(buf: bytes) -> bytes | None:
    """The first whole request in `buf`, or None."""
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    words = buf[:end].split()
    data = None
    if words and words[0] in STORAGE:
        data = int(words[4])
    elif words and words[0] == b"ms":
        data = int(words[2])
    if data is None:
        return buf[: end + 2]
    end += 2 + data + 2
    return buf[:end] if len(buf) >= end else None


@contextmanager
def routed(answer: Answer, **opts: object) -> Iterator[tuple[Proxy, FakeBackend]]:
    """The router (one worker, one connection to the server, so requests of different
    clients share it) in front of a FakeBackend."""
    backend = FakeBackend(answer)
    port = my_port()
    conf = pool_yaml("faulty", f"127.0.0.1:{port}", [f"127.0.0.1:{backend.port}:1"], **opts)
    try:
        with Proxy(conf, port, threads=1) as p:
            yield p, backend
    finally:
        backend.close()


def first_connection_answers(bad: bytes) -> Answer:
    """`bad` to every request on the first connection; honest answers on later ones."""
    return lambda n, reqs: bad if n == 1 else honest(reqs[-1])


@pytest.mark.parametrize(
    ("request_", "bad"),
    [
        (b"get k\r\n", b"WHATEVER 1 2 3\r\n"),
        (b"get k\r\n", b"STORED\r\n"),
        (b"get k\r\n", b"END\n"),
        (b"get k\r\n", b"VALUE k 0 1\r\nx\r\nSTORED\r\n"),
        (b"set k 0 0 1\r\nx\r\n", b"END\r\n"),
        (b"set k 0 0 1 noreply\r\nx\r\n", b"DELETED\r\n"),
        (b"delete k\r\n", b"STORED\r\n"),
        (b"incr k 1\r\n", b"TOUCHED\r\n"),
        (b"incr k 1\r\n", b"-1\r\n"),
        (b"touch k 1\r\n", b"DELETED\r\n"),
        (b"mg k v\r\n", b"STORED\r\n"),
        # A meta reply echoes the request's opaque and key: another's is another request's.
        (b"mg k v Oa1 k\r\n", b"EN Oa0 kk\r\n"),
        (b"mg k v k\r\n", b"VA 1 kother\r\nx\r\n"),
        (b"md k Oa1 q\r\n", b"HD Oa2\r\nMN\r\n"),
        (b"ms k 1\r\nx\r\n", b"EN\r\n"),
        (b"flush_all\r\n", b"STORED\r\n"),
    ],
)
def test_a_reply_of_another_kind_is_a_server_error(request_: bytes, bad: bytes) -> None:
    with routed(first_connection_answers(bad)) as (p, backend), connect(p, 10) as c:
        if b"noreply" in request_:
            # A noreply request shows memcached's error lines: the router's too, as the one
            # for a failed server does (`mn` is answered after it, in order).
            c.send(request_)
            assert c.request(b"mn\r\n", b"MN\r\n") == INVALID + b"MN\r\n"
        else:
            assert c.request(request_) == INVALID
        # The connection was dropped; a new one answers.
        assert c.request(b"get k\r\n", b"END\r\n") == honest(b"get k")
        assert backend.connections == 2
        server = p.stats()["faulty"][f"127.0.0.1:{backend.port}"]
        assert server["server_err"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        b"\x8f\x00\x17garbage without a line end",
        b"ENDX",
        b"SERVER_ERROR " + b"x" * 5000,
        b"VALUE " + b"k" * 5000,
    ],
    ids=["binary", "not-a-word", "long-error-line", "long-value-line"],
)
def test_bytes_that_can_become_no_reply_fail_the_request_at_once(bad: bytes) -> None:
    # No pool timeout: only the check of the bytes answers, never a line end.
    with routed(first_connection_answers(bad)) as (p, _), connect(p, 20) as c:
        assert c.request(b"get k\r\n") == INVALID


def held_then_doubled(n: int, reqs: list[bytes]) -> bytes:
    """Holds the first request until a second comes, then answers the first twice: one
    reply too many, which shifts every later one onto the request after."""
    if n > 1:
        return honest(reqs[-1])
    if len(reqs) == 1:
        return b""
    return honest(reqs[0]) * 2 + b"".join(honest(r) for r in reqs[1:])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (b"get a\r\n", b"get b\r\n"),
        (b"get a\r\n", b"get b c\r\n"),
        (b"set a 0 0 1\r\nx\r\n", b"get b\r\n"),
        (b"get a\r\n", b"gat 10 b\r\n"),
    ],
)
def test_one_reply_too_many_never_answers_the_next_request(first: bytes, second: bytes) -> None:
    with (
        routed(held_then_doubled) as (p, backend),
        connect(p, 10) as c1,
        connect(p, 10) as c2,
    ):
        c1.send(first)
        eventually(lambda: len(backend.received) == 1, "the first request forwarded")
        c2.send(second)
        if first.startswith(b"get"):
            assert c1.read_until(b"END\r\n") == honest(first)
        else:
            assert c1.read_line() == b"STORED\r\n"
        assert c2.read_line() == INVALID


@pytest.mark.parametrize(
    ("asked", "reply"),
    [
        # An item nobody asked for, before the one asked for.
        (b"get a\r\n", b"VALUE z 0 5\r\nwrong\r\n" + honest(b"get a")),
        # Out of the order asked.
        (b"get a b\r\n", honest(b"get b")[:-5] + honest(b"get a")),
        # gat's items are checked too.
        (b"gat 10 a\r\n", honest(b"get z")),
        # A key asked once, answered twice.
        (b"get a b\r\n", honest(b"get a a")),
    ],
)
def test_an_item_of_a_key_not_asked_for_is_a_server_error(asked: bytes, reply: bytes) -> None:
    with routed(first_connection_answers(reply)) as (p, _), connect(p, 10) as c:
        assert c.request(asked) == INVALID


def test_gets_merged_on_one_line_are_checked_against_their_keys() -> None:
    # One client's pipelined gets go out as one line, `get a b c`, split back by key.
    def answer(n: int, reqs: list[bytes]) -> bytes:
        return honest(b"get a z c") if n == 1 else honest(reqs[-1])

    with routed(answer) as (p, backend), connect(p, 10) as c:
        c.send(b"get a\r\nget b\r\nget c\r\n")
        assert [c.read_line() for _ in range(3)] == [INVALID] * 3
        assert backend.received == [b"get a b c\r\n"]
        assert c.request(b"get b\r\n", b"END\r\n") == honest(b"get b")


@pytest.mark.parametrize("length", [4294967296, 2147483648, 64 * 1024 * 1024 + 1])
def test_a_value_over_the_limit_is_refused_when_announced(length: int) -> None:
    # Announced, then nothing: the router must not wait for (or make room for) the value.
    bad = b"VALUE k 0 %d\r\n" % length
    with routed(first_connection_answers(bad)) as (p, _), connect(p, 20) as c:
        assert c.request(b"get k\r\n") == INVALID


def test_item_size_max_bounds_values_both_ways(tmp_path: Path) -> None:
    def answer(n: int, reqs: list[bytes]) -> bytes:
        key = reqs[-1].split()[1]
        size = int(key[1:])
        return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, size, b"v" * size)

    with routed(answer, item_size_max=4096) as (p, backend), connect(p, 10) as c:
        assert c.request(b"get k4096\r\n", b"END\r\n").startswith(b"VALUE k4096 0 4096\r\n")
        assert c.request(b"get k4097\r\n", b"END\r\n", INVALID) == INVALID
        # A client's value is held to the same limit, as memcached's -I counts an item.
        assert c.request(b"set big 0 0 5000\r\n" + b"x" * 5000 + b"\r\n") == (
            b"SERVER_ERROR object too large for cache\r\n"
        )
        assert not any(r.startswith(b"set") for r in backend.received)
    conf = tmp_path / "small.yml"
    conf.write_text(pool_yaml("a", "127.0.0.1:22121", ["127.0.0.1:11211:1"], item_size_max=100))
    refused = subprocess.run(
        [memfleet_bin(), "route", "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0
    assert 'directive "item_size_max" is not between 1024 and 1073741824' in refused.stderr


@pytest.mark.parametrize(
    "bad",
    [b"WHATEVER 1 2 3\r\n", b"+OK\n", b"$-2\r\n", b"\x8f\x00\x17garbage", b"$3\r\nabcd\r\n"],
    ids=["not-a-type", "bare-lf", "bad-length", "binary", "bulk-overrun"],
)
def test_a_redis_pool_fails_a_request_on_bytes_that_are_not_resp(bad: bytes) -> None:
    get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"

    # FakeBackend takes RESP requests line by line: answer on the array header.
    def answer(n: int, reqs: list[bytes]) -> bytes:
        if not reqs[-1].startswith(b"*"):
            return b""
        return bad if n == 1 else b"$-1\r\n"

    with routed(answer, redis=True) as (p, backend), connect(p, 20) as c:
        assert c.request(get) == b"-ERR invalid reply from server\r\n"
        assert c.request(get) == b"$-1\r\n"
        assert backend.connections == 2


def sized_values(n: int, reqs: list[bytes]) -> bytes:
    """`get k<size>` answers a value of <size> bytes."""
    key = reqs[-1].split()[1]
    size = int(key[1:])
    return b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, size, b"v" * size)


def test_an_mcrouter_config_checks_replies_and_takes_item_size_max() -> None:
    backend = FakeBackend(sized_values)
    config = {
        "pools": {"A": {"servers": [f"127.0.0.1:{backend.port}"]}},
        "route": "PoolRoute|A",
    }
    try:
        with McRouter(config, "--item-size-max", "4096") as r, connect(r, 10) as c:
            assert c.request(b"get k4096\r\n", b"END\r\n").startswith(b"VALUE k4096 0 4096")
            remote = b"SERVER_ERROR remote error\r\n"
            assert c.request(b"get k4097\r\n", b"END\r\n", remote) == remote
            # Through an execution (the routing prefix is stripped): the key as sent.
            got = c.request(b"get /././k10\r\n", b"END\r\n")
            assert got == b"VALUE /././k10 0 10\r\nvvvvvvvvvv\r\nEND\r\n"
    finally:
        backend.close()
    refused = subprocess.run(
        [memfleet_bin(), "route", "--config-str", "{}", "--item-size-max", "1023"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0
    assert "1023 is not in 1024..=1073741824" in refused.stderr, refused.stderr
