"""Operating the server: flags, sockets, limits, signals and hostile input."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TARGET
from harness import (
    Conn,
    Server,
    free_port,
    memfleet_bin,
    serve_command,
    udp_frame,
    wait_for_port,
)

memfleet_only = pytest.mark.skipif(TARGET != "memfleet", reason="memfleet-specific behaviour")


def test_unix_socket_with_mode(make_server) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(tempfile.mkdtemp(), "mc.sock")
    make_server("-s", path, "-a", "766")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o766
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b"set u 0 0 2\r\nhi\r\nget u\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(4096)
    assert buf == b"STORED\r\nVALUE u 0 2\r\nhi\r\nEND\r\n"


def wait_for_connections(control: Conn, expected: int) -> None:
    """Polls `stats` until the server counts `expected` client connections."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = control.request(b"stats\r\n", b"END\r\n")
        if b"STAT curr_connections %d\r\n" % expected in stats:
            return
        time.sleep(0.05)
    raise AssertionError(f"server never counted {expected} connections")


@memfleet_only
def test_max_connections_rejects_one_over(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server("-c", "5")
    control = Conn(srv.port)
    # the harness's readiness probe may still be counted until its close is processed
    wait_for_connections(control, 1)
    conns = [Conn(srv.port) for _ in range(4)]
    for c in conns:
        assert c.request(b"version\r\n").startswith(b"VERSION")
    with Conn(srv.port) as extra:
        assert extra.read_all(2.0) == b"ERROR Too many open connections\r\n"
    conns.pop().close()
    wait_for_connections(control, 4)
    with Conn(srv.port) as again:
        assert again.request(b"version\r\n").startswith(b"VERSION")
    for c in conns + [control]:
        c.close()


@memfleet_only
def test_several_listen_addresses() -> None:
    p1, p2 = free_port(), free_port()
    argv = serve_command("-t", "1", "-l", f"127.0.0.1:{p1},127.0.0.1:{p2}")
    with Server(argv, port=p1):
        wait_for_port(p2)
        with Conn(p1) as a, Conn(p2) as b:
            assert a.request(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
            assert b.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"


@memfleet_only
def test_daemon_and_pidfile() -> None:
    port = free_port()
    pidfile = os.path.join(tempfile.mkdtemp(), "mf.pid")
    argv = serve_command("-d", "-P", pidfile, "-l", "127.0.0.1", "-p", str(port))
    subprocess.run(argv, check=True, timeout=10)
    wait_for_port(port)
    deadline = time.monotonic() + 5
    while not os.path.exists(pidfile) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(pidfile) as f:
        pid = int(f.read())
    with Conn(port) as c:
        assert c.request(b"version\r\n").startswith(b"VERSION")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("daemon did not stop on SIGTERM")


@memfleet_only
def test_sigterm_and_sigint_stop_cleanly(make_server) -> None:  # type: ignore[no-untyped-def]
    for sig in (signal.SIGTERM, signal.SIGINT):
        srv = make_server()
        with Conn(srv.port) as c:
            c.request(b"set k 0 0 1\r\nx\r\n")
            assert srv.proc is not None
            srv.proc.send_signal(sig)
            assert srv.proc.wait(timeout=10) == 0


@memfleet_only
def test_help_and_unknown_o_option() -> None:
    out = subprocess.run(
        [memfleet_bin(), "serve", "-h"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0
    for flag in ("-p", "-U", "-s", "-a", "-l", "-m", "-c", "-t", "-I", "-d", "-P", "-o"):
        assert f"{flag}," in out.stdout or f"{flag} " in out.stdout, flag
    port = free_port()
    argv = serve_command("-l", "127.0.0.1", "-p", str(port), "-o", "frobnicate=1")
    with Server(argv, port=port) as srv:
        with Conn(port) as c:
            assert c.request(b"version\r\n").startswith(b"VERSION")
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGTERM)
        _, err = srv.proc.communicate(timeout=10)
    assert b"frobnicate" in err


def test_eviction_under_small_memory_limit(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server("-m", "8")
    value = b"v" * 1000
    with Conn(srv.port) as c:
        for batch in range(40):
            c.send(
                b"".join(
                    b"set key%d 0 0 %d\r\n%s\r\n" % (batch * 1000 + i, len(value), value)
                    for i in range(1000)
                )
            )
            replies = c.read_until(*[b"STORED\r\n" * 1000])
            assert replies == b"STORED\r\n" * 1000
        stats = c.request(b"stats\r\n", b"END\r\n").decode()
        got = dict(ln.split(" ", 2)[1:] for ln in stats.splitlines() if ln.startswith("STAT "))
        assert int(got["evictions"]) > 0
        assert int(got["curr_items"]) < 40000
        assert int(got["bytes"]) <= 8 * 1024 * 1024
        # the newest items survive
        assert c.request(b"get key39999\r\n", b"END\r\n").startswith(b"VALUE key39999 ")


def test_line_without_newline_is_cut(server: Server) -> None:
    with Conn(server.port) as c:
        c.send(b"x" * 8192)
        assert c.read_all(2.0) == b""  # closed, like memcached


def test_binary_garbage_never_kills_the_server(server: Server) -> None:
    rng = random.Random(7)
    for _ in range(30):
        with Conn(server.port) as c:
            junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))
            try:
                c.send(junk)
                c.read_all(0.05)
            except OSError:
                pass
    with Conn(server.port) as c:
        assert c.request(b"set ok 0 0 1\r\nx\r\n") == b"STORED\r\n"


def test_half_a_request_then_close(server: Server) -> None:
    for partial in (b"set k 0 0 100\r\nabc", b"get k", b"ms k 10\r\n12", b"mg k v"):
        with Conn(server.port) as c:
            c.send(partial)
    with Conn(server.port) as c:
        assert c.request(b"get k\r\n", b"END\r\n") == b"END\r\n"


def test_many_idle_connections(server: Server) -> None:
    conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(500)]
    try:
        with Conn(server.port) as c:
            assert c.request(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
        for s in conns[::50]:
            s.sendall(b"get k\r\n")
            assert s.recv(100) == b"VALUE k 0 1\r\nx\r\nEND\r\n"
    finally:
        for s in conns:
            s.close()


def test_pipelined_requests_in_one_packet(server: Server) -> None:
    with Conn(server.port) as c:
        reqs = b"".join(b"set p%d 0 0 1 \r\n%d\r\n" % (i, i % 10) for i in range(100))
        reqs += b"".join(b"get p%d\r\n" % i for i in range(100))
        c.send(reqs)
        out = c.read_until(b"VALUE p99 0 1\r\n9\r\nEND\r\n")
        assert out.count(b"STORED\r\n") == 100
        assert out.count(b"END\r\n") == 100


@memfleet_only
def test_udp_get(make_server) -> None:  # type: ignore[no-untyped-def]
    udp_port = free_port(socket.SOCK_DGRAM)
    srv = make_server("-U", str(udp_port))
    with Conn(srv.port) as c:
        c.request(b"set u 0 0 5\r\nhello\r\n")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(udp_frame(42, b"get u\r\n"), ("127.0.0.1", udp_port))
        data, _ = s.recvfrom(65536)
    req_id, seq, total, _ = struct.unpack(">HHHH", data[:8])
    assert (req_id, seq, total) == (42, 0, 1)
    assert data[8:] == b"VALUE u 0 5\r\nhello\r\nEND\r\n"


def test_io_uring_loop_serves_udp_beside_tcp() -> None:
    """-U no longer sends the server to the epoll loop: io_uring workers answer datagrams
    (each worker's UDP socket is polled on its ring) while serving TCP, a reply of several
    frames included, to 16 client sockets (SO_REUSEPORT spreads them over the workers'
    sockets by their ports)."""
    port, udp_port = free_port(), free_port(socket.SOCK_DGRAM)
    # Not serve_command: the epoll pass's MEMFLEET_SERVE_ARGS would pick epoll.
    argv = [memfleet_bin(), "serve", "-l", "127.0.0.1", "-p", str(port), "-U", str(udp_port),
            "-t", "2", "-o", "io_engine=uring"]  # fmt: skip
    value = os.urandom(5000)  # four 1,400-byte frames
    with Server(argv, port=port), Conn(port) as c:
        assert c.stats("settings")["io_engine"] == "uring"
        assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
        clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
        try:
            for i, s in enumerate(clients):
                s.settimeout(5)
                assert c.request(b"set u%d 0 0 %d\r\n%d\r\n" % (i, len(str(i)), i)) == b"STORED\r\n"
                s.sendto(udp_frame(i, b"get u%d\r\n" % i), ("127.0.0.1", udp_port))
            for i, s in enumerate(clients):
                data, _ = s.recvfrom(65536)
                assert data == udp_frame(i, b"VALUE u%d 0 %d\r\n%d\r\nEND\r\n" % (
                    i, len(str(i)), i))  # fmt: skip
            s = clients[0]
            s.sendto(udp_frame(99, b"get big\r\n"), ("127.0.0.1", udp_port))
            frames = {}
            while len(frames) < 4:
                data, _ = s.recvfrom(65536)
                req_id, seq, total, _ = struct.unpack(">HHHH", data[:8])
                assert (req_id, total) == (99, 4)
                frames[seq] = data[8:]
            reply = b"".join(frames[i] for i in range(4))
            assert reply == b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)
        finally:
            for s in clients:
                s.close()
        assert c.request(b"get u3\r\n", b"END\r\n") == b"VALUE u3 0 1\r\n3\r\nEND\r\n"
        assert int(c.stats()["udp_requests"]) == 17


@pytest.mark.parametrize("engine", ["epoll", "uring"])
def test_queued_datagrams_do_not_hold_up_a_tcp_client(engine: str) -> None:
    """A worker answers at most -R datagrams before its other clients (memcached answers one
    per event). 100 `incr`s wait on the UDP socket ahead of a TCP `get` of the same counter
    on the same worker (the server is stopped while they arrive): the get must not see all
    100 done first. Then every datagram is answered."""
    port, udp_port = free_port(), free_port(socket.SOCK_DGRAM)
    argv = [memfleet_bin(), "serve", "-l", "127.0.0.1", "-p", str(port), "-U", str(udp_port),
            "-t", "1", "-R", "20", "-o", f"io_engine={engine}"]  # fmt: skip
    with Server(argv, port=port) as server, Conn(port) as c:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.settimeout(5)
            assert c.request(b"set n 0 0 1\r\n0\r\n") == b"STORED\r\n"
            with server.paused():
                for i in range(100):
                    u.sendto(udp_frame(i, b"incr n 1\r\n"), ("127.0.0.1", udp_port))
                time.sleep(0.05)  # the datagrams are ready before the TCP request is
                c.send(b"get n\r\n")
            reply = c.read_until(b"END\r\n")
            done_first = int(reply.split(b"\r\n")[1])
            assert done_first < 100, "every queued datagram was answered before the TCP client"
            for _ in range(100):
                u.recvfrom(65536)
        assert c.request(b"get n\r\n", b"END\r\n") == b"VALUE n 0 3\r\n100\r\nEND\r\n"


def test_pipeline_of_large_gets_is_answered_in_full(server: Server) -> None:
    value = b"L" * (512 * 1024)
    with Conn(server.port) as c:
        assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
        count = 200  # 100 MB of replies to one 2 KB burst of requests
        c.send(b"get big\r\n" * count + b"mn\r\n")
        received = 0
        while True:
            chunk = c.read_until(b"END\r\n", b"MN\r\n")
            if chunk.endswith(b"MN\r\n"):
                break
            assert chunk.endswith(b"\r\nEND\r\n") and len(chunk) > len(value)
            received += 1
        assert received == count


def large_value(letter: int) -> bytes:
    """A value whose length follows from its byte, so a torn or mixed value shows."""
    return bytes([letter]) * (70_000 + (letter - ord("a")) * 2_000)


def check_multi_get(reply: bytes) -> int:
    """Checks every VALUE of a get reply against `large_value`; returns how many there were."""
    pos, found = 0, 0
    while not reply.startswith(b"END\r\n", pos):
        eol = reply.index(b"\r\n", pos)
        word, _key, _flags, size = reply[pos:eol].split(b" ")
        assert word == b"VALUE"
        data = reply[eol + 2 : eol + 2 + int(size)]
        assert data == large_value(data[0]), f"torn value of {len(data)} bytes"
        pos = eol + 2 + int(size) + 2
        found += 1
    assert pos + 5 == len(reply)
    return found


def test_large_values_replaced_while_being_sent_stay_whole(server: Server) -> None:
    """Large values are written to the socket from the item's own memory (memfleet without
    holding its shard): sets and deletes of the same keys meanwhile must not tear a reply,
    also when a slow reader makes the server send a reply in several goes."""
    keys = [b"big%d" % i for i in range(4)]
    with Conn(server.port) as c:
        for k in keys:
            value = large_value(ord("a"))
            assert c.request(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(value), value)) == b"STORED\r\n"
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def write(seed: int) -> None:
        rng = random.Random(seed)
        with Conn(server.port) as c:
            for i in range(200):
                k = rng.choice(keys)
                if i % 10 == 9:
                    assert c.request(b"delete %s\r\n" % k) in (b"DELETED\r\n", b"NOT_FOUND\r\n")
                    continue
                value = large_value(rng.randrange(ord("a"), ord("z") + 1))
                stored = c.request(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(value), value))
                assert stored == b"STORED\r\n"

    def read(slow: bool) -> None:
        with Conn(server.port) as c:
            if slow:
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            while not done.is_set():
                c.send(b"get " + b" ".join(keys) + b"\r\n")
                if slow:
                    time.sleep(0.01)
                seen.append(check_multi_get(c.read_until(b"\r\nEND\r\n", b"END\r\n")))

    def guarded(f: Callable[..., None], *args: object) -> None:
        try:
            f(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            done.set()

    readers = [threading.Thread(target=guarded, args=(read, slow)) for slow in (False, False, True)]
    writers = [threading.Thread(target=guarded, args=(write, seed)) for seed in (1, 2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors[0]
    assert len(seen) > 10 and sum(seen) > 0


def test_request_and_close_in_one_send_is_answered_and_closed(server: Server) -> None:
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(b"set fin 0 0 1\r\nx\r\nget fin\r\n")
            s.shutdown(socket.SHUT_WR)
            buf = b""
            s.settimeout(5)
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        assert buf == b"STORED\r\nVALUE fin 0 1\r\nx\r\nEND\r\n"


ALLOWED_CPUS = sorted(os.sched_getaffinity(0))


@memfleet_only
@pytest.mark.skipif(len(ALLOWED_CPUS) < 2, reason="needs two CPUs")
def test_connections_move_to_their_client_threads_worker(make_server) -> None:  # type: ignore[no-untyped-def]
    """All connections are opened from one CPU, then half are used from a thread on another:
    workers hand those over while requests keep flowing, and no reply is lost or mixed up."""
    srv = make_server("-t", "2")
    first, second = ALLOWED_CPUS[:2]
    os.sched_setaffinity(0, {first})
    try:
        conns = [Conn(srv.port) for _ in range(16)]
    finally:
        os.sched_setaffinity(0, set(ALLOWED_CPUS))
    errors: list[str] = []

    def drive(cpu: int, mine: list[Conn], tag: str) -> None:
        os.sched_setaffinity(0, {cpu})
        deadline = time.monotonic() + 3.5
        n = 0
        while time.monotonic() < deadline and not errors:
            for i, c in enumerate(mine):
                key = b"%s-%d" % (tag.encode(), i)
                value = b"%d" % n
                reply = c.request(
                    b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (key, len(value), value, key), b"END\r\n"
                )
                want = b"STORED\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(value), value)
                if reply != want:
                    errors.append(f"{key!r}: {reply!r}")
                n += 1

    threads = [
        threading.Thread(target=drive, args=(cpu, conns[k::2], f"t{k}"))
        for k, cpu in enumerate((first, second))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    stats = Conn(srv.port).request(b"stats\r\n", b"END\r\n")
    moved = int(stats.split(b"STAT conns_moved ")[1].split(b"\r\n")[0])
    assert moved > 0
    # The server's close reaches every client, moved or not (a hand-over must not leave a
    # copy of the socket open anywhere).
    for c in conns:
        c.send(b"quit\r\n")
    for i, c in enumerate(conns):
        assert closed_by_server(c), f"connection {i} was never closed"


def closed_by_server(c: Conn) -> bool:
    """Whether the server closes `c` (end of stream) within 5 s."""
    c.sock.settimeout(5)
    try:
        return c.sock.recv(1) == b""
    except (socket.timeout, TimeoutError):
        return False


@memfleet_only
def test_large_values_are_received_into_their_own_buffer(make_server) -> None:  # type: ignore[no-untyped-def]
    """At -m 1024 segments are 1 MiB, so a 100 KB value would be copied into one; received in
    place it becomes an item with its own buffer instead (stats slabs: large_items)."""
    srv = make_server("-m", "1024")
    with Conn(srv.port) as c:
        value = b"v" * 100_000
        assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
        assert c.request(b"set small 0 0 10000\r\n%s\r\n" % (b"s" * 10_000)) == b"STORED\r\n"
        slabs = c.request(b"stats slabs\r\n", b"END\r\n")
        assert b"STAT 1:large_items 1\r\n" in slabs
        got = c.request(b"get big small\r\n", b"END\r\n")
        assert got == b"VALUE big 0 100000\r\n%s\r\nVALUE small 0 10000\r\n%s\r\nEND\r\n" % (
            value,
            b"s" * 10_000,
        )


@memfleet_only
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to refuse io_uring")
def test_without_io_uring_the_server_runs_epoll() -> None:
    """A kernel that refuses io_uring_setup (old, io_uring_disabled, seccomp; here strace
    injects EPERM) gets the epoll loop even when io_uring is asked for, and it serves."""
    port = free_port()
    refuse = [
        "strace",
        "-f",
        "-qq",
        "-o",
        os.devnull,
        "-e",
        "trace=io_uring_setup",
        "-e",
        "inject=io_uring_setup:error=EPERM",
    ]
    argv = refuse + serve_command("-l", "127.0.0.1", "-p", str(port), "-o", "io_engine=uring")
    with Server(argv, port=port) as traced:
        assert traced.proc is not None
        pid = traced.proc.pid
        # Stopping strace detaches it from the server, which would run on: stop it first.
        server = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        try:
            with Conn(port) as c:
                assert c.stats("settings")["io_engine"] == "epoll"
                assert c.request(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
                assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
        finally:
            for child in server:
                os.kill(int(child), signal.SIGTERM)


def test_io_uring_as_on_kernels_before_6_17_serves_pipelined_requests() -> None:
    """Linux 6.0-6.16 fail a multishot receive that carries a byte cap (EINVAL), and kernels
    before 6.12 refuse incremental buffer rings: the probe finds out and the loop does without
    both. MEMFLEET_URING_AS_OLDER_KERNEL makes this kernel's server run that way (scripts/test
    runs the core suites so too): it says so at start and serves values larger than a ring
    buffer and requests pipelined past a receive."""
    port = free_port()
    # Not serve_command: the suite's MEMFLEET_SERVE_ARGS may pick epoll, and this is about io_uring.
    argv = [
        "env",
        "MEMFLEET_URING_AS_OLDER_KERNEL=1",
        memfleet_bin(),
        "serve",
        "-l",
        "127.0.0.1",
        "-p",
        str(port),
        "-o",
        "io_engine=uring",
    ]
    with Server(argv, port=port) as server:
        with Conn(port) as c:
            assert c.stats("settings")["io_engine"] == "uring"
            value = os.urandom(200_000)
            assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
            c.send(b"get big\r\n" * 20 + b"mn\r\n")
            want = (b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)) * 20
            assert c.read_until(b"MN\r\n") == want + b"MN\r\n"
        proc = server.proc
        assert proc is not None and proc.stderr is not None
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        assert b"without a byte cap per receive" in proc.stderr.read()


def test_command_line_as_a_memcached_user_types_it() -> None:
    """`-i` prints the license and exits 0 (as memcached); `-h` lists the -o options; an
    extstore option memfleet does not have is refused at start by name rather than ignored;
    `--memory` is taken as `--memory-limit` instead of suggesting `--memory-file`."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [memfleet_bin(), "serve", *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )

    r = run("-i")
    assert r.returncode == 0 and "Apache License" in r.stdout, r
    help_text = run("-h").stdout
    for option in ("idle_timeout", "io_engine", "metrics", "hotkeys", "ssl_chain_cert", "ext_"):
        assert option in help_text, option
    r = run("-p", str(free_port()), "-o", "ext_path=/tmp/memfleet-flash:64m,ext_max_sleep=1000")
    assert r.returncode != 0 and "-o ext_max_sleep" in r.stderr, r
    for refused in ("temporary_ttl=60", "proxy_config=/etc/proxy.lua"):
        r = run("-p", str(free_port()), "-o", refused)
        assert r.returncode != 0 and f"-o {refused.split('=')[0]}" in r.stderr, r
    port = free_port()
    server = Server(serve_command("--memory", "32", "-l", "127.0.0.1", "-p", str(port)), port=port)
    with server, Conn(port) as c:
        assert c.stats("settings")["maxbytes"] == str(32 << 20)
