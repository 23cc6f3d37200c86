"""get_or_set with meta leases, invalidate and stale-while-revalidate."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from client_support import raw_request

import memfleet


def _run_threads(n: int, target: Any) -> list[Any]:
    results: list[Any] = [None] * n
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = target()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_fifty_thread_stampede_runs_loader_once(server: Any) -> None:
    for protocol in ("meta", "text"):
        c = memfleet.Client([server.address], protocol=protocol, max_pool_size=64)
        c.flush_all()
        calls: list[int] = []
        lock = threading.Lock()

        def loader(calls: list[int] = calls, lock: threading.Lock = lock) -> Any:
            with lock:
                calls.append(1)
            time.sleep(0.3)
            return {"expensive": True}

        results = _run_threads(50, lambda c=c, loader=loader: c.get_or_set("hot", loader, ttl=60))
        assert len(calls) == 1, protocol
        assert results == [{"expensive": True}] * 50
        assert c.get("hot") == {"expensive": True}


def test_invalidate_serves_stale_while_one_caller_reloads(server: Any) -> None:
    mclient = memfleet.Client([server.address])  # threads: the blocking client only
    mclient.flush_all()
    mclient.set("page", "v1", ttl=60)
    assert mclient.invalidate("page")
    loaded = threading.Event()
    release = threading.Event()

    def slow_loader() -> str:
        loaded.set()
        release.wait(5)
        return "v2"

    winner = threading.Thread(target=lambda: mclient.get_or_set("page", slow_loader, ttl=60))
    winner.start()
    assert loaded.wait(5)
    # while the winner reloads, everyone else gets the stale value without calling the loader
    assert mclient.get_or_set("page", lambda: "must not run", ttl=60) == "v1"
    release.set()
    winner.join()
    assert mclient.get_or_set("page", lambda: "must not run", ttl=60) == "v2"
    assert mclient.get("page") == "v2"


def test_loader_error_releases_the_lease(client: Any) -> None:
    def broken() -> Any:
        raise RuntimeError("db down")

    with pytest.raises(RuntimeError):
        client.get_or_set("k", broken)
    # neither the meta lease's placeholder nor the text protocol's lock key is left behind
    assert raw_request(client, b"mg k v\r\n") == b"EN\r\n"
    assert raw_request(client, b"mg memfleet-lock:k v\r\n") == b"EN\r\n"
    assert client.get_or_set("k", lambda: "ok") == "ok"


def test_recache_before_expiry(mclient: Any) -> None:
    mclient.set("r", "old", ttl=5)
    calls = []
    # the first caller inside the recache window wins and refreshes; it returns the new value
    value = mclient.get_or_set("r", lambda: calls.append(1) or "new", ttl=60, recache_before=10)
    assert value == "new" and calls == [1]
    assert mclient.get_or_set("r", lambda: "x", ttl=60, recache_before=10) == "new"


def test_waiter_times_out_and_loads_itself(mclient: Any) -> None:
    # someone vivified the key and never filled it
    assert b"W" in raw_request(mclient, b"mg stuck v N30\r\n").split(b"\r\n")[0].split()
    t0 = time.monotonic()
    assert mclient.get_or_set("stuck", lambda: "mine", wait_timeout=0.3) == "mine"
    assert time.monotonic() - t0 >= 0.3
    # ...but does not store it: without the lease a set could land after a later write's delete
    assert b"mine" not in raw_request(mclient, b"mg stuck v\r\n")


def test_a_placeholder_marked_stale_is_not_served_as_a_value(mclient: Any) -> None:
    # A row changed while the first reader filled a miss: the invalidation marks the empty
    # placeholder stale, and another reader wins the reload. The placeholder is still nobody's
    # value: a caller waits for that reload (here it never comes, so it loads itself).
    replies = raw_request(mclient, b"mg s v c N30\r\nmd s I T30\r\nmg s v c N30\r\n").split(b"\r\n")
    assert b"W" in replies[0].split() and b"W" in replies[-3].split(), replies
    assert mclient.get_or_set("s", lambda: "fresh", wait_timeout=0.3) == "fresh"
