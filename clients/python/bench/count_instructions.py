#!/usr/bin/env python3
"""Instructions per get / set of the client, managed dictionaries vs no compression, counted by
valgrind's callgrind: unlike time, the count does not move with the machine's load.

Starts one server (``--server-cmd``, default ``memcached``), trains a dictionary per record kind
there (natively), then runs the client under ``valgrind --tool=callgrind`` twice per case, with
``--calls`` and ``3 * --calls`` calls after the same warm-up: the difference divided by
``2 * --calls`` is the cost of one call, start-up and warm-up left out. Only the client process is
counted. Prints Markdown.

    PYTHONPATH=clients/python/src python3 clients/python/bench/count_instructions.py [--calls 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import memfleet

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_clients import start_servers, stop_servers  # noqa: E402
from samples import feed_entry, small_profile  # noqa: E402

GENERATORS: dict[str, Callable[[int], Any]] = {"small_profile": small_profile, "feed_entry": feed_entry}
KEYS = 1000
CLIENTS = ("managed", "plain")


def key(client: str, kind: str, i: int) -> str:
    return f"{client[:2]}:{kind}:{i}"


def prepare(server: str) -> dict[str, str]:
    """Train each kind's dictionary and store every client's values; the dictionary id per kind."""
    managed = memfleet.Client([server])
    plain = memfleet.Client([server], compress_threshold=None)
    ids: dict[str, str] = {}
    for kind, gen in GENERATORS.items():
        family = key("managed", kind, 0).rsplit(":", 1)[0] + ":*"
        deadline = time.monotonic() + 60
        i = 0
        while not managed.dictionaries.stats()["families"].get(family) and time.monotonic() < deadline:
            managed.set(key("managed", kind, i % KEYS), gen(10_000 + i))
            i += 1
        ids[kind] = managed.dictionaries.stats()["families"][family]
        values = [gen(i) for i in range(KEYS)]
        managed.set_many({key("managed", kind, i): v for i, v in enumerate(values)})
        plain.set_many({key("plain", kind, i): v for i, v in enumerate(values)})
    managed.close()
    plain.close()
    return ids


def run_calls(server: str, client: str, op: str, kind: str, dict_id: str, warm: int, calls: int) -> None:
    """The process valgrind counts: ``warm`` calls, then ``calls`` more."""
    from memfleet._dicts import dict_key

    if client == "managed":  # no refresh of the dictionary's item while counting
        c = memfleet.Client([server], managed_dicts=memfleet.ManagedDicts(refresh_interval=1e9))
    else:
        c = memfleet.Client([server], compress_threshold=None)
    gen = GENERATORS[kind]
    keys = [key(client, kind, i) for i in range(KEYS)]
    values = [gen(i) for i in range(KEYS)]
    if client == "managed" and op == "set":
        # take up the trained dictionary as its trainer would, so writes compress with it at once
        ds = c.dictionaries
        d_id = int(dict_id, 16)
        payload = memfleet.Client([server], managed_dicts=False).get(dict_key(d_id).decode())
        fam = ds._family_of(keys[0].encode())
        assert fam is not None and ds.fetched(d_id, payload)
        d = ds._known[d_id]
        d.family, fam.sampling = fam, False
        ds.published(d, 0)
    n = 0
    for _ in range(warm + calls):
        i = n % KEYS
        if op == "get":
            assert c.get(keys[i]) == values[i]
        else:
            c.set(keys[i], values[i])
        n += 1
    if client == "managed" and op == "set":
        assert c.dictionaries.stats()["families"]
        assert c._encode(keys[0].encode(), values[0], 0)[1] & memfleet.serde.FLAG_ZSTD_MANAGED


def count(args: argparse.Namespace, server: str, client: str, op: str, kind: str, dict_id: str, calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        argv = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            os.path.abspath(__file__),
            "--run",
            json.dumps([server, client, op, kind, dict_id, args.warm, calls]),
        ]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            m = re.search(r"^summary: (\d+)", f.read(), re.M)
        assert m, "no summary in callgrind output"
        return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--server-cmd", default=os.environ.get("MEMFLEET_TEST_SERVER", "memcached"))
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--warm", type=int, default=1000)
    ap.add_argument("--only", help="comma-separated cases, e.g. 'set small_profile'")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        server, client, op, kind, dict_id, warm, calls = json.loads(args.run)
        run_calls(server, client, op, kind, dict_id, warm, calls)
        return 0
    servers = start_servers(args.server_cmd, 1)
    addresses = [s.address for s in servers]
    try:
        ids = prepare(addresses[0])
        print("| case | managed dictionaries | no compression | extra |")
        print("|---|---|---|---|")
        for kind in GENERATORS:
            for op in ("get", "set"):
                if args.only and f"{op} {kind}" not in args.only.split(","):
                    continue
                per: dict[str, float] = {}
                for client in CLIENTS:
                    small = count(args, addresses[0], client, op, kind, ids[kind], args.calls)
                    big = count(args, addresses[0], client, op, kind, ids[kind], 3 * args.calls)
                    per[client] = (big - small) / (2 * args.calls)
                print(
                    f"| {op} {kind} | {per['managed']:,.0f} | {per['plain']:,.0f} | "
                    f"{per['managed'] - per['plain']:+,.0f} |",
                    flush=True,
                )
    finally:
        stop_servers(servers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
