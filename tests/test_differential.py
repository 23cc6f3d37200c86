"""Differential test: the same request sequences to Debian's memcached and to memfleet.

Replies must be equal after normalising what must differ (CAS values, version strings, the
debug line of `me`, and TTL/last-access figures that can straddle a second).
"""

from __future__ import annotations

import re
import socket

import pytest
from differential_corpus import corpus
from harness import Server

SENTINEL = b"mn\r\n"
SENTINEL_REPLY = b"MN\r\n"

CAS_IN_VALUE = re.compile(rb"^(VALUE \S+ \d+ \d+) \d+(\r?)$", re.MULTILINE)
META_NUMBERS = re.compile(rb"^((?:VA|HD|EN|NF|NS|EX)\b.*)$", re.MULTILINE)
VERSION = re.compile(rb"^VERSION .*$", re.MULTILINE)
ME_LINE = re.compile(rb"^ME \S+ .*$", re.MULTILINE)


def normalise(reply: bytes) -> bytes:
    reply = CAS_IN_VALUE.sub(rb"\1 <cas>\2", reply)
    reply = VERSION.sub(b"VERSION <v>", reply)
    reply = ME_LINE.sub(b"ME <debug>", reply)

    def meta_line(m: re.Match[bytes]) -> bytes:
        line = m.group(1)
        line = re.sub(rb" c\d+", b" c<cas>", line)
        line = re.sub(rb" l\d+", b" l<n>", line)
        line = re.sub(
            rb" t(\d+)", lambda t: b" t<ttl>" if int(t.group(1)) > 0 else t.group(0), line
        )
        return line

    return META_NUMBERS.sub(meta_line, reply)


class Session:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed = False

    def exchange(self, request: bytes) -> bytes:
        """Sends a request followed by `mn`; returns everything before the MN reply."""
        if self.closed:
            return b"<closed>"
        try:
            self.sock.sendall(request + SENTINEL)
            while SENTINEL_REPLY not in self.buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.closed = True
                    out, self.buf = self.buf + b"<closed>", b""
                    return out
                self.buf += chunk
        except (socket.timeout, TimeoutError):
            out, self.buf = self.buf + b"<timeout>", b""
            return out
        except OSError:
            self.closed = True
            return self.buf + b"<closed>"
        i = self.buf.index(SENTINEL_REPLY)
        out, self.buf = self.buf[:i], self.buf[i + len(SENTINEL_REPLY) :]
        return out

    def close(self) -> None:
        self.sock.close()


CORPUS = corpus()


def run_sequence(port: int, n: int, seq: list[bytes]) -> list[tuple[bytes, bytes]]:
    s = Session(port)
    try:
        prefix = b"d%d_" % n
        return [
            (req, normalise(s.exchange(req.replace(b"{k}", prefix).replace(b"{bin}", prefix))))
            for req in seq
        ]
    finally:
        s.close()


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 200
    assert sum(len(s) for s in CORPUS) >= 500


@pytest.mark.parametrize("n", range(len(CORPUS)))
def test_same_replies_as_memcached(pair: tuple[Server, Server], n: int) -> None:
    ref, mine = pair
    seq = CORPUS[n]
    expected = run_sequence(ref.port or 0, n, seq)
    got = run_sequence(mine.port or 0, n, seq)
    assert got == expected
