"""Bad server replies through the Rust wire layer: a stand-in server answers every request with
garbage, truncated or out-of-step bytes, and the client, blocking or asyncio, raises a memfleet
error, never crashes or waits forever (a reply that never ends runs into the client's timeout)."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import listening_socket

import memfleet
from memfleet.errors import MemfleetConnectionError, MemfleetError, MemfleetServerError

# proto's fuzz seed of reply streams (its first byte picks the fuzzer's chunk size)
SEED = (Path(__file__).resolve().parents[3] / "crates/proto/fuzz/seeds/reply_frame/memcached").read_bytes()[1:]


class StandIn:
    """Answers each request with ``reply``, then closes the connection unless ``hold``."""

    def __init__(self) -> None:
        self.lsock = listening_socket()
        self.address = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.reply = b""
        self.hold = False
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                conn.sendall(self.reply)
                if self.hold:
                    self.held.append(conn)
                    return
                conn.shutdown(socket.SHUT_RDWR)
                break
        except OSError:
            pass
        conn.close()

    def close(self) -> None:
        self.lsock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def standin() -> Iterator[StandIn]:
    s = StandIn()
    yield s
    s.close()


def client(standin: StandIn, protocol: str) -> memfleet.Client:
    # failure_limit=0: the stand-in is never ejected, every call reaches it
    return memfleet.Client([standin.address], protocol=protocol, timeout=0.3, failure_limit=0)


def aclient(standin: StandIn, protocol: str) -> memfleet.AsyncClient:
    return memfleet.AsyncClient([standin.address], protocol=protocol, timeout=0.3, failure_limit=0)


def outcome(fn: Any) -> Any:
    """What a call returned, or the type of the memfleet error it raised (anything else fails)."""
    try:
        return fn()
    except MemfleetError as exc:
        return type(exc)


async def aoutcome(fn: Any) -> Any:
    """As :func:`outcome`, for a coroutine function."""
    try:
        return await fn()
    except MemfleetError as exc:
        return type(exc)


CASES = [
    # (reply, the error meta gets, the error text gets)
    (b"SERVER_ERROR out of memory\r\n", MemfleetServerError, MemfleetServerError),
    (b"VA x f0\r\n", MemfleetServerError, MemfleetServerError),
    (b"VA 99999999999 f0 kk\r\n", MemfleetServerError, MemfleetServerError),
    (b"VALUE k zz 3\r\nabc\r\nEND\r\n", MemfleetServerError, MemfleetServerError),
    (b"VA 3 f0 kk\r\nabcXY", MemfleetServerError, MemfleetServerError),
    (b"VALUE k 0 3\r\nabcXYEND\r\n", MemfleetServerError, MemfleetServerError),
    (b"x" * 20000, MemfleetServerError, MemfleetServerError),
    (b"VA 10 f0 kk\r\nabc", MemfleetConnectionError, MemfleetServerError),
    (b"VALUE k 0 10\r\nabc", MemfleetServerError, MemfleetConnectionError),
    (b"\x00\xff\r\n\r\n", MemfleetServerError, MemfleetServerError),
    (b"", MemfleetConnectionError, MemfleetConnectionError),
]


@pytest.mark.parametrize("protocol", ["meta", "text"])
@pytest.mark.parametrize("reply,meta_error,text_error", CASES)
def test_bad_replies_raise_memfleet_errors(
    standin: StandIn, protocol: str, reply: bytes, meta_error: type, text_error: type
) -> None:
    standin.reply = reply
    c = client(standin, protocol)
    want = meta_error if protocol == "meta" else text_error
    assert outcome(lambda: c.get_many(["k", "j"])) is want
    assert outcome(lambda: c.get("k")) is want
    c.close()


def test_a_multiget_hit_without_its_key_is_a_bad_reply(standin: StandIn) -> None:
    # a server that ignores the `k` flag: its hit cannot be matched to a key
    standin.reply = b"VA 1 f0\r\nx\r\nMN\r\n"
    c = client(standin, "meta")
    assert outcome(lambda: c.get_many(["k", "j"])) is MemfleetServerError
    assert outcome(lambda: c.get("k")) == b"x"  # a one-key get does not ask for the key
    c.close()
    ac = aclient(standin, "meta")

    async def many() -> Any:
        return await aoutcome(lambda: ac.get_many(["k", "j"]))

    assert asyncio.run(many()) is MemfleetServerError


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_a_reply_that_never_ends_times_out(standin: StandIn, protocol: str) -> None:
    # the length promises more than ever comes and the connection stays open
    standin.reply = b"VA 9999999999 f0 kk\r\n" if protocol == "meta" else b"VALUE k 0 9999999999\r\n"
    standin.hold = True
    c = client(standin, protocol)
    assert outcome(lambda: c.get_many(["k"])) is MemfleetConnectionError
    assert outcome(lambda: c.get("k")) is MemfleetConnectionError
    c.close()


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_every_truncation_and_byte_flip_of_the_fuzz_seed(standin: StandIn, protocol: str) -> None:
    c = client(standin, protocol)
    streams = [SEED[:i] for i in range(len(SEED) + 1)]
    streams += [SEED[:i] + bytes([SEED[i] ^ 0x20]) + SEED[i + 1 :] for i in range(len(SEED))]
    for stream in streams:
        standin.reply = stream
        for call in (lambda: c.get_many(["a", "bb"]), lambda: c.get("a")):
            r = outcome(call)
            # a memfleet error, or a reply that happened to parse (a dict of values, a value)
            assert r in (MemfleetServerError, MemfleetConnectionError) or not isinstance(r, type), (stream, r)
    c.close()


class Interrupted(Exception):
    pass


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted


@pytest.mark.parametrize("op", ["get", "get_many"])
def test_a_signal_ends_a_blocked_read(standin: StandIn, op: str) -> None:
    # the server never answers; a signal handler's exception (as Ctrl-C's KeyboardInterrupt)
    # must end the wait itself, not surface only once the read has timed out
    standin.reply = b""
    standin.hold = True
    c = memfleet.Client([standin.address], protocol="meta", timeout=3.0, failure_limit=0)
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted) as caught:
            c.get("k") if op == "get" else c.get_many(["k", "j"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert caught.value.__context__ is None, caught.value.__context__
    c.close()


# -- the asyncio client: the same replies, parsed as its protocol receives them


@pytest.mark.parametrize("protocol", ["meta", "text"])
@pytest.mark.parametrize("reply,meta_error,text_error", CASES)
def test_bad_replies_raise_memfleet_errors_async(
    standin: StandIn, protocol: str, reply: bytes, meta_error: type, text_error: type
) -> None:
    standin.reply = reply
    want = meta_error if protocol == "meta" else text_error

    async def main() -> None:
        c = aclient(standin, protocol)
        assert await aoutcome(lambda: c.get_many(["k", "j"])) is want
        assert await aoutcome(lambda: c.get("k")) is want
        await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_a_reply_that_never_ends_times_out_async(standin: StandIn, protocol: str) -> None:
    standin.reply = b"VA 9999999999 f0 kk\r\n" if protocol == "meta" else b"VALUE k 0 9999999999\r\n"
    standin.hold = True

    async def main() -> None:
        c = aclient(standin, protocol)
        assert await aoutcome(lambda: c.get_many(["k"])) is MemfleetConnectionError
        assert await aoutcome(lambda: c.get("k")) is MemfleetConnectionError
        await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_every_truncation_and_byte_flip_of_the_fuzz_seed_async(standin: StandIn, protocol: str) -> None:
    streams = [SEED[:i] for i in range(len(SEED) + 1)]
    streams += [SEED[:i] + bytes([SEED[i] ^ 0x20]) + SEED[i + 1 :] for i in range(len(SEED))]

    async def main() -> None:
        c = aclient(standin, protocol)
        for stream in streams:
            standin.reply = stream
            for call in (lambda: c.get_many(["a", "bb"]), lambda: c.get("a")):
                r = await aoutcome(call)
                assert r in (MemfleetServerError, MemfleetConnectionError) or not isinstance(r, type), (stream, r)
        await c.close()

    asyncio.run(main())


# -- every other reply kind, both clients

BAD = [
    b"SERVER_ERROR out of memory\r\n",
    b"VA x f0\r\n",
    b"VA 2 f0\r\nabXY",
    b"VA 10 f0\r\nabc",
    b"VALUE k zz 3\r\nabc\r\nEND\r\n",
    b"STAT pid\r\nEND\r\n",
    b"VA 2\r\nzz\r\n",
    b"12x\r\n",
    b"x" * 20000,
    b"\x00\xff\r\n\r\n",
    b"",
]


def _ops(c: Any) -> list[Any]:
    """A call of each operation whose reply is parsed by a kind of its own."""
    return [
        lambda: c.set("k", "v"),
        lambda: c.add("k", "v"),
        lambda: c.gets("k"),
        lambda: c.delete("k"),
        lambda: c.touch("k", 5),
        lambda: c.incr("n"),
        lambda: c.decr("n", initial=3),
        lambda: c.set_many({"a": 1, "b": 2}),
        lambda: c.delete_many(["a", "b"]),
        lambda: c.stats(),
        lambda: c.version(),
        lambda: c.flush_all(),
    ]


@pytest.mark.parametrize("protocol", ["meta", "text"])
@pytest.mark.parametrize("reply", BAD)
def test_every_reply_kind_raises_memfleet_errors(standin: StandIn, protocol: str, reply: bytes) -> None:
    standin.reply = reply
    c = client(standin, protocol)
    for i, call in enumerate(_ops(c)):
        r = outcome(call)
        # a memfleet error, or a reply that happens to be an answer (set_many's SERVER_ERROR)
        assert r in (MemfleetServerError, MemfleetConnectionError) or not isinstance(r, type), (i, r)
    c.close()

    async def main() -> None:
        c = aclient(standin, protocol)
        for i, call in enumerate(_ops(c)):
            r = await aoutcome(call)
            assert r in (MemfleetServerError, MemfleetConnectionError) or not isinstance(r, type), (i, r)
        await c.close()

    asyncio.run(main())
