"""The client with default settings through a real twemproxy (nutcracker)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import Server, free_port

import memfleet

NUTCRACKER = shutil.which("nutcracker") or ("/usr/sbin/nutcracker" if Path("/usr/sbin/nutcracker").exists() else None)


@pytest.fixture()
def twemproxy(server: Server, tmp_path: Path) -> Iterator[str]:
    """nutcracker on a free port in front of the test server; yields its address."""
    if NUTCRACKER is None:
        pytest.skip("nutcracker not installed")
    memfleet.Client([server.address]).flush_all()
    port = free_port()
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(
        f"pool:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n  servers:\n   - {server.address}:1\n"
    )
    argv = [NUTCRACKER, "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1", "-o", str(tmp_path / "log")]
    proxy = Server(argv, port=port).start()
    try:
        yield proxy.address
    finally:
        proxy.kill()


def test_default_client_falls_back_to_text_through_twemproxy(twemproxy: str, make_client: Any) -> None:
    c = make_client([twemproxy])  # protocol="auto": twemproxy closes the connection on "mn"
    assert c.set("tw", {"a": 1})
    assert c.get("tw") == {"a": 1}
    assert c._router.servers[0].meta is False
    assert c.get_many(["tw", "nope"]) == {"tw": {"a": 1}}
    assert c.incr("n", 1, initial=10) == 10
    assert c.incr("n", 2) == 12
    assert c.get_or_set("lazy", lambda: "loaded", ttl=60) == "loaded"
    assert c.get_or_set("lazy", lambda: "again", ttl=60) == "loaded"
    assert c.delete("tw") and c.get("tw") is None
