"""Fixtures: real cache servers on free loopback ports.

The server command is ``$MEMFLEET_TEST_SERVER`` (a command prefix, default ``memcached``), e.g.
``MEMFLEET_TEST_SERVER="/work/main/target/release/memfleet serve"``; it gets memcached's flags
``-p PORT -l 127.0.0.1 -U 0``.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

import memfleet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        cmd = shlex.split(os.environ.get("MEMFLEET_TEST_SERVER", "memcached"))
        cmd += ["-p", str(self.port), "-l", "127.0.0.1", "-U", "0"]
        if os.path.basename(cmd[0]) == "memcached" and os.geteuid() == 0:
            cmd += ["-u", "root"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{cmd} did not start listening")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _start_many(n: int) -> list[ServerProcess]:
    return [ServerProcess().start() for _ in range(n)]


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    s = ServerProcess().start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def servers3() -> Iterator[list[ServerProcess]]:
    ss = _start_many(3)
    yield ss
    for s in ss:
        s.stop()


@pytest.fixture()
def fresh_servers3() -> Iterator[list[ServerProcess]]:
    """Three servers the test may kill and restart."""
    ss = _start_many(3)
    yield ss
    for s in ss:
        s.stop()


@pytest.fixture(params=["meta", "text"])
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[memfleet.Client]:
    c = memfleet.Client([server.address], protocol=request.param)
    c.flush_all()
    yield c
    c.close()


@pytest.fixture()
def mclient(server: ServerProcess) -> Iterator[memfleet.Client]:
    """Meta-protocol client."""
    c = memfleet.Client([server.address])
    c.flush_all()
    yield c
    c.close()


@pytest.fixture()
def client3(servers3: list[ServerProcess]) -> Iterator[memfleet.Client]:
    c = memfleet.Client([s.address for s in servers3])
    c.flush_all()
    yield c
    c.close()
