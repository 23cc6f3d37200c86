"""`memfleet route` (or nutcracker) as a test fixture: config file, ports, stats, reload."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness import Server, free_port, memfleet_bin

NUTCRACKER = shutil.which("nutcracker")


def pool_yaml(name: str, listen: str, servers: list[str], **opts: object) -> str:
    lines = [f"{name}:", f"  listen: {listen}"]
    for k, v in opts.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append(f"  {k}: {v}")
    lines.append("  servers:")
    lines += [f"   - {s}" for s in servers]
    return "\n".join(lines) + "\n"


def stats_json(port: int) -> dict:
    """A nutcracker-style stats port's JSON (sent whole on connect)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return json.loads(buf)


class Proxy(Server):
    """`memfleet route` (or nutcracker) with a config file and a stats port."""

    def __init__(
        self,
        conf: str,
        port: int | None,
        unix: str | None = None,
        nutcracker: bool = False,
        threads: int = 2,
        extra: Sequence[str] = (),
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="route-")
        self.conf_path = os.path.join(self.dir, "conf.yml")
        Path(self.conf_path).write_text(conf)
        self.stats_port = free_port()
        self.log = os.path.join(self.dir, "log")
        if nutcracker:
            assert NUTCRACKER, "nutcracker not installed"
            exe = [NUTCRACKER]
        else:
            exe = [memfleet_bin(), "route", "-T", str(threads)]
        argv = exe + ["-c", self.conf_path, "-s", str(self.stats_port), "-a", "127.0.0.1"]
        argv += ["-o", self.log, *extra]
        super().__init__(argv, port=port, unix_socket=unix)

    def start(self) -> Proxy:
        super().start()
        time.sleep(0.05)
        assert self.proc is not None and self.proc.poll() is None, (
            "proxy exited at start: " + self.log_text()
        )
        return self

    def stats(self) -> dict:
        return stats_json(self.stats_port)

    def reload(self, conf: str) -> None:
        Path(self.conf_path).write_text(conf)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def log_text(self) -> str:
        try:
            return Path(self.log).read_text()
        except OSError:
            return ""


def never_reading_client(port: int, first: bytes, request: bytes) -> socket.socket:
    """A client that sends `first`, then `request` 1,000 times in a row (read by the router
    at once), and never reads a reply. A thousand, not more: a router that forwards them all
    holds every reply, and a test run against one must not take the machine's memory."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(first + request * 1000)
    return s


def settle(count: Callable[[], int], limit: float = 10.0) -> int:
    """Polls `count` every 0.5 s until it stops moving (at most `limit` s); returns it."""
    seen, deadline = -1, time.monotonic() + limit
    while (now := count()) != seen and time.monotonic() < deadline:
        seen = now
        time.sleep(0.5)
    return seen
