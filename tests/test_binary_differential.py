"""Differential test of the binary protocol: the same packet sequences (tests/binary_corpus.py)
to Debian's memcached 1.6.18 and to memfleet; the replies must be the same packets.

Masked, because they legitimately differ: CAS values (only zero vs non-zero is compared; each
server numbers its stores its own way), the version string, and the statistics of a stat
reply (names and values; its statuses, packet framing and terminator are compared).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from binary_corpus import (
    GET,
    GETK,
    NOOP,
    SET,
    STAT,
    VERSION,
    K,
    Sequence_,
    corpus,
    parse,
    pkt,
    store_extras,
)
from harness import Server, free_port, memcached, memfleet, udp_frame

SENTINEL_OPAQUE = 0xFEEDF00D
SENTINEL = struct.pack(">BBHBBHIIQ", 0x80, NOOP, 0, 0, 0, 0, 0, SENTINEL_OPAQUE, 0)
Packet = tuple[object, ...]


def normalise(data: bytes) -> list[Packet]:
    packets, rest = parse(data)
    out: list[Packet] = []
    for opcode, status, opaque, cas, extras, key, value in packets:
        if opcode == STAT and status == 0 and key:
            continue  # one statistic: names and values are the server's own
        if opcode == VERSION and status == 0:
            value = b"<version>"
        out.append((opcode, status, opaque, "cas" if cas else 0, extras, key, value))
    if rest:
        out.append(("raw", rest))
    return out


class Session:
    def __init__(self, port: int, prefix: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.prefix = prefix
        self.buf = b""
        self.closed = False
        self.last_cas = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data.replace(K, self.prefix))

    def read_idle(self, wait: float) -> bytes:
        """What arrives until nothing has come for `wait` seconds (or the peer closes)."""
        self.sock.settimeout(wait)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.closed = True
                    break
                self.buf += chunk
        except (socket.timeout, TimeoutError):
            pass
        except OSError:
            self.closed = True
        finally:
            self.sock.settimeout(2)
        out, self.buf = self.buf, b""
        return out

    def until_sentinel(self) -> bytes:
        while True:
            packets, _ = parse(self.buf)
            size = 0
            for p in packets:
                size += 24 + len(p[4]) + len(p[5]) + len(p[6])
                if p[0] == NOOP and p[2] == SENTINEL_OPAQUE:
                    out, self.buf = self.buf[: size - 24], self.buf[size:]
                    return out
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                out, self.buf = self.buf, b""
                return out + b"<timeout>"
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                out, self.buf = self.buf, b""
                return out + b"<closed>"
            self.buf += chunk

    def step(self, parts: list[bytes], cas_from_last: bool, idle: bool) -> list[Packet]:
        if self.closed:
            return [("closed",)]
        got = b""
        try:
            for i, part in enumerate(parts):
                if cas_from_last:
                    part = part[:16] + struct.pack(">Q", self.last_cas) + part[24:]
                self.send(part)
                if i + 1 < len(parts):
                    # A half-sent packet gets no reply (and must not close the connection).
                    got += self.read_idle(0.05) + (b"<closed>" if self.closed else b"")
            if idle:
                got += self.read_idle(0.3) + (b"<closed>" if self.closed else b"")
            else:
                self.sock.sendall(SENTINEL)
                got += self.until_sentinel()
        except OSError:
            self.closed = True
            got += b"<closed>"
        for p in parse(got)[0]:
            if p[3]:
                self.last_cas = p[3]
        return normalise(got)


def run_sequence(port: int, n: int, seq: Sequence_) -> list[list[Packet]]:
    s = Session(port, b"b%04d_" % n)
    try:
        return [s.step(st.parts, st.cas_from_last, st.idle) for st in seq.steps]
    finally:
        s.sock.close()


CORPUS = corpus()


def test_corpus_is_large_and_a_third_malformed() -> None:
    assert len(CORPUS) >= 200
    malformed = sum(1 for s in CORPUS if s.malformed)
    assert malformed * 3 >= len(CORPUS), (malformed, len(CORPUS))


@pytest.mark.parametrize("n", range(len(CORPUS)))
def test_same_binary_replies_as_memcached(pair: tuple[Server, Server], n: int) -> None:
    ref, mine = pair
    seq = CORPUS[n]
    expected = run_sequence(ref.port or 0, n, seq)
    got = run_sequence(mine.port or 0, n, seq)
    assert got == expected
    assert mine.proc is not None and mine.proc.poll() is None, "the server died"


def test_udp_same_as_memcached() -> None:
    """Requests in UDP datagrams (8-byte frame header): the same replies, each request's reply
    in a message of its own, binary or text decided per datagram."""
    datagrams = [
        pkt(SET, b"udpkey", store_extras(5), b"value"),
        pkt(GETK, b"udpkey") + pkt(GET, b"udpmiss") + pkt(NOOP),
        b"get udpkey\r\nget udpmiss\r\n",
        pkt(GET, b"udpkey", keylen=300),
        pkt(NOOP, magic=0x42),
        pkt(0x60, b"x") + pkt(NOOP),
    ]
    results: list[list[list[object]]] = []
    for start in (memcached, memfleet):
        udp = free_port(socket.SOCK_DGRAM)
        with start("-U", str(udp)):
            time.sleep(0.2)
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            replies: list[list[object]] = []
            for i, payload in enumerate(datagrams):
                sock.settimeout(2)
                sock.sendto(udp_frame(i, payload), ("127.0.0.1", udp))
                got: list[object] = []
                try:
                    while True:
                        data, _ = sock.recvfrom(65536)
                        body = data[8:]
                        got.append((data[:8], normalise(body) if body[:1] == b"\x81" else body))
                        sock.settimeout(0.3)
                except (socket.timeout, TimeoutError):
                    pass
                replies.append(got)
            sock.close()
            results.append(replies)
    assert results[0] == results[1]
    assert len(results[1][1]) == 3, "one message per binary request"
