"""AsyncClient: the same API as Client."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from typing import Any

import pytest
from client_support import free_port

import memfleet


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_async_methods(servers3: list[Any], protocol: str) -> None:
    async def main() -> None:
        c = memfleet.AsyncClient([s.address for s in servers3], protocol=protocol)
        assert await c.flush_all()
        assert await c.set("a", {"x": 1})
        assert await c.get("a") == {"x": 1}
        assert await c.get("missing", "d") == "d"
        assert await c.add("a", 2) is False
        assert await c.replace("a", 3)
        value, token = await c.gets("a")
        assert value == 3 and token
        assert await c.cas("a", 4, token)
        assert not await c.cas("a", 5, token)
        assert await c.set("s", b"m")
        assert await c.append("s", b">") and await c.prepend("s", b"<")
        assert await c.get("s") == b"<m>"
        data = {f"k{i}": i for i in range(300)}
        assert await c.set_many(data) == []
        assert await c.get_many(list(data) + ["nope"]) == data
        assert await c.delete_many(list(data)[:100]) == 100
        assert await c.delete("a") and not await c.delete("a")
        assert await c.incr("n", 2, initial=10) == 10
        assert await c.incr("n", 2) == 12
        assert await c.decr("n", 20) == 0
        assert await c.touch("s", 100)
        assert await c.invalidate("s")
        versions = await c.version()
        assert len(versions) == 3
        stats = await c.stats()
        assert all("curr_items" in s for s in stats.values())
        await c.close()

    run(main())


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_async_stampede_loader_runs_once(server: Any, protocol: str) -> None:
    calls = []

    async def loader() -> str:
        calls.append(1)
        await asyncio.sleep(0.2)
        return "loaded"

    async def main() -> list[Any]:
        c = memfleet.AsyncClient([server.address], max_pool_size=64, protocol=protocol)
        await c.flush_all()
        return list(await asyncio.gather(*(c.get_or_set("hot", loader, ttl=30) for _ in range(50))))

    assert run(main()) == ["loaded"] * 50
    assert calls == [1]


def test_async_get_many_fans_out_concurrently(servers3: list[Any]) -> None:
    async def main() -> None:
        c = memfleet.AsyncClient([s.address for s in servers3], near_cache=True)
        await c.flush_all()
        await c.set_many({f"f{i}": "v" * 1000 for i in range(100)})
        nc = c.near_cache
        assert nc is not None
        # a server that tracks has its replies cached only once its listener is open
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(st in ("probing", "down") for st in nc.stats()["servers"].values()):
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        got = await c.get_many([f"f{i}" for i in range(100)])
        assert len(got) == 100 and time.monotonic() - t0 < 1
        assert (await c.get("f1")) == "v" * 1000 and nc.hits >= 1
        await c.close()

    run(main())


def test_async_connection_errors() -> None:
    # a free port, not a fixed one (port 1 may be some service of the host's)
    dead = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        c = memfleet.AsyncClient([dead], failure_limit=0)
        with pytest.raises(memfleet.MemfleetConnectionError):
            await c.get("x")
        q = memfleet.AsyncClient([dead], ignore_errors=True, failure_limit=0)
        assert await q.get("x", "d") == "d"

    run(main())


def test_async_invalidate_serves_stale_while_one_task_reloads(server: Any) -> None:
    async def main() -> None:
        c = memfleet.AsyncClient([server.address])
        await c.flush_all()
        await c.set("page", "v1", ttl=60)
        assert await c.invalidate("page")
        loading = asyncio.Event()
        release = asyncio.Event()

        async def slow_loader() -> str:
            loading.set()
            await release.wait()
            return "v2"

        winner = asyncio.ensure_future(c.get_or_set("page", slow_loader, ttl=60))
        await asyncio.wait_for(loading.wait(), 5)
        # while the winner reloads, other tasks get the stale value without running the loader
        assert await c.get_or_set("page", lambda: "must not run", ttl=60) == "v1"
        release.set()
        assert await winner == "v2"
        assert await c.get_or_set("page", lambda: "must not run", ttl=60) == "v2"

    run(main())


def test_async_many_tasks_share_a_small_pool(server: Any) -> None:
    async def worker(c: memfleet.AsyncClient, n: int) -> None:
        for i in range(50):
            assert await c.set(f"t{n}-{i}", {"n": n, "i": i})
            assert await c.get(f"t{n}-{i}") == {"n": n, "i": i}

    async def main() -> None:
        c = memfleet.AsyncClient([server.address], max_pool_size=2)
        await asyncio.gather(*(worker(c, n) for n in range(16)))
        srv = c._router.servers[0]
        assert len(srv._idle) <= 2
        conn = await srv.acquire()
        sock = conn.writer.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        await c.close()

    run(main())


def test_methods_are_bound_once_with_their_signature(server: Any) -> None:
    c = memfleet.Client([server.address])
    a = memfleet.AsyncClient([server.address])
    assert inspect.signature(c.incr) == inspect.signature(a.incr)
    assert list(inspect.signature(a.get_or_set).parameters)[:3] == ["key", "loader", "ttl"]
    assert inspect.iscoroutinefunction(a.delete) and not inspect.iscoroutinefunction(c.delete)
    assert c.delete is c.delete  # stored on the instance at first use
    assert a.touch.__doc__ == c.touch.__doc__ and a.touch.__doc__
