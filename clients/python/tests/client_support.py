"""Helpers the client tests import by name: the server they run against, and a raw request to
one. (Not in conftest.py: the repository's own tests/conftest.py has that module name when both
suites run in one pytest session.)

Servers are started, waited for and stopped by the repository's one test harness,
``tests/harness.py``: a free loopback port, readiness that a probe connected to itself does not
fake, a server that exits early reported at once, SIGTERM then SIGKILL and a reaped process.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[3] / "tests"))
from harness import (  # noqa: E402
    Server,
    free_port,
    memcached,
    memcached_command,
    serve_command,
)
from harness import check_client_origin as check_client_origin  # noqa: E402  (for conftest)
from harness import listening_socket as listening_socket  # noqa: E402  (for the tests)


def cache_server(*flags: str, command: str | None = None) -> Server:
    """A server (not started) on a free port: ``command`` or ``$MEMFLEET_TEST_SERVER``, a command
    prefix such as ``/path/to/memfleet serve``, else Debian's memcached; either with memcached's
    flags, then ``flags``."""
    prefix = shlex.split(os.environ.get("MEMFLEET_TEST_SERVER", "") if command is None else command)
    if not prefix:
        return memcached(*flags)
    port = free_port()
    argv = [*prefix, "-l", "127.0.0.1", "-p", str(port), "-U", "0", *flags]
    if os.path.basename(prefix[0]) == "memcached":
        argv = memcached_command(*argv[1:], exe=prefix[0])
    return Server(argv, port=port)


def memfleet_server(*flags: str) -> Server:
    """``memfleet serve`` (this checkout's release binary) whatever ``$MEMFLEET_TEST_SERVER`` says:
    for features memcached does not have."""
    return cache_server(*flags, command=shlex.join(serve_command()))


def raw_request(client: Any, request: bytes) -> bytes:
    """Send ``request`` to the client's first server on a fresh connection; the first reply chunk."""
    host, port = client.servers[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(request)
        return s.recv(65536)
