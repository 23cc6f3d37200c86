"""`-R N`: a connection that has N requests run in one turn with more already received yields
to the others, and `conn_yields` counts it, as memcached 1.6.18 does."""

from __future__ import annotations

import struct

import pytest
from harness import Conn, Server, memcached, memfleet


def conn_yields(port: int) -> int:
    with Conn(port) as c:
        stats = c.request(b"stats\r\n", b"END\r\n").decode()
    line = next(x for x in stats.splitlines() if x.startswith("STAT conn_yields "))
    return int(line.split()[2])


def pipeline_gets(server: Server, count: int) -> None:
    """`count` gets in one send (small enough to arrive in one read), all answered.

    Only gets: with -R 1 memcached 1.6.18 also counts a yield after any single non-get
    command (an artifact of its state machine), which memfleet does not reproduce.
    """
    with Conn(server.port or 0) as c:
        c.send(b"".join(b"get k%d\r\n" % i for i in range(count)))
        for _ in range(count):
            assert c.read_until(b"END\r\n") == b"END\r\n"


@pytest.mark.parametrize("reqs", [1, 5, 20])
@pytest.mark.parametrize("count", [10, 100, 1000])
def test_conn_yields_match_memcached(reqs: int, count: int) -> None:
    got = []
    for start in (memfleet, memcached):
        with start("-R", str(reqs), "-t", "1") as s:
            pipeline_gets(s, count)
            got.append(conn_yields(s.port or 0))
    # Every -R requests with more waiting is one yield: (count - 1) // reqs.
    assert got == [(count - 1) // reqs] * 2


@pytest.mark.parametrize("reqs", [1, 5, 20])
@pytest.mark.parametrize("count", [10, 100])
def test_binary_conn_yields_match_memcached(reqs: int, count: int) -> None:
    """The budget is per connection turn on binary connections too, not per read."""

    def get(key: bytes) -> bytes:
        return struct.pack(">BBHBBHIIQ", 0x80, 0, len(key), 0, 0, 0, len(key), 0, 0) + key

    got = []
    for start in (memfleet, memcached):
        with start("-R", str(reqs), "-t", "1") as s, Conn(s.port or 0) as c:
            c.send(b"".join(get(b"k%d" % i) for i in range(count)))
            received = 0
            # Each miss is a 24-byte header and "Not found".
            while received < count * 33:
                chunk = c.sock.recv(65536)
                assert chunk
                received += len(chunk)
            got.append(conn_yields(s.port or 0))
    assert got == [(count - 1) // reqs] * 2


def test_a_yielding_connection_keeps_its_order_and_others_are_served() -> None:
    with memfleet("-R", "1", "-t", "1") as s, Conn(s.port or 0) as other:
        with Conn(s.port or 0) as c:
            c.send(b"".join(b"set k%d 0 0 1\r\n%d\r\n" % (i, i % 10) for i in range(300)))
            assert other.request(b"version\r\n").startswith(b"VERSION")
            for _ in range(300):
                assert c.read_line() == b"STORED\r\n"
            c.send(b"".join(b"get k%d\r\n" % i for i in range(300)))
            for i in range(300):
                assert c.read_until(b"END\r\n") == b"VALUE k%d 0 1\r\n%d\r\nEND\r\n" % (i, i % 10)
        assert conn_yields(s.port or 0) >= 299 * 2
