"""Start and stop real servers (memfleet, Debian's memcached) on free loopback ports for tests."""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from typing_extensions import Self

ROOT = Path(__file__).resolve().parent.parent


def stat_listener(host: str, port: int, command: bytes = b"stats\r\n") -> dict[str, str]:
    """A memcached-style stats listener's answer to `command` (`STAT name value` lines up to
    `END`, or `RESET`), as name -> value: the invalidator's and other tools' stats ports."""
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(command)
        buf = b""
        while not buf.endswith((b"END\r\n", b"RESET\r\n")):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    out = {}
    for line in buf.decode().splitlines():
        parts = line.split(" ", 2)
        if parts[0] == "STAT" and len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def memfleet_bin() -> str:
    """The release binary; built on demand so `pytest tests/` works on its own."""
    env = os.environ.get("MEMFLEET_BIN")
    if env:
        return env
    path = ROOT / "target" / "release" / "memfleet"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "--release", "--quiet", "-p", "memfleet"],
            cwd=ROOT,
            check=True,
        )
    return str(path)


def check_client_origin() -> None:
    """With $MEMFLEET_CLIENT_FROM set (scripts/test sets it to the site-packages its wheel went
    into), fail the session unless ``import memfleet`` and its compiled wire layer come from there:
    a checkout's clients/python/src on the path would otherwise be tested in the wheel's place."""
    want = os.environ.get("MEMFLEET_CLIENT_FROM")
    if not want:
        return
    import memfleet
    import memfleet._native

    want = os.path.realpath(want) + os.sep
    for mod in (memfleet, memfleet._native):
        got = os.path.realpath(str(mod.__file__))
        if not got.startswith(want):
            raise RuntimeError(f"{mod.__name__} is {got}, not the installed wheel's (under {want})")


def stop_process(pid: int, timeout: float = 5.0) -> None:
    """SIGSTOP `pid` and return once every one of its threads is stopped. kill() returns
    before that: the kernel wakes one thread to start the group stop, and until it runs, the
    others can still answer a request that arrives meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not all_threads_stopped(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid}: threads still running {timeout} s after SIGSTOP")
        time.sleep(0.001)


def all_threads_stopped(pid: int) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread exited
            continue
        # The state follows the command name, which is in parentheses and may hold any byte.
        # A thread that has exited (Z, X) will not answer either.
        if stat[stat.rindex(")") + 2] not in "TtZX":
            return False
    return True


def serve_command(*args: str) -> list[str]:
    """`memfleet serve ARGS`, then the flags in $MEMFLEET_SERVE_ARGS (e.g. `-o io_engine=uring`,
    so one suite runs under each event loop: scripts/test)."""
    extra = shlex.split(os.environ.get("MEMFLEET_SERVE_ARGS", ""))
    return [memfleet_bin(), "serve", *args, *extra]


# Test servers listen above the kernel's client-port range (32768-60999 by default), so a
# port picked here is never taken meanwhile by some outgoing connection's local end.
TEST_PORTS = range(61000, 65536)
_handed_out: set[int] = set()


def _bindable(port: int) -> bool:
    # Both protocols: servers started with -U take the same port for UDP.
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            # As the servers do: a port held only by TIME_WAIT connections is free to them.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port in TEST_PORTS free for TCP and UDP now, not handed out before in this process
    (until all have been). `kind` is accepted for callers that name the protocol."""
    del kind
    if len(_handed_out) >= len(TEST_PORTS) // 2:
        _handed_out.clear()
    start = random.randrange(len(TEST_PORTS))
    for i in range(len(TEST_PORTS)):
        port = TEST_PORTS[(start + i) % len(TEST_PORTS)]
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in {TEST_PORTS.start}-{TEST_PORTS.stop - 1}")


def listening_socket(host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on a free test port, for stand-in servers written in Python."""
    for _ in range(20):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, free_port()))
        except OSError:
            sock.close()
            continue
        sock.listen(128)
        return sock
    raise RuntimeError("no free test port to listen on")


def udp_frame(req_id: int, body: bytes) -> bytes:
    """A one-datagram request (or reply) in memcached's UDP framing: request id, sequence
    number 0, 1 datagram in all, reserved."""
    return struct.pack(">HHHH", req_id, 0, 1, 0) + body


def eventually(check: Callable[[], bool], what: str, limit: float = 5.0) -> None:
    """Polls `check` (background work: async sends, fills, probes) up to `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


class ServerExited(RuntimeError):
    """The process a wait was for has exited: it will never listen."""


def check_running(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is not None:
        raise ServerExited(f"{proc.args} exited with {proc.returncode}")


def wait_for_port(
    port: int,
    timeout: float = 10.0,
    host: str = "127.0.0.1",
    proc: subprocess.Popen[bytes] | None = None,
) -> None:
    """Until something listens on host:port; ServerExited at once if `proc` (the server) exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_running(proc)
        try:
            with socket.create_connection((host, port), timeout=0.2) as s:
                # On loopback, a connect to a port nobody listens on yet can pick that very
                # port as its source and connect to itself: that is not the server.
                if s.getsockname() != s.getpeername():
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {host}:{port}")


def wait_for_unix(
    path: str, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_running(proc)
        if os.path.exists(path):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(path)
                    return
            except OSError:
                pass
        time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {path}")


def terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout`; reaps it either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Server:
    """A server process on a free loopback port; stop() sends SIGTERM and waits."""

    def __init__(
        self,
        argv: Sequence[str],
        port: int | None = None,
        unix_socket: str | None = None,
    ) -> None:
        self.argv = list(argv)
        self.port = port
        self.unix_socket = unix_socket
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            # Already running (e.g. `with started_server:`): a second process would fail to
            # bind while this one's handle was lost, leaving it running after the test.
            return self
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if self.unix_socket:
                wait_for_unix(self.unix_socket, proc=self.proc)
            elif self.port:
                wait_for_port(self.port, proc=self.proc)
        except (TimeoutError, ServerExited):
            self.stop()
            raise
        return self

    @contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP for the block (the process hangs with its sockets open), SIGCONT after."""
        proc = self.proc
        assert proc is not None
        stop_process(proc.pid)
        try:
            yield
        finally:
            proc.send_signal(signal.SIGCONT)

    def rss_mb(self, field: str = "VmRSS") -> float:
        """The process's resident set in MiB: now (VmRSS), or its peak so far (VmHWM)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            terminate(self.proc)
        code = self.proc.returncode
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None
        return code

    def kill(self) -> int:
        """SIGKILL, as a crash: no shutdown work (memcached's takes up to a second), then reaped."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        return self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def memfleet(*args: str, port: int | None = None) -> Server:
    """`memfleet serve` on 127.0.0.1 with memcached flags `args` (default -t 2)."""
    if "-s" in args:
        path = args[args.index("-s") + 1]
        return Server(serve_command(*args), unix_socket=path)
    port = port or free_port()
    extra = list(args)
    if "-t" not in extra:
        extra += ["-t", "2"]
    return Server(serve_command("-l", "127.0.0.1", "-p", str(port), *extra), port=port)


def save_warm_restart(memfile: str, items: int, *args: str) -> None:
    """Leaves `memfile` holding `items` small items (k0, k1, ...) saved by `memfleet serve -e`
    with flags `args`: enough of them keep the next start loading for a while after its port
    opens, when a signal sent at once arrives before the server's signal thread runs."""
    with memfleet(*args, "-e", memfile) as s:
        assert s.proc is not None
        with Conn(s.port or 0) as c:
            c.send(b"".join(b"set k%d 0 0 10 noreply\r\n0123456789\r\n" % i for i in range(items)))
            assert c.request(b"mn\r\n") == b"MN\r\n"
        s.proc.send_signal(signal.SIGUSR1)
        assert s.proc.wait(timeout=30) == 0


def memcached_command(*args: str, exe: str | None = None) -> list[str]:
    """Debian's memcached (or `exe`) with `args`, told to run as root when we are root (it
    refuses to otherwise)."""
    exe = exe or shutil.which("memcached") or "/usr/bin/memcached"
    return [exe, *(["-u", "root"] if os.geteuid() == 0 else []), *args]


def memcached(*args: str, port: int | None = None) -> Server:
    """Debian's memcached 1.6 with the same flags."""
    if "-s" in args:
        path = args[args.index("-s") + 1]
        return Server(memcached_command(*args), unix_socket=path)
    port = port or free_port()
    argv = memcached_command("-l", "127.0.0.1", "-p", str(port), "-U", "0", *args)
    return Server(argv, port=port)


class Conn:
    """A raw text-protocol connection: send bytes, read until a terminator."""

    def __init__(self, port: int, timeout: float = 5.0, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, *terminators: bytes) -> bytes:
        while True:
            for t in terminators:
                i = self.buf.find(t)
                if i >= 0:
                    end = i + len(t)
                    out, self.buf = self.buf[:end], self.buf[end:]
                    return out
            chunk = self.sock.recv(65536)
            if not chunk:
                out, self.buf = self.buf, b""
                return out
            self.buf += chunk

    def read_line(self) -> bytes:
        return self.read_until(b"\r\n")

    def request(self, data: bytes, *terminators: bytes) -> bytes:
        self.send(data)
        return self.read_until(*(terminators or (b"\r\n",)))

    def stats(self, sub: str = "") -> dict[str, str]:
        """`stats [sub]` as name -> value."""
        raw = self.request(f"stats {sub}".strip().encode() + b"\r\n", b"END\r\n")
        return {
            parts[1]: parts[2] if len(parts) > 2 else ""
            for parts in (line.split(" ", 2) for line in raw.decode().splitlines())
            if parts[0] == "STAT"
        }

    def read_all(self, timeout: float = 0.3) -> bytes:
        """Everything that arrives until the peer is quiet for `timeout` or closes."""
        self.sock.settimeout(timeout)
        out = self.buf
        self.buf = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, TimeoutError):
            pass
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def keys_held(port: int, keys: Sequence[str], host: str = "127.0.0.1") -> list[str]:
    """Which of `keys` the server on host:port holds, asked directly (multi-gets of 100)."""
    held: list[str] = []
    with Conn(port, host=host) as c:
        for i in range(0, len(keys), 100):
            part = keys[i : i + 100]
            reply = c.request(("get " + " ".join(part) + "\r\n").encode(), b"END\r\n")
            held += [
                line.split()[1].decode()
                for line in reply.split(b"\r\n")
                if line.startswith(b"VALUE ")
            ]
    return held
