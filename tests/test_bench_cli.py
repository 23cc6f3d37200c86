"""`memfleet bench` driven with memtier_benchmark command lines, against Debian's memcached
and redis-server on free loopback ports; checks what the report says and what the servers
hold afterwards."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import proxy_harness
import pytest
import redis
from harness import Conn, Server, free_port, memcached, memfleet_bin

REDIS_SERVER = shutil.which("redis-server")


def bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [memfleet_bin(), "bench", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(*args: str) -> str:
    r = bench(*args)
    assert r.returncode == 0, r.stderr + r.stdout
    return r.stdout


@pytest.fixture
def mc() -> Iterator[Server]:
    with memcached("-m", "64") as s:
        yield s


@pytest.fixture
def rs() -> Iterator[Server]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server not installed")
    port = free_port()
    argv = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--logfile", "", "--loglevel", "warning"]
    with Server(argv, port=port) as s:
        yield s


def header_and_totals(report: str) -> tuple[list[str], list[str]]:
    """The table's header cells and its Totals row of the last table in `report`."""
    header = [line for line in report.splitlines() if line.startswith("Type ")][-1]
    totals = [line for line in report.splitlines() if line.startswith("Totals ")][-1]
    return header.split(), totals.split()


def mc_get(port: int, keys: list[str]) -> set[str]:
    """Keys memcached holds, of `keys`."""
    with Conn(port) as c:
        out = c.request(("get " + " ".join(keys) + "\r\n").encode(), b"END\r\n")
    return set(re.findall(r"VALUE (\S+) ", out.decode()))


def test_memtier_memcache_text_line_with_percentiles(mc: Server) -> None:
    out = ok(
        "-s",
        "127.0.0.1",
        "-p",
        str(mc.port),
        "-P",
        "memcache_text",
        "-t",
        "1",
        "-c",
        "2",
        "-n",
        "300",
        "--ratio=1:3",
        "--distinct-client-seed",
        "--randomize",
        "--key-maximum=500",
        "--print-percentiles",
        "50,90,99.99",
        "--hide-histogram",
    )
    header, totals = header_and_totals(out)
    assert header == [
        "Type",
        "Ops/sec",
        "Hits/sec",
        "Misses/sec",
        "Avg(ms)",
        "p50(ms)",
        "p90(ms)",
        "p99.99(ms)",
        "Max(ms)",
        "KB/sec",
    ]
    assert len(totals) == len(header)
    assert "text protocol" in out and "connection errors 0" in out


def test_run_count_gives_each_run_and_the_aggregate(mc: Server, tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    out = ok(
        "-p",
        str(mc.port),
        "--protocol=memcache_text",
        "-t",
        "1",
        "-c",
        "2",
        "-n",
        "100",
        "--run-count",
        "2",
        "--hide-histogram",
        f"--json-out-file={js}",
    )
    assert "Run 1 of 2:" in out and "Run 2 of 2:" in out and "Aggregate of 2 runs:" in out
    assert out.count("Totals ") == 3
    # 2 connections x 100 requests per run: the aggregate holds both runs.
    report = json.loads(js.read_text())
    assert report["totals"]["ops"] == 400
    assert [p for p, _ in report["totals"]["percentiles"]] == [50.0, 99.0, 99.9]


def test_parallel_pattern_with_allkeys_writes_every_key_once(mc: Server) -> None:
    ok(
        "-p",
        str(mc.port),
        "-P",
        "memcache_text",
        "-t",
        "2",
        "-c",
        "3",
        "-n",
        "allkeys",
        "--key-pattern",
        "P:P",
        "--ratio",
        "1:0",
        "--key-minimum",
        "1",
        "--key-maximum",
        "60",
        "--key-prefix",
        "par-",
        "--expiry-range",
        "100-200",
        "--hide-histogram",
    )
    keys = [f"par-{i}" for i in range(62)]
    assert mc_get(mc.port, keys) == {f"par-{i}" for i in range(1, 61)}
    with Conn(mc.port) as c:
        stats = c.request(b"stats\r\n", b"END\r\n").decode()
    assert re.search(r"STAT cmd_set 60\r", stats), "each key of the range set exactly once"


def test_sequential_pattern_walks_the_whole_range_per_connection(mc: Server) -> None:
    # memtier's S: every connection starts at --key-minimum, so 3 connections x 5 sets
    # write keys 0..4 only (P would have spread them over 0..14).
    ok(
        "-p",
        str(mc.port),
        "-t",
        "1",
        "-c",
        "3",
        "-n",
        "5",
        "--key-pattern",
        "S:S",
        "--ratio",
        "1:0",
        "--key-maximum",
        "14",
        "--key-prefix",
        "seq-",
        "--hide-histogram",
    )
    assert mc_get(mc.port, [f"seq-{i}" for i in range(15)]) == {f"seq-{i}" for i in range(5)}


def test_redis_protocol_against_redis_server_leaves_the_keys(rs: Server) -> None:
    out = ok(
        "-s",
        "127.0.0.1",
        "-p",
        str(rs.port),
        "-P",
        "redis",
        "-t",
        "1",
        "-c",
        "2",
        "-n",
        "allkeys",
        "--key-pattern=P:P",
        "--ratio=1:0",
        "--key-maximum=49",
        "--key-prefix=rb-",
        "-d",
        "16",
        "--expiry-range=500-600",
        "--hide-histogram",
    )
    assert "redis protocol" in out and "errors 0  connection errors 0" in out
    r = redis.Redis(port=rs.port, protocol=2)
    assert r.dbsize() == 50
    assert len(r.get("rb-0") or b"") == 16 and len(r.get("rb-49") or b"") == 16
    assert 500 <= r.ttl("rb-7") <= 600
    # Gets with MGET find them: every key a hit.
    out = ok(
        "-p",
        str(rs.port),
        "--protocol",
        "redis",
        "-t",
        "1",
        "-c",
        "2",
        "--test-time",
        "1",
        "--ratio",
        "0:1",
        "--multi-key-get",
        "5",
        "--key-maximum",
        "49",
        "--key-prefix",
        "rb-",
        "--hide-histogram",
    )
    assert "hit ratio 100.00%" in out
    r.close()


def test_redis_protocol_through_a_redis_pool_of_memfleet_route(rs: Server) -> None:
    if REDIS_SERVER is None:
        pytest.skip("redis-server not installed")
    port = free_port()
    argv = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--logfile", "", "--loglevel", "warning"]
    with Server(argv, port=port) as rs2:
        listen = free_port()
        servers = [f"127.0.0.1:{rs.port}:1", f"127.0.0.1:{rs2.port}:1"]
        conf = proxy_harness.pool_yaml(
            "r", f"127.0.0.1:{listen}", servers, redis=True, hash="murmur", distribution="ketama"
        )
        with proxy_harness.Proxy(conf, listen):
            out = ok(
                "-p",
                str(listen),
                "-P",
                "redis",
                "-t",
                "1",
                "-c",
                "2",
                "-n",
                "allkeys",
                "--key-pattern",
                "P:P",
                "--ratio",
                "1:0",
                "--key-maximum",
                "99",
                "--key-prefix",
                "rt-",
                "--hide-histogram",
            )
            assert "errors 0  connection errors 0" in out
            # 3-key MGETs split over both servers by the router: every key found.
            out = ok(
                "-p",
                str(listen),
                "-P",
                "redis",
                "-t",
                "1",
                "-c",
                "2",
                "-n",
                "200",
                "--ratio",
                "0:1",
                "--multi-key-get",
                "3",
                "--key-maximum",
                "99",
                "--key-prefix",
                "rt-",
                "--hide-histogram",
            )
            assert "hit ratio 100.00%" in out
        sizes = []
        for s in (rs, rs2):
            with redis.Redis(port=s.port, protocol=2) as r:
                sizes.append(r.dbsize())
        assert sum(sizes) == 100 and min(sizes) > 0, sizes


def test_unsupported_memtier_options_are_refused_by_name(mc: Server) -> None:
    for argv, name in [
        (["--cluster-mode"], "--cluster-mode"),
        (["--command", "SET __key__ __data__"], "--command"),
        (["--data-size-list", "10:1"], "--data-size-list"),
        (["--reconnect-interval", "5"], "--reconnect-interval"),
        (["-P", "memcache_binary"], "memcache_binary"),
        (["--protocol", "resp3"], "resp3"),
    ]:
        r = bench("-p", str(mc.port), "-n", "1", *argv)
        assert r.returncode != 0 and name in r.stderr and "not supported" in r.stderr, r.stderr


def test_error_replies_are_named_with_their_counts(tmp_path: Path) -> None:
    """`errors N` alone says nothing of what went wrong: the report lists the error replies
    by line with their counts, in the text output and the JSON file."""
    js = tmp_path / "r.json"
    with memcached("-m", "64", "-I", "1k", "-o", "slab_chunk_max=512") as small:
        out = ok(
            "-p", str(small.port), "-t", "1", "-c", "2", "-n", "50", "--ratio", "1:0",
            "-d", "2000", "--hide-histogram", f"--json-out-file={js}",
        )  # fmt: skip
    assert re.search(r"errors 100\b", out), out
    assert "  100 x SERVER_ERROR object too large for cache" in out, out
    report = json.loads(js.read_text())
    assert report["error_replies"] == [["SERVER_ERROR object too large for cache", 100]]
