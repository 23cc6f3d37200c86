"""mcrouter's asynclog with `memfleet route`: deletes a PoolRoute could not deliver are
spooled under --async-dir (one file per server), answered NOT_FOUND, and replayed once
the server answers again, also by a router restarted after kill -9."""

from __future__ import annotations

import os
import re
import shutil
import signal
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


def pipeline_deletes(port: int | None, per_conn: list[list[str]]) -> list[list[bytes]]:
    """Sends each list's deletes pipelined on a connection of its own, all before reading
    any reply; the replies per connection, in order."""
    assert port is not None
    conns = [Conn(port, timeout=60.0) for _ in per_conn]
    try:
        for c, keys in zip(conns, per_conn):
            c.send(b"".join(f"delete {k}\r\n".encode() for k in keys))
        return [[c.read_until(b"\r\n") for _ in keys] for c, keys in zip(conns, per_conn)]
    finally:
        for c in conns:
            c.sock.close()


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
        # Logged after the spool file is emptied and synced, so it may come a moment later.
        eventually(lambda: "asynclog: replayed" in r.log_text(), "the replay logged")


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


def test_pipelined_deletes_on_many_connections_are_on_disk_when_answered(
    servers, spool_dir: Path
) -> None:
    (a,) = servers(1)
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    r = McRouter(config, *FLAGS, "--async-dir", str(spool_dir))
    per_conn = [[f"c{c}:{i}" for i in range(500)] for c in range(4)]
    with r, a.paused():
        assert delete_all(r.port, ["tko"]) == [b"NOT_FOUND\r\n"]
        replies = pipeline_deletes(r.port, per_conn)
        for keys, got in zip(per_conn, replies):
            assert got == [b"NOT_FOUND\r\n"] * len(keys)
        # Every answered delete survives a kill -9 that follows the last reply at once.
        assert r.proc is not None
        r.proc.kill()
        r.proc.wait()
        left = spooled(spool_dir, a)
    assert left[0] == "tko"
    assert sorted(left[1:]) == sorted(k for keys in per_conn for k in keys)
    for keys in per_conn:
        mine = set(keys)
        assert [k for k in left if k in mine] == keys, "each connection's deletes in order"


def test_no_delete_is_answered_before_its_spool_is_synced(servers, spool_dir: Path) -> None:
    """Under strace (one worker, so its syscalls are in order): every NOT_FOUND a client is
    sent comes after an fdatasync that followed the last spool append, and a pipelined
    burst shares its syncs (group commit)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    (a,) = servers(1)
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    r = McRouter(config, *FLAGS, "--async-dir", str(spool_dir))
    trace = Path(r.dir) / "strace"
    r.argv[r.argv.index("--num-proxies") + 1] = "1"
    r.argv = ["strace", "-f", "-o", str(trace), "-e", "trace=write,sendto,fdatasync", *r.argv]
    per_conn = [[f"c{c}:{i}" for i in range(300)] for c in range(3)]
    with r, a.paused():
        assert r.proc is not None
        # Stopping strace detaches it from the router, which would run on: stop the router.
        strace_pid = r.proc.pid
        try:
            assert delete_all(r.port, ["tko"]) == [b"NOT_FOUND\r\n"]
            replies = pipeline_deletes(r.port, per_conn)
            assert all(got == [b"NOT_FOUND\r\n"] * 300 for got in replies)
            assert len(spooled(spool_dir, a)) == 901
        finally:
            children = Path(f"/proc/{strace_pid}/task/{strace_pid}/children").read_text().split()
            for child in children:
                os.kill(int(child), signal.SIGTERM)
            r.proc.wait(timeout=10)
    appends = syncs = answers = 0
    unsynced = False
    for line in trace.read_text().splitlines():
        call = re.sub(r"^\d+\s+", "", line)
        if re.match(r'write\(\d+, "[^"]*\\n"', call):
            appends += 1
            unsynced = True
        elif re.match(r"(<\.\.\. )?fdatasync(\(\d+\)| resumed>\)) += 0", call):
            syncs += 1
            unsynced = False
        elif re.match(r'sendto\(\d+, "NOT_FOUND', call):
            answers += 1
            assert not unsynced, f"a reply went out before the spool was synced: {line}"
    assert appends == 901, "one write per spooled delete"
    assert answers > 0
    assert 0 < syncs <= 901 // 4, f"{syncs} fdatasyncs for 901 pipelined deletes"


def test_pipelined_deletes_keep_their_order_among_other_requests(servers, spool_dir: Path) -> None:
    """Spooled deletes are answered a loop turn later than the requests around them; a
    connection still gets every reply in its own order."""
    (a,) = servers(1)
    b = servers(1)[0]
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {
            "type": "PrefixSelectorRoute",
            "policies": {"b:": "PoolRoute|B"},
            "wildcard": "PoolRoute|A",
        },
    }
    with McRouter(config, *FLAGS, "--async-dir", str(spool_dir)) as r, a.paused():
        assert r.port is not None
        assert delete_all(r.port, ["tko"]) == [b"NOT_FOUND\r\n"]
        with Conn(r.port) as c:
            reqs = []
            for i in range(100):
                reqs.append(f"delete a{i}\r\n")
                reqs.append(f"set b:{i} 0 0 1\r\nx\r\n" if i % 2 else f"get b:{i}\r\n")
            c.send("".join(reqs).encode())
            for i in range(100):
                assert c.read_until(b"\r\n") == b"NOT_FOUND\r\n"
                want = b"STORED\r\n" if i % 2 else b"END\r\n"
                assert c.read_until(b"\r\n") == want
    assert spooled(spool_dir, a) == ["tko"] + [f"a{i}" for i in range(100)]
