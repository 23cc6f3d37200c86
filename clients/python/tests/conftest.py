"""Fixtures: real cache servers on free loopback ports.

The server command is ``$MEMFLEET_TEST_SERVER`` (a command prefix, default Debian's
``memcached``), e.g. ``MEMFLEET_TEST_SERVER="/work/main/target/release/memfleet serve"``; it gets
memcached's flags ``-l 127.0.0.1 -p PORT -U 0`` (``client_support.cache_server``).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# The repository's pytest settings import test files without touching sys.path; the tests here
# import their helpers by module name.
sys.path.append(str(Path(__file__).resolve().parent))
from client_support import Server, cache_server, check_client_origin  # noqa: E402

import memfleet

check_client_origin()


@contextmanager
def _running(n: int) -> Iterator[list[Server]]:
    """``n`` started servers, killed after (also those started when one fails to)."""
    ss: list[Server] = []
    try:
        for _ in range(n):
            ss.append(cache_server().start())
        yield ss
    finally:
        for s in ss:
            s.kill()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with _running(1) as (s,):
        yield s


@pytest.fixture(scope="session")
def servers3() -> Iterator[list[Server]]:
    with _running(3) as ss:
        yield ss


@pytest.fixture()
def fresh_servers3() -> Iterator[list[Server]]:
    """Three servers the test may kill and restart."""
    with _running(3) as ss:
        yield ss


class Blocking:
    """An AsyncClient whose coroutine methods run to completion on a private event loop, so one
    test body checks both drivers."""

    def __init__(self, async_client: memfleet.AsyncClient) -> None:
        self._client = async_client
        self._loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        return lambda *args, **kwargs: self._loop.run_until_complete(attr(*args, **kwargs))

    def close(self) -> None:
        self._loop.run_until_complete(self._client.close())
        self._loop.close()


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make_client(servers, **options)``: a Client, or an AsyncClient behind :class:`Blocking`."""
    made: list[Any] = []

    def make(servers: Any, **options: Any) -> Any:
        if request.param == "sync":
            c: Any = memfleet.Client(servers, **options)
        else:
            c = Blocking(memfleet.AsyncClient(servers, **options))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture(params=["meta", "text"])
def client(request: pytest.FixtureRequest, server: Server, make_client: Any) -> Any:
    """Either driver over either protocol."""
    c = make_client([server.address], protocol=request.param)
    c.flush_all()
    return c


@pytest.fixture()
def mclient(server: Server, make_client: Any) -> Any:
    """Either driver, meta protocol."""
    c = make_client([server.address])
    c.flush_all()
    return c


@pytest.fixture()
def client3(servers3: list[Server]) -> Iterator[memfleet.Client]:
    c = memfleet.Client([s.address for s in servers3])
    c.flush_all()
    yield c
    c.close()
