"""The text protocol, byte for byte as memcached 1.6 answers it, over a raw socket."""

from __future__ import annotations

import time

from harness import Conn, Server


def test_set_get_gets_and_noreply(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"set a 5 0 3\r\nabc\r\n") == b"STORED\r\n"
        assert c.request(b"get a\r\n", b"END\r\n") == b"VALUE a 5 3\r\nabc\r\nEND\r\n"
        reply = c.request(b"gets a\r\n", b"END\r\n")
        assert reply.startswith(b"VALUE a 5 3 ") and reply.endswith(b"\r\nabc\r\nEND\r\n")
        c.send(b"set b 0 0 1 noreply\r\nx\r\n")
        assert c.request(b"get b missing a\r\n", b"END\r\n") == (
            b"VALUE b 0 1\r\nx\r\nVALUE a 5 3\r\nabc\r\nEND\r\n"
        )


def test_add_replace_append_prepend(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"add k 1 0 1\r\na\r\n") == b"STORED\r\n"
        assert c.request(b"add k 1 0 1\r\nb\r\n") == b"NOT_STORED\r\n"
        assert c.request(b"replace nope 0 0 1\r\nb\r\n") == b"NOT_STORED\r\n"
        assert c.request(b"replace k 2 0 2\r\nbb\r\n") == b"STORED\r\n"
        assert c.request(b"append k 9 0 2\r\ncc\r\n") == b"STORED\r\n"
        assert c.request(b"prepend k 9 0 2\r\naa\r\n") == b"STORED\r\n"
        # append/prepend keep the original flags
        assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 2 6\r\naabbcc\r\nEND\r\n"
        assert c.request(b"append nope 0 0 1\r\nx\r\n") == b"NOT_STORED\r\n"
        assert c.request(b"prepend nope 0 0 1\r\nx\r\n") == b"NOT_STORED\r\n"


def test_cas(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"cas k 0 0 1 1\r\nx\r\n") == b"NOT_FOUND\r\n"
        c.request(b"set k 0 0 1\r\nx\r\n")
        line = c.request(b"gets k\r\n", b"END\r\n").split(b"\r\n")[0]
        cas = int(line.split()[4])
        assert c.request(b"cas k 0 0 1 %d\r\ny\r\n" % (cas + 1000)) == b"EXISTS\r\n"
        assert c.request(b"cas k 0 0 1 %d\r\ny\r\n" % cas) == b"STORED\r\n"
        assert c.request(b"cas k 0 0 1 %d\r\nz\r\n" % cas) == b"EXISTS\r\n"
        assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\ny\r\nEND\r\n"


def test_delete_and_its_argument_rules(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"set k 0 0 1\r\nx\r\n")
        assert c.request(b"delete k\r\n") == b"DELETED\r\n"
        assert c.request(b"delete k\r\n") == b"NOT_FOUND\r\n"
        c.request(b"set k 0 0 1\r\nx\r\n")
        assert c.request(b"delete k 0\r\n") == b"DELETED\r\n"
        assert c.request(b"delete k 5\r\n") == (
            b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
        )
        c.send(b"delete k noreply\r\n")
        assert c.request(b"version\r\n").startswith(b"VERSION ")


def test_incr_decr_rules(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"incr n 1\r\n") == b"NOT_FOUND\r\n"
        c.request(b"set n 0 0 2\r\n10\r\n")
        assert c.request(b"incr n 5\r\n") == b"15\r\n"
        assert c.request(b"decr n 6\r\n") == b"9\r\n"
        # memcached rewrites a shorter number in place, padded with a space
        assert c.request(b"get n\r\n", b"END\r\n") == b"VALUE n 0 2\r\n9 \r\nEND\r\n"
        assert c.request(b"decr n 100\r\n") == b"0\r\n"
        c.request(b"set big 0 0 20\r\n18446744073709551615\r\n")
        assert c.request(b"incr big 2\r\n") == b"1\r\n"
        c.request(b"set s 0 0 3\r\nabc\r\n")
        assert c.request(b"incr s 1\r\n") == (
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        )
        assert c.request(b"incr n abc\r\n") == b"CLIENT_ERROR invalid numeric delta argument\r\n"
        c.send(b"incr n 1 noreply\r\n")
        assert c.request(b"get n\r\n", b"END\r\n") == b"VALUE n 0 2\r\n1 \r\nEND\r\n"


def test_touch_gat_gats(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"touch k 10\r\n") == b"NOT_FOUND\r\n"
        c.request(b"set k 3 0 1\r\nx\r\n")
        assert c.request(b"touch k 10\r\n") == b"TOUCHED\r\n"
        assert c.request(b"gat 100 k\r\n", b"END\r\n") == b"VALUE k 3 1\r\nx\r\nEND\r\n"
        reply = c.request(b"gats 100 k nope\r\n", b"END\r\n")
        assert reply.startswith(b"VALUE k 3 1 ") and reply.endswith(b"\r\nx\r\nEND\r\n")
        # a negative exptime expires the item at once
        assert c.request(b"gat -1 k\r\n", b"END\r\n") == b"VALUE k 3 1\r\nx\r\nEND\r\n"
        assert c.request(b"get k\r\n", b"END\r\n") == b"END\r\n"


def test_ttl_relative_negative_and_absolute(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"set neg 0 -1 1\r\nx\r\n")
        assert c.request(b"get neg\r\n", b"END\r\n") == b"END\r\n"
        past = int(time.time()) - 100
        c.request(b"set abs_past 0 %d 1\r\nx\r\n" % past)
        assert c.request(b"get abs_past\r\n", b"END\r\n") == b"END\r\n"
        future = int(time.time()) + 3600
        c.request(b"set abs_future 0 %d 1\r\nx\r\n" % future)
        assert (
            c.request(b"get abs_future\r\n", b"END\r\n") == b"VALUE abs_future 0 1\r\nx\r\nEND\r\n"
        )
        # Two seconds: with one, a clock tick right after the set may already expire it.
        c.request(b"set short 0 2 1\r\nx\r\n")
        assert c.request(b"get short\r\n", b"END\r\n") == b"VALUE short 0 1\r\nx\r\nEND\r\n"
        time.sleep(3.2)
        assert c.request(b"get short\r\n", b"END\r\n") == b"END\r\n"


def test_flush_all_now_and_delayed(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"set a 0 0 1\r\nx\r\n")
        assert c.request(b"flush_all\r\n") == b"OK\r\n"
        assert c.request(b"get a\r\n", b"END\r\n") == b"END\r\n"
        c.request(b"set b 0 0 1\r\nx\r\n")
        # flush_all N takes effect at the (N-1)th clock tick from now: 3 leaves at least a second.
        assert c.request(b"flush_all 3\r\n") == b"OK\r\n"
        assert c.request(b"get b\r\n", b"END\r\n") == b"VALUE b 0 1\r\nx\r\nEND\r\n"
        time.sleep(4.2)
        assert c.request(b"get b\r\n", b"END\r\n") == b"END\r\n"
        c.send(b"flush_all noreply\r\n")
        assert c.request(b"version\r\n").startswith(b"VERSION ")


def test_errors_keep_the_connection_usable(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"bogus\r\n") == b"ERROR\r\n"
        assert c.request(b"\r\n") == b"ERROR\r\n"
        assert c.request(b"set k 0 0 abc\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        long_key = b"k" * 251
        assert (
            c.request(b"get " + long_key + b"\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        )
        # memcached does not swallow the data of a refused key: "x" then runs as a command
        assert c.request(b"set " + long_key + b" 0 0 1\r\nx\r\n") == (
            b"CLIENT_ERROR bad command line format\r\n"
        )
        assert c.read_line() == b"ERROR\r\n"
        assert c.request(b"set k 0 0 1\r\nxyz\r\n").startswith(b"CLIENT_ERROR bad data chunk")
        c.read_all(0.3)
        assert c.request(b"set ok 0 0 1\r\nx\r\n") == b"STORED\r\n"
        assert c.request(b"get ok\r\n", b"END\r\n") == b"VALUE ok 0 1\r\nx\r\nEND\r\n"


def test_too_large_value_is_swallowed(server: Server) -> None:
    with Conn(server.port) as c:
        size = 2 * 1024 * 1024
        c.send(b"set big 0 0 %d\r\n" % size + b"x" * size + b"\r\n")
        assert c.read_line() == b"SERVER_ERROR object too large for cache\r\n"
        assert c.request(b"get big\r\n", b"END\r\n") == b"END\r\n"
        assert c.request(b"set small 0 0 1\r\ny\r\n") == b"STORED\r\n"


def test_huge_length_claim_allocates_nothing(server: Server) -> None:
    before = server.rss_mb()
    for _ in range(5):
        with Conn(server.port) as c:
            c.send(b"set big 0 0 1073741824\r\n" + b"x" * (4 << 20))
    with Conn(server.port) as c:
        assert c.request(b"set ok 0 0 1\r\nx\r\n") == b"STORED\r\n"
    assert server.rss_mb() - before < 64


def test_many_keys_in_one_get(server: Server) -> None:
    with Conn(server.port) as c:
        for i in range(0, 5000, 500):
            c.send(
                b"".join(
                    b"set k%d 0 0 1 noreply\r\n%d\r\n" % (j, j % 10) for j in range(i, i + 500)
                )
            )
        keys = b" ".join(b"k%d" % i for i in range(5000))
        reply = c.request(b"get " + keys + b"\r\n", b"END\r\n")
        assert reply.count(b"VALUE ") == 5000


def test_version_verbosity_quit(server: Server) -> None:
    with Conn(server.port) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION 1.6")
        assert c.request(b"verbosity 1\r\n") == b"OK\r\n"
        c.send(b"verbosity 0 noreply\r\n")
        c.send(b"quit\r\n")
        assert c.read_all(1.0) == b""


def test_shutdown_needs_A(make_server) -> None:  # type: ignore[no-untyped-def]
    plain = make_server()
    with Conn(plain.port) as c:
        assert c.request(b"shutdown\r\n") == b"ERROR: shutdown not enabled\r\n"
    enabled = make_server("-A")
    with Conn(enabled.port) as c:
        c.send(b"shutdown\r\n")
        c.read_all(1.0)
    assert enabled.proc is not None
    enabled.proc.wait(timeout=10)


def test_stats_general_fields(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"set a 0 0 1\r\nx\r\n")
        c.request(b"get a b\r\n", b"END\r\n")
        reply = c.request(b"stats\r\n", b"END\r\n").decode()
    stats = dict(line.split(" ", 2)[1:] for line in reply.splitlines() if line.startswith("STAT "))
    for field in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "get_hits",
        "get_misses",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "evictions",
        "expired_unfetched",
        "curr_items",
        "total_items",
        "bytes",
        "limit_maxbytes",
        "threads",
        "bytes_read",
        "bytes_written",
    ]:
        assert field in stats, field
    assert stats["cmd_get"] == "2"
    assert stats["get_hits"] == "1"
    assert stats["get_misses"] == "1"
    assert stats["curr_items"] == "1"
    assert stats["limit_maxbytes"] == str(64 * 1024 * 1024)


def test_stats_subcommands(server: Server) -> None:
    with Conn(server.port) as c:
        c.request(b"set a 0 0 1\r\nx\r\n")
        for sub in (b"settings", b"items", b"slabs", b"conns"):
            reply = c.request(b"stats " + sub + b"\r\n", b"END\r\n")
            assert reply.endswith(b"END\r\n"), sub
            assert reply.startswith(b"STAT "), sub
        assert c.request(b"stats reset\r\n") == b"RESET\r\n"
        reply = c.request(b"stats\r\n", b"END\r\n")
        assert b"STAT cmd_set 0\r\n" in reply
        assert c.request(b"stats nonsense\r\n").startswith(b"")


def test_stats_conns_names_each_clients_address(server: Server) -> None:
    # The peer address is read from the socket when asked, not stored per connection.
    with Conn(server.port) as a, Conn(server.port) as b:
        b.request(b"version\r\n")
        reply = a.request(b"stats conns\r\n", b"END\r\n").decode()
        for c in (a, b):
            assert f":addr tcp:127.0.0.1:{c.sock.getsockname()[1]}\r\n" in reply, reply
        assert f"listen_addr tcp:127.0.0.1:{server.port}" in reply, reply


def test_large_values_in_a_multiget_with_a_bad_key(server: Server) -> None:
    value = b"v" * (300 * 1024)
    with Conn(server.port) as c:
        assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
        # memcached withdraws every VALUE of a get whose later key is too long
        bad = b"k" * 251
        assert c.request(b"get big " + bad + b"\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        reply = c.request(b"get big big\r\n", b"END\r\n")
        assert reply == (b"VALUE big 0 %d\r\n%s\r\n" % (len(value), value)) * 2 + b"END\r\n"


def test_large_sets_arriving_in_pieces(server: Server) -> None:
    """Values of 64 KiB and more are received into their own buffer (memfleet) or item
    (memcached): replies, modes and pipelining must be the same as for small values."""
    value = bytes(range(256)) * 400  # 102,400 bytes
    n = len(value)
    with Conn(server.port) as c:
        request = b"set big 5 0 %d\r\n%s\r\nget big\r\n" % (n, value)
        for i in range(0, len(request), 7000):
            c.send(request[i : i + 7000])
            time.sleep(0.002)
        assert c.read_until(b"END\r\n") == b"STORED\r\nVALUE big 5 %d\r\n%s\r\nEND\r\n" % (n, value)
        c.send(
            b"set big2 0 0 %d noreply\r\n%s\r\nadd big 0 0 %d\r\n%s\r\ngets big2\r\n"
            % (n, value, n, value)
        )
        assert c.read_line() == b"NOT_STORED\r\n"
        header = c.read_line()
        assert header.startswith(b"VALUE big2 0 %d " % n)
        cas = int(header.split()[-1])
        assert c.read_until(b"END\r\n") == value + b"\r\nEND\r\n"
        other = value[::-1]
        c.send(b"cas big2 1 0 %d %d\r\n%s\r\n" % (n, cas + 1, other))
        c.send(b"cas big2 1 0 %d %d\r\n%s\r\nget big2\r\n" % (n, cas, other))
        assert c.read_until(
            b"END\r\n"
        ) == b"EXISTS\r\nSTORED\r\nVALUE big2 1 %d\r\n%s\r\nEND\r\n" % (n, other)
        c.send(b"append big 0 0 3\r\nabc\r\nreplace big 0 0 %d\r\n%s\r\nget big\r\n" % (n, other))
        assert c.read_until(
            b"END\r\n"
        ) == b"STORED\r\nSTORED\r\nVALUE big 0 %d\r\n%s\r\nEND\r\n" % (n, other)
        # A value that does not end in \r\n is refused; the connection goes on.
        c.send(b"set bad 0 0 70000\r\n" + b"x" * 70000 + b"XX")
        assert c.read_line() == b"CLIENT_ERROR bad data chunk\r\n"
        assert c.request(b"get bad\r\n", b"END\r\n") == b"END\r\n"
