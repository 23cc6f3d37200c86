"""A mixed Redis workload whose every read is checked, for the router's cluster and sentinel
pools: rounds of SET/GET/MSET/MGET/DEL/UNLINK/EXISTS/TOUCH/INCR/HSET/HGET/LPUSH/LRANGE/EXPIRE
plus hash-tagged RENAME/SUNIONSTORE/SMOVE, from redis-py threads and PHP processes, with every
error and wrong read tallied (time, what) and what each finished round left behind verifiable
afterwards through any client.

Clients are plain `redis.Redis` (a router, or a single primary) or `RedisCluster` (the cluster
directly: proves the workload itself, without the router)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, cast

import pytest
import redis
from harness import free_port, memfleet_bin
from redis.cluster import RedisCluster

Client = Union[redis.Redis, RedisCluster]
# What a key holds once its round is over: a string, a hash, a list or a set.
Value = Union[str, dict[str, str], list[str], frozenset[str]]


class Mismatch(AssertionError):
    """A read returned something other than what the round wrote."""


def check(got: object, want: object, what: str) -> None:
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, want {want!r}")


def mset(r: Client, mapping: dict[str, str]) -> None:
    # RedisCluster refuses a cross-slot MSET itself; its split form is the same request.
    if isinstance(r, RedisCluster):
        check(r.mset_nonatomic(mapping), [True] * len({r.keyslot(k) for k in mapping}), "MSET")
    else:
        check(r.mset(mapping), True, "MSET")


def mget(r: Client, keys: list[str]) -> list[object]:
    if isinstance(r, RedisCluster):
        return list(r.mget_nonatomic(keys))
    return list(r.mget(keys))


def python_round(r: Client, p: str, i: int) -> dict[str, Value]:
    """One round of the workload under prefix `p`; raises Mismatch on a wrong read (and
    whatever the client raises on an error). Returns what the round leaves behind."""
    left: dict[str, Value] = {}
    s, sv = f"{p}:s:{i}", f"v{i}-{p}-" + "x" * (i % 50)
    check(r.set(s, sv), True, f"SET {s}")
    check(r.get(s), sv, f"GET {s}")
    check(r.expire(s, 600), True, f"EXPIRE {s}")
    ttl = r.ttl(s)
    if not 0 < ttl <= 600:
        raise Mismatch(f"TTL {s}: {ttl}")
    left[s] = sv

    mk = [f"{p}:m:{i}:{j}" for j in range(6)]
    mv = {k: f"m{i}.{j}" for j, k in enumerate(mk)}
    mset(r, mv)
    check(mget(r, [*mk, f"{p}:none:{i}"]), [*mv.values(), None], f"MGET {p}:m:{i}")
    check(r.exists(*mk), 6, f"EXISTS {p}:m:{i}")
    check(r.delete(mk[0], mk[1]), 2, f"DEL {p}:m:{i}")
    check(r.exists(mk[0], mk[1]), 0, f"EXISTS deleted {p}:m:{i}")
    check(r.unlink(mk[5], f"{p}:none:{i}"), 1, f"UNLINK {p}:m:{i}")
    check(r.touch(*mk), 3, f"TOUCH {p}:m:{i}")
    left.update({k: mv[k] for k in mk[2:5]})

    n = f"{p}:n:{i}"
    check(r.incr(n), 1, f"INCR {n}")
    check(r.incr(n), 2, f"INCR {n}")
    left[n] = "2"

    h = f"{p}:h:{i}"
    hv = {"a": str(i), "b": p}
    check(r.hset(h, mapping=cast("dict[Any, Any]", hv)), 2, f"HSET {h}")
    check(r.hget(h, "a"), str(i), f"HGET {h}")
    left[h] = hv

    lk = f"{p}:l:{i}"
    check(r.lpush(lk, "x", "y", "z"), 3, f"LPUSH {lk}")
    check(r.lrange(lk, 0, -1), ["z", "y", "x"], f"LRANGE {lk}")
    left[lk] = ["z", "y", "x"]

    # Keys sharing a {tag} share a slot: the multi-key commands a cluster allows.
    t = "{" + f"{p}:{i}" + "}"
    check(r.set(f"{t}:a", sv), True, f"SET {t}:a")
    check(r.rename(f"{t}:a", f"{t}:b"), True, f"RENAME {t}:a")
    check(mget(r, [f"{t}:a", f"{t}:b"]), [None, sv], f"MGET {t}")
    check(r.sadd(f"{t}:x", "1", "2"), 2, f"SADD {t}:x")
    check(r.sadd(f"{t}:y", "2", "3"), 2, f"SADD {t}:y")
    check(r.sunionstore(f"{t}:u", [f"{t}:x", f"{t}:y"]), 3, f"SUNIONSTORE {t}:u")
    check(r.smove(f"{t}:x", f"{t}:y", "1"), True, f"SMOVE {t}:x")
    check(r.smembers(f"{t}:y"), {"1", "2", "3"}, f"SMEMBERS {t}:y")
    left[f"{t}:b"] = sv
    left[f"{t}:x"] = frozenset({"2"})
    left[f"{t}:y"] = frozenset({"1", "2", "3"})
    left[f"{t}:u"] = frozenset({"1", "2", "3"})
    return left


def php_left(p: str, i: int) -> dict[str, Value]:
    """What a round of PHP_ROUNDS leaves behind."""
    sv = f"p{i}-{p}"
    t = "{" + f"{p}:{i}" + "}"
    return {
        f"{p}:s:{i}": sv,
        **{f"{p}:m:{i}:{j}": f"m{i}.{j}" for j in range(2, 5)},
        f"{p}:n:{i}": "2",
        f"{p}:h:{i}": {"a": str(i), "b": p},
        f"{p}:l:{i}": ["z", "y", "x"],
        f"{t}:b": sv,
    }


# argv: prefix, rounds, stop file, clean rounds wanted after it, deadline (unix time), then
# the connect target. One connection per round (connect, commands, close), as PHP pages do.
# Prints `R <i> <start>` per finished round, `E <time> <what>` per error and `M <time> <what>`
# per wrong read.
PHP_ROUNDS = r"""
[$_, $p, $rounds, $stop, $need, $deadline, $kind] = $argv;
$seeds = array_slice($argv, 7);
function sentinel($h, $port) {
    if (version_compare(phpversion('redis'), '6.0', '>='))
        return new RedisSentinel(['host' => $h, 'port' => $port, 'connectTimeout' => 1.0]);
    return new RedisSentinel($h, $port, 1.0);
}
function conn() {
    global $kind, $seeds;
    if ($kind === 'cluster') return new RedisCluster(NULL, $seeds, 2.0, 2.0);
    $addr = $seeds[0];
    if ($kind === 'sentinel') {  // seeds: the master name, then the Sentinels
        $addr = null;
        foreach (array_slice($seeds, 1) as $sa) {
            [$h, $port] = explode(':', $sa);
            try { $a = sentinel($h, (int)$port)->getMasterAddrByName($seeds[0]); }
            catch (Exception $e) { continue; }
            if ($a) { $addr = "$a[0]:$a[1]"; break; }
        }
        if ($addr === null) throw new RedisException("no Sentinel names $seeds[0]");
    }
    [$h, $port] = explode(':', $addr);
    $r = new Redis();
    if (!$r->connect($h, (int)$port, 2.0)) throw new RedisException("connect $h:$port");
    $r->setOption(Redis::OPT_READ_TIMEOUT, 2.0);
    return $r;
}
class Bad extends Exception {}
// A cluster answers TRYAGAIN to a multi-key command whose slot is half moved, and expects it
// sent again shortly; redis-py's cluster client does that itself, PHP's leaves it to the page.
// Through the router it never reaches a client, so only the cluster's own client retries.
function again($r, $call) {
    global $kind;
    for ($n = 0; ; $n++) {
        $got = $call();
        $err = $r->getLastError();
        if ($kind !== 'cluster' || $got !== false || !$err || strncmp($err, 'TRYAGAIN', 8) !== 0
            || $n >= 100) return $got;
        $r->clearLastError();
        usleep(20000);
    }
}
function want($r, $got, $want, $what) {
    if ($got === $want) return;
    $err = $r->getLastError();
    if ($got === false && $err) { $r->clearLastError(); throw new RedisException("$what: $err"); }
    throw new Bad("$what: got " . json_encode($got) . " want " . json_encode($want));
}
$clean = 0; $after = false;
for ($i = 0; $i < (int)$rounds && microtime(true) < (float)$deadline; $i++) {
    if (!$after && file_exists($stop)) { $after = true; $clean = 0; }
    if ($after && $clean >= (int)$need) break;
    $start = microtime(true);
    $r = null;
    try {
        $r = conn();
        $s = "$p:s:$i"; $sv = "p$i-$p";
        want($r, $r->set($s, $sv), true, "SET $s");
        want($r, $r->get($s), $sv, "GET $s");
        want($r, $r->expire($s, 600), true, "EXPIRE $s");
        $mk = []; $mv = [];
        for ($j = 0; $j < 6; $j++) { $mk[] = "$p:m:$i:$j"; $mv["$p:m:$i:$j"] = "m$i.$j"; }
        want($r, again($r, fn() => $r->mset($mv)), true, "MSET");
        want($r, again($r, fn() => $r->mget(array_merge($mk, ["$p:none:$i"]))),
             array_merge(array_values($mv), [false]), "MGET $p:m:$i");
        want($r, again($r, fn() => $r->del($mk[0], $mk[1])), 2, "DEL $p:m:$i");
        want($r, $r->del($mk[5]), 1, "DEL $mk[5]");
        want($r, $r->incr("$p:n:$i"), 1, "INCR");
        want($r, $r->incr("$p:n:$i"), 2, "INCR");
        want($r, $r->hSet("$p:h:$i", "a", "$i"), 1, "HSET a");
        want($r, $r->hSet("$p:h:$i", "b", $p), 1, "HSET b");
        want($r, $r->hGet("$p:h:$i", "a"), "$i", "HGET");
        want($r, $r->lPush("$p:l:$i", "x", "y", "z"), 3, "LPUSH");
        want($r, $r->lRange("$p:l:$i", 0, -1), ["z", "y", "x"], "LRANGE");
        $t = "{" . "$p:$i" . "}";
        want($r, $r->set("$t:a", $sv), true, "SET $t:a");
        want($r, again($r, fn() => $r->rename("$t:a", "$t:b")), true, "RENAME $t:a");
        want($r, $r->get("$t:b"), $sv, "GET $t:b");
        $r->close();
        echo "R $i $start\n";
        $clean++;
    } catch (Bad $e) {
        echo "M ", $start, " ", $e->getMessage(), "\n"; $clean = 0;
    } catch (Exception $e) {
        echo "E ", microtime(true), " ", str_replace("\n", " ", $e->getMessage()), "\n";
        $clean = 0;
        usleep(10000);
    }
    if ($r) { try { $r->close(); } catch (Exception $e) {} }
}
"""


@dataclass
class Tally:
    """What one client saw: errors (when, what), wrong reads (when their round began, what),
    and each finished round's start time with what it left behind."""

    name: str
    errors: list[tuple[float, str]] = field(default_factory=list)
    mismatches: list[tuple[float, str]] = field(default_factory=list)
    rounds: list[tuple[float, dict[str, Value]]] = field(default_factory=list)
    # Consecutive clean rounds begun after the stop was asked for.
    clean_after_stop: int = 0
    output: str = ""

    def events(self) -> list[float]:
        return sorted(t for t, _ in self.errors + self.mismatches)

    def left(self, since: float = 0.0) -> dict[str, Value]:
        out: dict[str, Value] = {}
        for start, keys in self.rounds:
            if start >= since:
                out.update(keys)
        return out


class Load:
    """redis-py threads and PHP processes running rounds until told to stop, then until each
    has done `need` clean rounds in a row (or the deadline): bounded however the servers do."""

    def __init__(self, limit: float = 20.0, need: int = 20) -> None:
        self.deadline = time.time() + limit
        self.need = need
        self.stopping = threading.Event()
        self.stop_file: Path | None = None
        self.threads: list[threading.Thread] = []
        self.php: list[tuple[Tally, subprocess.Popen[str]]] = []
        self.tallies: list[Tally] = []

    def python(self, name: str, make: Callable[[], Client], prefix: str) -> Tally:
        tally = Tally(name)
        self.tallies.append(tally)

        def run() -> None:
            r = make()
            i, clean, after = 0, 0, False
            try:
                while time.time() < self.deadline and not (after and clean >= self.need):
                    if not after and self.stopping.is_set():
                        after, clean = True, 0
                    start = time.time()
                    try:
                        tally.rounds.append((start, python_round(r, prefix, i)))
                        clean += 1
                    except Mismatch as e:
                        tally.mismatches.append((start, str(e)))
                        clean = 0
                    except (redis.RedisError, OSError) as e:
                        tally.errors.append((time.time(), f"{type(e).__name__}: {e}"))
                        clean = 0
                        # Pacing, not a wait for anything: a client failing in a tight loop
                        # would take the CPU the failover needs.
                        time.sleep(0.01)
                    i += 1
                    tally.clean_after_stop = clean if after else 0
            finally:
                r.close()

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self.threads.append(t)
        return tally

    def php_process(self, name: str, kind: str, seeds: list[str], prefix: str, stop: Path) -> Tally:
        """PHP's `Redis` (kind "redis", seeds[0] the server; "sentinel", seeds the master
        name then the Sentinels) or `RedisCluster` ("cluster", seeds the cluster's nodes)."""
        tally = Tally(name)
        self.tallies.append(tally)
        self.stop_file = stop
        argv = ["php", "-r", PHP_ROUNDS, "--", prefix, "1000000", str(stop), str(self.need)]
        argv += [f"{self.deadline:.3f}", kind, *seeds]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.php.append((tally, proc))
        return tally

    def started(self, rounds: int = 5, limit: float = 20.0) -> None:
        """Until every redis-py client has finished `rounds` rounds (errors fail at once)."""
        deadline = time.monotonic() + limit
        py = [t for t in self.tallies if all(t is not x for x, _ in self.php)]
        while time.monotonic() < deadline:
            bad = [(t.name, t.errors + t.mismatches) for t in py if t.errors or t.mismatches]
            assert not bad, bad
            if all(len(t.rounds) >= rounds for t in py):
                return
            time.sleep(0.05)
        raise TimeoutError(f"the load did not start: {[len(t.rounds) for t in py]}")

    def stop(self) -> list[Tally]:
        """Asks every client to finish (after `need` clean rounds) and waits for them."""
        self.stopping.set()
        if self.stop_file is not None:
            self.stop_file.touch()
        wait = max(self.deadline - time.time(), 0) + 15
        for t in self.threads:
            t.join(wait)
            assert not t.is_alive(), f"{t.name} still running"
        for tally, proc in self.php:
            out, _ = proc.communicate(timeout=wait)
            tally.output = out
            parse_php(tally, out, self.need)
        return self.tallies


def parse_php(tally: Tally, out: str, need: int) -> None:
    """Fills `tally` from PHP_ROUNDS's output; the prefix is in each round's keys."""
    clean = 0
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "R":
            i, start = rest.split(" ", 1)
            tally.rounds.append((float(start), {"php-round": i}))
            clean += 1
        elif kind == "E":
            at, what = rest.split(" ", 1)
            tally.errors.append((float(at), what))
            clean = 0
        elif kind == "M":
            at, what = rest.split(" ", 1)
            tally.mismatches.append((float(at), what))
            clean = 0
        else:
            raise AssertionError(f"PHP said: {out[-3000:]}")
    tally.clean_after_stop = clean


def php_rounds_left(tally: Tally, prefix: str, since: float = 0.0) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for start, marker in tally.rounds:
        if start >= since:
            out.update(php_left(prefix, int(str(marker["php-round"]))))
    return out


def run_php(kind: str, seeds: list[str], prefix: str, rounds: int) -> Tally:
    """`rounds` PHP rounds in one process, to completion."""
    tally = Tally(f"php-{kind}")
    argv = ["php", "-r", PHP_ROUNDS, "--", prefix, str(rounds), "/nonexistent", "0"]
    argv += [f"{time.time() + 60:.3f}", kind, *seeds]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    tally.output = out.stdout
    parse_php(tally, out.stdout, 0)
    return tally


def wrong_keys(r: Client, left: dict[str, Value]) -> list[str]:
    """The keys of `left` that `r` reads back as anything else (each one read, by type)."""
    wrong: list[str] = []
    strings = [k for k, v in left.items() if isinstance(v, str)]
    for part in chunks(strings, 100):
        for k, got in zip(part, mget(r, part)):
            if got != left[k]:
                wrong.append(f"{k}={got!r} (want {left[k]!r})")
    others = [k for k, v in left.items() if not isinstance(v, str)]
    for part in chunks(others, 200):
        pipe = r.pipeline(transaction=False)
        for k in part:
            v = left[k]
            if isinstance(v, dict):
                pipe.hgetall(k)
            elif isinstance(v, list):
                pipe.lrange(k, 0, -1)
            else:
                pipe.smembers(k)
        for k, reply in zip(part, pipe.execute()):
            if isinstance(reply, set):
                reply = frozenset(reply)
            if reply != left[k]:
                wrong.append(f"{k}={reply!r} (want {left[k]!r})")
    return wrong


def chunks(items: list[str], n: int) -> Iterable[list[str]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def resp_sets(keys: Iterable[tuple[str, str]]) -> bytes:
    """SET commands in RESP, for `redis-cli --pipe`."""
    out = []
    for k, v in keys:
        out.append(
            b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
            % (len(k), k.encode(), len(v), v.encode())
        )
    return b"".join(out)


def failover_summary(
    what: str, tallies: list[Tally], killed_at: float, recovered_at: float, need: int
) -> float:
    """Prints what the clients saw around a failover (run pytest with -s to see it). Asserts
    that the errors stopped (every client ended with `need` clean rounds in a row) and that no
    round begun after the failover was seen done read anything wrong. Returns the end of the
    trouble window (the last error or wrong read; the kill if there was none)."""
    events = sorted(t for tally in tallies for t in tally.events())
    for tally in tallies:
        first = tally.errors[0][1][:160] if tally.errors else "-"
        print(
            f"{what}: {tally.name}: {len(tally.rounds)} rounds, {len(tally.errors)} errors, "
            f"{len(tally.mismatches)} wrong reads; first error: {first}"
        )
    if events:
        print(
            f"{what}: {len(events)} errors or wrong reads in a window of "
            f"{events[-1] - events[0]:.2f} s (from {events[0] - killed_at:+.2f} s to "
            f"{events[-1] - killed_at:+.2f} s after the kill); the failover was seen done "
            f"{recovered_at - killed_at:.2f} s after the kill"
        )
    else:
        print(f"{what}: no client saw an error")
    late = [(t.name, m) for t in tallies for at, m in t.mismatches if at >= recovered_at]
    assert not late, f"wrong reads in rounds begun after the failover: {late[:5]}"
    stuck = [
        (t.name, t.clean_after_stop, [e for _, e in t.errors[-3:]])
        for t in tallies
        if t.clean_after_stop < need
    ]
    assert not stuck, f"clients still failing after the failover: {stuck}"
    return events[-1] if events else killed_at


def plain(port: int, protocol: int = 2) -> redis.Redis:
    # A socket timeout: a hang fails the test instead of stalling it.
    return redis.Redis(
        host="127.0.0.1", port=port, protocol=protocol, decode_responses=True, socket_timeout=5
    )


def read_back_errors(port: int, prefix: str, n: int, tries: int) -> list[str]:
    """Reads `{prefix}:{i}` for i < n through `port`, each expected to be `v{i}`, trying each
    key up to `tries` times; returns the errors of the keys that failed every try."""
    errors: list[str] = []
    with plain(port) as r:
        for i in range(n):
            for attempt in range(tries):
                try:
                    assert r.get(f"{prefix}:{i}") == f"v{i}"
                    break
                except (redis.RedisError, OSError) as e:
                    if attempt == tries - 1:
                        errors.append(str(e))
    return errors


def assert_all_read_back(clients: list[Client], left: dict[str, Value]) -> None:
    assert left
    for r in clients:
        wrong = wrong_keys(r, left)
        assert not wrong, f"{len(wrong)} of {len(left)} keys read back wrong: {wrong[:5]}"


def left_by(tallies: list[Tally], target: str, since: float = 0.0) -> dict[str, Value]:
    left: dict[str, Value] = {}
    for t in tallies:
        if t.name == "php":
            left.update(php_rounds_left(t, f"{target}php", since))
        else:
            left.update(t.left(since))
    return left


def route_until_exit(conf: str, tmp_path: Path, limit: float = 10.0) -> tuple[int, str]:
    """Runs `memfleet route` on `conf` in the foreground; (exit code, its output). The
    configuration must pass `memfleet route -t` first: a start-up failure under test is the
    servers', not a file the router refuses to read."""
    path = tmp_path / "conf.yml"
    path.write_text(conf)
    checked = subprocess.run(
        [memfleet_bin(), "route", "-t", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=limit,
        check=False,
    )
    assert checked.returncode == 0 and "syntax is ok" in checked.stderr, checked.stderr
    argv = [memfleet_bin(), "route", "-c", str(path), "-s", str(free_port()), "-a", "127.0.0.1"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"memfleet route still running {limit} s after start", pytrace=False)
    return out.returncode, out.stdout + out.stderr
