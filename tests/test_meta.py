"""The meta protocol (mg ms md ma mn me), including leases against thundering herds."""

from __future__ import annotations

import base64
import socket
import threading

import pytest
from conftest import TARGET
from harness import Conn, Server


def test_ms_mg_flags_in_request_order(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"ms foo 3 T0 F5\r\nbar\r\n") == b"HD\r\n"
        reply = c.request(b"mg foo v f t s k O123\r\n", b"bar\r\n")
        assert reply == b"VA 3 f5 t-1 s3 kfoo O123\r\nbar\r\n"
        assert c.request(b"mg foo\r\n") == b"HD\r\n"
        assert c.request(b"mg foo k v\r\n", b"bar\r\n") == b"VA 3 kfoo\r\nbar\r\n"
        assert c.request(b"mg miss v\r\n") == b"EN\r\n"


def test_quiet_mode_closed_by_mn(server: Server) -> None:
    with Conn(server.port) as c:
        c.send(b"ms a 1 q\r\n1\r\nms b 1 q\r\n2\r\nmg a v q\r\nmg nope v q\r\nmd nope q\r\nmn\r\n")
        assert c.read_until(b"MN\r\n") == b"VA 1\r\n1\r\nNF\r\nMN\r\n"


def test_cas_compare_and_return(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"ms k 1\r\nx\r\n")
        line = c.request(b"mg k c\r\n")
        assert line.startswith(b"HD c")
        cas = int(line.split()[1][1:])
        assert c.request(b"ms k 1 C%d\r\ny\r\n" % (cas + 1)) == b"EX\r\n"
        assert c.request(b"ms k 1 C%d\r\ny\r\n" % cas) == b"HD\r\n"
        assert c.request(b"ms missing 1 C5\r\ny\r\n") == b"NF\r\n"
        assert c.request(b"md k C1\r\n") == b"EX\r\n"
        assert c.request(b"md k q\r\nmn\r\n", b"MN\r\n") == b"MN\r\n"
        assert c.request(b"md k\r\n") == b"NF\r\n"


def test_ms_modes(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"ms k 1 ME\r\na\r\n") == b"HD\r\n"
        assert c.request(b"ms k 1 ME\r\nb\r\n") == b"NS\r\n"
        assert c.request(b"ms k 1 MA\r\nc\r\n") == b"HD\r\n"
        assert c.request(b"ms k 1 MP\r\nd\r\n") == b"HD\r\n"
        assert c.request(b"mg k v\r\n", b"dac\r\n") == b"VA 3\r\ndac\r\n"
        assert c.request(b"ms other 1 MR\r\ne\r\n") == b"NS\r\n"
        assert c.request(b"ms other 1 MA\r\ne\r\n") == b"NS\r\n"
        assert c.request(b"ms k 1 MS\r\nf\r\n") == b"HD\r\n"
        assert c.request(b"ms k 1 MZ\r\nf\r\n") == b"CLIENT_ERROR invalid mode for ms M token\r\n"


def test_ma_arithmetic(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"ma cnt\r\n") == b"NF\r\n"
        assert c.request(b"ma cnt N0 J10 v\r\n", b"10\r\n") == b"VA 2\r\n10\r\n"
        assert c.request(b"ma cnt v\r\n", b"11\r\n") == b"VA 2\r\n11\r\n"
        assert c.request(b"ma cnt v MD D3\r\n", b"8\r\n") == b"VA 1\r\n8\r\n"
        assert c.request(b"ma cnt v M- D100\r\n", b"0\r\n") == b"VA 1\r\n0\r\n"
        assert c.request(b"ma cnt\r\n") == b"HD\r\n"
        c.request(b"ms txt 3\r\nabc\r\n")
        assert c.request(b"ma txt\r\n") == (
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        )


def test_base64_keys_and_opaque(server: Server) -> None:
    key = base64.b64encode(b"bin\x00key\xff")
    with Conn(server.port) as c:
        assert c.request(b"ms " + key + b" 2 b O9\r\nhi\r\n") == b"HD O9\r\n"
        reply = c.request(b"mg " + key + b" b k v\r\n", b"hi\r\n")
        assert reply == b"VA 2 k" + key + b" b\r\nhi\r\n"
        assert c.request(b"mg !!!! b v\r\n") == b"CLIENT_ERROR error decoding key\r\n"


def test_meta_errors(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"mg k !\r\n") == b"CLIENT_ERROR invalid flag\r\n"
        assert c.request(b"mg k v v\r\n") == b"CLIENT_ERROR duplicate flag\r\n"
        assert c.request(b"mg k Tabc\r\n") == b"CLIENT_ERROR bad token in command line format\r\n"
        assert c.request(b"mg\r\n") == b"ERROR\r\n"
        assert c.request(b"mn\r\n") == b"MN\r\n"


def test_invalidate_marks_stale_and_one_client_wins(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"ms k 3\r\nold\r\n")
        assert c.request(b"md k I T30\r\n") == b"HD\r\n"
        first = c.request(b"mg k v c\r\n", b"old\r\n")
        assert first.startswith(b"VA 3 c") and first.endswith(b" X W\r\nold\r\n")
        second = c.request(b"mg k v\r\n", b"old\r\n")
        assert second == b"VA 3 Z X\r\nold\r\n"
        # the winner's set with the stale item's CAS replaces it and clears the lease
        cas = int(first.split()[2][1:])
        assert c.request(b"ms k 3 C%d\r\nnew\r\n" % cas) == b"HD\r\n"
        assert c.request(b"mg k v\r\n", b"new\r\n") == b"VA 3\r\nnew\r\n"


def test_recache_wins_once_below_ttl(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"ms k 1 T20\r\nx\r\n")
        assert c.request(b"mg k v R30\r\n", b"x\r\n") == b"VA 1 W\r\nx\r\n"
        assert c.request(b"mg k v R30\r\n", b"x\r\n") == b"VA 1 Z\r\nx\r\n"
        assert c.request(b"mg k v R10\r\n", b"x\r\n") == b"VA 1 Z\r\nx\r\n"


def test_vivify_on_miss(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"mg new N30 v t\r\n", b"\r\n\r\n") == b"VA 0 t30 W\r\n\r\n"
        assert c.request(b"mg new2 N30 s t v\r\n", b"\r\n") == b"VA 0 s0 t30 W\r\n"
        assert c.read_line() == b"\r\n"
        assert c.request(b"mg new2 N30 s v\r\n", b"\r\n") == b"VA 0 s0 Z\r\n"
        assert c.read_line() == b"\r\n"


def test_thundering_herd_exactly_one_winner(server: Server) -> None:
    clients = 50
    barrier = threading.Barrier(clients)
    replies: list[bytes] = []
    lock = threading.Lock()

    def miss() -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            barrier.wait()
            s.sendall(b"mg herd N30 v\r\n")
            buf = b""
            while buf.count(b"\r\n") < 2:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        with lock:
            replies.append(buf.split(b"\r\n")[0])

    threads = [threading.Thread(target=miss) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(replies) == clients
    winners = [r for r in replies if r.split()[-1] == b"W"]
    assert len(winners) == 1, replies
    assert all(r.endswith(b" Z") for r in replies if r not in winners)


def test_me_debug(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"ms k 1 T100\r\nx\r\n")
        reply = c.request(b"me k\r\n")
        assert reply.startswith(b"ME k exp=") and b"cas=" in reply
        assert c.request(b"me missing\r\n") == b"EN\r\n"


@pytest.mark.skipif(TARGET != "memfleet", reason="extensions newer than memcached 1.6.18")
def test_md_x_and_explicit_cas_extensions(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"ms k 2 F5 E777 c\r\nhi\r\n") == b"HD c777\r\n"
        assert c.request(b"mg k c\r\n") == b"HD c777\r\n"
        # x keeps the item but drops its value and client flags
        assert c.request(b"md k x\r\n") == b"HD\r\n"
        assert c.request(b"mg k v f s\r\n", b"\r\n\r\n") == b"VA 0 f0 s0\r\n\r\n"
        assert c.request(b"ma n N0 J5 E42 c v\r\n", b"5\r\n") == b"VA 1 c42\r\n5\r\n"
