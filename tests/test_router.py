"""`memfleet route` against real memcached backends and real nutcracker (twemproxy 0.5)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import (
    Conn,
    Server,
    eventually,
    free_port,
    keys_held,
    listening_socket,
    memcached,
    memfleet_bin,
    wait_for_port,
)
from proxy_harness import NUTCRACKER, Proxy, never_reading_client, pool_yaml, settle


def my_port() -> int:
    return free_port()


def mc(*args: str, port: int | None = None) -> Server:
    """memcached on a port of ours, checked to be really ours once it listens."""
    srv = memcached(*args, port=port or my_port()).start()
    time.sleep(0.05)
    assert srv.proc is not None and srv.proc.poll() is None, "memcached exited at start"
    return srv


# ---------------------------------------------------------------- helpers


@pytest.fixture
def backends() -> Iterator[list[Server]]:
    started = [mc("-t", "1") for _ in range(4)]
    yield started
    for s in started:
        s.stop()


def where(backends: list[Server], keys: list[str]) -> dict[str, int]:
    """Which backend holds each key (checked directly, bypassing the proxy)."""
    found: dict[str, int] = {}
    for i, b in enumerate(backends):
        for k in keys_held(b.port or 0, keys):
            assert k not in found, f"{k} on two backends"
            found[k] = i
    return found


def flush(backends: list[Server]) -> None:
    for b in backends:
        with Conn(b.port) as c:
            assert c.request(b"flush_all\r\n") == b"OK\r\n"


def set_all(port: int, keys: list[str]) -> None:
    with Conn(port) as c:
        payload = b"".join(f"set {k} 0 0 {len(k)} noreply\r\n{k}\r\n".encode() for k in keys)
        c.send(payload)
        # A final acknowledged command proves everything before it was forwarded.
        for k in keys[-5:]:
            assert c.request(f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode()) == b"STORED\r\n"


# ---------------------------------------------------------------- placement


@pytest.mark.skipif(NUTCRACKER is None, reason="nutcracker not installed")
@pytest.mark.parametrize("hash_name", ["md5", "fnv1a_64", "murmur", "crc32a"])
def test_placement_matches_nutcracker(backends: list[Server], hash_name: str) -> None:
    servers = [f"127.0.0.1:{b.port}:{w}" for b, w in zip(backends, [1, 2, 1, 3])]
    servers[1] += " second"
    keys = [f"key:{i}:{hash_name}" for i in range(1500)] + ["{tag}a", "{tag}b"]
    placements = []
    for nut in (True, False):
        flush(backends)
        port = my_port()
        conf = pool_yaml(
            "alpha", f"127.0.0.1:{port}", servers, hash=hash_name, distribution="ketama"
        )
        with Proxy(conf, port, nutcracker=nut):
            set_all(port, keys)
            placements.append(where(backends, keys))
    assert len(placements[1]) == len(keys)
    assert placements[0] == placements[1]
    assert len(set(placements[1].values())) == 4


@pytest.mark.skipif(NUTCRACKER is None, reason="nutcracker not installed")
def test_hash_tag_and_modula_match_nutcracker(backends: list[Server]) -> None:
    servers = [f"127.0.0.1:{b.port}:1" for b in backends]
    keys = [f"{{user{i % 7}}}:field{i}" for i in range(400)] + [f"plain{i}" for i in range(400)]
    placements = []
    for nut in (True, False):
        flush(backends)
        port = my_port()
        conf = pool_yaml(
            "beta",
            f"127.0.0.1:{port}",
            servers,
            hash="fnv1a_32",
            hash_tag='"{}"',
            distribution="modula",
        )
        with Proxy(conf, port, nutcracker=nut):
            set_all(port, keys)
            placements.append(where(backends, keys))
    assert placements[0] == placements[1]
    for i in range(7):
        assert len({placements[1][k] for k in keys if k.startswith(f"{{user{i}}}")}) == 1


# ---------------------------------------------------------------- forwarding


@pytest.fixture
def router(backends: list[Server]) -> Iterator[Proxy]:
    port = my_port()
    servers = [f"127.0.0.1:{b.port}:1" for b in backends]
    # md5: fnv1a_64 puts keys that differ only in their last bytes next to each other.
    conf = pool_yaml(
        "alpha", f"127.0.0.1:{port}", servers, hash="md5", distribution="ketama", timeout=1000
    )
    with Proxy(conf, port) as p:
        yield p


def test_text_commands_round_trip(router: Proxy) -> None:
    with Conn(router.port) as c:
        assert c.request(b"set a 5 0 3\r\nabc\r\n") == b"STORED\r\n"
        assert c.request(b"get a\r\n", b"END\r\n") == b"VALUE a 5 3\r\nabc\r\nEND\r\n"
        assert c.request(b"add a 0 0 1\r\nx\r\n") == b"NOT_STORED\r\n"
        assert c.request(b"append a 0 0 2\r\nde\r\n") == b"STORED\r\n"
        assert c.request(b"prepend a 0 0 1\r\nz\r\n") == b"STORED\r\n"
        reply = c.request(b"gets a\r\n", b"END\r\n")
        assert reply.startswith(b"VALUE a 5 6 ") and reply.endswith(b"\r\nzabcde\r\nEND\r\n")
        cas = reply.split(b"\r\n")[0].split()[4]
        assert c.request(b"cas a 0 0 1 " + cas + b"\r\nq\r\n") == b"STORED\r\n"
        assert c.request(b"cas a 0 0 1 " + cas + b"\r\nq\r\n") == b"EXISTS\r\n"
        assert c.request(b"set n 0 0 2\r\n10\r\n") == b"STORED\r\n"
        assert c.request(b"incr n 5\r\n") == b"15\r\n"
        assert c.request(b"decr n 20\r\n") == b"0\r\n"
        assert c.request(b"incr nope 1\r\n") == b"NOT_FOUND\r\n"
        assert c.request(b"touch n 100\r\n") == b"TOUCHED\r\n"
        # memcached keeps the length on decr: "0 " (two bytes).
        assert c.request(b"gat 100 n\r\n", b"END\r\n") == b"VALUE n 0 2\r\n0 \r\nEND\r\n"
        assert c.request(b"delete n\r\n") == b"DELETED\r\n"
        assert c.request(b"delete n\r\n") == b"NOT_FOUND\r\n"
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        assert c.request(b"bogus\r\n") == b"ERROR\r\n"
        assert c.request(b"set k 0 0 notanumber\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        stats = c.request(b"stats\r\n", b"END\r\n")
        assert b"STAT curr_connections " in stats and b"STAT pool alpha\r\n" in stats
        c.send(b"quit\r\n")
        assert c.read_all(1.0) == b""


def test_multi_get_is_split_and_merged_in_key_order(router: Proxy, backends: list[Server]) -> None:
    keys = [f"mk{i}" for i in range(40)]
    with Conn(router.port) as c:
        for k in keys[::2]:
            assert c.request(f"set {k} {len(k)} 0 {len(k)}\r\n{k}\r\n".encode()) == b"STORED\r\n"
        asked = keys[::-1] + keys[:3] + ["missing"]
        reply = c.request(("get " + " ".join(asked) + "\r\n").encode(), b"END\r\n")
    stored = set(keys[::2])
    expect = (
        b"".join(f"VALUE {k} {len(k)} {len(k)}\r\n{k}\r\n".encode() for k in asked if k in stored)
        + b"END\r\n"
    )
    assert reply == expect
    assert len(set(where(backends, keys[::2]).values())) > 1, "keys spread over servers"
    with Conn(router.port) as c:
        # gats is split the same way, "gats <exptime>" kept on every fragment.
        reply = c.request(("gats 100 " + " ".join(keys[:8]) + "\r\n").encode(), b"END\r\n")
        lines = [ln for ln in reply.split(b"\r\n") if ln.startswith(b"VALUE ")]
        assert [ln.split()[1].decode() for ln in lines] == [k for k in keys[:8] if k in stored]
        assert all(len(ln.split()) == 5 for ln in lines), "cas unique present"
    assert router.stats()["alpha"]["fragments"] >= 2


def test_pipelined_requests_answer_in_order(router: Proxy) -> None:
    with Conn(router.port) as c:
        req = b""
        expect = b""
        for i in range(300):
            k = f"p{i}"
            req += f"set {k} 0 0 {len(str(i))}\r\n{i}\r\nget {k} p{i + 1}x\r\n".encode()
            expect += b"STORED\r\n" + f"VALUE {k} 0 {len(str(i))}\r\n{i}\r\nEND\r\n".encode()
        req += b"delete p0 noreply\r\nget p0\r\n"
        expect += b"END\r\n"
        c.send(req)
        got = b""
        while len(got) < len(expect):
            got += c.sock.recv(65536)
    assert got == expect


def mixed_script(prefix: str, shared: list[str], rounds: int) -> tuple[bytes, bytes]:
    """Pipelined gets interleaved with writes to the same keys, and the replies a
    one-request-at-a-time memcached gives: gets merged with other clients' gets must
    still see this client's earlier writes and never a later one."""
    store: dict[str, str] = {k: k for k in shared}
    req = b""
    expect = b""

    def get(keys: list[str]) -> None:
        nonlocal req, expect
        req += ("get " + " ".join(keys) + "\r\n").encode()
        for k in keys:
            if k in store:
                expect += f"VALUE {k} 0 {len(store[k])}\r\n{store[k]}\r\n".encode()
        expect += b"END\r\n"

    for i in range(rounds):
        own = f"{prefix}{i % 7}"
        value = f"{prefix}v{i}"
        get([own])
        req += f"set {own} 0 0 {len(value)}\r\n{value}\r\n".encode()
        expect += b"STORED\r\n"
        store[own] = value
        get([own, shared[i % len(shared)], f"{prefix}{(i + 3) % 7}"])
        get(shared[i % 5 : i % 5 + 4] + [own])
        if i % 4 == 0:
            req += f"delete {own}\r\n".encode()
            expect += b"DELETED\r\n"
            del store[own]
            get([own])
    return req, expect


def test_merged_gets_keep_each_clients_order(router: Proxy) -> None:
    shared = [f"shared{i}" for i in range(12)]
    set_all(router.port, shared)
    errors: list[str] = []

    def client(n: int) -> None:
        req, expect = mixed_script(f"c{n}_", shared, 150)
        got = b""
        with Conn(router.port, timeout=5) as c:
            c.send(req)
            try:
                while len(got) < len(expect):
                    chunk = c.sock.recv(1 << 16)
                    if not chunk:
                        break
                    got += chunk
            except OSError as e:  # a wrong (shorter) answer leaves us waiting
                errors.append(f"client {n}: {e!r} after {len(got)} of {len(expect)} bytes")
        if got != expect:
            at = next((i for i, (a, b) in enumerate(zip(got, expect)) if a != b), len(got))
            errors.append(f"client {n}: replies differ from byte {at}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_noreply_and_meta_quiet_mode(router: Proxy) -> None:
    with Conn(router.port) as c:
        c.send(b"set q 0 0 1 noreply\r\nv\r\nadd q 0 0 1 noreply\r\nw\r\ndelete nokey noreply\r\n")
        assert c.request(b"get q\r\n", b"END\r\n") == b"VALUE q 0 1\r\nv\r\nEND\r\n"
        # Errors still come back for noreply, as from memcached itself.
        assert (
            c.request(b"incr q 1 noreply\r\nmn\r\n", b"MN\r\n")
            == b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\nMN\r\n"
        )
        assert (
            c.request(b"ms m1 2 T0 q\r\nhi\r\nmg m1 v q\r\nmg nothere v q\r\nmn\r\n", b"MN\r\n")
            == b"VA 2\r\nhi\r\nMN\r\n"
        )
        assert c.request(b"mg m1 s v k Oab\r\n", b"\r\nhi\r\n") == b"VA 2 s2 km1 Oab\r\nhi\r\n"
        assert c.request(b"md m1 q\r\nmd m1\r\n") == b"NF\r\n"
        assert c.request(b"ma cnt N0 J7 v\r\n", b"7\r\n") == b"VA 1\r\n7\r\n"
        assert c.request(b"mn\r\n") == b"MN\r\n"
        assert c.request(b"flush_all\r\n") == b"OK\r\n"
        assert c.request(b"mg cnt v\r\n") == b"EN\r\n"


def test_large_values_cross_intact(router: Proxy) -> None:
    sizes = [8 * 1024, 100 * 1024, 300 * 1024, 1000 * 1000]
    with Conn(router.port, timeout=10) as c:
        for n in sizes:
            val = os.urandom(n // 2).hex().encode()[:n]
            assert c.request(f"set big{n} 0 0 {n}\r\n".encode() + val + b"\r\n") == b"STORED\r\n"
            reply = c.request(f"get big{n}\r\n".encode(), b"\r\nEND\r\n")
            assert reply == f"VALUE big{n} 0 {n}\r\n".encode() + val + b"\r\nEND\r\n"
        # A multi-get of big values from several servers merges whole items.
        reply = c.request(
            ("get " + " ".join(f"big{n}" for n in sizes) + "\r\n").encode(), b"\r\nEND\r\n"
        )
        assert reply.count(b"VALUE big") == len(sizes)


def test_stats_json_has_nutcracker_fields(router: Proxy, backends: list[Server]) -> None:
    with Conn(router.port) as c:
        c.request(b"set s 0 0 1\r\nx\r\n")
    st = router.stats()
    for k in [
        "service",
        "source",
        "version",
        "uptime",
        "timestamp",
        "total_connections",
        "curr_connections",
    ]:
        assert k in st
    pool = st["alpha"]
    for k in [
        "client_eof",
        "client_err",
        "client_connections",
        "server_ejects",
        "forward_error",
        "fragments",
    ]:
        assert k in pool
    server = pool[f"127.0.0.1:{backends[0].port}"]
    assert set(server) == {
        "server_eof",
        "server_err",
        "server_timedout",
        "server_connections",
        "server_ejected_at",
        "requests",
        "request_bytes",
        "responses",
        "response_bytes",
        "in_queue",
        "in_queue_bytes",
        "out_queue",
        "out_queue_bytes",
    }
    assert sum(pool[f"127.0.0.1:{b.port}"]["requests"] for b in backends) >= 1


@pytest.mark.skipif(NUTCRACKER is None, reason="nutcracker not installed")
def test_stats_json_shape_equals_nutcracker(backends: list[Server]) -> None:
    shapes = []
    for nut in (True, False):
        port = my_port()
        conf = pool_yaml(
            "alpha",
            f"127.0.0.1:{port}",
            [f"127.0.0.1:{backends[0].port}:1", f"127.0.0.1:{backends[1].port}:1 two"],
        )
        with Proxy(conf, port, nutcracker=nut) as p:
            st = p.stats()
        shapes.append(
            {k: (sorted(v) if isinstance(v, dict) else None) for k, v in st.items()}
            | {"alpha/two": sorted(st["alpha"]["two"])}
        )
    # memfleet adds one top-level field ("memfleet": its version).
    assert {k: v for k, v in shapes[1].items() if k != "memfleet"} == shapes[0]


def test_unix_socket_listener_and_backend(tmp_path: Path) -> None:
    mc_sock = str(tmp_path / "mc.sock")
    listen = str(tmp_path / "route.sock")
    with memcached("-s", mc_sock), mc("-t", "1") as tcp:
        conf = pool_yaml(
            "u", f"{listen} 0666", [f"{mc_sock}:1", f"127.0.0.1:{tcp.port}:1"], hash="md5"
        )
        with Proxy(conf, None, unix=listen):
            assert oct(os.stat(listen).st_mode & 0o777) == "0o666"
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(listen)
                keys = [f"u{i}" for i in range(50)]
                s.sendall(b"".join(f"set {k} 0 0 2\r\nhi\r\n".encode() for k in keys))
                buf = b""
                while buf.count(b"STORED") < len(keys):
                    buf += s.recv(4096)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(mc_sock)
                s.sendall(("get " + " ".join(keys) + "\r\n").encode())
                buf = b""
                while not buf.endswith(b"END\r\n"):
                    buf += s.recv(65536)
            on_unix = buf.count(b"VALUE ")
            assert 0 < on_unix < len(keys), "keys spread over the unix and the TCP backend"
        assert not os.path.exists(listen), "socket file removed on exit"


# ---------------------------------------------------------------- failures


def test_dead_backend_errors_then_ejects_then_returns(backends: list[Server]) -> None:
    port = my_port()
    servers = [f"127.0.0.1:{b.port}:1" for b in backends[:3]]
    conf = pool_yaml(
        "alpha",
        f"127.0.0.1:{port}",
        servers,
        hash="md5",
        timeout=500,
        auto_eject_hosts=True,
        server_retry_timeout=1500,
        server_failure_limit=2,
    )
    with Proxy(conf, port) as p:
        keys = [f"f{i}" for i in range(200)]
        set_all(port, keys)
        victim = backends[1]
        victim_keys = [k for k, i in where(backends, keys).items() if i == 1]
        assert victim_keys
        vport = victim.port
        victim.stop()
        # A hang would trip the client's 5 s socket timeout (the pool's timeout is 500 ms).
        with Conn(port, timeout=5) as c:
            errors = 0
            for k in victim_keys[:5]:
                r = c.request(f"get {k}\r\n".encode(), b"END\r\n", b"\r\n")
                if r.startswith(b"SERVER_ERROR"):
                    errors += 1
                else:
                    assert r == b"END\r\n"  # already remapped to a live server
            assert errors >= 1
            # Ejected: the victim's keys now live elsewhere.
            for k in victim_keys:
                assert c.request(f"set {k} 0 0 1\r\nx\r\n".encode()) == b"STORED\r\n"
            st = p.stats()["alpha"]
            assert st["server_ejects"] >= 1
            assert st[f"127.0.0.1:{vport}"]["server_ejected_at"] > 0
            # Back on the same port: after server_retry_timeout it rejoins the ring.
            revived = mc("-t", "1", port=vport)
            backends[1] = revived
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                c.request(f"set {victim_keys[0]} 0 0 1\r\ny\r\n".encode())
                with Conn(vport) as d:
                    if d.request(f"get {victim_keys[0]}\r\n".encode(), b"END\r\n").startswith(
                        b"VALUE"
                    ):
                        break
                time.sleep(0.2)
            else:
                pytest.fail("server was not re-added")
            # Logged just after the ring is rebuilt.
            eventually(lambda: "is back" in p.log_text(), "the return logged")


def test_unresponsive_backend_times_out(tmp_path: Path) -> None:
    # Accepts and reads but never answers.
    silent = listening_socket()
    held: list[socket.socket] = []
    stop = threading.Event()

    def sink() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = silent.accept()
                held.append(conn)
            except OSError:
                pass

    th = threading.Thread(target=sink, daemon=True)
    th.start()
    port = my_port()
    conf = pool_yaml(
        "slow", f"127.0.0.1:{port}", [f"127.0.0.1:{silent.getsockname()[1]}:1"], timeout=300
    )
    try:
        # The router's own 300 ms timeout answers, long before the client's 5 s one.
        with Proxy(conf, port) as p, Conn(port, timeout=5) as c:
            assert c.request(b"get x\r\n") == b"SERVER_ERROR Connection timed out\r\n"
            c.send(b"set a 0 0 1\r\n1\r\nget b c d\r\n")
            assert c.read_line() == b"SERVER_ERROR Connection timed out\r\n"
            assert c.read_line() == b"SERVER_ERROR Connection timed out\r\n"
            assert p.stats()["slow"][f"127.0.0.1:{silent.getsockname()[1]}"]["server_timedout"] >= 2
    finally:
        stop.set()
        th.join()
        silent.close()
        for h in held:
            h.close()


def test_no_live_server_answers_at_once(tmp_path: Path) -> None:
    port = my_port()
    dead = my_port()
    conf = pool_yaml(
        "d",
        f"127.0.0.1:{port}",
        [f"127.0.0.1:{dead}:1"],
        timeout=2000,
        auto_eject_hosts=True,
        server_failure_limit=1,
        server_retry_timeout=60000,
    )
    with Proxy(conf, port), Conn(port, timeout=5) as c:
        # Refused connects, not the 2 s timeout: the reply names the cause.
        for key in (b"x", b"y"):
            reply = c.request(b"get " + key + b"\r\n")
            assert reply.startswith(b"SERVER_ERROR"), reply
            assert b"timed out" not in reply, reply


# ---------------------------------------------------------------- configuration and reload


def run_route(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [memfleet_bin(), "route", *args], capture_output=True, text=True, check=False, timeout=30
    )


def test_test_conf_flag(tmp_path: Path) -> None:
    good = tmp_path / "good.yml"
    good.write_text(pool_yaml("a", "127.0.0.1:22121", ["127.0.0.1:11211:1"], hash="md5"))
    r = run_route("-t", "-c", str(good))
    assert r.returncode == 0 and "syntax is ok" in r.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text(pool_yaml("a", "127.0.0.1:22121", ["127.0.0.1:11211:1"], hash="md6"))
    r = run_route("-t", "-c", str(bad))
    assert r.returncode != 0 and 'directive "hash" is not a valid hash' in r.stderr
    if NUTCRACKER:
        assert (
            subprocess.run(
                [NUTCRACKER, "-t", "-c", str(good)], check=False, capture_output=True
            ).returncode
            == 0
        )
        assert (
            subprocess.run(
                [NUTCRACKER, "-t", "-c", str(bad)], check=False, capture_output=True
            ).returncode
            != 0
        )
    r = run_route("-D")
    assert r.returncode == 0 and "server_ejected_at" in r.stdout


def test_several_pools_in_one_file(backends: list[Server]) -> None:
    p1, p2 = my_port(), my_port()
    conf = pool_yaml("one", f"127.0.0.1:{p1}", [f"127.0.0.1:{backends[0].port}:1"]) + pool_yaml(
        "two", f"127.0.0.1:{p2}", [f"127.0.0.1:{backends[1].port}:1"], hash="md5"
    )
    with Proxy(conf, p1):
        wait_for_port(p2)
        with Conn(p1) as a, Conn(p2) as b:
            assert a.request(b"set k 0 0 1\r\n1\r\n") == b"STORED\r\n"
            assert b.request(b"set k 0 0 1\r\n2\r\n") == b"STORED\r\n"
            assert a.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\n1\r\nEND\r\n"
            assert b.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\n2\r\nEND\r\n"


def test_sighup_reload_under_load_drops_no_connection(backends: list[Server]) -> None:
    port = my_port()
    conf1 = pool_yaml(
        "alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backends[0].port}:1"], timeout=2000, hash="md5"
    )
    conf2 = pool_yaml(
        "alpha",
        f"127.0.0.1:{port}",
        [f"127.0.0.1:{b.port}:1" for b in backends[:3]],
        timeout=2000,
        hash="md5",
    )
    with Proxy(conf1, port) as p:
        stop = threading.Event()
        failures: list[str] = []
        counts = [0] * 8

        def client(n: int) -> None:
            try:
                with Conn(port, timeout=5) as c:
                    i = 0
                    while not stop.is_set():
                        k = f"c{n}:{i % 50}"
                        v = f"{n}-{i}"
                        r = c.request(
                            f"set {k} 0 0 {len(v)}\r\n{v}\r\nget {k}\r\n".encode(), b"END\r\n"
                        )
                        if r != f"STORED\r\nVALUE {k} 0 {len(v)}\r\n{v}\r\nEND\r\n".encode():
                            failures.append(repr(r))
                            return
                        i += 1
                        counts[n] = i
            except OSError as e:
                failures.append(f"client {n}: {e}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.3)

        def reloads() -> int:
            log = p.log_text()
            return log.count("configuration reloaded") + log.count("reload refused")

        for conf in [conf2, "alpha:\n  listen: nonsense\n", conf1, conf2]:
            # One SIGHUP at a time: two before the first is taken would be one reload.
            done = reloads()
            p.reload(conf)
            eventually(lambda done=done: reloads() > done, "the reload taken", limit=10)
            time.sleep(0.2)
        before = list(counts)
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join()
        assert not failures, failures[:3]
        assert all(a < b for a, b in zip(before, counts)), "every client kept going"
        assert "reload refused" in p.log_text()
        assert p.proc is not None and p.proc.poll() is None
        flush(backends)
        fresh = [f"after{i}" for i in range(100)]
        set_all(port, fresh)
        assert len(set(where(backends, fresh).values())) == 3, "new servers took keys after reload"


def test_reload_moves_listener(backends: list[Server]) -> None:
    p1, p2 = my_port(), my_port()
    conf1 = pool_yaml("alpha", f"127.0.0.1:{p1}", [f"127.0.0.1:{backends[0].port}:1"])
    conf2 = pool_yaml("alpha", f"127.0.0.1:{p2}", [f"127.0.0.1:{backends[0].port}:1"])
    with Proxy(conf1, p1) as p:
        p.reload(conf2)
        wait_for_port(p2)
        with Conn(p2) as c:
            assert c.request(b"set m 0 0 1\r\n1\r\n") == b"STORED\r\n"

        def p1_refused() -> bool:
            # Closed once every worker has dropped its copy of the old listener.
            try:
                socket.create_connection(("127.0.0.1", p1), timeout=1).close()
            except OSError:
                return True
            return False

        eventually(p1_refused, "the old port closed")


def test_preconnect_and_client_connections_limit(backends: list[Server]) -> None:
    port = my_port()
    conf = pool_yaml(
        "alpha",
        f"127.0.0.1:{port}",
        [f"127.0.0.1:{b.port}:1" for b in backends[:2]],
        preconnect=True,
        server_connections=2,
        client_connections=3,
    )
    with Proxy(conf, port, threads=2) as p:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = p.stats()["alpha"]
            conns = [st[f"127.0.0.1:{b.port}"]["server_connections"] for b in backends[:2]]
            if conns == [4, 4]:  # 2 per server per worker thread, before any request
                break
            time.sleep(0.05)
        assert conns == [4, 4]
        # client_connections is enforced (nutcracker 0.5 parses it but ignores it).
        held = [Conn(port) for _ in range(3)]
        for c in held:
            assert c.request(b"version\r\n").startswith(b"VERSION")
        extra = Conn(port)
        try:
            extra.send(b"version\r\n")
            assert extra.read_all(1.0) == b"", "over the limit: closed without a reply"
        except ConnectionResetError:
            pass
        extra.close()
        held[0].close()

        def served() -> bool:
            # Once the router has seen the close, a new client fits under the limit again.
            try:
                with Conn(port, timeout=1) as c:
                    return c.request(b"version\r\n").startswith(b"VERSION")
            except OSError:
                return False

        eventually(served, "a client served after one left")
        for c in held[1:]:
            c.close()


def test_hot_pipelining_client_does_not_starve_others(backends: list[Server]) -> None:
    port = my_port()
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backends[0].port}:1"])
    with Proxy(conf, port, threads=1) as p:
        stop = threading.Event()

        def hot() -> None:
            with Conn(port, timeout=10) as c:
                batch = b"get hot\r\n" * 2000
                while not stop.is_set():
                    c.send(batch)
                    got = 0
                    while got < 2000:
                        chunk = c.sock.recv(1 << 20)
                        got += chunk.count(b"END\r\n")

        th = threading.Thread(target=hot)
        th.start()
        time.sleep(0.3)
        # Same worker thread as the hot client, yet answered between its batches: a
        # starved request would trip the 5 s socket timeout.
        with Conn(port, timeout=5) as c:
            for _ in range(50):
                assert c.request(b"get cold\r\n", b"END\r\n") == b"END\r\n"
        stop.set()
        th.join()
        assert p.proc is not None and p.proc.poll() is None


def pool_of_a_large_value(backend: Server) -> tuple[int, str]:
    """Stores `big`, a 500 KB value, on `backend`: the port and config of a pool of it alone."""
    value = b"v" * 500_000
    with Conn(backend.port or 0) as c:
        assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
    port = my_port()
    return port, pool_yaml("alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backend.port}:1"])


def get_hits(backend: Server) -> int:
    with Conn(backend.port or 0) as c:
        return int(c.stats()["get_hits"])


def test_clients_that_never_read_large_gets_leave_memory_bounded(backends: list[Server]) -> None:
    """Replies the router asked for must be taken off the shared server connection whoever
    waits for them, so it has to stop asking on behalf of a client that reads nothing: four
    such clients pipelining gets of a 500 KB value (memfleet route held 2 GB for eight of
    them, nutcracker 1.3 GB and growing) leave its memory within tens of MB each."""
    port, conf = pool_of_a_large_value(backends[0])
    with Proxy(conf, port) as p:
        before = p.rss_mb()
        socks = [never_reading_client(port, b"", b"get big\r\n") for _ in range(4)]
        try:
            served = settle(lambda: get_hits(backends[0]))
            grown = p.rss_mb() - before
            print(f"router grew {grown:.0f} MB; the backend served {served} gets")
            assert grown < 4 * 40, f"router grew {grown:.0f} MB for 4 clients that never read"
            with Conn(port) as c:
                assert c.request(b"get small\r\n", b"END\r\n") == b"END\r\n"
        finally:
            for s in socks:
                s.close()


def test_a_client_that_stops_reading_after_small_replies_is_closed_at_256_mb(
    backends: list[Server],
) -> None:
    """The pause judges a client by its recent replies, so one that read small ones first can
    have a burst of large gets forwarded at once (up to 16,384). If it then reads nothing, the
    router must not hold all their replies: past 256 MB unread it closes the client, as Redis
    does past a client's output buffer limit. Nor does it hold a merged get's reply whole (up
    to 128 values of 500 KB here) before splitting it. Others are served throughout."""
    port, conf = pool_of_a_large_value(backends[0])
    with Proxy(conf, port) as p:
        before = p.rss_mb("VmHWM")
        greedy = Conn(port)
        for _ in range(60):  # small replies bring its estimate down to a few hundred bytes
            assert greedy.request(b"get small\r\n", b"END\r\n") == b"END\r\n"
        # 1,500 gets of 500 KB in one write: 750 MB of replies, which it never reads
        greedy.send(b"get big\r\n" * 1500)
        served = settle(lambda: get_hits(backends[0]))
        peak = p.rss_mb("VmHWM") - before
        print(f"the backend served {served} gets; the router's peak grew {peak:.0f} MB")
        # 13.5 KB of gets arrive in one read, before any large reply raises the estimate
        assert served == 1500, f"the router forwarded {served} of the 1,500 gets"
        assert peak < 330, f"the router held {peak:.0f} MB for a client that does not read"
        greedy.sock.settimeout(10)
        received = 0
        try:
            while chunk := greedy.sock.recv(1 << 20):  # what the kernel held, then the close
                received += len(chunk)
        except ConnectionResetError:
            pass
        assert received < 256 * 1024 * 1024, "the client was not closed"
        assert p.stats()["alpha"]["client_err"] >= 1
        assert "replies it does not read" in p.log_text()
        with Conn(port) as c:
            assert c.request(b"get small\r\n", b"END\r\n") == b"END\r\n"
        greedy.close()


def test_writers_that_stall_after_a_set_line_hold_what_they_sent_not_what_they_announced(
    backends: list[Server],
) -> None:
    """A client that sends `set k 0 0 1000000` and two bytes, then stalls, must not make the
    router set aside the megabyte it announced: 200 of them held 192 MB before (763 MB with
    4 MB values); memcached bounds the same by its memory limit, nutcracker by what came."""
    port = my_port()
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backends[0].port}:1"])
    with Proxy(conf, port) as p:
        before = p.rss_mb()
        stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        try:
            for i, s in enumerate(stalled):
                s.sendall(b"set stalled%d 0 0 1000000\r\nxx" % i)
            grown = settle(lambda: int(p.rss_mb())) - before
            print(f"router grew {grown:.0f} MB for 200 stalled writers")
            assert grown < 64, f"router grew {grown:.0f} MB for 200 writers that sent 27 bytes each"
            with Conn(port) as c:
                assert c.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
        finally:
            for s in stalled:
                s.close()


def test_nutcracker_signals_neither_stop_nor_kill_it(backends: list[Server]) -> None:
    """Signals as nutcracker takes them: HUP re-opens the log file (a rotator moved it; here
    it also reloads), TTIN/TTOU make the log chattier/quieter, USR1/USR2 are ignored. By
    default TTIN and TTOU stop a process and USR1 kills it: a site's scripts that send them
    to nutcracker must not take the router down."""
    port = my_port()
    conf = pool_yaml("alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backends[0].port}:1"])
    with Proxy(conf, port) as p:
        assert p.proc is not None
        for sig in (signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1, signal.SIGUSR2):
            p.proc.send_signal(sig)
        eventually(lambda: "log level set to 5" in p.log_text(), "TTIN then TTOU")
        assert "log level set to 6" in p.log_text()
        # A stopped router would let this time out; a killed one refuse it.
        with Conn(port, timeout=5) as c:
            assert c.request(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
        assert p.proc.poll() is None
        os.rename(p.log, p.log + ".1")
        p.proc.send_signal(signal.SIGHUP)
        eventually(
            lambda: os.path.exists(p.log) and "configuration reloaded" in p.log_text(),
            "HUP re-opening the log file",
        )


def test_pid_file_and_daemonize(tmp_path: Path, backends: list[Server]) -> None:
    port = my_port()
    conf = tmp_path / "c.yml"
    conf.write_text(pool_yaml("alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backends[0].port}:1"]))
    pid_file = tmp_path / "route.pid"
    r = run_route(
        "-d",
        "-c",
        str(conf),
        "-p",
        str(pid_file),
        "-s",
        str(my_port()),
        "-a",
        "127.0.0.1",
        "-o",
        str(tmp_path / "log"),
    )
    assert r.returncode == 0
    # The parent writes the daemon's pid before it exits.
    pid = int(pid_file.read_text())
    wait_for_port(port)
    try:
        with Conn(port) as c:
            assert c.request(b"set d 0 0 1\r\n1\r\n") == b"STORED\r\n"
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_file.exists(), "pid file removed on exit"


def test_client_auth_extension(backends: list[Server]) -> None:
    port = my_port()
    conf = pool_yaml(
        "alpha", f"127.0.0.1:{port}", [f"127.0.0.1:{backends[0].port}:1"], client_auth="s3cret"
    )
    with Proxy(conf, port), Conn(port) as c:
        assert c.request(b"get a\r\n") == b"CLIENT_ERROR unauthenticated\r\n"
        assert (
            c.request(b"set x 0 0 10\r\nbob wrong!\r\n")
            == b"CLIENT_ERROR authentication failure\r\n"
        )
        assert c.request(b"set x 0 0 10\r\nbob s3cret\r\n") == b"STORED\r\n"
        assert c.request(b"get x\r\n", b"END\r\n") == b"END\r\n", "the auth set is not stored"


def test_real_clients_through_the_router(router: Proxy) -> None:
    pymemcache = pytest.importorskip("pymemcache.client.base")
    c = pymemcache.Client(("127.0.0.1", router.port), timeout=5, connect_timeout=5)
    data = {f"pm{i}": f"v{i}".encode() * (i + 1) for i in range(60)}
    assert c.set_many(data) == []  # noreply by default in pymemcache
    assert c.get_many(list(data)) == data
    assert c.set("n", b"5", noreply=False) is True
    assert c.incr("n", 3, noreply=False) == 8
    _value, cas = c.gets("n")
    assert c.cas("n", b"1", cas, noreply=False) is True
    assert c.delete_many(list(data)[:10], noreply=False) is True
    assert c.get_many(list(data)[:12]) == {k: data[k] for k in list(data)[10:12]}
    c.close()
    try:
        import pylibmc
    except ImportError:
        return
    mc = pylibmc.Client([f"127.0.0.1:{router.port}"], binary=False)
    mc.set_multi({"lib1": "a", "lib2": "b"})
    assert mc.get_multi(["lib1", "lib2", "nope"]) == {"lib1": "a", "lib2": "b"}
    assert mc.incr("n", 2) == 3


PHP_VERSION_AND_STATS = """
$m = new Memcached();
$m->addServer('127.0.0.1', (int)$argv[1]);
echo json_encode(['version' => $m->getVersion(), 'stats' => $m->getStats()]);
"""


@pytest.mark.skipif(shutil.which("memcstat") is None, reason="libmemcached-tools not installed")
@pytest.mark.skipif(shutil.which("php") is None, reason="php-cli not installed")
def test_libmemcached_reads_the_routers_version_and_stats(router: Proxy) -> None:
    # libmemcached asks `version` before `stats` and parses major.minor.micro from it; the
    # stats' version goes into a 24-byte field.
    out = subprocess.run(
        ["memcstat", f"--servers=127.0.0.1:{router.port}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert "Failed" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert "\tversion: 1.6.18-memfleet-" in out.stdout, out.stdout
    php = subprocess.run(
        ["php", "-r", PHP_VERSION_AND_STATS, str(router.port)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    got = json.loads(php.stdout)
    server = f"127.0.0.1:{router.port}"
    assert got["version"] == {server: "1.6.18"}
    stats = got["stats"][server]
    assert router.proc is not None and stats["pid"] == router.proc.pid
    assert stats["version"].startswith("1.6.18-memfleet-")
    assert stats["curr_connections"] >= 1


def test_near_cache_tracking_is_refused_so_clients_fall_back(router: Proxy) -> None:
    with Conn(router.port) as c:
        assert c.request(b"track listen\r\n") == b"ERROR\r\n"
        assert c.request(b"track 1\r\n") == b"ERROR\r\n"
        assert c.request(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
