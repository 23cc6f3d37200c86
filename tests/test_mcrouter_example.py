"""The complete mcrouter config of docs/router-mcrouter.md, taken from the doc as written
(the block after `<!-- mcrouter-example -->`), its server addresses replaced by real
memcached instances, loaded by `memfleet route`, and checked to do what the doc says."""

from __future__ import annotations

import re
from collections.abc import Callable

from harness import ROOT, Server, eventually, keys_held
from mcrouter_harness import McRouter, ask, fetch, servers, store

__all__ = ["servers"]

DOC = ROOT / "docs" / "router-mcrouter.md"


def doc_example() -> str:
    m = re.search(r"<!-- mcrouter-example -->\n```json\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    assert m, f"{DOC}: no json block after <!-- mcrouter-example -->"
    return m.group(1)


def ttl_of(port: int, key: str) -> int | None:
    """The remaining TTL (-1: none) of `key` on the server itself; None on a miss."""
    line = ask(port, f"mg {key} t\r\n".encode())
    if not line.startswith(b"HD"):
        return None
    return int(line.split(b" t")[1].split()[0])


def test_documented_config_routes_as_documented(servers: Callable[[int], list[Server]]) -> None:
    text = doc_example()
    addresses = list(dict.fromkeys(re.findall(r'"(\d+\.\d+\.\d+\.\d+:\d+)"', text)))
    assert addresses == [
        "10.0.0.1:11211",
        "10.0.0.2:11211",
        "10.0.9.1:11211",
        "10.0.1.1:11211",
        "10.0.2.1:11211",
    ]
    started = servers(len(addresses))
    for address, server in zip(addresses, started):
        text = text.replace(f'"{address}"', f'"{server.address}"')
    main, gutter, fresh, canary = started[:2], started[2], started[3], started[4]

    with McRouter(text).start() as router:
        rp = router.port or 0
        # Ordinary keys: one main server each, a copy on the canary, nothing on the gutter.
        keys = [f"user:{i}" for i in range(20)]
        for k in keys:
            assert store(rp, k, "v", exptime=1000) == b"STORED\r\n"
            assert fetch(rp, k) == f"VALUE {k} 0 1\r\nv\r\nEND\r\n".encode()
        held = [keys_held(s.port or 0, keys) for s in main]
        assert sorted(held[0] + held[1]) == sorted(keys) and held[0] and held[1], held
        eventually(lambda: keys_held(canary.port or 0, keys) == keys, "the canary's copies")
        assert keys_held(gutter.port or 0, keys) == []

        # session: keys are warmed up from main into fresh; new ones go to fresh only.
        for s in main:  # wherever main's hash puts it
            assert store(s.port or 0, "session:7", "w", exptime=500) == b"STORED\r\n"
        assert fetch(rp, "session:7") == b"VALUE session:7 0 1\r\nw\r\nEND\r\n"
        eventually(lambda: ttl_of(fresh.port or 0, "session:7") is not None, "fresh filled")
        assert 490 < (ttl_of(fresh.port or 0, "session:7") or 0) <= 500
        assert store(rp, "session:8", "n") == b"STORED\r\n"
        assert keys_held(fresh.port or 0, ["session:8"]) == ["session:8"]
        assert [keys_held(s.port or 0, ["session:8"]) for s in main] == [[], []]
        assert ask(rp, b"delete session:7\r\n") == b"DELETED\r\n"
        assert keys_held(fresh.port or 0, ["session:7"]) == []
        assert sum(len(keys_held(s.port or 0, ["session:7"])) for s in main) == 1, (
            "deleted where main's hash puts it"
        )

        # One main server down: its keys fail over to the gutter, with a 10 s exptime.
        down, up = (main[0], main[1])
        lost = held[0][0]
        down.stop()
        assert fetch(rp, lost) == b"END\r\n", "a miss from the gutter"
        assert store(rp, lost, "g", exptime=1000) == b"STORED\r\n"
        assert fetch(rp, lost) == f"VALUE {lost} 0 1\r\ng\r\nEND\r\n".encode()
        assert 0 < (ttl_of(gutter.port or 0, lost) or 0) <= 10
        kept = held[1][0]
        assert fetch(rp, kept) == f"VALUE {kept} 0 1\r\nv\r\nEND\r\n".encode()
        assert keys_held(gutter.port or 0, [kept]) == []
        assert keys_held(up.port or 0, [lost]) == []

        # Back: once a probe finds it, its keys are written there again.
        down.start()
        eventually(
            lambda: (
                store(rp, lost, "b") == b"STORED\r\n"
                and keys_held(down.port or 0, [lost]) == [lost]
            ),
            "the main server's keys back on it",
        )
