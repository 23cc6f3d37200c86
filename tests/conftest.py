"""Fixtures shared by the cross-component tests: real servers on free loopback ports.

Set MEMFLEET_TEST_TARGET=memcached to run the protocol suites against Debian's memcached
instead of memfleet: that is how the tests themselves are checked against the reference.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Server, memcached, memfleet

TARGET = os.environ.get("MEMFLEET_TEST_TARGET", "memfleet")


def start_target(*args: str) -> Server:
    """The implementation under test, started with memcached-style flags."""
    if TARGET == "memcached":
        return memcached(*args)
    return memfleet(*args)


@pytest.fixture
def make_server() -> Iterator[Callable[..., Server]]:
    """Starts servers with given flags; stops them all after the test."""
    started: list[Server] = []

    def make(*args: str) -> Server:
        s = start_target(*args).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def server() -> Iterator[Server]:
    """A fresh server for one test."""
    with start_target() as s:
        yield s


@pytest.fixture
def reference() -> Iterator[Server]:
    """Debian's memcached 1.6, the reference for differential tests."""
    with memcached() as s:
        yield s
