"""Text gets of items on flash that are not in the page cache are read by I/O threads (`-o
ext_threads`): multi-gets answer every value in order, other connections keep being served
meanwhile, and a connection that leaves with reads under way does not hurt the server. Each
test first drops the flash file from the page cache (POSIX_FADV_DONTNEED), as gets of cached
items are answered on the worker. Run under both event loops
(MEMFLEET_SERVE_ARGS="-o io_engine=epoll" / "-o io_engine=uring")."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from harness import Conn, Server, memfleet

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


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, list[int], Path]]:
    """A server with 8 MB of memory and most of ITEMS values on flash; the ids to get; the
    flash file."""
    flash = Path(tmp_path_factory.mktemp("flash")) / "f"
    opts = f"ext_path={flash}:256m,ext_item_size=512,ext_page_size=8,ext_threads=2"
    with memfleet("-m", "8", "-o", opts) as s:
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
        stop.set()
        t.join(60)
    assert not errors, errors
    assert rounds[0] > 0


def test_a_connection_gone_with_reads_under_way_leaves_the_server_serving(
    loaded: tuple[Server, list[int], Path],
) -> None:
    s, ids, flash = loaded
    uncache(flash)
    for n in range(30):
        batch = ids[n * 100 : n * 100 + 100]
        sock = socket.create_connection(("127.0.0.1", s.port or 0))
        sock.sendall(b"get " + b" ".join(key(i) for i in batch) + b"\r\n")
        if n % 2:
            # A reset rather than a close: nothing can be written to it any more.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    with Conn(s.port or 0) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        batch = ids[:100]
        assert multi_get(c, batch) == [(key(i), value(i)) for i in batch]
        # Reads of reset connections are dropped as they come back (how many were still
        # under way at the reset is a matter of timing).
        assert "get_aborted_extstore" in c.stats()
    assert s.proc is not None and s.proc.poll() is None


def test_flash_reads_over_tls_answer_gets_sent_while_others_wait(tmp_path: Path) -> None:
    """The same off-the-worker reads on TLS connections (`-Z`): gets of keys on flash, out of
    the page cache, answer the right values in order, and a request that arrives in a later
    TLS record while the connection waits for its reads is answered too."""
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
            before = int(c.stats()["extstore_io_reads"])
            ids = list(range(0, 6_000, 13))
            # One record of gets, then `mn` in a record of its own.
            c.send(b"".join(b"get %s\r\n" % key(i) for i in ids))
            c.send(b"mn\r\n")
            for i in ids:
                assert c.read_line() == b"VALUE %s 0 %d\r\n" % (key(i), VALUE_LEN)
                assert c.read_until(b"\r\n") == value(i) + b"\r\n"
                assert c.read_line() == b"END\r\n"
            assert c.read_line() == b"MN\r\n"
            assert int(c.stats()["extstore_io_reads"]) > before
