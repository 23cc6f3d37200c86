#!/usr/bin/env python3
"""memfleet vs pymemcache vs pylibmc: operation speed, and value size/speed vs pickle and json.

Starts its own servers (``--server-cmd``, default ``memcached``) on free loopback ports unless
``--servers host:port,...`` is given (three or more for the get_many case). Prints Markdown.

    python3 clients/python/bench/compare_clients.py [--quick] [--only managed] [--rounds 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import socket
import statistics
import sys
import time
import zlib
from typing import Any, Callable

import memfleet
from memfleet.serde import Serde

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from samples import feed_entry, html_page, int_list, small_profile, user_profile  # noqa: E402

# servers are started and stopped as the client's tests do it (tests/harness.py underneath)
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from client_support import Server, cache_server  # noqa: E402

try:
    import pylibmc
except ImportError:  # pragma: no cover
    pylibmc = None
try:
    from pymemcache.client.base import Client as PymemcacheClient
    from pymemcache.client.hash import HashClient
    from pymemcache.serde import pickle_serde
except ImportError:  # pragma: no cover
    PymemcacheClient = None


# -- servers ------------------------------------------------------------------------------------
def start_servers(cmd: str, n: int, cpu: int | None = None) -> list[Server]:
    """``n`` servers ``cmd`` of 256 MB each on free loopback ports, on CPU ``cpu`` if given."""
    servers: list[Server] = []
    try:
        for _ in range(n):
            s = cache_server("-m", "256", command=cmd)
            if cpu is not None:
                s.argv = ["taskset", "-c", str(cpu), *s.argv]
            servers.append(s.start())
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: list[Server]) -> None:
    for s in servers:
        s.kill()


# -- timing -------------------------------------------------------------------------------------
def per_op(fn: Callable[[], Any], n: int, repeats: int = 5) -> float:
    """Best-of-repeats wall microseconds per call."""
    return min(per_call(fn, n)[0] for _ in range(repeats))


def hostport(a: str) -> tuple[str, int]:
    h, p = a.rsplit(":", 1)
    return h, int(p)


def bench_ops(addresses: list[str], n: int) -> list[dict[str, Any]]:
    one = addresses[0]
    rows: list[dict[str, Any]] = []
    mf1 = memfleet.Client([one])
    mf3 = memfleet.Client(addresses)
    pm1 = PymemcacheClient(hostport(one), serde=pickle_serde, default_noreply=False) if PymemcacheClient else None
    pm3 = (
        HashClient([hostport(a) for a in addresses], serde=pickle_serde, default_noreply=False)
        if PymemcacheClient
        else None
    )
    pl1 = pylibmc.Client([one], binary=False, behaviors={"tcp_nodelay": True}) if pylibmc else None
    pl3 = (
        pylibmc.Client(addresses, binary=False, behaviors={"tcp_nodelay": True, "ketama_weighted": True})
        if pylibmc
        else None
    )

    small = "v" * 100
    big = random.Random(5).randbytes(100 * 1024)  # incompressible, so no client compresses it
    keys100 = [f"multi:{i}" for i in range(100)]
    many100 = {k: small for k in keys100}

    def load_small() -> str:
        return small

    # each client stores the keys itself: pymemcache's HashClient places keys with its own hashing
    mf3.set_many({k: small for k in keys100})
    if pm3:
        pm3.set_many({k: small for k in keys100})
    if pl3:
        pl3.set_multi({k: small for k in keys100})
    mf1.set("single", small)
    mf1.set("big", big)
    mf1.set("counter", 0)

    def add(name: str, clients: dict[str, Callable[[], Any]], iters: int) -> None:
        # interleave the clients' repeats so a noisy neighbour hurts them all alike; keep the best
        row: dict[str, Any] = {"case": name}
        for _ in range(7):
            for cname, fn in clients.items():
                row[cname] = min(row.get(cname, float("inf")), per_op(fn, iters, repeats=1))
        rows.append(row)

    add(
        "get (100 B value, 1 server)",
        {
            "memfleet": lambda: mf1.get("single"),
            **({"pymemcache": lambda: pm1.get("single")} if pm1 else {}),
            **({"pylibmc": lambda: pl1.get("single")} if pl1 else {}),
        },
        n,
    )
    add(
        "set (100 B value, 1 server)",
        {
            "memfleet": lambda: mf1.set("single", small),
            **({"pymemcache": lambda: pm1.set("single", small)} if pm1 else {}),
            **({"pylibmc": lambda: pl1.set("single", small)} if pl1 else {}),
        },
        n,
    )
    add(
        "get_many 100 keys, 3 servers",
        {
            "memfleet": lambda: mf3.get_many(keys100),
            **({"pymemcache": lambda: pm3.get_many(keys100)} if pm3 else {}),
            **({"pylibmc": lambda: pl3.get_multi(keys100)} if pl3 else {}),
        },
        max(50, n // 20),
    )
    # what no client can beat: the three requests written and the replies read over bare
    # sockets, nothing parsed or decoded (the keys placed as memfleet places them)
    floor_socks: list[tuple[socket.socket, bytes]] = []
    for i, batch in mf3._router.group([k.encode() for k in keys100], [k.encode() for k in keys100]).items():
        sock = socket.create_connection(hostport(i.address))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        floor_socks.append((sock, b"get " + b" ".join(batch) + b"\r\n"))

    def floor() -> None:
        for sock, request in floor_socks:
            sock.sendall(request)
        for sock, _ in floor_socks:
            reply = sock.recv(65536)
            while not reply.endswith(b"END\r\n"):
                reply += sock.recv(65536)

    add("get_many floor: bare sockets, nothing parsed", {"memfleet": floor}, max(50, n // 20))
    # and what every client returning a dict of str adds to that: 100 values made str and put in
    # a dict (here from bytes already cut out of the replies, by C code alone)
    raw_values = [small.encode() for _ in keys100]

    def floor_and_dict() -> None:
        floor()
        dict(zip(keys100, map(bytes.decode, raw_values)))

    add("get_many floor + the result dict", {"memfleet": floor_and_dict}, max(50, n // 20))
    add(
        "set_many 100 keys, 3 servers",
        {
            "memfleet": lambda: mf3.set_many(many100),
            **({"pymemcache": lambda: pm3.set_many(many100)} if pm3 else {}),
            **({"pylibmc": lambda: pl3.set_multi(many100)} if pl3 else {}),
        },
        max(50, n // 20),
    )
    add(
        "incr",
        {
            "memfleet": lambda: mf1.incr("counter"),
            **({"pymemcache": lambda: pm1.incr("counter", 1)} if pm1 else {}),
            **({"pylibmc": lambda: pl1.incr("counter")} if pl1 else {}),
        },
        n,
    )
    add(
        "delete (key absent)",
        {
            "memfleet": lambda: mf1.delete("absent"),
            **({"pymemcache": lambda: pm1.delete("absent")} if pm1 else {}),
            **({"pylibmc": lambda: pl1.delete("absent")} if pl1 else {}),
        },
        n,
    )
    # a hit of get_or_set is one fetch; the other clients have no get_or_set, so their get
    add(
        "get_or_set hit (others: get)",
        {
            "memfleet": lambda: mf1.get_or_set("single", load_small),
            **({"pymemcache": lambda: pm1.get("single")} if pm1 else {}),
            **({"pylibmc": lambda: pl1.get("single")} if pl1 else {}),
        },
        n,
    )
    add(
        "get 100 KB value",
        {
            "memfleet": lambda: mf1.get("big"),
            **({"pymemcache": lambda: pm1.get("big")} if pm1 else {}),
            **({"pylibmc": lambda: pl1.get("big")} if pl1 else {}),
        },
        max(50, n // 10),
    )
    add(
        "set 100 KB value",
        {
            "memfleet": lambda: mf1.set("big", big),
            **({"pymemcache": lambda: pm1.set("big", big)} if pm1 else {}),
            **({"pylibmc": lambda: pl1.set("big", big)} if pl1 else {}),
        },
        max(50, n // 10),
    )
    # sanity: every client really read the values
    assert mf3.get_many(keys100) == {k: small for k in keys100}
    if pm3:
        assert len(pm3.get_many(keys100)) == 100
    if pl3:
        assert len(pl3.get_multi(keys100)) == 100
    return rows


def per_call(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    """(wall, CPU) microseconds per call over one run of ``n`` calls. CPU time is this process's
    (user + system): what the client itself spends, less disturbed by other jobs than wall time."""
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn()
    t1, c1 = time.perf_counter(), time.process_time()
    return (t1 - t0) / n * 1e6, (c1 - c0) / n * 1e6


MANAGED = "default (managed dictionaries)"
PLAIN = "no compression"
DICTS_OFF = "dictionaries off"


def bench_managed(addresses: list[str], n: int, rounds: int) -> list[dict[str, Any]]:
    """Managed dictionaries (the default) against the same client with compression off, on small
    records and ~1 KB feed entries: µs per get and set, and stored bytes.

    Each round times ``n`` calls of every client back to back, in an order that rotates from round
    to round, so that load from other jobs hits them alike; each round gives one ratio per client,
    and the report shows the median ratio and the middle half of the rounds' ratios, for wall time
    and for CPU time."""
    one = addresses[:1]
    clients = {
        MANAGED: memfleet.Client(one),
        PLAIN: memfleet.Client(one, compress_threshold=None),
        DICTS_OFF: memfleet.Client(one, managed_dicts=False),
    }
    labels = list(clients)
    rows: list[dict[str, Any]] = []
    for gen in (small_profile, feed_entry):
        name = gen.__name__
        values = [gen(i) for i in range(1000)]
        for label, c in clients.items():
            for i in range(2000):
                c.set(f"{label[:2]}:{name}:{i}", gen(10_000 + i))
        managed = clients[MANAGED]
        deadline = time.monotonic() + 30
        while not managed.dictionaries.stats()["families"].get(f"de:{name}:*") and time.monotonic() < deadline:
            managed.set(f"de:{name}:0", values[0])
            time.sleep(0.01)
        for label, c in clients.items():
            c.set_many({f"{label[:2]}:{name}:{i}": v for i, v in enumerate(values)})
        keys = {label: [f"{label[:2]}:{name}:{i}" for i in range(1000)] for label in labels}
        for op in ("get", "set"):
            # per round: {label: (wall, cpu)}
            runs: list[dict[str, tuple[float, float]]] = []
            for r in range(rounds):
                run: dict[str, tuple[float, float]] = {}
                for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                    c = clients[label]
                    if op == "get":
                        it_get = iter(keys[label] * (n // 1000 + 1))
                        run[label] = per_call(lambda c=c, it=it_get: c.get(next(it)), n)
                    else:
                        it_set = iter(list(zip(keys[label], values)) * (n // 1000 + 1))
                        run[label] = per_call(lambda c=c, it=it_set: c.set(*next(it)), n)
                runs.append(run)
            row: dict[str, Any] = {"case": f"{op} {name}", "rounds": rounds, "calls": n}
            for label in labels:
                for i, kind in enumerate(("wall", "cpu")):
                    row[f"{label} {kind}"] = statistics.median(run[label][i] for run in runs)
                    if label != MANAGED:
                        ratios = sorted(run[label][i] / run[MANAGED][i] for run in runs)
                        row[f"{label} {kind} ratios"] = ratios
            rows.append(row)
        base = sum(len(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)) for v in values)
        stored = sum(len(managed._encode(f"de:{name}:{i}".encode(), v, 0)[0]) for i, v in enumerate(values))
        rows.append({"case": f"stored {name}", "x_pickle": stored / base})
    for c in clients.values():
        c.close()
    return rows


def spread(ratios: list[float]) -> str:
    """Median ratio and the middle half of the rounds' ratios (25th to 75th percentile)."""
    q = statistics.quantiles(ratios, n=4)
    return f"{q[1]:.2f}× ({q[0]:.2f}–{q[2]:.2f})"


def print_managed(rows: list[dict[str, Any]]) -> None:
    rounds = next(r["rounds"] for r in rows if "rounds" in r)
    calls = next(r["calls"] for r in rows if "calls" in r)
    print(
        "\n## Managed dictionaries vs no compression and vs dictionaries off "
        f"(µs per call, 1 server; {rounds} interleaved rounds of {calls} calls: median µs, "
        "and the ratio other / default per round as median (25th–75th percentile); > 1: the default is faster)\n"
    )
    for kind in ("wall", "cpu"):
        what = "wall time" if kind == "wall" else "client CPU time (user + system)"
        print(f"{what}:\n")
        print("| case | default (managed dicts) | no compression | ratio | dictionaries off | ratio |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            if "x_pickle" in r:
                continue
            print(
                f"| {r['case']} | {r[f'{MANAGED} {kind}']:.1f} | {r[f'{PLAIN} {kind}']:.1f} | "
                f"{spread(r[f'{PLAIN} {kind} ratios'])} | {r[f'{DICTS_OFF} {kind}']:.1f} | "
                f"{spread(r[f'{DICTS_OFF} {kind} ratios'])} |"
            )
        print()
    for r in rows:
        if "x_pickle" in r:
            print(f"- {r['case']} with the default: {r['x_pickle']:.2f}× pickle")


def bench_values(n: int) -> list[dict[str, Any]]:
    zdict = memfleet.train_dictionary([user_profile(i) for i in range(1000, 3000)], size=16384)
    codecs: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {}
    codecs["pickle"] = (lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads)
    codecs["json"] = (lambda v: json.dumps(v, separators=(",", ":")).encode(), json.loads)
    codecs["pickle+zlib (pylibmc/pymemcache compression)"] = (
        lambda v: zlib.compress(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)),
        lambda b: pickle.loads(zlib.decompress(b)),
    )
    values = {"user profile dict": user_profile(1), "list of 1,000 ints": int_list(), "HTML page": html_page()}
    serdes = {
        "memfleet msgpack+zstd (default)": Serde(),
        "memfleet + trained dictionary": Serde(zstd_dictionary=zdict),
        "memfleet json+zstd": Serde(serializer="json"),
    }
    rows = []
    order = list(serdes) + list(codecs)
    for vname, value in values.items():
        base = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        for cname in order:
            if cname in serdes:
                s = serdes[cname]
                data, flags = s.encode(value)
                assert s.decode(data, flags) == value
                enc_us = per_op(lambda s=s, v=value: s.encode(v), n)
                dec_us = per_op(lambda s=s, d=data, f=flags: s.decode(d, f), n)
            else:
                enc_fn, dec_fn = codecs[cname]
                data = enc_fn(value)
                enc_us = per_op(lambda e=enc_fn, v=value: e(v), n)
                dec_us = per_op(lambda d=dec_fn, b=data: d(b), n)
            rows.append(
                {
                    "value": vname,
                    "codec": cname,
                    "bytes": len(data),
                    "vs_pickle": len(data) / base,
                    "encode_us": enc_us,
                    "decode_us": dec_us,
                }
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", help="comma-separated host:port list (default: start 3 servers)")
    ap.add_argument("--server-cmd", default=os.environ.get("MEMFLEET_TEST_SERVER", "memcached"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--json", help="also write results as JSON to this file")
    ap.add_argument("--only", choices=("ops", "managed", "values"), help="run one part of the benchmark")
    ap.add_argument("--rounds", type=int, default=40, help="interleaved rounds of the managed dictionaries part (40)")
    ap.add_argument(
        "--pin",
        metavar="CLIENT,SERVER",
        help="run this process and the servers it starts on these CPUs (e.g. 0,0 or 0,1): a loopback "
        "round trip takes several times longer between two CPUs than on one, and without pinning "
        "the scheduler moves the processes between the two placements during a run",
    )
    args = ap.parse_args()
    server_cpu: int | None = None
    if args.pin:
        client_cpu, server_cpu = (int(x) for x in args.pin.split(","))
        os.sched_setaffinity(0, {client_cpu})
    n = 2000 if args.quick else 20000
    servers: list[Server] = []
    if args.servers:
        addresses = args.servers.split(",")
    else:
        servers = start_servers(args.server_cmd, 3, server_cpu)
        addresses = [s.address for s in servers]
    parts = (args.only,) if args.only else ("managed", "ops", "values")
    out: dict[str, Any] = {}
    try:
        if "managed" in parts:
            out["managed"] = bench_managed(addresses, n // 20, args.rounds)
        if "ops" in parts:
            out["operations"] = bench_ops(addresses, n)
        if "values" in parts:
            out["values"] = bench_values(max(200, n // 10))
    finally:
        stop_servers(servers)

    placement = f", client on CPU {client_cpu}, servers on CPU {server_cpu}" if args.pin else ", not pinned"
    print(f"python {sys.version.split()[0]}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}{placement}")
    if "operations" in out:
        ops = out["operations"]
        clients = [c for c in ("memfleet", "pymemcache", "pylibmc") if c in ops[0]]
        print("\n## Client operations (µs per call, lower is better)\n")
        header = "| case | " + " | ".join(clients) + " | memfleet / pylibmc time |"
        print(header)
        print("|" + "---|" * (len(clients) + 2))
        for r in ops:
            speed = f"{r['memfleet'] / r['pylibmc']:.2f}" if "pylibmc" in r else "-"
            cells = " | ".join(f"{r[c]:.1f}" if c in r else "-" for c in clients)
            print(f"| {r['case']} | {cells} | {speed} |")
    if "managed" in out:
        print_managed(out["managed"])
    if "values" in out:
        print("\n## Values: stored size and codec speed\n")
        print("| value | codec | bytes | × pickle | encode µs | decode µs |")
        print("|---|---|---|---|---|---|")
        for r in out["values"]:
            print(
                f"| {r['value']} | {r['codec']} | {r['bytes']} | {r['vs_pickle']:.2f} | "
                f"{r['encode_us']:.1f} | {r['decode_us']:.1f} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
