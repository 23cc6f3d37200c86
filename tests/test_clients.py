"""Real clients against the server: libmemcached's memccapable (ascii and binary), pylibmc,
pymemcache. Binary-only clients (dalli, Rails) are in test_binary_clients.py."""

from __future__ import annotations

import shutil
import subprocess

import pylibmc
import pytest
from harness import Server
from pymemcache.client.base import Client as PymemcacheClient


@pytest.mark.skipif(shutil.which("memccapable") is None, reason="libmemcached-tools missing")
@pytest.mark.parametrize(("flag", "mode"), [("-a", "ascii"), ("-b", "binary")])
def test_memccapable_passes_everything(server: Server, flag: str, mode: str) -> None:
    out = subprocess.run(
        ["memccapable", "-h", "127.0.0.1", "-p", str(server.port), flag, "-t", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(mode + " ")]
    assert len(lines) >= 27, out.stdout
    failed = [ln for ln in lines if not ln.rstrip().endswith("[pass]")]
    assert not failed, out.stdout + out.stderr
    assert "All tests passed" in out.stdout
    assert out.returncode == 0


def test_pymemcache_commands(server: Server) -> None:
    c = PymemcacheClient(("127.0.0.1", server.port), connect_timeout=2, timeout=2)
    assert c.set("a", b"1") is True
    assert c.get("a") == b"1"
    assert c.add("a", b"2", noreply=False) is False
    assert c.replace("a", b"3", noreply=False) is True
    assert c.append("a", b"4", noreply=False) is True
    assert c.prepend("a", b"0", noreply=False) is True
    assert c.get("a") == b"034"
    value, cas = c.gets("a")
    assert value == b"034"
    assert c.cas("a", b"5", cas, noreply=False) is True
    assert c.cas("a", b"6", cas, noreply=False) is False
    assert c.get_many(["a", "nope"]) == {"a": b"5"}
    assert c.incr("a", 10) == 15
    assert c.decr("a", 20) == 0
    assert c.touch("a", 100, noreply=False) is True
    assert c.get("a") == b"0 "
    assert c.delete("a", noreply=False) is True
    assert c.get("a") is None
    c.set_many({"x": b"1", "y": b"2"})
    assert c.get_many(["x", "y"]) == {"x": b"1", "y": b"2"}
    assert c.flush_all(noreply=False) is True
    assert c.get("x") is None
    assert c.version().startswith(b"1.6")
    stats = c.stats()
    assert stats[b"cmd_get"] > 0
    c.close()


def test_pylibmc_commands(server: Server) -> None:
    c = pylibmc.Client([f"127.0.0.1:{server.port}"], behaviors={"tcp_nodelay": True})
    assert c.set("s", "text") is True
    assert c.get("s") == "text"
    assert c.set("i", 42)
    assert c.get("i") == 42
    assert c.set("d", {"a": [1, 2]})
    assert c.get("d") == {"a": [1, 2]}
    assert c.add("s", "x") is False
    assert c.incr("i", 8) == 50
    assert c.decr("i", 60) == 0
    assert c.get_multi(["s", "i", "nope"]) == {"s": "text", "i": 0}
    assert c.set_multi({"m1": b"1", "m2": b"2"}) == []
    assert c.delete_multi(["m1", "m2"])
    assert c.get("m1") is None
    big = b"z" * 300_000
    assert c.set("big", big)
    assert c.get("big") == big
    assert c.touch("s", 100)
    assert c.flush_all()
    assert c.get("s") is None
