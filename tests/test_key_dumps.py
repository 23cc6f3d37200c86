"""Key dumps: `lru_crawler metadump` (memcached-tool dump and keys) and `lru_crawler mgdump`,
against memfleet on each event loop and, as a differential, Debian's memcached."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from urllib.parse import unquote_to_bytes

import pytest
from harness import Conn, Server, memcached, memfleet

MEMCACHED_TOOL = "/usr/share/memcached/scripts/memcached-tool"
ENGINES = [(), ("-o", "io_engine=epoll"), ("-o", "io_engine=uring")]
ENGINE_IDS = ["default", "epoll", "uring"]

# Keys memcached-tool must get back url-decoded: reserved, percent, UTF-8 and control bytes.
ODD_KEYS = [b"a%20b", b"x/y?z#w&q=1+2", b"\xc3\xbcber", b"ctl\x01\x7f", b"~._-"]


def load(port: int, count: int) -> set[bytes]:
    """Stores `count` plain keys (some with flags and a long TTL), the odd keys, and 100 keys
    that expire in a second; returns the keys that stay."""
    keys = {b"k:%d" % i for i in range(count)} | set(ODD_KEYS)
    with Conn(port) as c:
        lines = [
            b"set %s %d %d 3 noreply\r\nabc\r\n" % (k, len(k) % 3, 3600 if len(k) % 2 else 0)
            for k in sorted(keys)
        ]
        lines += [b"set gone:%d 0 1 1 noreply\r\nx\r\n" % i for i in range(100)]
        c.send(b"".join(lines))
        assert c.request(b"mn\r\n") == b"MN\r\n"
    time.sleep(2.5)  # the 1-second keys are past their time when the dump runs
    return keys


def tool(server: Server, mode: str) -> str:
    r = subprocess.run(
        ["perl", MEMCACHED_TOOL, server.address, mode],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.decode("latin-1")


def dumped_keys(server: Server) -> tuple[set[bytes], set[bytes]]:
    """The keys `memcached-tool keys` lists (url-decoded) and those `dump` writes out."""
    listed = re.findall(r"^key=(\S+) exp=", tool(server, "keys"), re.MULTILINE)
    decoded = [unquote_to_bytes(k) for k in listed]
    assert len(decoded) == len(set(decoded)), "a key listed twice"
    dumped = re.findall(r"^add (\S+) \d+ \d+ \d+\r?$", tool(server, "dump"), re.MULTILINE)
    return set(decoded), {k.encode("latin-1") for k in dumped}


@pytest.mark.skipif(not os.path.exists(MEMCACHED_TOOL), reason="memcached's memcached-tool")
@pytest.mark.parametrize("args", ENGINES, ids=ENGINE_IDS)
def test_memcached_tool_dump_and_keys_list_every_live_key(args: tuple[str, ...]) -> None:
    """50,000 keys (with odd bytes, flags, TTLs) come back from both tools, once each and
    without the expired ones, on every event loop."""
    with memfleet("-m", "256", *args) as server:
        keys = load(server.port or 0, 50_000)
        listed, dumped = dumped_keys(server)
        assert listed == keys
        # dump gets each value by key: the control bytes survive its round trip too.
        assert dumped == keys


@pytest.mark.skipif(not os.path.exists(MEMCACHED_TOOL), reason="memcached's memcached-tool")
def test_memcached_lists_the_same_keys() -> None:
    """The differential: Debian's memcached (crawler on by default) gives the same key set."""
    with memcached("-m", "256") as server:
        keys = load(server.port or 0, 50_000)
        listed, dumped = dumped_keys(server)
        assert listed == keys and dumped == keys


@pytest.mark.parametrize("args", ENGINES, ids=ENGINE_IDS)
def test_dump_replies_and_mgdump(args: tuple[str, ...]) -> None:
    """memcached's line format, class lists and errors; mgdump's `mg` lines and `EN`."""
    with memfleet(*args) as server, Conn(server.port or 0) as c:
        assert c.request(b"set a%20b\x01 5 0 3\r\nabc\r\n") == b"STORED\r\n"
        assert c.request(b"set plain 0 0 1\r\nx\r\n") == b"STORED\r\n"
        for classes in (b"all", b"hash", b"1", b"2,1"):
            reply = c.request(b"lru_crawler metadump %s\r\n" % classes, b"END\r\n")
            lines = sorted(reply.removesuffix(b"END\r\n").split(b"\n")[:-1])
            assert re.fullmatch(
                rb"key=a%2520b%01 exp=-1 la=\d+ cas=\d+ fetch=no cls=1 size=72", lines[0]
            ), lines
            assert re.fullmatch(
                rb"key=plain exp=-1 la=\d+ cas=\d+ fetch=no cls=1 size=65", lines[1]
            ), lines
        assert c.request(b"lru_crawler metadump 2\r\n") == b"END\r\n"
        for bad in (b"64", b"0", b"all,", b"x"):
            assert (
                c.request(b"lru_crawler metadump %s\r\n" % bad) == b"BADCLASS invalid class id\r\n"
            )
        assert c.request(b"lru_crawler metadump\r\n") == b"ERROR\r\n"
        assert c.request(b"lru_crawler metadump all extra\r\n") == b"ERROR\r\n"
        assert c.request(b"lru_crawler enable\r\n") == b"ERROR\r\n"
        reply = c.request(b"lru_crawler mgdump all\r\n", b"EN\r\n")
        assert sorted(reply.split(b"\r\n")) == [b"", b"EN", b"mg YSUyMGIB b", b"mg plain"]
        # The connection goes on after a dump.
        assert c.request(b"get plain\r\n", b"END\r\n") == b"VALUE plain 0 1\r\nx\r\nEND\r\n"


@pytest.mark.parametrize("args", ENGINES, ids=ENGINE_IDS)
def test_an_unread_dump_costs_bounded_memory_and_others_are_served(
    args: tuple[str, ...],
) -> None:
    """A dump of ~100 MB sent to a client that does not read: the server's RSS stays far
    below the dump's size, another client on the same worker is answered meanwhile, and the
    dump, once read, is complete."""
    count, key_len = 400_000, 200
    with memfleet("-m", "512", "-t", "1", *args) as server:
        port = server.port or 0
        with Conn(port) as c:
            for start in range(0, count, 20_000):
                c.send(
                    b"".join(
                        b"set %s 0 0 1 noreply\r\nv\r\n" % (b"%0*d" % (key_len, i))
                        for i in range(start, start + 20_000)
                    )
                )
            assert c.request(b"mn\r\n") == b"MN\r\n"
        before = server.rss_mb()
        # A small receive buffer, set before connecting so the window is sized for it.
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", port))
        stalled.sendall(b"lru_crawler metadump all\r\n")
        with Conn(port) as other:
            for i in range(200):
                assert other.request(b"set o%d 0 0 1\r\nv\r\n" % i) == b"STORED\r\n"
                assert other.request(b"get o%d\r\n" % i, b"END\r\n").startswith(b"VALUE")
        time.sleep(1)  # a server that built the whole dump would have by now
        grown = server.rss_mb() - before
        assert grown < 40, f"RSS grew {grown:.0f} MiB for an unread dump"
        stalled.settimeout(60)
        got = bytearray()
        while not got.endswith(b"END\r\n"):
            chunk = stalled.recv(1 << 20)
            assert chunk, "connection closed before END"
            got += chunk
        stalled.close()
        assert got.count(b"\n") - 1 >= count
