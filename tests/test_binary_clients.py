"""Real binary-protocol clients against `memfleet serve`: pylibmc with
binary=True (and SASL), Ruby's dalli and ActiveSupport::Cache::MemCacheStore (Debian packages,
binary protocol only), plus -B, -S and -vv behaviour seen from a socket."""

from __future__ import annotations

import os
import random
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pylibmc
import pytest
from binary_corpus import (
    APPEND,
    DELETE,
    FLUSH,
    GAT,
    GET,
    GETK,
    INCR,
    NOOP,
    SASL_AUTH,
    SASL_LIST,
    SET,
    STAT,
    TOUCH,
    arith_extras,
    parse,
    pkt,
    store_extras,
)
from conftest import start_target
from harness import Server, memcached, memfleet

RUBY_SCRIPT = Path(__file__).resolve().parent / "ruby" / "dalli_roundtrip.rb"
USERS = b"alice:s3cret\nbob:pa:ss\n"


def have_dalli() -> bool:
    if shutil.which("ruby") is None:
        return False
    libs = (
        "dalli",
        "active_support",
        "active_support/cache",
        "active_support/cache/mem_cache_store",
    )
    probe = ["ruby", "-e", "; ".join(f'require "{lib}"' for lib in libs)]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def exchange(port: int, data: bytes, wait: float = 0.5) -> tuple[list[tuple], bool]:
    """Sends `data` on a new connection; the response packets and whether the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        got, closed = b"", False
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                got += chunk
        except (socket.timeout, TimeoutError):
            pass
    return parse(got)[0], closed


def stats_of(packets: list[tuple]) -> dict[bytes, bytes]:
    return {p[5]: p[6] for p in packets if p[0] == STAT and p[5]}


def test_pylibmc_binary(server: Server) -> None:
    c = pylibmc.Client([f"127.0.0.1:{server.port}"], binary=True, behaviors={"cas": True})
    assert c.set("a", "hello")
    assert c.get("a") == "hello"
    c.set_multi({"x": 1, "y": b"\x00\xff"})
    assert c.get_multi(["x", "y", "nope"]) == {"x": 1, "y": b"\x00\xff"}
    assert c.incr("x", 5) == 6
    assert c.decr("x", 10) == 0
    assert c.add("a", "no") is False
    assert c.replace("a", "world")
    assert c.append("a", "!") and c.prepend("a", ">")
    assert c.get("a") == ">world!"
    value, cas = c.gets("a")
    assert value == ">world!"
    assert c.cas("a", "new", cas)
    assert not c.cas("a", "newer", cas)
    assert c.touch("a", 100)
    assert c.delete("a") and c.get("a") is None
    assert c.get_stats()[0][1]["cmd_get"] != b"0"
    c.flush_all()
    assert c.get("x") is None


@pytest.mark.skipif(not have_dalli(), reason="ruby-dalli / ruby-activesupport missing")
def test_dalli_and_rails_cache_store(server: Server) -> None:
    out = subprocess.run(
        ["ruby", str(RUBY_SCRIPT), f"127.0.0.1:{server.port}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok flush" in out.stdout and "ok rails read_multi" in out.stdout
    assert out.stdout.rstrip().endswith("all passed")


def test_binary_only_refuses_text_and_stat_settings_says_so(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server("-B", "binary")
    packets, closed = exchange(srv.port, b"version\r\n" + b" " * 20)
    assert (packets, closed) == ([], True)
    packets, _ = exchange(srv.port, pkt(STAT, b"settings") + pkt(NOOP))
    assert stats_of(packets)[b"binding_protocol"] == b"binary"
    auto = make_server()
    packets, _ = exchange(auto.port, pkt(STAT, b"settings"))
    assert stats_of(packets)[b"binding_protocol"] == b"auto-negotiate"
    # Under -B auto the first byte decides, per connection.
    with socket.create_connection(("127.0.0.1", auto.port), timeout=2) as s:
        s.sendall(b"version\r\n")
        assert s.recv(100).startswith(b"VERSION 1.6.18")


@pytest.fixture
def sasl_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    pwdb = tmp_path / "users"
    pwdb.write_bytes(USERS)
    monkeypatch.setenv("MEMCACHED_SASL_PWDB", str(pwdb))
    with start_target("-S") as srv:
        yield srv


def plain(user: bytes, password: bytes) -> bytes:
    return pkt(SASL_AUTH, b"PLAIN", b"", b"\x00" + user + b"\x00" + password)


def test_sasl_plain(sasl_server: Server) -> None:
    port = sasl_server.port or 0
    packets, _ = exchange(port, plain(b"alice", b"s3cret") + pkt(STAT, b"settings"))
    settings = stats_of(packets)
    assert (settings[b"auth_enabled_sasl"], settings[b"binding_protocol"]) == (b"yes", b"binary")
    packets, closed = exchange(port, pkt(SASL_LIST))
    assert [(p[0], p[1], p[6]) for p in packets] == [(SASL_LIST, 0, b"PLAIN")] and not closed
    # Unauthenticated: memcached's auth error, then the connection closes.
    packets, closed = exchange(port, pkt(GET, b"k") + pkt(NOOP))
    assert [(p[0], p[1], p[6]) for p in packets] == [(GET, 0x20, b"Auth failure.")] and closed
    # A wrong password fails (the connection stays open, still unauthenticated).
    packets, closed = exchange(port, plain(b"alice", b"s3creT") + pkt(NOOP))
    assert [(p[0], p[1]) for p in packets] == [(SASL_AUTH, 0x20), (NOOP, 0x20)] and closed
    # A password may contain ':'; after success every command works.
    ok = plain(b"bob", b"pa:ss") + pkt(SET, b"k", store_extras(), b"v") + pkt(GET, b"k")
    packets, closed = exchange(port, ok + pkt(STAT))
    assert [(p[0], p[1], p[6]) for p in packets[:3]] == [
        (SASL_AUTH, 0, b"Authenticated"),
        (SET, 0, b""),
        (GET, 0, b"v"),
    ]
    stats = stats_of(packets)
    assert (stats[b"auth_cmds"], stats[b"auth_errors"]) == (b"3", b"1")
    # An authorization id other than the user is refused.
    packets, _ = exchange(port, pkt(SASL_AUTH, b"PLAIN", b"", b"bob\x00alice\x00s3cret"))
    assert [(p[0], p[1]) for p in packets] == [(SASL_AUTH, 0x20)]


PYLIBMC_SASL = """
import sys, pylibmc
c = pylibmc.Client([sys.argv[1]], binary=True, username=sys.argv[2], password=sys.argv[3])
try:
    c.set("k", "v")
    print(c.get("k"))
except pylibmc.Error as e:
    print("error", e)
"""


def test_pylibmc_sasl(sasl_server: Server) -> None:
    # pylibmc's wheel bundles libsasl2, which looks for its PLAIN plugin in /usr/lib64/sasl2.
    plugins = [
        p for p in ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib64/sasl2") if Path(p).is_dir()
    ]
    env = {"SASL_PATH": plugins[0]} if plugins else {}

    def run(user: str, password: str) -> str:
        argv = [sys.executable, "-c", PYLIBMC_SASL, f"127.0.0.1:{sasl_server.port}", user, password]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=30, env=env, check=False
        ).stdout

    assert run("alice", "s3cret").strip() == "v"
    assert run("alice", "wrong").startswith("error")


@pytest.mark.skipif(not have_dalli(), reason="ruby-dalli / ruby-activesupport missing")
def test_dalli_sasl(sasl_server: Server) -> None:
    argv = ["ruby", str(RUBY_SCRIPT), f"127.0.0.1:{sasl_server.port}"]
    good = subprocess.run(
        [*argv, "alice", "s3cret"], capture_output=True, text=True, timeout=60, check=False
    )
    assert good.returncode == 0 and good.stdout.rstrip().endswith("all passed"), (
        good.stdout + good.stderr
    )
    bad = subprocess.run(
        [*argv, "alice", "nope"], capture_output=True, text=True, timeout=60, check=False
    )
    assert bad.returncode != 0


def test_sasl_needs_the_password_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import memfleet_bin

    monkeypatch.delenv("MEMCACHED_SASL_PWDB", raising=False)
    for args, message in [
        (["-S", "-p", "0"], "MEMCACHED_SASL_PWDB"),
        (["-S", "-B", "auto"], "ASCII protocol while using SASL"),
    ]:
        argv = [memfleet_bin(), "serve", *args]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        assert out.returncode != 0 and message in out.stderr


def read_log_until(stream: IO[bytes], marker: bytes, timeout: float = 5.0) -> bytes:
    """What a running server has written to `stream` up to `marker` (or `timeout`)."""
    fd = stream.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        seen += chunk
    return seen


def vv_log(start: Callable[..., Server], data: bytes) -> list[str]:
    """The -vv lines a server prints for one connection sending `data`, fds replaced by `fd`."""
    with start("-vv") as srv:
        assert srv.proc is not None and srv.proc.stderr is not None
        # Wait until the harness's port probe has been logged as closed: otherwise its line
        # can land in the middle of one of ours (stderr is written by several threads).
        early = read_log_until(srv.proc.stderr, b"connection closed.\n")
        exchange(srv.port, data, wait=0.3)
        srv.proc.terminate()
        log = (early + srv.proc.stderr.read()).decode(errors="replace").splitlines()
    # From the protocol choice on; connects and closes (the harness's port probe among them)
    # interleave differently.
    first = next(i for i, ln in enumerate(log) if "Client using the" in ln)
    noise = ("Signal handled", "Exiting normally", "new auto-negotiating", "connection closed")
    return [
        re.sub(r"^([<>]?)\d+", r"\1fd", ln) for ln in log[first:] if not any(n in ln for n in noise)
    ]


def test_verbose_logs_binary_commands_as_memcached() -> None:
    data = b"".join(
        [
            pkt(SET, b"vk", store_extras(), b"vv"),
            pkt(GETK, b"vk"),
            pkt(GET, b"nokey"),
            pkt(INCR, b"n", arith_extras(1, 5, 0)),
            pkt(APPEND, b"n", b"", b"x"),
            pkt(TOUCH, b"n", b"\0\0\0\0"),
            pkt(GAT, b"n", b"\0\0\0\0"),
            pkt(DELETE, b"vk"),
            pkt(STAT, b"settings"),
            pkt(FLUSH),
            pkt(0x55),
            pkt(NOOP, magic=0x42),
        ]
    )
    want, got = vv_log(memcached, data), vv_log(memfleet, data)
    # Response headers carry CAS values, which differ: compare those dumps without their bytes.
    bytes_line = re.compile(r">fd(\s+0x[0-9a-f]{2})+")
    assert [ln for ln in got if not bytes_line.fullmatch(ln)] == [
        ln for ln in want if not bytes_line.fullmatch(ln)
    ]
    assert "<fd    0x80 0x01 0x00 0x02" in got and ">fd Writing an error: Not found" in got
    assert len(got) > 60


def test_binary_header_bytes_are_checked_before_use(server: Server) -> None:
    """A binary header claiming a 4 GB body for a get closes the connection without the server
    waiting for (or allocating) the claimed bytes; the server keeps serving."""
    packets, closed = exchange(server.port or 0, pkt(GET, b"k", body=0xFFFFFFFF))
    assert [(p[0], p[1]) for p in packets] == [(GET, 0x04)] and closed
    packets, _ = exchange(server.port or 0, pkt(SET, b"k", store_extras(), b"v") + pkt(GET, b"k"))
    assert [(p[0], p[1], p[6]) for p in packets] == [(SET, 0, b""), (GET, 0, b"v")]


def test_value_without_room_is_refused_as_memcached(make_server) -> None:  # type: ignore[no-untyped-def]
    """With -M and memory full, a binary set answers out of memory (0x82, memcached's text),
    its value is discarded, the old item is dropped, and the connection goes on."""
    srv = make_server("-m", "8", "-M")
    value = b"v" * 200_000
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(pkt(SET, b"old", store_extras(), b"x"))
        for i in range(200):
            s.sendall(pkt(SET, b"fill%d" % i, store_extras(), value))
        s.sendall(pkt(SET, b"old", store_extras(), value) + pkt(GET, b"old") + pkt(NOOP))
        got = b""
        while not any(p[0] == NOOP for p in parse(got)[0]):
            chunk = s.recv(65536)
            assert chunk
            got += chunk
    replies = [(p[0], p[1], p[6]) for p in parse(got)[0]]
    assert (SET, 0x82, b"Out of memory allocating item") in replies
    assert replies[-3:] == [
        (SET, 0x82, b"Out of memory allocating item"),
        (GET, 1, b"Not found"),
        (NOOP, 0, b""),
    ]


def test_random_binary_packets_never_kill_the_server(server: Server) -> None:
    """Packets with the binary magic and random opcodes, lengths and bytes (some cut short):
    the server answers or closes each connection, and keeps serving."""
    rng = random.Random(14)
    for _ in range(60):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        header = struct.pack(
            ">BBHBBHIIQ",
            0x80,
            rng.choice([rng.randint(0, 0x25), rng.randint(0, 255)]),
            rng.choice([0, 1, 5, 250, 251, 65535, rng.randint(0, 400)]),
            rng.choice([0, 4, 8, 20, rng.randint(0, 255)]),
            rng.randint(0, 255),
            rng.randint(0, 65535),
            rng.choice([len(body), rng.randint(0, 2000), 0xFFFFFFFF, 1 << 20]),
            rng.getrandbits(32),
            rng.getrandbits(64),
        )
        packet = (header + body)[: rng.randint(1, 24 + len(body))]
        exchange(server.port or 0, packet * rng.randint(1, 3), wait=0.05)
    packets, _ = exchange(server.port or 0, pkt(SET, b"k", store_extras(), b"v") + pkt(GET, b"k"))
    assert [(p[0], p[1], p[6]) for p in packets] == [(SET, 0, b""), (GET, 0, b"v")]
    assert server.proc is not None and server.proc.poll() is None
