"""`memfleet route` with an mcrouter JSON config, the memcached servers it routes to, and
one-request helpers: shared by the mcrouter suites (test_route_mcrouter, test_route_asynclog)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from harness import Conn, Server, free_port, memcached, memfleet_bin


def route_argv(
    conf: str | Path,
    port: int,
    listen: str,
    log: str | Path,
    options: dict[str, str],
    extra: Sequence[str],
) -> list[str]:
    """`memfleet route` with the mcrouter config file `conf`, 2 proxies, logging to `log`;
    `options` (flag -> value) as overridden by the flag/value pairs in `extra`."""
    argv = [memfleet_bin(), "route", "--config", f"file:{conf}", "-p", str(port)]
    argv += ["--listen-addresses", listen, "-L", str(log)]
    defaults = {"--num-proxies": "2", **options}
    for flag, value in {**defaults, **dict(zip(extra[::2], extra[1::2]))}.items():
        argv += [flag, value]
    return argv


class McRouter(Server):
    """The router with an mcrouter config file, short timeouts and quick TKO probes."""

    def __init__(self, config: dict | str, *extra: str, prefix: str | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="mcroute-")
        self.conf_path = os.path.join(self.dir, "mcrouter.json")
        self.write(config)
        self.log = os.path.join(self.dir, "log")
        port = free_port()
        options = {
            "--server-timeout": "300",
            "--probe-timeout-initial": "100",
            "--probe-timeout-max": "400",
        }
        argv = route_argv(self.conf_path, port, "127.0.0.1", self.log, options, extra)
        if prefix:
            argv += ["--route-prefix", prefix]
        super().__init__(argv, port=port)

    def write(self, config: dict | str) -> None:
        """Writes `config`: a dict as JSON, a string (a config as written, comments and
        all) as it is."""
        Path(self.conf_path).write_text(config if isinstance(config, str) else json.dumps(config))

    def log_text(self) -> str:
        try:
            return Path(self.log).read_text()
        except OSError:
            return ""


def ask(port: int, data: bytes, *terms: bytes) -> bytes:
    with Conn(port) as c:
        return c.request(data, *terms)


def store(port: int, key: str, value: str = "v", exptime: int = 0) -> bytes:
    return ask(port, f"set {key} 0 {exptime} {len(value)}\r\n{value}\r\n".encode())


def fetch(port: int, key: str) -> bytes:
    return ask(port, f"get {key}\r\n".encode(), b"END\r\n", b"ERROR\r\n")


@pytest.fixture
def servers() -> Iterator[Callable[[int], list[Server]]]:
    started: list[Server] = []

    def start(n: int) -> list[Server]:
        out = [memcached().start() for _ in range(n)]
        started.extend(out)
        return out

    yield start
    for s in started:
        s.stop()


def pools(**named: list[Server]) -> dict:
    return {name: {"servers": [s.address for s in group]} for name, group in named.items()}
