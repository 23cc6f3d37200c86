"""`memfleet route --runtime-vars-file`: WeightedCh3Rv takes its weights from mcrouter's
runtime variables (`hash_route_weights`), read at start and again on SIGHUP."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from harness import eventually
from mcrouter_harness import McRouter, fetch, pools, servers, store

__all__ = ["servers"]


def on(port: int, keys: list[str]) -> int:
    """How many of `keys` the server on `port` holds."""
    return sum(fetch(port, k) != b"END\r\n" for k in keys)


def test_weights_follow_the_runtime_vars_file_and_its_reload(servers, tmp_path: Path) -> None:
    a, b = servers(2)
    vars_file = tmp_path / "rv.json"
    vars_file.write_text(json.dumps({"hash_route_weights": {"w": [1, 0]}}))
    hash_spec = {"hash_func": "WeightedCh3Rv", "weights_rv": "w"}
    config = {
        "pools": pools(P=[a, b]),
        "route": {"type": "PoolRoute", "pool": "P", "hash": hash_spec},
    }
    with McRouter(config, "--runtime-vars-file", str(vars_file)).start() as r:
        first = [f"k{i}" for i in range(30)]
        for k in first:
            assert store(r.port, k) == b"STORED\r\n"
        assert (on(a.port, first), on(b.port, first)) == (30, 0), "weight 0 gets nothing"
        vars_file.write_text(json.dumps({"hash_route_weights": {"w": [0, 1]}}))
        assert r.proc is not None
        r.proc.send_signal(signal.SIGHUP)
        eventually(lambda: "configuration reloaded" in r.log_text(), "reload")
        second = [f"j{i}" for i in range(30)]
        for k in second:
            assert store(r.port, k) == b"STORED\r\n"
        assert (on(a.port, second), on(b.port, second)) == (0, 30)
        # A variable that is gone refuses the reload; the weights read last stay.
        vars_file.write_text(json.dumps({"hash_route_weights": {}}))
        r.proc.send_signal(signal.SIGHUP)
        eventually(lambda: "reload refused" in r.log_text(), "the refusal logged")
        assert "hash_route_weights.w is not in" in r.log_text()
        assert store(r.port, "late") == b"STORED\r\n"
        assert fetch(b.port, "late") != b"END\r\n"
