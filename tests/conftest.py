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

from fleet import Fleet, FleetError
from harness import Server, check_client_origin, memcached, memfleet

check_client_origin()

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


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Server, Server]]:
    """Debian's memcached and the implementation under test, shared by a module's
    differential tests."""
    with memcached() as ref, start_target() as mine:
        yield ref, mine


@pytest.fixture
def make_fleet() -> Iterator[Callable[[str, list[str]], Fleet]]:
    """Builds fleets of network-namespace hosts (fleet.py); tears them all down after the test,
    whatever its outcome. Where namespaces cannot be made the test fails with the reason."""
    fleets: list[Fleet] = []

    def make(name: str, hosts: list[str]) -> Fleet:
        fleet = Fleet(name, hosts)
        try:
            fleet.start()
        except FleetError as e:
            reason = str(e)
        else:
            fleets.append(fleet)
            return fleet
        pytest.fail(f"cannot build the fleet: {reason}", pytrace=False)

    yield make
    for fleet in fleets:
        fleet.close()
