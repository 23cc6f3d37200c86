"""mcrouter's asynclog with `memfleet route`: deletes a PoolRoute could not deliver are
spooled under --async-dir (one file per server), answered NOT_FOUND, and replayed once
the server answers again, also by a router restarted after kill -9."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Conn, Server, eventually
from mcrouter_harness import McRouter, fetch, pools, servers, store

__all__ = ["servers"]

# A server that does not answer in 200 ms is TKO at once; probes stay out of the way.
FLAGS = ("--server-timeout", "200", "--timeouts-until-tko", "1")


@pytest.fixture
def spool_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "spool"


def spool_of(spool_dir: Path, server: Server) -> Path:
    return spool_dir / f"{server.address}.asynclog"


def spooled(spool_dir: Path, server: Server) -> list[str]:
    try:
        return spool_of(spool_dir, server).read_text().split()
    except FileNotFoundError:
        return []


def delete_all(port: int | None, keys: list[str]) -> list[bytes]:
    """Pipelines a delete per key; the replies in order."""
    assert port is not None
    with Conn(port) as c:
        c.send(b"".join(f"delete {k}\r\n".encode() for k in keys))
        return [c.read_until(b"\r\n") for _ in keys]


def present(server: Server, keys: list[str]) -> list[str]:
    port = server.port
    assert port is not None
    return [k for k in keys if fetch(port, k) != b"END\r\n"]


def test_deletes_to_a_hung_server_are_spooled_and_replayed(servers, spool_dir: Path) -> None:
    (a,) = servers(1)
    keys = [f"key{i}" for i in range(40)]
    for k in keys:
        assert store(a.port, k) == b"STORED\r\n"
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    with McRouter(config, *FLAGS, "--async-dir", str(spool_dir)) as r:
        with a.paused():
            # The first times out (A goes TKO), the rest are not sent: all are spooled,
            # in order, and answered as mcrouter does.
            assert delete_all(r.port, keys[:1]) == [b"NOT_FOUND\r\n"]
            assert delete_all(r.port, keys[1:]) == [b"NOT_FOUND\r\n"] * 39
            assert spooled(spool_dir, a) == keys
        eventually(lambda: not present(a, keys), "every key deleted on A")
        eventually(lambda: spooled(spool_dir, a) == [], "spool emptied")
        assert spool_of(spool_dir, a).exists()
        assert "asynclog: replayed" in r.log_text()


def test_a_router_killed_mid_outage_replays_its_spool_at_start(servers, spool_dir: Path) -> None:
    (a,) = servers(1)
    keys = [f"k{i}" for i in range(30)]
    for k in keys:
        assert store(a.port, k) == b"STORED\r\n"
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    r = McRouter(config, *FLAGS, "--async-dir", str(spool_dir))
    with r:
        with a.paused():
            assert delete_all(r.port, keys[:1]) == [b"NOT_FOUND\r\n"]
            assert delete_all(r.port, keys[1:]) == [b"NOT_FOUND\r\n"] * 29
            assert r.proc is not None
            r.proc.kill()
            r.proc.wait()
        # Nothing replays while the router is down, the spool is intact.
        assert spooled(spool_dir, a) == keys
        # The timed-out first delete may have reached A late; the others were never sent.
        assert present(a, keys[1:]) == keys[1:]
        r.start()
        eventually(lambda: not present(a, keys), "every key deleted after the restart")
        eventually(lambda: spooled(spool_dir, a) == [], "spool emptied")
        assert "left from an earlier run" in r.log_text()


def test_a_full_spool_drops_its_oldest_and_says_so(servers, spool_dir: Path) -> None:
    (a,) = servers(1)
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    flags = (*FLAGS, "--async-dir", str(spool_dir), "--asynclog-max-bytes", "1000")
    with McRouter(config, *flags) as r, a.paused():
        keys = [f"key{i:06}" for i in range(150)]  # 10 bytes a line in the spool
        assert delete_all(r.port, keys[:1]) == [b"NOT_FOUND\r\n"]
        assert delete_all(r.port, keys[1:]) == [b"NOT_FOUND\r\n"] * 149
        left = spooled(spool_dir, a)
        assert spool_of(spool_dir, a).stat().st_size <= 1000
        assert left == keys[-len(left) :], "the newest are kept, in order"
        assert len(left) < 100
        assert "dropped its" in r.log_text()


def test_asynclog_disable_returns_the_error(servers, spool_dir: Path) -> None:
    (a,) = servers(1)
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    r = McRouter(config, *FLAGS, "--async-dir", str(spool_dir))
    r.argv.append("--asynclog-disable")  # a flag without a value
    with r, a.paused():
        (first,) = delete_all(r.port, ["k"])
        assert first.startswith(b"SERVER_ERROR"), first
        assert not spool_dir.exists()
