"""Remote markers: writes made from a replica region (remote_write, set_remote_markers) and
get_or_set's master_loader, against real servers."""

from __future__ import annotations

import asyncio
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from client_support import listening_socket, memfleet_server
from harness import free_port

import memfleet


# -- helpers -------------------------------------------------------------------------------------
@contextmanager
def remote_write(c: Any, keys: Any, **options: Any) -> Iterator[memfleet.RemoteWrite]:
    """``c.remote_write`` for a Client, or for the AsyncClient behind conftest's ``Blocking``."""
    if isinstance(c, memfleet.Client):
        with c.remote_write(keys, **options) as w:
            yield w
        return
    loop, cm = c._loop, c._client.remote_write(keys, **options)
    w = loop.run_until_complete(cm.__aenter__())
    try:
        yield w
    except BaseException as exc:
        if not loop.run_until_complete(cm.__aexit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        loop.run_until_complete(cm.__aexit__(None, None, None))


def request(address: str, data: bytes) -> bytes:
    """One request on a fresh connection to ``address``; the reply up to its last CRLF."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(data)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def marker_ttl(c: Any, marker: str) -> int | None:
    """The marker's remaining TTL as the server holding it reports it (``mg <key> t``), or None
    if it is not there."""
    line = request(c.server_for(marker), b"mg " + marker.encode() + b" t\r\n").strip()
    if line == b"EN":
        return None
    assert line.startswith(b"HD t"), line
    return int(line[4:])


class Relay:
    """A TCP relay in front of a real server that keeps every byte clients sent through it."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = listening_socket()
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            self._socks += [client, up]
            threading.Thread(target=self._pipe, args=(client, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record:
                    with self._lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def take(self) -> bytes:
        """What was sent since the last take."""
        with self._lock:
            out = bytes(self.sent)
            self.sent.clear()
        return out

    def close(self) -> None:
        for s in self._socks:
            s.close()


@pytest.fixture()
def relays(servers3: list[Any]) -> Iterator[list[Relay]]:
    rs = [Relay(s.address) for s in servers3]
    yield rs
    for r in rs:
        r.close()


# -- markers set, TTL, keys deleted -------------------------------------------------------------
def test_remote_write_sets_markers_and_deletes_the_keys(client: Any) -> None:
    client.set_many({"a": 1, "b": 2, "c": 3})
    with remote_write(client, ["a", "b"], marker_ttl=30) as w:
        # markers first: a reader that misses during the master write already sees them
        assert 0 < (marker_ttl(client, "rm:a") or 0) <= 30
        assert 0 < (marker_ttl(client, "rm:b") or 0) <= 30
        assert marker_ttl(client, "rm:c") is None
    assert client.get_many(["a", "b", "c"]) == {"c": 3}
    # the markers stay, holding the write's token: the region's invalidator removes them once
    # the replica has the transaction that emitted it
    token = w.token.encode()
    assert re.fullmatch(rb"[0-9a-f]{16}", token), token
    assert client.get("rm:a") == b" " + token and client.get("rm:b") == b" " + token
    assert w.keys == ("a", "b")
    assert w.message == f"a {w.token}\nb {w.token}\n"
    assert w.pg_message() == (
        "SELECT pg_logical_emit_message(true, %s::text, %s::text)",
        (memfleet.REMOTE_MARKER_MESSAGE_PREFIX, w.message),
    )
    assert w.pg_message("numeric")[0] == "SELECT pg_logical_emit_message(true, $1::text, $2::text)"
    with pytest.raises(ValueError):
        w.pg_message("named")
    # one key as a plain str, with the client's default TTL (60 s)
    client.set("d", 4)
    with remote_write(client, "d") as again:
        pass
    # every write its own token: an earlier write's release cannot remove this marker
    assert again.token != w.token
    assert client.get("d") is None
    assert 30 < (marker_ttl(client, "rm:d") or 0) <= 60
    # a second write of a key while the first is in flight: the marker holds both tokens, and
    # its TTL starts again
    with remote_write(client, "a", marker_ttl=50) as w3:
        pass
    assert client.get("rm:a") == b" " + token + b" " + w3.token.encode()
    assert 30 < (marker_ttl(client, "rm:a") or 0) <= 50


def test_remote_write_that_raises_keeps_markers_and_still_deletes(client: Any) -> None:
    client.set("k", "old")
    with pytest.raises(RuntimeError, match="master down"):
        with remote_write(client, ["k"]):
            raise RuntimeError("master down")
    # the master write may have happened: the key goes, the marker stays
    assert client.get("k") is None
    assert marker_ttl(client, "rm:k") is not None


def test_low_level_pair_and_options(server: Any, make_client: Any) -> None:
    c = make_client([server.address], key_prefix="app:", remote_marker_prefix="mk/", remote_marker_ttl=20)
    c.flush_all()
    assert c.set_remote_markers(["x", "y"]) == []
    assert c.set_remote_marker("z", marker_ttl=5)
    raw = memfleet.Client([server.address])
    with remote_write(c, "w") as w:
        pass
    # the message names the key as the cache stores it, as the invalidator computes it
    assert w.keys == ("app:w",)
    assert raw.get("mk/app:w") == b" " + w.token.encode()
    assert c.set_remote_marker("t", token="tok-1") and raw.get("mk/app:t") == b" tok-1"
    for bad in ["", "a b", "x" * 65, "é"]:
        with pytest.raises(ValueError):
            c.set_remote_marker("t", token=bad)
    # the marker of cache key K is the cache key prefix + K (the client's key_prefix is in K)
    assert 10 < (marker_ttl(raw, "mk/app:x") or 0) <= 20
    assert 0 < (marker_ttl(raw, "mk/app:z") or 0) <= 5
    assert raw.get_many(["mk/app:x", "mk/app:y", "rm:app:x"]) == {"mk/app:x": b"1", "mk/app:y": b"1"}
    with pytest.raises(ValueError):
        c.set_remote_marker("x", marker_ttl=0)  # a marker must expire
    with pytest.raises(ValueError):
        memfleet.Client([server.address], remote_marker_prefix="bad prefix")
    raw.close()


def test_marker_key_over_250_bytes_is_a_value_error(client: Any) -> None:
    ok, long = "k" * 247, "k" * 248  # "rm:" + key: 250 and 251 bytes
    assert client.set_remote_marker(ok)
    with pytest.raises(ValueError, match="k" * 248):
        client.set_remote_marker(long)
    with pytest.raises(ValueError, match="k" * 248):
        with remote_write(client, [ok, long]):
            pytest.fail("the block must not run")
    with pytest.raises(ValueError, match="k" * 248):
        client.get_or_set(long, lambda: 1, master_loader=lambda: 2)
    assert client.get_or_set(long, lambda: 1) == 1  # the key itself is fine without markers


def test_a_marker_not_set_stops_the_write(make_client: Any) -> None:
    nobody = "127.0.0.1:%d" % free_port()
    c = make_client([nobody], protocol="meta", connect_timeout=0.5)
    ran = []
    with pytest.raises(memfleet.MemfleetConnectionError):
        with remote_write(c, ["k"]):
            ran.append(1)
    assert ran == []
    # ignore_errors: the write goes on without its guarantee; the keys not marked are reported
    lax = make_client([nobody], protocol="meta", connect_timeout=0.5, ignore_errors=True, failure_limit=0)
    assert lax.set_remote_markers(["k", "j"]) == ["k", "j"]
    with remote_write(lax, ["k"]):
        ran.append(1)
    assert ran == [1]


def test_a_marker_the_server_refuses_stops_the_write() -> None:
    with memfleet_server("-m", "8", "-M") as s:  # no evictions: a full server refuses stores
        c = memfleet.Client([s.address], compress_threshold=None)
        for size in (100_000, 10_000, 1_000, 100):
            with pytest.raises(memfleet.MemfleetServerError):
                for i in range(100_000):
                    c.set(f"fill{size}:{i}", b"x" * size)
        assert c.set_remote_markers(["k", "j"]) == ["k", "j"]
        ran = []
        with pytest.raises(memfleet.MemfleetServerError, match="not set"):
            with c.remote_write("k"):
                ran.append(1)
        assert ran == []
        c.close()


# -- get_or_set with master_loader --------------------------------------------------------------
def test_get_or_set_goes_to_the_master_while_the_marker_is_there(client: Any) -> None:
    calls: list[str] = []

    def loader() -> str:
        calls.append("replica")
        return "from replica"

    def master() -> str:
        calls.append("master")
        return "from master"

    meta = client.get_or_set("probe", lambda: 1) == 1 and client._router.servers[0].meta
    client.set("k", "old")
    with remote_write(client, "k"):
        pass
    assert client.get_or_set("k", loader, ttl=60, master_loader=master) == "from master"
    assert calls == ["master"]
    if meta:
        # stored over the lease won on the miss: the next reader hits it
        assert client.get("k") == "from master"
        assert client.get_or_set("k", loader, master_loader=master) == "from master"
        assert calls == ["master"]
    else:
        # no lease on the text protocol: returned, not stored
        assert client.get("k") is None
        assert client.get_or_set("k", loader, master_loader=master) == "from master"
        assert calls == ["master", "master"]
    # the invalidator deletes key and marker once the replica has the row
    client.delete_many(["k", "rm:k"])
    calls.clear()
    assert client.get_or_set("k", loader, master_loader=master) == "from replica"
    assert calls == ["replica"]
    # without master_loader the marker changes nothing
    client.delete("k")
    client.set_remote_marker("k")
    calls.clear()
    assert client.get_or_set("k", loader) == "from replica"
    assert calls == ["replica"]


def test_master_loader_error_releases_the_lease(client: Any) -> None:
    client.set_remote_marker("k")

    def broken() -> Any:
        raise RuntimeError("master down")

    with pytest.raises(RuntimeError, match="master down"):
        client.get_or_set("k", lambda: "replica", master_loader=broken)
    assert client.get_or_set("k", lambda: "replica", master_loader=lambda: "master") == "master"


def test_threads_share_one_master_load(server: Any) -> None:
    c = memfleet.Client([server.address], max_pool_size=64)
    c.flush_all()
    c.set("hot", "old")
    with c.remote_write("hot"):
        pass
    calls: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(20)

    def load(kind: str) -> str:
        with lock:
            calls.append(kind)
        time.sleep(0.2)
        return kind

    results: list[Any] = [None] * 20

    def run(i: int) -> None:
        barrier.wait()
        results[i] = c.get_or_set("hot", lambda: load("replica"), ttl=60, master_loader=lambda: load("master"))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["master"]
    assert results == ["master"] * 20
    c.close()


def test_async_tasks_share_one_master_load(server: Any) -> None:
    calls: list[str] = []

    async def master() -> str:
        calls.append("master")
        await asyncio.sleep(0.2)
        return "master"

    async def main() -> list[Any]:
        c = memfleet.AsyncClient([server.address], max_pool_size=64)
        await c.flush_all()
        await c.set("hot", "old")
        async with c.remote_write(["hot"], marker_ttl=30):
            pass
        assert await c.get("hot") is None
        got = await asyncio.gather(
            *(c.get_or_set("hot", lambda: "replica", ttl=60, master_loader=master) for _ in range(20))
        )
        await c.close()
        return list(got)

    assert asyncio.run(main()) == ["master"] * 20
    assert calls == ["master"]


# -- the near cache -----------------------------------------------------------------------------
@pytest.mark.parametrize("tracking", [False, True])
def test_near_cache_serves_no_old_value_and_keeps_no_master_value(
    server: Any, make_client: Any, tracking: bool
) -> None:
    c = make_client([server.address], near_cache=True, near_cache_ttl=60, near_cache_tracking=tracking)
    c.flush_all()
    nc = c.near_cache
    c.set("k", "old")
    assert c.get("k") == "old" and c.get("k") == "old"
    with remote_write(c, "k"):
        assert nc.get(b"k") is memfleet.near.MISSING  # dropped before the master write
    assert c.get_or_set("k", lambda: "replica", master_loader=lambda: "master") == "master"
    assert nc.get(b"k") is memfleet.near.MISSING
    assert c.get_or_set("k", lambda: "replica", master_loader=lambda: "master") == "master"


# -- several servers ----------------------------------------------------------------------------
def _keys_by_marker_placement(c: Any) -> tuple[str, str]:
    """A key whose marker is on the key's own server, and one whose marker is on another."""
    same = other = None
    for i in range(1000):
        k = f"user:{i}"
        if c.server_for(k) == c.server_for("rm:" + k):
            same = same or k
        else:
            other = other or k
        if same and other:
            return same, other
    raise AssertionError("no such keys")


def test_marker_on_another_server(relays: list[Relay]) -> None:
    c = memfleet.Client([r.address for r in relays])
    c.flush_all()
    same, other = _keys_by_marker_placement(c)
    relay_of = {r.address: r for r in relays}
    tokens = {}
    for key in (same, other):
        c.set(key, "old")
        with c.remote_write(key) as w:
            tokens["rm:" + key] = b" " + w.token.encode()
        for r in relays:
            r.take()
        assert c.get_or_set(key, lambda: "replica", ttl=60, master_loader=lambda: "master") == "master"
        home, marker_home = relay_of[c.server_for(key)], relay_of[c.server_for("rm:" + key)]
        lease = b"mg %s f v c N30\r\n" % key.encode()
        check = b"mg rm:%s\r\n" % key.encode()
        if home is marker_home:
            # one round trip: the marker's get right behind the lease get
            assert home.take().startswith(lease + check)
        else:
            assert home.take().startswith(lease) and marker_home.take() == check
        # a hit: the key's server only, and on another server no look at the marker at all
        assert c.get_or_set(key, lambda: "replica", master_loader=lambda: "master") == "master"
        if home is marker_home:
            assert home.take() == lease + check
        else:
            assert home.take() == lease and marker_home.take() == b""
    # both markers' servers got them in one remote_write, and the invalidator's delete clears them
    assert c.get_many(["rm:" + same, "rm:" + other]) == tokens
    c.close()


def test_markers_of_several_keys_one_pipeline_per_server(relays: list[Relay]) -> None:
    c = memfleet.Client([r.address for r in relays])
    c.flush_all()
    keys = [f"row:{i}" for i in range(30)]
    for r in relays:
        r.take()
    assert c.set_remote_markers(keys, marker_ttl=40) == []
    by_relay = {r.address: r.take() for r in relays}
    for address, sent in by_relay.items():
        mine = [k for k in keys if c.server_for("rm:" + k) == address]
        # one write per server holding every marker that hashes to it
        assert sent == b"".join(b"ms rm:%s 1 F0 T40\r\n1\r\n" % k.encode() for k in mine)
    assert all(marker_ttl(c, "rm:" + k) for k in keys)
    # one round trip per server: a single write on each server's connection
    writes: dict[str, list[bytes]] = {}
    for srv in c._router.servers:
        conn = srv.acquire()
        sock = conn.sock
        out: list[bytes] = []
        writes[srv.address] = out

        class Counting:
            def sendall(self, data: bytes, sock: socket.socket = sock, out: list[bytes] = out) -> None:
                out.append(bytes(data))
                sock.sendall(data)

            def __getattr__(self, name: str, sock: socket.socket = sock) -> Any:
                return getattr(sock, name)

        conn.sock = Counting()  # type: ignore[assignment]
        srv.release(conn)
    assert c.set_remote_markers(keys) == []
    assert sorted(len(w) for w in writes.values()) == [1, 1, 1]
    c.close()


# -- no master_loader, no change ----------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_without_master_loader_the_traffic_is_unchanged(server: Any, protocol: str) -> None:
    relay = Relay(server.address)
    c = memfleet.Client([relay.address], protocol=protocol, compress_threshold=None)
    c.flush_all()
    c.set_remote_marker("k")  # a marker is there, and must not matter
    relay.take()
    assert c.get_or_set("k", lambda: "v", ttl=60) == "v"
    assert c.get_or_set("k", lambda: "never", ttl=60) == "v"
    sent = relay.take()
    # the requests of a miss (lease or lock, store) and of a hit, as they were before markers
    if protocol == "meta":
        assert re.fullmatch(rb"mg k f v c N30\r\nms k 1 F16 T60 C\d+\r\nv\r\nmg k f v c N30\r\n", sent), sent
    else:
        assert sent == (
            b"get k\r\nadd memfleet-lock:k 0 30 1\r\n1\r\nget k\r\nset k 16 60 1\r\nv\r\n"
            b"delete memfleet-lock:k\r\nget k\r\n"
        )
    assert b"rm:" not in sent
    c.close()
    relay.close()


# -- read-your-writes ---------------------------------------------------------------------------
class LaggingReplica:
    """A master database and a streaming replica that replays its writes in order, each at the
    earliest ``lag`` steps after it was made; once the replica has replayed a write, the region's
    invalidator deletes the key and its marker. With ``hold_markers`` it keeps the marker while
    a later write of the same key is still on its way."""

    def __init__(self, cache: Any, hold_markers: bool) -> None:
        self.master: dict[str, int] = {}
        self.replica: dict[str, int] = {}
        self.pending: list[tuple[int, str, int]] = []  # (step it may be replayed at, key, value)
        self.step = 0
        self.cache = cache
        self.hold_markers = hold_markers

    def write(self, key: str, value: int, lag: int) -> None:
        self.master[key] = value
        self.pending.append((self.step + lag, key, value))

    def in_flight(self, key: str) -> bool:
        return any(k == key for _, k, _ in self.pending)

    def tick(self) -> None:
        self.step += 1
        while self.pending and self.pending[0][0] <= self.step:
            _, key, value = self.pending.pop(0)
            self.replica[key] = value
            if self.hold_markers and self.in_flight(key):
                self.cache.delete(key)
            else:
                self.cache.delete_many([key, "rm:" + key])


def _stale_reads(c: Any, markers: bool, overlap: bool) -> int:
    """Reads that missed the master's value, in 1,000 writes each read back at once. Without
    ``overlap`` a row is written only when its last write has been replayed."""
    rng = random.Random(7)
    db = LaggingReplica(c, hold_markers=overlap)
    keys = [f"row:{i}" for i in range(5)]
    for k in keys:
        db.write(k, -1, 0)
    db.tick()
    stale = 0
    for i in range(1000):
        free = keys if overlap else [k for k in keys if not db.in_flight(k)]
        if free:
            key = rng.choice(free)
            if markers:
                with remote_write(c, key):
                    db.write(key, i, rng.randrange(4))
            else:
                db.write(key, i, rng.randrange(4))
                c.delete(key)
        # read it back at once, and another row that may have a write in flight
        for k in (key, rng.choice(keys)):
            got = c.get_or_set(k, lambda k=k: db.replica[k], ttl=300, master_loader=lambda k=k: db.master[k])
            stale += got != db.master[k]
        db.tick()
    return stale


@pytest.mark.parametrize("overlap", [False, True])
def test_read_your_writes_through_a_lagging_replica(client: Any, overlap: bool) -> None:
    without = _stale_reads(client, markers=False, overlap=overlap)
    assert without > 0  # the race is there to be won
    client.flush_all()
    assert _stale_reads(client, markers=True, overlap=overlap) == 0


def test_waiter_that_times_out_goes_to_the_master_without_storing(mclient: Any) -> None:
    # someone vivified the key and never filled it, and a marker is there
    assert b"W" in request(mclient.servers[0], b"mg stuck v N30\r\n").split()
    mclient.set_remote_marker("stuck")
    got = mclient.get_or_set("stuck", lambda: "replica", wait_timeout=0.2, master_loader=lambda: "master")
    assert got == "master"
    # no lease was won: the stub is left alone for its holder
    assert request(mclient.servers[0], b"mg stuck v\r\n").startswith(b"VA 0 ")


def test_marker_server_down_fails_the_load_and_releases_the_lease(fresh_servers3: list[Any]) -> None:
    c = memfleet.Client([s.address for s in fresh_servers3], failure_limit=0)
    c.flush_all()
    _, key = _keys_by_marker_placement(c)
    c.set_remote_marker(key)
    by_address = {s.address: s for s in fresh_servers3}
    by_address[c.server_for("rm:" + key)].kill()
    calls: list[str] = []
    with pytest.raises(memfleet.MemfleetConnectionError):
        c.get_or_set(key, lambda: calls.append("replica"), master_loader=lambda: calls.append("master"))
    assert calls == []  # unsure whether the marker is there, it loads from neither
    assert request(c.server_for(key), b"mg %s v\r\n" % key.encode()) == b"EN\r\n"  # no stub left
    c.close()
