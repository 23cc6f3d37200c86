"""The Rust reply parsers through both of their doors: the blocking connection's ``read_reply``
and the ``Reader`` an asyncio connection feeds with the chunks it receives, whole or one byte at a
time. Each reply must come out the same every way."""

from __future__ import annotations

import socket
from typing import Any, Callable

import pytest

from memfleet import _proto as P
from memfleet._native import Conn, Reader, Reply
from memfleet.errors import MemfleetServerError

KEYS = [b"a", b"b", b"c"]

# (parser, the reply's bytes, what it parses into)
REPLIES: list[tuple[Callable[[], Reply], bytes, Any]] = [
    (lambda: P.parse_get(True), b"VA 2 f3 c9\r\nhi\r\n", (b"hi", 3, 9)),
    (lambda: P.parse_get(True), b"EN\r\n", None),
    (lambda: P.parse_get(False), b"VALUE k 5 2 7\r\nhi\r\nEND\r\n", (b"hi", 5, 7)),
    (
        lambda: P.parse_get_many(True),
        b"VA 1 f2 ka\r\nx\r\nEN\r\nVA 0 kb\r\n\r\nMN\r\n",
        {b"a": (b"x", 2), b"b": (b"", 0)},
    ),
    (lambda: P.parse_get_many(False), b"VALUE a 1 2\r\nxy\r\nEND\r\n", {b"a": (b"xy", 1)}),
    (lambda: P.parse_store(True), b"NS\r\n", False),
    (lambda: P.parse_set_many(True, KEYS), b"HD\r\nSERVER_ERROR oom\r\nNS\r\n", [b"b", b"c"]),
    (lambda: P.parse_add_token_many(True, KEYS[:1]), b"NS\r\nNS\r\nEN\r\n", [b"a"]),
    (lambda: P.parse_delete(False), b"DELETED\r\n", True),
    (lambda: P.parse_delete_many(True, 3), b"NF\r\nMN\r\n", 2),
    (lambda: P.parse_delete_many(False, 2), b"NOT_FOUND\r\nDELETED\r\n", 1),
    (lambda: P.parse_touch(True), b"EN\r\n", False),
    (lambda: P.parse_arith(True), b"VA 2\r\n42\r\n", 42),
    (lambda: P.parse_arith(False), b"18446744073709551615\r\n", 2**64 - 1),
    (lambda: P.parse_arith(False), b"NOT_FOUND\r\n", None),
    (lambda: P.parse_exists(False), b"VALUE m 0 1\r\nx\r\nEND\r\n", True),
    (lambda: P.parse_probe(True), b"ERROR\r\n", False),
    (lambda: P.parse_ok(True), b"OK\r\n", True),
    (lambda: P.parse_version(True), b"VERSION 1.6.18\r\n", "1.6.18"),
    (lambda: P.parse_stats(True), b"STAT pid 1\r\nSTAT v a b\r\nEND\r\n", {"pid": "1", "v": "a b"}),
    (lambda: P.parse_line(True), b"NOT_FOUND\r\n", b"NOT_FOUND"),
]


def through_reader(parse: Callable[[], Reply], chunks: list[bytes]) -> Any:
    r = Reader()
    assert not r.begin(parse())
    for i, chunk in enumerate(chunks):
        if r.feed(chunk):
            assert i == len(chunks) - 1, "whole before its last byte"
            return r.result()
    raise AssertionError("never whole")


def through_conn(parse: Callable[[], Reply], data: bytes) -> Any:
    a, b = socket.socketpair()
    try:
        conn = Conn("127.0.0.1", 0, None, 1.0, a)
        b.sendall(data)
        return conn.read_reply(parse())
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("parse,data,want", REPLIES)
def test_every_reply_parses_the_same_whole_bytewise_and_off_a_connection(
    parse: Callable[[], Reply], data: bytes, want: Any
) -> None:
    assert through_reader(parse, [data]) == want
    assert through_reader(parse, [data[i : i + 1] for i in range(len(data))]) == want
    assert through_conn(parse, data) == want


def test_lease_flags() -> None:
    lease = through_reader(lambda: P.parse_lease(True), [b"VA 0 f0 c5 W\r\n\r\n"])
    assert (lease.win, lease.hit, lease.cas, lease.data) == (True, False, 5, b"")
    lease, marked = through_reader(lambda: P.parse_lease_exists(True), [b"VA 1 f2 X\r\nv\r\nHD\r\n"])
    assert (lease.stale, lease.hit, lease.flags, lease.data, marked) == (True, True, 2, b"v", True)


def test_bytes_after_a_reply_are_the_next_ones() -> None:
    r = Reader()
    assert not r.feed(b"HD\r\nNF")  # nothing waited for yet: kept
    assert r.begin(P.parse_store(True))
    assert r.result() is True
    assert not r.begin(P.parse_delete(True))
    assert r.feed(b"\r\nEN\r\n")
    assert r.result() is False
    assert r.begin(P.parse_touch(True))
    assert r.result() is False
    # a chunk holding a whole reply and more, with nothing buffered before it
    assert not r.begin(P.parse_store(True))
    assert r.feed(b"HD\r\nEN\r\n")
    assert r.result() is True
    assert r.begin(P.parse_touch(True))
    assert r.result() is False


def test_a_bad_reply_raises_and_is_dropped() -> None:
    r = Reader()
    r.begin(P.parse_get(True))
    with pytest.raises(MemfleetServerError, match="SERVER_ERROR busy"):
        r.feed(b"SERVER_ERROR busy\r\nEN\r\n")
    # what followed the bad line is not read as the next reply
    assert not r.begin(P.parse_get(True))
    with pytest.raises(MemfleetServerError):
        through_reader(lambda: P.parse_arith(False), [b"12x\r\n"])
    with pytest.raises(MemfleetServerError):
        through_conn(lambda: P.parse_stats(True), b"STAT pid\r\nEND\r\n")


def test_tracking_replies_and_notices() -> None:
    assert P.parse_tracking(b"TRACKING 7") == 7
    assert P.parse_tracking(b"ERROR") is None
    with pytest.raises(MemfleetServerError):
        P.parse_tracking(b"SERVER_ERROR too many listeners")
    assert P.parse_notice(b"IV k1") == b"k1"
    assert P.parse_notice(b"IV a2V5IHg= b") == b"key x"
    assert P.parse_notice(b"IV_ALL") is None
    for bad in (b"IV", b"IV a b c", b"IV a2V* b", b"HD"):
        with pytest.raises(ValueError):
            P.parse_notice(bad)
