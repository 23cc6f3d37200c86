"""`memfleet top` driven in a real terminal (tmux): a loaded memfleet serve, an idle Debian
memcached holding many connections, and a dead port. The screen is read back with
capture-pane and its figures checked for sense; a sort key must reorder the rows."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import Conn, Server, free_port, memcached, memfleet, memfleet_bin
from typing_extensions import Self

TMUX = shutil.which("tmux")


class Tmux:
    """One tmux server of our own (its own socket), so a user's sessions are never touched."""

    def __init__(self) -> None:
        assert TMUX, "tmux is needed (scripts/setup installs it)"
        self.socket = f"memfleet-top-test-{os.getpid()}-{id(self)}"

    def run(self, *args: str) -> str:
        out = subprocess.run(
            [TMUX, "-L", self.socket, *args], capture_output=True, text=True, check=True
        )
        return out.stdout

    def start(self, command: list[str]) -> None:
        self.run("new-session", "-d", "-x", "200", "-y", "30", "-s", "top", shlex.join(command))

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "top", *keys)

    def alive(self) -> bool:
        probe = [TMUX, "-L", self.socket, "has-session", "-t", "top"]
        return subprocess.run(probe, check=False, capture_output=True).returncode == 0

    def stop(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], check=False, capture_output=True)


def rows(screen: str) -> list[list[str]]:
    """The table's server lines, split into cells (no cell holds a space but the last)."""
    return [
        line.split(None, 7)
        for line in screen.splitlines()
        if line.startswith(("127.0.0.1:", "[", "/"))
    ]


def wait_screen(tmux: Tmux, ok: Callable[[str], bool], what: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux.screen()
        if ok(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"screen never showed {what}:\n{screen}")


def ask(port: int, command: bytes) -> bytes:
    """One stats command's reply: up to END, or a single error line."""
    with Conn(port) as c:
        return c.request(command, b"END\r\n", b"ERROR\r\n")


class Load:
    """A client hammering one server with pipelined sets and gets of keys it stored."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        batch = b"".join(b"set top:%d 0 0 5\r\nvalue\r\nget top:%d\r\n" % (i, i) for i in range(50))
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            while not self.stop_flag.is_set():
                s.sendall(batch)
                got = b""
                while got.count(b"END\r\n") < 50:
                    got += s.recv(65536)
                time.sleep(0.002)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=5)


@pytest.fixture
def fleet() -> Iterator[tuple[Server, Server, int]]:
    """(memfleet serve, memcached, a port nothing listens on)."""
    with memfleet() as loaded, memcached() as idle:
        yield loaded, idle, free_port()


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    yield t
    t.stop()


def test_top_shows_load_dead_hosts_and_sorts(fleet: tuple[Server, Server, int], tmux: Tmux) -> None:
    loaded, idle, dead = fleet
    dead_addr = f"127.0.0.1:{dead}"
    # Idle connections make the idle server first by CONNS while it is last up by OPS/S.
    parked = [socket.create_connection(("127.0.0.1", idle.port)) for _ in range(20)]
    try:
        with Load(loaded.port):
            tmux.start([memfleet_bin(), "top", idle.address, loaded.address, dead_addr])

            def ready(screen: str) -> bool:
                by_server = {r[0]: r for r in rows(screen)}
                if set(by_server) != {loaded.address, idle.address, dead_addr}:
                    return False
                # Rates once two samples are in; the loaded one busy, the dead one down.
                return (
                    by_server[loaded.address][1] not in ("-", "0")
                    and by_server[idle.address][1] != "-"
                    and by_server[dead_addr][1] == "down"
                )

            screen = wait_screen(tmux, ready, "nonzero ops/s on the loaded server")
            by_server = {r[0]: r for r in rows(screen)}
            assert set(by_server) == {loaded.address, idle.address, dead_addr}, screen

            busy = by_server[loaded.address]
            assert float(busy[1]) > 0, screen  # ops/s
            assert float(busy[2]) > 50, screen  # hit% (it gets keys it just set)
            used, limit = busy[5].split("/")
            assert used != "0B" and limit == "64M", screen  # memfleet's default -m 64
            # P99 and HOT KEYS show what the server itself reports, or "-" when it has none.
            latency = ask(loaded.port, b"stats latency\r\n")
            if b":p99_us " in latency:
                assert float(busy[6]) > 0, screen
            else:
                assert busy[6] == "-", screen
            hot = ask(loaded.port, b"stats hotkeys\r\n")
            assert ("top:" in busy[7]) == (b"STAT hotkey:" in hot), screen

            quiet = by_server[idle.address]
            assert int(quiet[4]) >= 20, screen  # its 20 parked connections
            assert quiet[6] == "-" and quiet[7] == "-", screen  # memcached: no latency, no hot keys

            down = by_server[dead_addr]
            assert down[1] == "down", screen
            assert "connection refused" in down[7] and "retrying" in down[7], screen
            assert "1 down" in screen, screen

            order = [r[0] for r in rows(screen)]
            assert order == [loaded.address, idle.address, dead_addr], screen

            tmux.keys("5")  # sort by CONNS
            screen = wait_screen(tmux, lambda s: "CONNS v" in s, "the CONNS sort marker")
            assert [r[0] for r in rows(screen)] == [idle.address, loaded.address, dead_addr], screen

            tmux.keys("r")  # fewest connections first; the dead host stays last
            screen = wait_screen(tmux, lambda s: "CONNS ^" in s, "the reversed CONNS sort")
            assert [r[0] for r in rows(screen)] == [loaded.address, idle.address, dead_addr], screen

            tmux.keys("q")  # quits: the session ends with the program
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and tmux.alive():
                time.sleep(0.1)
            assert not tmux.alive(), tmux.screen()
    finally:
        for s in parked:
            s.close()


@pytest.mark.parametrize("mode", ["nutcracker", "mcrouter"])
def test_top_reads_server_lists_from_router_configs(
    mode: str, fleet: tuple[Server, Server, int], tmux: Tmux, tmp_path: Path
) -> None:
    loaded, idle, dead = fleet
    servers = [loaded.address, idle.address, f"127.0.0.1:{dead}"]
    if mode == "nutcracker":
        conf = tmp_path / "nutcracker.yml"
        listed = "".join(f"   - {s}:1\n" for s in servers)
        conf.write_text(f"alpha:\n  listen: 127.0.0.1:{free_port()}\n  servers:\n{listed}")
        args = ["-c", str(conf)]
    else:
        conf = tmp_path / "mcrouter.json"
        conf.write_text(json.dumps({"pools": {"A": {"servers": servers}}, "route": "PoolRoute|A"}))
        args = ["--config", f"file:{conf}"]
    tmux.start([memfleet_bin(), "top", *args])

    def all_polled(screen: str) -> bool:
        shown = rows(screen)
        return len(shown) == 3 and all(r[1] == "down" or r[5] != "-" for r in shown)

    screen = wait_screen(tmux, all_polled, "the config's three servers polled")
    by_server = {r[0]: r for r in rows(screen)}
    assert set(by_server) == set(servers), screen
    assert by_server[f"127.0.0.1:{dead}"][1] == "down", screen
    assert "1 down" in screen, screen
    for up in (loaded.address, idle.address):
        assert by_server[up][5].endswith("/64M"), screen


def test_top_refuses_bad_arguments_without_a_terminal() -> None:
    bin_ = memfleet_bin()
    none = subprocess.run([bin_, "top"], check=False, capture_output=True, text=True)
    assert none.returncode == 1 and "no servers to watch" in none.stderr
    bad = subprocess.run([bin_, "top", "localhost"], check=False, capture_output=True, text=True)
    assert bad.returncode == 1 and "expected host:port" in bad.stderr
    piped = subprocess.run(
        [bin_, "top", "127.0.0.1:1"], check=False, capture_output=True, text=True
    )
    assert piped.returncode == 1 and "needs a terminal" in piped.stderr


def test_top_watches_a_unix_socket_server(tmux: Tmux, tmp_path: Path) -> None:
    path = str(tmp_path / "mc.sock")
    with memcached("-s", path):
        tmux.start([memfleet_bin(), "top", path])
        screen = wait_screen(
            tmux,
            lambda s: any(r[0] == path and r[5] != "-" for r in rows(s)),
            "the unix-socket server polled",
        )
        row = next(r for r in rows(screen) if r[0] == path)
        assert row[5].endswith("/64M") and int(row[4]) >= 1, screen
        assert "0 down" in screen, screen
