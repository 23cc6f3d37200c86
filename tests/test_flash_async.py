"""Text gets of items on flash that are not in the page cache are read by I/O threads (`-o
ext_threads`): multi-gets answer every value in order, other connections keep being served
meanwhile, and a connection that leaves with reads under way does not hurt the server. So
are the reads of the commands that bring an item back into memory (gat, mg, touch, ms ...). Each
test first drops the flash file from the page cache (POSIX_FADV_DONTNEED), as gets of cached
items are answered on the worker. Run under both event loops
(MEMFLEET_SERVE_ARGS="-o io_engine=epoll" / "-o io_engine=uring")."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from binary_corpus import GAT, GETK, NOOP, TOUCH, parse, pkt
from harness import Conn, Server, free_port, memfleet, udp_frame

ITEMS = 40_000
VALUE_LEN = 1000


def value(i: int) -> bytes:
    head = b"v%d:" % i
    return head + b"x" * (VALUE_LEN - len(head))


def key(i: int) -> bytes:
    return b"fk:%08d" % i


def multi_get(c: Conn, ids: list[int]) -> list[tuple[bytes, bytes]]:
    """`get` of the keys `ids`: (key, value) per VALUE, in reply order."""
    c.send(b"get " + b" ".join(key(i) for i in ids) + b"\r\n")
    got = []
    while True:
        line = c.read_line()
        if line == b"END\r\n":
            return got
        parts = line.split()
        assert parts[0] == b"VALUE", line
        data = c.read_until(b"\r\n")
        while len(data) < int(parts[3]) + 2:
            data += c.read_until(b"\r\n")
        got.append((parts[1], data[:-2]))


def uncache(path: Path) -> None:
    """Drops the file's pages from the page cache, so that reading them waits for the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# The UDP port of the `loaded` server.
UDP_PORT = [0]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, list[int], Path]]:
    """A server with 8 MB of memory and most of ITEMS values on flash, listening on UDP too
    (`UDP_PORT`); the ids to get; the flash file."""
    flash = Path(tmp_path_factory.mktemp("flash")) / "f"
    opts = f"ext_path={flash}:256m,ext_item_size=512,ext_page_size=8,ext_threads=2"
    UDP_PORT[0] = free_port(socket.SOCK_DGRAM)
    with memfleet("-m", "8", "-o", opts, "-U", str(UDP_PORT[0])) as s:
        with Conn(s.port or 0) as c:
            for start in range(0, ITEMS, 500):
                batch = b"".join(
                    b"set %s 0 0 %d\r\n%s\r\n" % (key(i), VALUE_LEN, value(i))
                    for i in range(start, start + 500)
                )
                c.send(batch)
                for _ in range(500):
                    assert c.read_line() == b"STORED\r\n"
            st = c.stats()
            assert int(st["extstore_objects_used"]) > ITEMS // 2, st
            assert c.stats("settings")["ext_threads"] == "2"
        # Every 7th key: most are on flash (8 MB of memory holds a few thousand).
        yield s, list(range(0, ITEMS, 7)), flash


def test_multi_gets_of_flash_keys_answer_every_value_in_order(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids, flash = loaded
    uncache(flash)
    with Conn(s.port or 0) as c:
        before = c.stats()
        for start in range(0, 3000, 100):
            batch = ids[start : start + 100]
            # A key not stored and a repeated key keep their places too.
            asked = batch[:50] + [ITEMS + 5] + batch[50:] + [batch[0]]
            got = multi_get(c, asked)
            want = [(key(i), value(i)) for i in asked if i < ITEMS]
            assert got == want
        after = c.stats()
        assert int(after["get_extstore"]) > int(before["get_extstore"]) + 1000
        # Read off the workers (the file was out of the page cache). How many depends on the
        # device's readahead, which brings neighbouring frames back into the page cache.
        assert int(after["extstore_io_reads"]) > int(before["extstore_io_reads"])
        assert int(after["get_hits"]) - int(before["get_hits"]) == 30 * 101
        assert after["extstore_io_queue"] == "0"
        # gets/gat still answer the same from flash.
        c.send(b"gets " + key(ids[0]) + b"\r\n")
        assert c.read_line().startswith(b"VALUE " + key(ids[0]) + b" 0 1000 ")
        assert c.read_until(b"END\r\n") == value(ids[0]) + b"\r\nEND\r\n"
        c.send(b"gat 0 " + key(ids[1]) + b" " + key(ids[2]) + b"\r\n")
        assert [k for k, _ in _values(c)] == [key(ids[1]), key(ids[2])]


def _values(c: Conn) -> list[tuple[bytes, bytes]]:
    got = []
    while (line := c.read_line()) != b"END\r\n":
        got.append((line.split()[1], c.read_until(b"\r\n")[:-2]))
    return got


def test_other_connections_are_served_while_flash_keys_are_read(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids, flash = loaded
    uncache(flash)
    stop = threading.Event()
    errors: list[str] = []
    rounds = [0]

    def flash_loop() -> None:
        try:
            with Conn(s.port or 0, timeout=30) as c:
                while not stop.is_set():
                    start = (rounds[0] * 100) % (len(ids) - 100)
                    batch = ids[start : start + 100]
                    if multi_get(c, batch) != [(key(i), value(i)) for i in batch]:
                        errors.append("wrong multi-get")
                    rounds[0] += 1
        except OSError as e:
            errors.append(repr(e))

    t = threading.Thread(target=flash_loop)
    t.start()
    try:
        with Conn(s.port or 0, timeout=30) as c:
            c.send(b"set hot 0 0 5\r\nhello\r\n")
            assert c.read_line() == b"STORED\r\n"
            for _ in range(300):
                assert c.request(b"get hot\r\n", b"END\r\n") == (
                    b"VALUE hot 0 5\r\nhello\r\nEND\r\n"
                )
                assert c.request(b"version\r\n").startswith(b"VERSION ")
    finally:
        # the flash loop's first batch may still be on its way (uncached keys, a busy machine):
        # let it finish, bounded, so that the check below sees flash reads really ran
        deadline = time.monotonic() + 30
        while rounds[0] == 0 and not errors and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        t.join(60)
    assert not errors, errors
    assert rounds[0] > 0


def leave_under_way(s: Server, requests: list[bytes]) -> None:
    """Sends each request on a connection of its own, left at once: closed, or every other
    one reset (nothing can be written to it any more)."""
    for n, req in enumerate(requests):
        sock = socket.create_connection(("127.0.0.1", s.port or 0))
        sock.sendall(req)
        if n % 2:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def test_a_connection_gone_with_reads_under_way_leaves_the_server_serving(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids, flash = loaded
    uncache(flash)
    batches = [ids[n * 100 : n * 100 + 100] for n in range(30)]
    leave_under_way(s, [b"get " + b" ".join(key(i) for i in b) + b"\r\n" for b in batches])
    with Conn(s.port or 0) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        batch = ids[:100]
        assert multi_get(c, batch) == [(key(i), value(i)) for i in batch]
        # Reads of reset connections are dropped as they come back (how many were still
        # under way at the reset is a matter of timing).
        assert "get_aborted_extstore" in c.stats()
    assert s.proc is not None and s.proc.poll() is None


# The gets above use `ids`; the tests below bring their keys back into memory, so each takes
# keys of its own, none of them in `ids`.


def others(loaded: tuple[Server, list[int], Path], offset: int, n: int) -> list[int]:
    """n keys not in `ids`, from `offset` on: most are on flash, out of the page cache."""
    uncache(loaded[2])
    return list(range(offset, ITEMS, 7))[:n]


def io_reads(c: Conn) -> int:
    """Reads the I/O threads made so far."""
    return int(c.stats()["extstore_io_reads"])


def io_reads_settled(c: Conn) -> int:
    """`io_reads` once no read is queued (those of connections an earlier test left)."""
    for _ in range(600):
        st = c.stats()
        if st["extstore_io_queue"] == "0":
            return int(st["extstore_io_reads"])
        time.sleep(0.05)
    raise AssertionError("flash reads still queued")


def test_gat_of_many_flash_keys_answers_every_value_in_order(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], others(loaded, 1, 1000)
    with Conn(s.port or 0) as c:
        io_reads_settled(c)
        before = c.stats()
        for start in range(0, len(ids), 100):
            batch = ids[start : start + 100]
            asked = batch[:50] + [ITEMS + 5] + batch[50:] + [batch[0]]
            c.send(b"gats 1000 " + b" ".join(key(i) for i in asked) + b"\r\n")
            got = _values(c)
            assert got == [(key(i), value(i)) for i in asked if i < ITEMS]
        after = c.stats()
        assert int(after["extstore_io_reads"]) > int(before["extstore_io_reads"])
        assert int(after["touch_hits"]) - int(before["touch_hits"]) == 10 * 101
        assert int(after["touch_misses"]) - int(before["touch_misses"]) == 10
        assert after["extstore_io_queue"] == "0"
        # The new TTL is the item's, now in memory.
        ttl = c.request(b"mg " + key(ids[0]) + b" t\r\n").split()
        assert ttl[0] == b"HD" and 990 <= int(ttl[1][1:]) <= 1000, ttl


def meta_get_many(c: Conn, ids: list[int]) -> list[list[bytes]]:
    """`mg <key> v k t c` of the keys `ids`, pipelined: each reply's tokens and value."""
    c.send(b"".join(b"mg " + key(i) + b" v k t c\r\n" for i in ids))
    got = []
    for _ in ids:
        line = c.read_line().split()
        if line[0] == b"VA":
            line.append(c.read_until(b"\r\n")[:-2])
        got.append(line)
    return got


def test_mg_of_flash_keys_answers_right_while_other_connections_are_served(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], others(loaded, 2, 1000)
    stop = threading.Event()
    errors: list[str] = []
    replies: list[list[bytes]] = []

    def flash_loop() -> None:
        try:
            with Conn(s.port or 0, timeout=30) as c:
                for start in range(0, len(ids), 100):
                    replies.extend(meta_get_many(c, ids[start : start + 100] + [ITEMS + 5]))
        except OSError as e:
            errors.append(repr(e))
        finally:
            stop.set()

    with Conn(s.port or 0, timeout=30) as c:
        reads_before = io_reads_settled(c)
        c.send(b"set hot 0 0 5\r\nhello\r\n")
        assert c.read_line() == b"STORED\r\n"
        t = threading.Thread(target=flash_loop)
        t.start()
        try:
            while not stop.is_set():
                assert c.request(b"mg hot v\r\n", b"\r\nhello\r\n") == b"VA 5\r\nhello\r\n"
        finally:
            t.join(60)
        assert not errors, errors
        assert io_reads(c) > reads_before
        want = []
        for start in range(0, len(ids), 100):
            want += ids[start : start + 100] + [ITEMS + 5]
        assert len(replies) == len(want)
        for i, r in zip(want, replies, strict=True):
            if i >= ITEMS:
                assert r == [b"EN", b"k" + key(i)]
                continue
            # The item is in memory now: gets shows the CAS mg answered.
            c.send(b"gets " + key(i) + b"\r\n")
            cas = c.read_line().split()[4]
            assert c.read_until(b"END\r\n") == value(i) + b"\r\nEND\r\n"
            assert r == [b"VA", b"1000", b"k" + key(i), b"t-1", b"c" + cas, value(i)], r


def test_single_key_commands_on_flash_keys_read_off_the_worker(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], others(loaded, 3, 700)
    with Conn(s.port or 0) as c:
        reads_before = io_reads_settled(c)
        # Pipelined, so that each waits for its read with more requests behind it.
        commands: list[tuple[bytes, bytes]] = []
        for n in range(0, len(ids), 7):
            k = [key(i) for i in ids[n : n + 7]]
            commands += [
                (b"touch %s 1000\r\n" % k[0], b"TOUCHED\r\n"),
                (b"append %s 0 0 1\r\n!\r\n" % k[1], b"STORED\r\n"),
                (b"add %s 0 0 1\r\n!\r\n" % k[2], b"NOT_STORED\r\n"),
                (
                    b"incr %s 1\r\n" % k[3],
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                ),
                (b"ms %s 1 MA\r\n?\r\n" % k[4], b"HD\r\n"),
                (b"md %s q\r\nmn\r\n" % k[5], b"MN\r\n"),
                (b"delete %s\r\n" % k[6], b"DELETED\r\n"),
            ]
        c.send(b"".join(cmd for cmd, _ in commands))
        for cmd, want in commands:
            assert c.read_line() == want, cmd
        assert io_reads(c) > reads_before
        assert c.stats()["extstore_io_queue"] == "0"
        for n in range(0, len(ids), 7):
            k = ids[n : n + 7]
            assert multi_get(c, k[:3]) == [
                (key(k[0]), value(k[0])),
                (key(k[1]), value(k[1]) + b"!"),
                (key(k[2]), value(k[2])),
            ]
            assert multi_get(c, k[4:]) == [(key(k[4]), value(k[4]) + b"?")]


def test_a_connection_gone_with_mg_reads_under_way_leaves_the_server_serving(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], others(loaded, 4, 3000)
    batches = [ids[n * 100 : n * 100 + 100] for n in range(30)]
    with Conn(s.port or 0) as c:
        reads_before = io_reads_settled(c)
    leave_under_way(s, [b"".join(b"mg " + key(i) + b" v\r\n" for i in b) for b in batches])
    with Conn(s.port or 0) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        batch = ids[:100]
        got = meta_get_many(c, batch)
        assert [r[-1] for r in got] == [value(i) for i in batch]
        # Reads were under way (how many at the close is a matter of timing).
        assert io_reads(c) > reads_before
    assert s.proc is not None and s.proc.poll() is None


def test_binary_gets_of_flash_keys_answer_in_order_off_the_worker(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], others(loaded, 5, 600)
    # getk, gat and touch pipelined, each answered in its turn: opaque n for request n.
    sent = []
    for n, i in enumerate(ids):
        if n % 3 == 0:
            sent.append(pkt(GETK, key(i), opaque=n))
        elif n % 3 == 1:
            sent.append(pkt(GAT, key(i), struct.pack(">I", 1000), opaque=n))
        else:
            sent.append(pkt(TOUCH, key(i), struct.pack(">I", 1000), opaque=n))
    sent.append(pkt(NOOP, opaque=len(ids)))
    with Conn(s.port or 0) as c:
        reads_before = io_reads_settled(c)
    with socket.create_connection(("127.0.0.1", s.port or 0), timeout=30) as sock:
        sock.sendall(b"".join(sent))
        got = b""
        while True:
            packets, _ = parse(got)
            if packets and packets[-1][0] == NOOP:
                break
            chunk = sock.recv(1 << 20)
            assert chunk, "closed"
            got += chunk
    assert [p[2] for p in packets] == list(range(len(ids) + 1))
    for n, (i, p) in enumerate(zip(ids, packets, strict=False)):
        assert p[1] == 0, p
        if n % 3 == 0:
            assert (p[5], p[6]) == (key(i), value(i))
        elif n % 3 == 1:
            assert p[6] == value(i)
    with Conn(s.port or 0) as c:
        assert io_reads(c) > reads_before


def residue_six(loaded: tuple[Server, list[int], Path], start: int, n: int) -> list[int]:
    """n keys from item `start` on that no other test takes (ids 6 apart from a multiple of
    7): most are on flash, out of the page cache."""
    uncache(loaded[2])
    first = start - start % 7 + 6
    return list(range(first, ITEMS, 7))[:n]


def test_me_of_flash_keys_reads_off_the_worker_and_leaves_them_there(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], residue_six(loaded, 0, 300)
    with Conn(s.port or 0) as c:
        reads_before = io_reads_settled(c)
        flash_before = int(c.stats()["extstore_objects_used"])
        c.send(b"".join(b"me %s\r\n" % key(i) for i in ids) + b"mn\r\n")
        for i in ids:
            line = c.read_line().split()
            assert line[:3] == [b"ME", key(i), b"exp=-1"], line
            assert line[-2:] == [b"cls=1", b"size=%d" % (48 + len(key(i)) + VALUE_LEN + 2)]
        assert c.read_line() == b"MN\r\n"
        assert io_reads(c) > reads_before
        # `me` reads, it does not bring items back into memory.
        assert int(c.stats()["extstore_objects_used"]) >= flash_before
        assert c.request(b"me fk:none\r\n") == b"EN\r\n"


def test_large_storage_commands_on_flash_keys_read_their_items_off_the_worker(
    loaded: tuple[Server, list[int], Path],
) -> None:
    """add/replace/cas with values of 64 KiB and more, received in place, wait for the old
    item's read like any command on a flash key, with the requests behind them in turn."""
    s, ids = loaded[0], residue_six(loaded, 28_000, 30)
    big = [b"%d" % i + b"B" * 70_000 for i in range(len(ids))]
    with Conn(s.port or 0, timeout=30) as c:
        reads_before = io_reads_settled(c)
        requests = []
        for n, i in enumerate(ids):
            cmd = [b"replace %s 0 0 %d", b"add %s 0 0 %d", b"cas %s 0 0 %d 1"][n % 3]
            requests.append(cmd % (key(i), len(big[n])) + b"\r\n" + big[n] + b"\r\n")
        c.send(b"".join(requests) + b"mn\r\n")
        for n in range(len(ids)):
            want = [b"STORED\r\n", b"NOT_STORED\r\n", b"EXISTS\r\n"][n % 3]
            assert c.read_line() == want, n
        assert c.read_line() == b"MN\r\n"
        assert io_reads(c) > reads_before
        for n, i in enumerate(ids):
            want = big[n] if n % 3 == 0 else value(i)
            assert multi_get(c, [i]) == [(key(i), want)]


def udp_replies(sock: socket.socket, want: int) -> dict[int, bytes]:
    """`want` replies by request id, each put together from its frames."""
    frames: dict[int, dict[int, bytes]] = {}
    totals: dict[int, int] = {}
    done: dict[int, bytes] = {}
    while len(done) < want:
        data = sock.recv(65536)
        req_id, seq, total, _ = struct.unpack(">HHHH", data[:8])
        frames.setdefault(req_id, {})[seq] = data[8:]
        totals[req_id] = total
        if len(frames[req_id]) == total:
            done[req_id] = b"".join(frames[req_id][n] for n in range(total))
    return done


def test_udp_requests_on_flash_keys_are_answered_off_the_worker(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids = loaded[0], residue_six(loaded, 14_000, 240)
    with Conn(s.port or 0) as c:
        reads_before = io_reads_settled(c)
    groups = [ids[n : n + 3] for n in range(0, len(ids), 3)]
    got: dict[int, bytes] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.settimeout(10)
        # One at a time: a burst of replies can overflow this socket's receive buffer on a
        # loaded machine, and UDP drops what does not fit.
        for n, group in enumerate(groups):
            get = b"get " + b" ".join(key(i) for i in group) + b"\r\n"
            u.sendto(udp_frame(n, get), ("127.0.0.1", UDP_PORT[0]))
            got.update(udp_replies(u, 1))
        # A one-key command too: its item is brought back into memory.
        u.sendto(udp_frame(9999, b"touch %s 0\r\n" % key(ids[0])), ("127.0.0.1", UDP_PORT[0]))
        assert udp_replies(u, 1) == {9999: b"TOUCHED\r\n"}
    for n, group in enumerate(groups):
        want = b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (key(i), VALUE_LEN, value(i)) for i in group)
        assert got[n] == want + b"END\r\n", n
    with Conn(s.port or 0) as c:
        assert io_reads(c) > reads_before


def test_gets_past_the_bounds_on_reads_under_way_wait_and_answer_right(
    loaded: tuple[Server, list[int], Path],
) -> None:
    """More reads asked for at once than the I/O threads may have under way (1,024): the
    requests past that wait for room instead of reading on their worker, and every one is
    answered right."""
    s, ids, flash = loaded
    uncache(flash)
    # 100 connections, each a get of 16 keys (ext_io_depth's default) far from the others'.
    batches = [ids[n * 50 : n * 50 + 16] for n in range(100)]
    conns = [Conn(s.port or 0, timeout=60) for _ in batches]
    try:
        for c, b in zip(conns, batches, strict=True):
            c.send(b"get " + b" ".join(key(i) for i in b) + b"\r\n")
        for c, b in zip(conns, batches, strict=True):
            got = []
            while (line := c.read_line()) != b"END\r\n":
                assert line.split()[1] == key(b[len(got)]), line
                got.append(c.read_until(b"\r\n")[:-2])
            assert got == [value(i) for i in b]
    finally:
        for c in conns:
            c.close()
    with Conn(s.port or 0) as c:
        assert c.stats()["extstore_io_queue"] == "0"


def test_flash_reads_over_tls_answer_text_meta_and_binary_requests(tmp_path: Path) -> None:
    """The same off-the-worker reads on TLS connections (`-Z`): mg and pipelined binary getk of
    keys on flash, out of the page cache, answer the right values in order."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    chain, tls_key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
    tls_key.write_bytes(leaf.private_key_pem.bytes())
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(ctx)
    flash = tmp_path / "f"
    opts = f"ext_path={flash}:256m,ext_item_size=512,ext_page_size=8,ext_threads=2"
    tls = f"ssl_chain_cert={chain},ssl_key={tls_key}"
    with memfleet("-m", "8", "-o", opts, "-Z", "-o", tls) as s:

        def conn() -> Conn:
            c = Conn(s.port or 0, timeout=30)
            c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
            return c

        n = 20_000
        with conn() as c:
            for start in range(0, n, 500):
                c.send(
                    b"".join(
                        b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i), VALUE_LEN, value(i))
                        for i in range(start, start + 500)
                    )
                )
            assert c.request(b"mn\r\n") == b"MN\r\n"
            assert int(c.stats()["extstore_objects_used"]) > n // 2
        uncache(flash)
        with conn() as c:
            before = io_reads_settled(c)
            ids = list(range(0, 6_000, 13))
            c.send(b"".join(b"mg %s v k\r\n" % key(i) for i in ids) + b"mn\r\n")
            for i in ids:
                assert c.read_line() == b"VA %d k%s\r\n" % (VALUE_LEN, key(i))
                assert c.read_until(b"\r\n") == value(i) + b"\r\n"
            assert c.read_line() == b"MN\r\n"
        with conn() as c:
            ids = list(range(6_001, 12_000, 13))
            c.send(b"".join(pkt(GETK, key(i), opaque=n) for n, i in enumerate(ids)))
            c.send(pkt(NOOP, opaque=len(ids)))
            got = b""
            while True:
                packets, _ = parse(got)
                if packets and packets[-1][0] == NOOP:
                    break
                chunk = c.sock.recv(1 << 20)
                assert chunk, "closed"
                got += chunk
        assert [p[2] for p in packets] == list(range(len(ids) + 1))
        for i, p in zip(ids, packets, strict=False):
            assert (p[1], p[5], p[6]) == (0, key(i), value(i))
        with conn() as c:
            assert io_reads(c) > before
