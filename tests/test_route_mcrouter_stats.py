"""`memfleet route` with an mcrouter config: mcrouter's `stats servers` and
`stats suspect_servers`, read after real traffic to real memcached servers, one of them
killed (hard TKO) or hung (timeouts, soft TKO).
"""

from __future__ import annotations

import re

from harness import Conn, eventually
from mcrouter_harness import McRouter, ask, fetch, pools, servers, store

__all__ = ["servers"]

LINE = re.compile(r"STAT (\S+) (.*)")


def stats(port: int, group: str) -> dict[str, str]:
    """`stats <group>` as name -> value; every line but the last is a STAT line."""
    raw = ask(port, f"stats {group}\r\n".encode(), b"END\r\n").decode()
    assert raw.endswith("END\r\n"), raw
    lines = raw[: -len("END\r\n")].split("\r\n")[:-1]
    out = {}
    for line in lines:
        m = LINE.fullmatch(line)
        assert m, line
        out[m[1]] = m[2]
    return out


def fields(value: str) -> tuple[str, dict[str, int]]:
    """A `stats servers` value: its TKO mark ("hard_tko", "soft_tko" or "") and every
    `name:N` field (latency aside), checked to come in mcrouter's layout."""
    m = re.fullmatch(
        r"avg_latency_us:(\d+\.\d{3}) pending_reqs:(\d+) inflight_reqs:(\d+)"
        r"(?: (hard_tko|soft_tko); )?((?: (?:new|up|down|closed):\d+)*)"
        r"(?:; (\w+:\d+(?: \w+:\d+)*))?",
        value,
    )
    assert m, value
    counts = {"pending_reqs": int(m[2]), "inflight_reqs": int(m[3])}
    for part in (m[5] + " " + (m[6] or "")).split():
        name, n = part.split(":")
        counts[name] = int(n)
    return m[4] or "", counts


def destination(port: int, timeout_ms: int) -> str:
    return f"127.0.0.1:{port}:ascii:plain:notcompressed-{timeout_ms}"


def states(counts: dict[str, int]) -> int:
    return sum(counts.get(s, 0) for s in ("new", "up", "down", "closed"))


def test_stats_servers_counts_results_and_marks_a_killed_server_hard_tko(servers) -> None:
    a, b = servers(2)
    config = {
        "pools": pools(A=[a], B=[b]),
        "route": {"type": "FailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"]},
    }
    with McRouter(config, "--probe-timeout-initial", "60000").start() as r:
        assert stats(r.port, "suspect_servers") == {}
        for i in range(5):
            assert store(r.port, f"k{i}") == b"STORED\r\n"
        for i in range(3):
            assert fetch(r.port, f"k{i}") == f"VALUE k{i} 0 1\r\nv\r\nEND\r\n".encode()
        assert fetch(r.port, "missing") == b"END\r\n"
        # Several keys in one get: one request per key, as mcrouter sends them.
        assert fetch(r.port, "k3 k4 nope").count(b"VALUE") == 2

        servers_now = stats(r.port, "servers")
        assert set(servers_now) == {destination(a.port, 300), destination(b.port, 300)}
        mark, on_a = fields(servers_now[destination(a.port, 300)])
        assert mark == ""
        assert on_a["stored"] == 5 and on_a["found"] == 5 and on_a["notfound"] == 2, on_a
        assert on_a["pending_reqs"] == 0 and on_a["inflight_reqs"] == 0
        assert on_a.get("up", 0) >= 1 and states(on_a) == 2, on_a  # one per proxy
        assert not servers_now[destination(a.port, 300)].startswith("avg_latency_us:0.000")
        _, on_b = fields(servers_now[destination(b.port, 300)])
        assert on_b == {"pending_reqs": 0, "inflight_reqs": 0, "new": 2}

        a.kill()

        def hard_tko_after_a_set() -> bool:
            # Each set fails over to B; once a connection to A is refused, A is hard TKO.
            assert store(r.port, "after") == b"STORED\r\n"
            return fields(stats(r.port, "servers")[destination(a.port, 300)])[0] == "hard_tko"

        eventually(hard_tko_after_a_set, "A hard TKO")
        servers_now = stats(r.port, "servers")
        mark, on_a = fields(servers_now[destination(a.port, 300)])
        assert mark == "hard_tko", servers_now
        assert on_a["stored"] == 5 and on_a["connect_error"] >= 1, on_a
        assert on_a.get("up", 0) == 0 and on_a.get("down", 0) >= 1 and states(on_a) == 2
        assert on_a["pending_reqs"] == 0 and on_a["inflight_reqs"] == 0
        mark, on_b = fields(servers_now[destination(b.port, 300)])
        assert mark == ""
        assert on_b["stored"] >= 1 and "connect_error" not in on_b, on_b

        suspect = stats(r.port, "suspect_servers")
        assert list(suspect) == [f"127.0.0.1:{a.port}"], suspect
        m = re.fullmatch(r"status:tko num_failures:(\d+)", suspect[f"127.0.0.1:{a.port}"])
        assert m and int(m[1]) >= 1, suspect

        # Any other group still gets the router's own stats.
        with Conn(r.port) as c:
            assert "pid" in c.stats() and "pid" in c.stats("items")


def test_a_hung_server_shows_its_request_in_flight_then_soft_tko(servers) -> None:
    (a,) = servers(1)
    config = {"pools": pools(A=[a]), "route": "PoolRoute|A"}
    extra = ("--timeouts-until-tko", "1", "--server-timeout", "1500")
    with McRouter(config, *extra).start() as r:
        name = destination(a.port, 1500)
        assert store(r.port, "k") == b"STORED\r\n"
        with a.paused(), Conn(r.port) as c:
            c.send(b"get k\r\n")
            eventually(
                lambda: fields(stats(r.port, "servers")[name])[1]["inflight_reqs"] == 1,
                "the get in flight",
            )
            assert c.read_line() == b"SERVER_ERROR timeout\r\n"
            mark, on_a = fields(stats(r.port, "servers")[name])
            assert mark == "soft_tko", on_a
            assert on_a["timeout"] == 1 and on_a["stored"] == 1, on_a
            assert on_a["inflight_reqs"] == 0 and on_a["pending_reqs"] == 0
            suspect = stats(r.port, "suspect_servers")
            status = suspect[f"127.0.0.1:{a.port}"]
            assert re.fullmatch(r"status:tko num_failures:\d+", status), suspect
        # A probe brings it back: no longer suspect, no mark.
        eventually(lambda: stats(r.port, "suspect_servers") == {}, "A back")
        assert fields(stats(r.port, "servers")[name])[0] == ""
