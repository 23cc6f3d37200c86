"""Warm-restart check at scale: fill `memfleet serve -e` with N items of mixed sizes, stop it
with SIGUSR1, start it again, and compare every item (value, flags, cas) before and after.

    python scripts/warm_restart_check.py --items 1000000 -m 1024

Prints the save and load times the server logged. Uses only loopback and /dev/shm.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def value_of(i: int) -> bytes:
    size = 1 + (i * 7919) % 1000
    if i % 997 == 0:
        size = 10_000 + (i * 31) % 90_000
    unit = b"%08d|" % i
    return (unit * (size // len(unit) + 1))[:size]


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb", buffering=1 << 20)

    def fill(self, n: int) -> None:
        batch: list[bytes] = []
        for i in range(n):
            v = value_of(i)
            ttl = 3600 if i % 10 == 0 else 0
            batch.append(b"set k%d %d %d %d noreply\r\n%s\r\n" % (i, i % 65536, ttl, len(v), v))
            if len(batch) == 2000:
                self.sock.sendall(b"".join(batch))
                batch.clear()
        batch.append(b"mn\r\n")
        self.sock.sendall(b"".join(batch))
        assert self.file.readline() == b"MN\r\n"

    def dump(self, n: int) -> dict[int, tuple[int, int, bytes]]:
        """key number -> (flags, cas, value) for every key found."""
        out: dict[int, tuple[int, int, bytes]] = {}
        for start in range(0, n, 100):
            keys = b" ".join(b"k%d" % i for i in range(start, min(n, start + 100)))
            self.sock.sendall(b"gets " + keys + b"\r\n")
            while True:
                line = self.file.readline()
                if line == b"END\r\n":
                    break
                _, key, flags, size, cas = line.split()
                value = self.file.read(int(size) + 2)[:-2]
                out[int(key[1:])] = (int(flags), int(cas), value)
        return out


def start(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("server did not start") from None
            time.sleep(0.02)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("-m", default="1024")
    ap.add_argument("--file", default=f"/dev/shm/memfleet-warm-check-{os.getpid()}")
    ap.add_argument("--port", type=int, default=22199)
    args = ap.parse_args()
    binary = os.environ.get("MEMFLEET_BIN", str(ROOT / "target/release/memfleet"))
    argv = [binary, "serve", "-l", "127.0.0.1", "-p", str(args.port), "-t", "2"]
    argv += ["-m", args.m, "-e", args.file]

    proc = start(argv, args.port)
    c = Client(args.port)
    t = time.monotonic()
    c.fill(args.items)
    print(f"filled {args.items} items in {time.monotonic() - t:.1f} s")
    before = c.dump(args.items)
    print(f"{len(before)} items present before the restart")
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=600)
    print(err.decode().strip())
    size = os.path.getsize(args.file)
    print(f"file: {size} bytes")

    proc = start(argv, args.port)
    after = Client(args.port).dump(args.items)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    log = err.decode()
    print(log.strip())
    same = sum(1 for k, v in before.items() if after.get(k) == v)
    print(f"after restart: {len(after)} items, {same} identical to before")
    m = re.search(r"restored \d+ items .* in ([\d.]+) s \(([\d.]+) s CPU", log)
    if m:
        gb = int(args.m) / 1024
        wall, cpu = float(m.group(1)), float(m.group(2))
        print(f"load at -m {args.m}: {wall / gb:.2f} s wall, {cpu / gb:.2f} s CPU per GB of -m")
    ok = same == len(before) == len(after) == args.items
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
