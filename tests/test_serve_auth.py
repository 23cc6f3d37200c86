"""`-Y FILE`: text-protocol clients log in with `set <key> <flags> <exptime> <n>` + `user pass`.

Each exchange is run against memcached 1.6.18 -Y as well, and the replies must be the same.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import (
    Conn,
    Server,
    eventually,
    free_port,
    memcached,
    memfleet,
    memfleet_bin,
    save_warm_restart,
)

# One request per step, each answered before the next is sent; every step gets a reply. (memcached drops all but one
# reply when unauthenticated requests are pipelined; memfleet answers each.)
SCRIPTS: list[list[bytes]] = [
    [b"get foo\r\n", b"mg foo v\r\n", b"version\r\n", b"quit\r\n", b"get foo\r\n"],
    [b"set a 0 0 9\r\nuser pasx\r\n", b"set a 0 0 9\r\nuser pass\r\n", b"get a\r\n"],
    [b"set a 0 0 4\r\nuser\r\n", b"set a 0 0 9\r\nuser passXX", b"get a\r\n"],
    [b"set a 0 0\r\n", b"set a 0 0 abc\r\n", b"set a 0 0 -1\r\n", b"SET a 0 0 9\r\n"],
    [b"set a b c 9 noreply\r\nuser pass\r\n", b"mn\r\n", b"set k 0 0 1\r\nx\r\n"],
    [b"set a 0 0 11\r\nuser pass x\r\n", b"mg k v\r\n", b"get k\r\n"],
    [b"set a 0 0 10\r\nuser  pass\r\n", b"delete k\r\n"],
    [b"set a 0 0 10\nother pw:2\r\n", b"set k 0 0 2\r\nhi\r\n", b"mg k v\r\n"],
    [b"set a 0 0 9\r\nuser pass\r\nget a\r\n"],
    # Only spaces separate the words (docs/protocol.md): a tab does not, leading ones are skipped.
    [b"set a 0 0 9\r\nuser\tpass\r\n", b"set a 0 0 11\r\n  user pass\r\n", b"mn\r\n"],
    [b"set a 0 0 10\r\nuser pass \r\n", b"mn\r\n"],
]


@pytest.fixture
def pwfile(tmp_path: Path) -> Path:
    path = tmp_path / "pw"
    path.write_bytes(b"user:pass\nother:pw:2\n")
    return path


@pytest.fixture
def pair(pwfile: Path) -> Iterator[tuple[Server, Server]]:
    with memfleet("-Y", str(pwfile)) as mine, memcached("-Y", str(pwfile)) as ref:
        yield mine, ref


def replies(port: int, script: list[bytes]) -> list[bytes]:
    out = []
    with Conn(port) as c:
        for req in script:
            c.send(req)
            c.sock.settimeout(5)
            first = c.sock.recv(65536)
            out.append(first + c.read_all(timeout=0.1))
    return out


def auth_stats(port: int) -> tuple[int, int]:
    with Conn(port) as c:
        c.request(b"set x 0 0 9\r\nuser pass\r\n")
        c.send(b"stats\r\n")
        stats = c.read_until(b"END\r\n").decode()
    fields = dict(line.split()[1:3] for line in stats.splitlines() if line.startswith("STAT"))
    return int(fields["auth_cmds"]), int(fields["auth_errors"])


def test_login_replies_match_memcached(pair: tuple[Server, Server]) -> None:
    mine, ref = pair
    for script in SCRIPTS:
        got = replies(mine.port or 0, script)
        want = replies(ref.port or 0, script)
        # memfleet's version string extends memcached's ("1.6.18-memfleet-...").
        got = [re.sub(rb"^VERSION 1\.6\.18-memfleet\S*", b"VERSION 1.6.18", r) for r in got]
        assert got == want, script
    assert auth_stats(mine.port or 0) == auth_stats(ref.port or 0)


def test_counts_and_stats_reset(pwfile: Path) -> None:
    with memfleet("-Y", str(pwfile)) as s, Conn(s.port or 0) as c:
        assert (
            c.request(b"set a 0 0 9\r\nuser nope\r\n") == b"CLIENT_ERROR authentication failure\r\n"
        )
        assert c.request(b"set a 0 0 9\r\nuser pass\r\n") == b"STORED\r\n"
        stats = c.request(b"stats\r\n", b"END\r\n")
        assert b"STAT auth_cmds 2\r\n" in stats and b"STAT auth_errors 1\r\n" in stats
        assert c.request(b"stats reset\r\n") == b"RESET\r\n"
        stats = c.request(b"stats\r\n", b"END\r\n")
        assert b"STAT auth_cmds 0\r\n" in stats and b"STAT auth_errors 0\r\n" in stats


def test_unterminated_line_closes_and_huge_value_is_refused(pwfile: Path) -> None:
    with memfleet("-Y", str(pwfile)) as s:
        with Conn(s.port or 0) as c:
            c.send(b"x" * 3000)
            assert c.read_all(timeout=2) == b""
        with Conn(s.port or 0) as c:
            c.send(b"set a 0 0 100000000\r\n")
            assert c.read_all(timeout=2) == b"CLIENT_ERROR unauthenticated\r\n"


def logs_in(port: int, login: bytes) -> bool:
    """Whether `user password` in `login` authenticates a new connection."""
    with Conn(port) as c:
        return c.request(b"set a 0 0 %d\r\n%s\r\n" % (len(login), login)) == b"STORED\r\n"


def test_sighup_rereads_the_file_and_keeps_it_when_broken(pwfile: Path) -> None:
    with memfleet("-Y", str(pwfile)) as s:
        assert s.proc is not None
        pwfile.write_bytes(b"new:secret\n")
        s.proc.send_signal(signal.SIGHUP)

        eventually(lambda: logs_in(s.port or 0, b"new secret"), "SIGHUP reloading the file")
        pwfile.write_bytes(b"no colon here\n")
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert logs_in(s.port or 0, b"new secret"), "a broken file replaced the one in use"
        assert s.proc.poll() is None


def test_sighup_while_a_warm_restart_loads_is_not_lost(pwfile: Path, tmp_path: Path) -> None:
    """The port accepts connections before a warm restart's items are loaded; a HUP sent as
    soon as it does must still re-read the file."""
    memfile = str(tmp_path / "mem")
    save_warm_restart(memfile, 100_000, "-m", "64")
    with memfleet("-m", "64", "-e", memfile, "-Y", str(pwfile)) as s:
        assert s.proc is not None
        pwfile.write_bytes(b"new:secret\n")
        s.proc.send_signal(signal.SIGHUP)

        # Eventually: on a machine that loads the items before the HUP arrives, the HUP is
        # an ordinary one, handled beside the requests. A lost HUP never gets there.
        eventually(lambda: logs_in(s.port or 0, b"new secret"), "the HUP sent while loading")
        with Conn(s.port or 0) as c:
            assert c.request(b"set a 0 0 10\r\nnew secret\r\n") == b"STORED\r\n"
            assert c.request(b"mg k99999\r\n") == b"HD\r\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, b"Could not open authfile"), (b"user:pass\nbroken\n", b"malformed entry")],
)
def test_bad_file_stops_startup(tmp_path: Path, content: bytes | None, message: bytes) -> None:
    path = tmp_path / "pw"
    if content is not None:
        path.write_bytes(content)
    argv = [memfleet_bin(), "serve", "-l", "127.0.0.1", "-p", str(free_port()), "-Y", str(path)]
    done = subprocess.run(argv, check=False, capture_output=True, timeout=10)
    assert done.returncode != 0
    assert message in done.stderr


def test_udp_with_auth_is_refused(pwfile: Path) -> None:
    argv = [memfleet_bin(), "serve", "-l", "127.0.0.1", "-p", str(free_port())]
    argv += ["-U", str(free_port()), "-Y", str(pwfile)]
    done = subprocess.run(argv, check=False, capture_output=True, timeout=10)
    assert done.returncode != 0
    assert b"Cannot use UDP with ascii authentication enabled" in done.stderr
