"""Helpers the client tests import by name: real cache servers on free loopback ports, and a
raw request to one. (Not in conftest.py: the repository's own tests/conftest.py has that module
name when both suites run in one pytest session.)"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from typing import Any


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


def raw_request(client: Any, request: bytes) -> bytes:
    """Send ``request`` to the client's first server on a fresh connection; the first reply chunk."""
    host, port = client.servers[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(request)
        return s.recv(65536)
