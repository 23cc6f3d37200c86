"""The flash tier (`-o ext_path=FILE:SIZE`, memcached's extstore flags): items evicted from
memory are read back from the file with the right value, every command sees them, and a file
that is corrupted, truncated, removed or on a full file system gives misses, never a wrong
value, while the server keeps serving what is in memory."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Conn, Server, eventually, free_port, memcached, memfleet, memfleet_bin

VALUE_LEN = 1000


def value(i: int, version: int = 1) -> bytes:
    head = f"v{version}:{i}:".encode()
    return head + b"x" * (VALUE_LEN - len(head))


def key(i: int) -> str:
    return f"flash:{i:08d}"


@pytest.fixture
def flash_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="memfleet-flash-", dir="/var/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def flash_server(
    path: Path,
    *extra: str,
    size: str = "256m",
    mb: str = "8",
    more: Path | None = None,
    port: int | None = None,
) -> Server:
    """At -m `mb` with the flash space at `path` (and `more`, a second file, if given)."""
    opts = f"ext_path={path}:{size},ext_item_size=512,ext_page_size=8,ext_wbuf_size=1"
    if more is not None:
        opts += f",ext_path={more}:{size}"
    return memfleet("-m", mb, "-o", opts, *extra, port=port)


def load(port: int, n: int, version: int = 1, start: int = 0) -> None:
    with Conn(port, timeout=30) as c:
        for lo in range(start, start + n, 500):
            c.send(
                b"".join(
                    b"set %s 0 0 %d noreply\r\n%s\r\n"
                    % (key(i).encode(), VALUE_LEN, value(i, version))
                    for i in range(lo, min(start + n, lo + 500))
                )
            )
        assert c.request(b"mn\r\n") == b"MN\r\n"


def read_back(port: int, n: int, version: int = 1) -> tuple[int, int, int]:
    """(right, wrong, missing) over keys 0..n, by multi-gets of 100."""
    right = wrong = 0
    with Conn(port, timeout=30) as c:
        for lo in range(0, n, 100):
            keys = [key(i) for i in range(lo, min(n, lo + 100))]
            reply = c.request(("get " + " ".join(keys) + "\r\n").encode(), b"END\r\n")
            got = parse_values(reply)
            for k in keys:
                if k in got:
                    i = int(k.split(":")[1])
                    if got[k] == value(i, version):
                        right += 1
                    else:
                        wrong += 1
    return right, wrong, n - right - wrong


def parse_values(reply: bytes) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    pos = 0
    while reply.startswith(b"VALUE ", pos):
        eol = reply.index(b"\r\n", pos)
        parts = reply[pos:eol].split()
        length = int(parts[3])
        got[parts[1].decode()] = reply[eol + 2 : eol + 2 + length]
        pos = eol + 2 + length + 2
    assert reply[pos:] == b"END\r\n", reply[pos : pos + 100]
    return got


def test_items_evicted_from_memory_are_read_back_from_flash(flash_dir: Path) -> None:
    """30 MB of values at -m 8, over two 16 MiB files: nearly all go to flash, and every one
    reads back right; `stats` counts them under memcached's extstore names, /metrics under
    memcached_exporter's."""
    n = 30_000
    metrics_port = free_port()
    with flash_server(
        flash_dir / "a",
        "-o",
        f"metrics=127.0.0.1:{metrics_port}",
        size="16m",
        more=flash_dir / "b",
    ) as s:
        load(s.port or 0, n)
        with Conn(s.port or 0) as c:
            st = c.stats()
            settings = c.stats("settings")
        assert int(st["extstore_objects_used"]) > n // 2, st
        assert int(st["curr_items"]) == n
        assert st["evictions"] == "0"
        assert settings["ext_item_size"] == "512"
        # Not given: memcached's default, UINT_MAX (only eviction writes to flash).
        assert settings["ext_item_age"] == "4294967295"
        assert read_back(s.port or 0, n) == (n, 0, 0)
        with Conn(s.port or 0) as c:
            st = c.stats()
        assert int(st["get_extstore"]) > n // 2
        assert int(st["extstore_bytes_written"]) >= int(st["extstore_objects_written"]) * VALUE_LEN
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            metrics = r.read().decode()
        used = re.search(r"^memcached_extstore_objects_used (\d+)$", metrics, re.MULTILINE)
        assert used and int(used.group(1)) > n // 2, metrics
        assert f"memcached_current_items {n}" in metrics
        # Both files were written to.
        assert (flash_dir / "b").stat().st_blocks > 0


def test_items_idle_past_ext_item_age_go_to_flash_while_memory_is_not_full(
    flash_dir: Path,
) -> None:
    """memcached's ext_item_age: 1,000-byte values at -m 64 (2 MB of it used) that nobody
    reads or writes for more than 2 s are written to flash by the background pass, their
    memory given back, and read back right from there; a small value stays in memory."""
    n = 2_000
    opts = (
        f"ext_path={flash_dir / 'cache'}:64m,ext_item_age=2,ext_item_size=512,"
        "ext_page_size=8,ext_wbuf_size=1,ext_recache_rate=0"
    )
    with memfleet("-m", "64", "-o", opts) as s:
        port = s.port or 0
        with Conn(port) as c:
            assert c.stats("settings")["ext_item_age"] == "2"
            assert c.request(b"set small 0 0 5\r\nshort\r\n") == b"STORED\r\n"
        load(port, n)
        with Conn(port) as c:

            def all_on_flash() -> bool:
                return int(c.stats()["extstore_objects_used"]) == n

            # Idle past the age within ~3 s, moved at the next pass (about once a second).
            eventually(all_on_flash, "every idle value written to flash", limit=60)
            st = c.stats()
            assert int(st["extstore_objects_written"]) == n, st
            assert st["evictions"] == "0" and st["curr_items"] == str(n + 1), st
            # Memory holds the small item alone.
            assert int(st["bytes"]) < 100, st
            reply = c.request(b"get small\r\n", b"END\r\n")
            assert reply == b"VALUE small 0 5\r\nshort\r\nEND\r\n"
            assert c.stats()["get_extstore"] == "0"
        assert read_back(port, n) == (n, 0, 0)
        with Conn(port) as c:
            assert c.stats()["get_extstore"] == str(n)


def test_commands_on_items_on_flash_answer_as_memcached(flash_dir: Path) -> None:
    """Every kind of command on a key whose item is on flash answers as memcached answers the
    same command on the item (differential against Debian's memcached, its item in memory)."""
    n = 20_000
    script = [
        b"add %s 0 0 1\r\nx\r\n" % key(1).encode(),
        b"replace %s 5 0 3\r\nnew\r\n" % key(2).encode(),
        b"get %s\r\n" % key(2).encode(),
        b"append %s 0 0 1\r\n!\r\n" % key(3).encode(),
        b"prepend %s 0 0 1\r\n^\r\n" % key(3).encode(),
        b"delete %s\r\n" % key(4).encode(),
        b"get %s\r\n" % key(4).encode(),
        b"touch %s 100\r\n" % key(5).encode(),
        b"mg %s s v f\r\n" % key(5).encode(),
        b"mg %s s f\r\n" % key(6).encode(),
        b"md %s q\r\nmn\r\n" % key(7).encode(),
        b"mg %s v\r\n" % key(7).encode(),
        b"ms %s 2 I\r\nzz\r\n" % key(8).encode(),
        b"incr %s 1\r\n" % key(9).encode(),
        b"get %s %s %s\r\n" % (key(10).encode(), key(99_999).encode(), key(11).encode()),
    ]
    replies = []
    with flash_server(flash_dir / "cache") as s, memcached("-m", "64") as ref:
        for srv in (s, ref):
            load(srv.port or 0, n)
            with Conn(srv.port or 0) as c:
                if srv is s:
                    on_flash = int(c.stats()["extstore_objects_used"])
                    assert on_flash > n // 2
                out = []
                for req in script:
                    c.send(req)
                    out.append(c.read_all(0.2))
                replies.append(out)
    for req, mine, theirs in zip(script, replies[0], replies[1]):
        assert mine == theirs, (req, mine[:200], theirs[:200])


def test_a_second_server_or_a_bad_path_is_refused_by_name(flash_dir: Path) -> None:
    def start(opts: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [memfleet_bin(), "serve", "-l", "127.0.0.1", "-p", str(free_port()), "-o", opts],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )

    path = flash_dir / "cache"
    with flash_server(path) as s:
        r = start(f"ext_path={path}:256m,ext_page_size=8")
        assert r.returncode != 0 and str(path) in r.stderr and "in use" in r.stderr, r
        with Conn(s.port or 0) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION ")
    r = start(f"ext_path={flash_dir}/no/such/dir/cache:64m")
    assert r.returncode != 0 and f"{flash_dir}/no/such/dir/cache" in r.stderr, r
    r = start(f"ext_path={flash_dir}/huge:1000000g")
    assert r.returncode != 0 and "free" in r.stderr and f"{flash_dir}/huge" in r.stderr, r
    r = start(f"ext_path={flash_dir}/x:64m,ext_max_sleep=1000")
    assert r.returncode != 0 and "ext_max_sleep" in r.stderr, r
    r = start(f"ext_path={flash_dir}/x:64m,ext_drop_under=many")
    assert r.returncode != 0 and "ext_drop_under" in r.stderr, r


def test_corrupt_or_truncated_flash_gives_misses_never_wrong_values(flash_dir: Path) -> None:
    n = 20_000
    path = flash_dir / "cache"
    with flash_server(path) as s:
        load(s.port or 0, n)
        # Flip bytes all over the written part of the file under the running server.
        with open(path, "r+b") as f:
            for off in range(0, 16 << 20, 4099):
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ 0x5A]) if b else b"\x01")
        right, wrong, missing = read_back(s.port or 0, n)
        assert wrong == 0
        assert missing > 0 and right > 0
        with Conn(s.port or 0) as c:
            assert int(c.stats()["badcrc_from_extstore"]) > 0
        # Truncated to nothing: every item still on flash is a miss.
        os.truncate(path, 0)
        right, wrong, missing = read_back(s.port or 0, n)
        assert wrong == 0 and missing > n // 2
        with Conn(s.port or 0) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION ")


def test_a_removed_file_makes_flash_items_misses_and_stops_writes(flash_dir: Path) -> None:
    n = 20_000
    path = flash_dir / "cache"
    with flash_server(path) as s:
        load(s.port or 0, n)
        os.remove(path)
        with Conn(s.port or 0) as c:
            eventually(lambda: c.stats()["extstore_writes_stopped"] == "1", "writes stopped")
        _, wrong, missing = read_back(s.port or 0, n)
        assert wrong == 0 and missing > n // 2
        # New items are served from memory; nothing more is written.
        load(s.port or 0, 100, version=2, start=n)
        with Conn(s.port or 0) as c:
            reply = c.request(b"get %s\r\n" % key(n + 99).encode(), b"END\r\n")
            assert value(n + 99, 2) in reply
        log = stop_for_log(s)
    assert log.count("writes stopped") == 1, log


def stop_for_log(s: Server) -> str:
    """Stops the server (SIGTERM) and returns what it wrote to stderr."""
    proc = s.proc
    assert proc is not None and proc.stderr is not None
    proc.terminate()
    proc.wait(timeout=10)
    log = proc.stderr.read().decode()
    s.stop()
    return log


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_file_system_stops_writes_and_memory_keeps_serving(flash_dir: Path) -> None:
    """The flash file on a 48 MiB tmpfs; another file then takes the free space, so the
    server's next page write fails (ENOSPC): writes stop, logged once, flash items become
    misses, and what is in memory is still served."""
    mnt = flash_dir / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], check=True)
    try:
        s = flash_server(mnt / "cache", size="40m")
        port = 0
        with s:
            port = s.port or 0
            load(port, 2_000)
            subprocess.run(
                ["dd", "if=/dev/zero", f"of={mnt}/filler", "bs=1M", "count=64"],
                capture_output=True,
                check=False,
            )
            load(port, 20_000, start=2_000)
            with Conn(port) as c:
                eventually(lambda: c.stats()["extstore_writes_stopped"] == "1", "writes stopped")
            right, wrong, _ = read_back(port, 22_000)
            assert wrong == 0 and right > 0
            with Conn(port) as c:
                reply = c.request(b"get %s\r\n" % key(21_999).encode(), b"END\r\n")
                assert value(21_999) in reply
                assert c.request(b"version\r\n").startswith(b"VERSION ")
            # The maintenance thread logs the error on its next pass, within a second.
            time.sleep(1.5)
            log = stop_for_log(s)
        assert log.count("writes stopped") == 1, log
        assert re.search(r"No space left|os error 28", log), log
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def settled(port: int, stat: str) -> None:
    """Waits (bounded) until `stat` stops moving: background compaction has caught up."""
    with Conn(port) as c:
        last = None
        for _ in range(100):
            now = c.stats()[stat]
            if now == last:
                return
            last = now
            time.sleep(0.3)


TOTAL = 26_000


@pytest.mark.parametrize("max_frag", ["0.8", "0"])
def test_compaction_keeps_the_live_items_of_mostly_deleted_pages(
    flash_dir: Path, max_frag: str
) -> None:
    """16 pages of 1 MB: 12 MB of values, three in four of the first 8,000 deleted, then 14 MB
    more. With compaction (memcached's default ext_max_frag) the mostly dead pages are
    compacted before the log wraps onto them and every live item reads back; with
    ext_max_frag=0 (never compact) the wrap drops live items with their pages."""
    opts = (
        f"ext_path={flash_dir / 'c'}:16m,ext_item_size=512,ext_page_size=1,ext_wbuf_size=1,"
        f"ext_max_frag={max_frag}"
    )
    metrics_port = free_port()
    with memfleet("-m", "8", "-o", opts, "-o", f"metrics=127.0.0.1:{metrics_port}") as s:
        port = s.port or 0
        load(port, 12_000)
        with Conn(port) as c:
            for i in range(8_000):
                if i % 4:
                    assert c.request(f"delete {key(i)}\r\n".encode()) == b"DELETED\r\n"
            st = c.stats("settings")
            assert (st["ext_max_frag"], st["ext_compact_under"]) == (f"{float(max_frag):.3f}", "4")
        for start in range(12_000, TOTAL, 1_000):
            load(port, 1_000, start=start)
            settled(port, "extstore_compact_rescues")
        live = [i for i in range(TOTAL) if i >= 8_000 or i % 4 == 0]
        with Conn(port, timeout=30) as c:
            right = wrong = 0
            for lo in range(0, len(live), 100):
                keys = [key(i) for i in live[lo : lo + 100]]
                got = parse_values(
                    c.request(("get " + " ".join(keys) + "\r\n").encode(), b"END\r\n")
                )
                for k, v in got.items():
                    if v == value(int(k.split(":")[1])):
                        right += 1
                    else:
                        wrong += 1
            st = c.stats()
        assert wrong == 0
        if max_frag == "0":
            assert int(st["extstore_compacted_pages"]) == 0, st
            assert int(st["extstore_page_evictions"]) > 0, st
            assert right < len(live) - 100, (right, len(live))
        else:
            assert right == len(live), (right, len(live), st)
            assert int(st["extstore_compacted_pages"]) > 0, st
            assert int(st["extstore_compact_rescues"]) > 500, st
            assert int(st["extstore_page_evictions"]) == 0, st
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as r:
                metrics = r.read().decode()
            rescued = f"memcached_extstore_compact_rescued_total {st['extstore_compact_rescues']}"
            assert rescued in metrics, metrics


def test_drop_unread_compaction_drops_what_was_never_read(flash_dir: Path) -> None:
    """16 pages of 1 MB, every one full of live items: with ext_drop_unread, once fewer than
    ext_drop_under pages are free the oldest page is compacted anyway, its items never read
    since they went to flash dropped (counted in extstore_compact_skipped) and the read ones
    written again."""
    opts = (
        f"ext_path={flash_dir / 'c'}:16m,ext_item_size=512,ext_page_size=1,ext_wbuf_size=1,"
        "ext_recache_rate=0,ext_drop_unread,ext_drop_under=4"
    )
    metrics_port = free_port()
    with memfleet("-m", "8", "-o", opts, "-o", f"metrics=127.0.0.1:{metrics_port}") as s:
        port = s.port or 0
        load(port, 10_000)
        with Conn(port) as c:
            st = c.stats("settings")
            assert (st["ext_drop_unread"], st["ext_drop_under"]) == ("yes", "4"), st
            # Keys 1 and 3 read from flash (and left there); 0 and 2 never read.
            for i in (1, 3):
                reply = c.request(f"get {key(i)}\r\n".encode(), b"END\r\n")
                assert parse_values(reply) == {key(i): value(i)}
            assert c.stats()["get_extstore"] == "2"
            start = 10_000
            while int(c.stats()["extstore_pages_free"]) >= 4:
                load(port, 200, start=start)
                start += 200
                assert start < 30_000
        settled(port, "extstore_compact_skipped")
        with Conn(port) as c:
            got = parse_values(
                c.request(f"get {key(0)} {key(1)} {key(2)} {key(3)}\r\n".encode(), b"END\r\n")
            )
            st = c.stats()
        assert got == {key(1): value(1), key(3): value(3)}, (list(got), st)
        assert int(st["extstore_compact_skipped"]) > 500, st
        assert int(st["extstore_compacted_pages"]) > 0, st
        assert int(st["extstore_compact_rescues"]) >= 2, st
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            metrics = r.read().decode()
        skipped = f"memcached_extstore_compact_skipped_total {st['extstore_compact_skipped']}"
        assert skipped in metrics, metrics


def test_rss_with_flash_stays_near_the_memory_limit(flash_dir: Path) -> None:
    """60 MB of values at -m 16: RSS stays under -m plus the stated bound (write buffer,
    read buffers, the process's own) rather than growing with what is on flash."""
    with flash_server(flash_dir / "cache", mb="16", size="256m") as s:
        load(s.port or 0, 60_000)
        time.sleep(1.5)
        assert s.rss_mb() < 16 + 40, s.rss_mb()


def test_a_warm_restart_keeps_the_items_on_flash(flash_dir: Path) -> None:
    """`-e` with a flash tier: a graceful stop (SIGUSR1) saves the memory items and the places
    of the flash items; the next start serves every one again, newest value first."""
    n = 20_000
    path = flash_dir / "cache"
    memfile = str(flash_dir / "memory")
    port = free_port()
    with flash_server(path, "-e", memfile, port=port) as s:
        load(port, n)
        with Conn(port) as c:
            # A newer value in memory for a key whose old value is on flash.
            c.send(b"set %s 0 0 5\r\nnewer\r\n" % key(0).encode())
            assert c.read_line() == b"STORED\r\n"
            on_flash = int(c.stats()["extstore_objects_used"])
        assert on_flash > n // 2
        assert s.proc is not None
        s.proc.send_signal(signal.SIGUSR1)
        assert s.proc.wait(timeout=60) == 0
    assert Path(f"{path}.index").exists()
    with flash_server(path, "-e", memfile, port=port) as s:
        with Conn(port) as c:
            assert int(c.stats()["extstore_objects_used"]) >= on_flash - 1
            assert c.request(b"get %s\r\n" % key(0).encode(), b"END\r\n") == (
                b"VALUE %s 0 5\r\nnewer\r\nEND\r\n" % key(0).encode()
            )
        right, wrong, missing = read_back(port, n)
        assert (right, wrong, missing) == (n - 1, 1, 0)
        log = stop_for_log(s)
    assert "kept" in log and "items on flash" in log, log
    # Used up: a start without it has nothing on flash.
    assert not Path(f"{path}.index").exists()
