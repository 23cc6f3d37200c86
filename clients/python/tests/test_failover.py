"""Dead-host handling: eject after N failures, remap, come back after the retry delay."""

from __future__ import annotations

import time
from typing import Any

import pytest

import memfleet


def test_killed_server_is_ejected_and_comes_back(fresh_servers3: list[Any], make_client: Any) -> None:
    addresses = [s.address for s in fresh_servers3]
    c = make_client(addresses, failure_limit=2, retry_timeout=1.0, connect_timeout=0.5, timeout=0.5)
    keys = [f"fo{i}" for i in range(300)]
    before = {k: c.server_for(k) for k in keys}
    victim = fresh_servers3[1]
    on_victim = [k for k in keys if before[k] == victim.address]
    assert on_victim
    for k in keys:
        c.set(k, k)

    victim.kill()
    k0 = on_victim[0]
    errors = 0
    for _ in range(2):
        with pytest.raises(memfleet.MemfleetConnectionError):
            c.get(k0)
        errors += 1
    # ejected: the victim's keys now map to the survivors, the others do not move
    assert c.server_for(k0) != victim.address
    for k in keys:
        if before[k] != victim.address:
            assert c.server_for(k) == before[k]
    assert c.get(k0) is None  # a miss on the new server, not an error
    assert c.set(k0, "remapped")
    assert c.get(k0) == "remapped"
    survivors = {k: k for k in keys[:50] if before[k] != victim.address}
    assert c.get_many(keys[:50]) == {**survivors, **({k0: "remapped"} if k0 in keys[:50] else {})}

    victim.start()  # same port
    time.sleep(1.1)
    assert c.server_for(k0) == victim.address
    assert c.set(k0, "back")
    assert memfleet.Client([victim.address]).get(k0) == "back"


def test_all_servers_dead_raises(fresh_servers3: list[Any], make_client: Any) -> None:
    addresses = [s.address for s in fresh_servers3]
    c = make_client(addresses, failure_limit=1, retry_timeout=30)
    for s in fresh_servers3:
        s.kill()
    for _ in range(10):
        try:
            c.get("anything")
        except memfleet.NoServersError:
            break
        except memfleet.MemfleetConnectionError:
            continue
    else:
        pytest.fail("never reported that all servers are dead")


def test_stale_pooled_connection_after_restart(fresh_servers3: list[Any], make_client: Any) -> None:
    s = fresh_servers3[0]
    c = make_client([s.address], failure_limit=3, retry_timeout=0.2)
    c.set("a", 1)
    s.kill()
    s.start()
    # the pooled connection is dead; the first call fails, later calls reconnect
    with pytest.raises(memfleet.MemfleetConnectionError):
        c.get("a")
    assert c.set("a", 2)
    assert c.get("a") == 2
