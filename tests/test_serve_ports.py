"""`-p -1` / `-U -1` (any free port) and `MEMCACHED_PORT_FILENAME`, against memcached 1.6.18."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from harness import Conn, memcached_command, memfleet_bin, udp_frame

IMPLEMENTATIONS = ["memfleet", "memcached"]


def command(impl: str, *args: str) -> list[str]:
    if impl == "memfleet":
        return [memfleet_bin(), "serve", "-t", "2", *args]
    return memcached_command(*args)


@contextmanager
def started(impl: str, portfile: Path, *args: str) -> Iterator[dict[str, list[int]]]:
    """Runs the server until the port file appears; yields {"TCP INET": [ports], ...}."""
    env = dict(os.environ, MEMCACHED_PORT_FILENAME=str(portfile))
    proc = subprocess.Popen(command(impl, *args), env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not portfile.exists():
            assert proc.poll() is None, "server exited"
            assert time.monotonic() < deadline, "no port file"
            time.sleep(0.02)
        ports: dict[str, list[int]] = {}
        for line in portfile.read_text().splitlines():
            m = re.fullmatch(r"(TCP|UDP) (INET6?): (\d+)", line)
            assert m, line
            ports.setdefault(f"{m[1]} {m[2]}", []).append(int(m[3]))
        yield ports
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def udp_version(port: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(udp_frame(7, b"version\r\n"), ("127.0.0.1", port))
        return s.recv(2048)[8:]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_any_free_port_reported_in_the_port_file(impl: str, tmp_path: Path) -> None:
    portfile = tmp_path / "ports"
    with started(impl, portfile, "-l", "127.0.0.1", "-p", "-1", "-U", "-1") as ports:
        assert sorted(ports) == ["TCP INET", "UDP INET"]
        (tcp,), (udp,) = ports["TCP INET"], ports["UDP INET"]
        assert tcp != 0 and udp != 0
        with Conn(tcp) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION 1.6.18")
        assert udp_version(udp).startswith(b"VERSION 1.6.18")
        assert not (tmp_path / "ports.lck").exists()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_fixed_ports_and_several_addresses(impl: str, tmp_path: Path) -> None:
    portfile = tmp_path / "ports"
    have_v6 = socket.has_ipv6
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        have_v6 = False
    listen = "127.0.0.1,[::1]" if have_v6 else "127.0.0.1"
    with started(impl, portfile, "-l", listen, "-p", "-1") as ports:
        assert "UDP INET" not in ports
        assert len(ports["TCP INET"]) == 1
        if have_v6:
            assert len(ports["TCP INET6"]) == 1
            with socket.create_connection(("::1", ports["TCP INET6"][0]), timeout=5) as s:
                s.sendall(b"version\r\n")
                assert s.recv(100).startswith(b"VERSION 1.6.18")
