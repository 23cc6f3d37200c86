"""Wire protocol, sans I/O: request builders and response parsers for meta and text commands.

A parser is a generator that yields what it needs next (``LINE`` for a response line without CRLF,
or ``n >= 0`` for n data bytes plus their CRLF) and returns the result. The blocking and the asyncio
clients drive the same parsers.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Generator
from typing import Any, cast

from ._native import GetManyParser
from ._native import req_get_many as req_get_many  # built by the Rust wire layer
from .errors import MemfleetServerError

LINE = -1
Parser = Generator[int, bytes, object]

_BAD_KEY = re.compile(rb"[\x00-\x20\x7f]")
MAX_KEY = 250


def check_key(kb: bytes) -> bytes:
    if not kb or len(kb) > MAX_KEY or _BAD_KEY.search(kb):
        raise ValueError(f"invalid memcached key {kb!r}: 1-250 bytes, no spaces or control characters")
    return kb


def raise_for(line: bytes) -> MemfleetServerError:
    return MemfleetServerError(line.decode("utf-8", "replace"))


def _ttl(ttl: int) -> bytes:
    return str(int(ttl)).encode()


# -- fetches -----------------------------------------------------------------------------------
def req_get(kb: bytes, meta: bool, cas: bool = False) -> bytes:
    if meta:
        return b"mg " + kb + (b" f v c\r\n" if cas else b" f v\r\n")
    return (b"gets " if cas else b"get ") + kb + b"\r\n"


def _value_head(line: bytes) -> tuple[int, dict[int, bytes]]:
    """A meta ``VA <size> <flag>...`` line: the data size, and each returned flag's token by its
    letter (``f`` client flags, ``k`` key, ``c`` cas, ``W``/``X``/``Z`` lease state)."""
    parts = line.split()
    return int(parts[1]), {t[0]: t[1:] for t in parts[2:]}


def parse_get(meta: bool) -> Generator[int, bytes, tuple[bytes, int, int] | None]:
    """Returns (data, flags, cas) or None on a miss."""
    line = yield LINE
    if meta:
        if line.startswith(b"VA "):
            n, f = _value_head(line)
            data = yield n
            return data, int(f.get(102, b"0")), int(f.get(99, b"0"))
        if line == b"EN":
            return None
        raise raise_for(line)
    if line == b"END":
        return None
    if not line.startswith(b"VALUE "):
        raise raise_for(line)
    parts = line.split()
    data = yield int(parts[3])
    cas = int(parts[4]) if len(parts) > 4 else 0
    end = yield LINE
    if end != b"END":
        raise raise_for(end)
    return data, int(parts[2]), cas


# the reply of a multi-key fetch is read by the Rust wire layer: GetManyParser takes the lines and
# data blocks a driver reads, as the parsers here do ({key: (data, flags)} of the hits; meta: the
# replies to ``mg <key> f v k q`` ... ``mn``, text: ``VALUE`` items up to ``END``); the blocking
# connection reads the whole reply itself (``Conn.read_get_many``)
parse_get_many: Callable[[bool], Parser] = cast(Any, GetManyParser)


# -- stores ------------------------------------------------------------------------------------
_META_MODE = {b"set": b"", b"add": b" ME", b"replace": b" MR", b"append": b" MA", b"prepend": b" MP", b"cas": b""}


def store_head(cmd: bytes, kb: bytes, n: int, flags: int, ttl: int, meta: bool, cas: int = 0) -> bytes:
    """The command line of a store, CRLF included; the value and its CRLF follow."""
    if meta:
        head = b"ms %b %d F%d T%d%b" % (kb, n, flags, ttl, _META_MODE[cmd])
        if cmd == b"cas":
            head += b" C%d" % cas
    else:
        head = b"%b %b %d %d %d" % (cmd, kb, flags, ttl, n)
        if cmd == b"cas":
            head += b" %d" % cas
    return head + b"\r\n"


def req_store(cmd: bytes, kb: bytes, data: bytes, flags: int, ttl: int, meta: bool, cas: int = 0) -> bytes:
    # header, value and CRLF in one buffer, so they leave in one write
    return b"".join((store_head(cmd, kb, len(data), flags, ttl, meta, cas), data, b"\r\n"))


STORED = {
    b"HD": True,
    b"STORED": True,
    b"NS": False,
    b"NOT_STORED": False,
    b"EX": False,
    b"EXISTS": False,
    b"NF": False,
    b"NOT_FOUND": False,
}


def _one_line(answers: dict[bytes, bool]) -> Callable[[bool], Generator[int, bytes, bool]]:
    """The parser of a reply that is one line saying yes or no; any other line is an error."""

    def parse(meta: bool) -> Generator[int, bytes, bool]:
        line = yield LINE
        r = answers.get(line)
        if r is None:
            raise raise_for(line)
        return r

    return parse


parse_store = _one_line(STORED)


def req_set_many(items: list[tuple[bytes, bytes, int]], ttl: int, meta: bool) -> bytes:
    # not quiet: SERVER_ERROR replies carry no key, so replies are matched to requests by order
    t = _ttl(ttl)
    if meta:
        parts = [
            b"ms " + kb + b" " + str(len(d)).encode() + b" F" + str(f).encode() + b" T" + t + b"\r\n" + d + b"\r\n"
            for kb, d, f in items
        ]
    else:
        parts = [
            b"set " + kb + b" " + str(f).encode() + b" " + t + b" " + str(len(d)).encode() + b"\r\n" + d + b"\r\n"
            for kb, d, f in items
        ]
    return b"".join(parts)


def parse_set_many(meta: bool, kbs: list[bytes]) -> Generator[int, bytes, list[bytes]]:
    """Returns the keys that were not stored."""
    failed: list[bytes] = []
    for kb in kbs:
        line = yield LINE
        ok = STORED.get(line)
        if ok is None and not line.startswith(b"SERVER_ERROR"):
            raise raise_for(line)
        if not ok:
            failed.append(kb)
    return failed


def req_add_token_many(kbs: list[bytes], token: bytes, ttl: int, meta: bool) -> bytes:
    """Per marker: append `` <token>`` to it, else add it holding ``" <token>"``, then set its TTL.
    One of the two stores succeeds, unless the marker came or went between them."""
    d = b" " + token
    n, t = str(len(d)).encode(), _ttl(ttl)
    if meta:
        one = (
            b"ms %b " + n + b" MA\r\n" + d + b"\r\nms %b " + n + b" T" + t + b" ME\r\n" + d
            + b"\r\nmg %b T" + t + b"\r\n"
        )  # fmt: skip
    else:
        one = (
            b"append %b 0 0 " + n + b"\r\n" + d + b"\r\nadd %b 0 " + t + b" " + n + b"\r\n" + d
            + b"\r\ntouch %b " + t + b"\r\n"
        )  # fmt: skip
    return b"".join(one % (kb, kb, kb) for kb in kbs)


TOUCHED = {b"HD": True, b"TOUCHED": True, b"EN": False, b"NOT_FOUND": False}


def parse_add_token_many(meta: bool, kbs: list[bytes]) -> Generator[int, bytes, list[bytes]]:
    """Returns the markers that hold no token of this write (neither store took)."""
    failed: list[bytes] = []
    for kb in kbs:
        stored = False
        for _ in range(2):
            line = yield LINE
            ok = STORED.get(line)
            if ok is None and not line.startswith(b"SERVER_ERROR"):
                raise raise_for(line)
            stored = stored or bool(ok)
        line = yield LINE
        if TOUCHED.get(line) is None and not line.startswith(b"SERVER_ERROR"):
            raise raise_for(line)
        if not stored:
            failed.append(kb)
    return failed


# -- deletes, touch, arithmetic ----------------------------------------------------------------
def req_delete(kb: bytes, meta: bool) -> bytes:
    return (b"md " if meta else b"delete ") + kb + b"\r\n"


DELETED = {b"HD": True, b"DELETED": True, b"NF": False, b"NOT_FOUND": False}
parse_delete = _one_line(DELETED)


def req_delete_many(kbs: list[bytes], meta: bool) -> bytes:
    if meta:
        return b"".join([b"md " + kb + b" q\r\n" for kb in kbs]) + b"mn\r\n"
    return b"".join([b"delete " + kb + b"\r\n" for kb in kbs])


def parse_delete_many(meta: bool, count: int) -> Generator[int, bytes, int]:
    """Returns how many keys existed."""
    if meta:
        missing = 0
        while True:
            line = yield LINE
            if line == b"MN":
                return count - missing
            if line == b"NF":
                missing += 1
            else:
                raise raise_for(line)
    found = 0
    for _ in range(count):
        line = yield LINE
        if line == b"DELETED":
            found += 1
        elif line != b"NOT_FOUND":
            raise raise_for(line)
    return found


def req_invalidate(kb: bytes, ttl: int | None) -> bytes:
    return b"md " + kb + b" I" + (b" T" + _ttl(ttl) if ttl is not None else b"") + b"\r\n"


def req_touch(kb: bytes, ttl: int, meta: bool) -> bytes:
    if meta:
        return b"mg " + kb + b" T" + _ttl(ttl) + b"\r\n"
    return b"touch " + kb + b" " + _ttl(ttl) + b"\r\n"


parse_touch = _one_line(TOUCHED)


def req_arith(kb: bytes, delta: int, decr: bool, initial: int | None, ttl: int, meta: bool) -> bytes:
    if meta:
        r = b"ma " + kb + b" v D" + str(delta).encode()
        if decr:
            r += b" MD"
        if initial is not None:
            r += b" N" + _ttl(ttl) + b" J" + str(initial).encode()
        return r + b"\r\n"
    return (b"decr " if decr else b"incr ") + kb + b" " + str(delta).encode() + b"\r\n"


def parse_arith(meta: bool) -> Generator[int, bytes, int | None]:
    line = yield LINE
    if meta:
        if line.startswith(b"VA "):
            data = yield _value_head(line)[0]
            return int(data)
        if line in (b"NF", b"NS"):
            return None
        raise raise_for(line)
    if line == b"NOT_FOUND":
        return None
    if line[:1].isdigit():
        return int(line)
    raise raise_for(line)


# -- stampede protection (meta only) -----------------------------------------------------------
def req_lease_get(kb: bytes, lock_ttl: int, recache: int) -> bytes:
    r = b"mg " + kb + b" f v c N" + str(lock_ttl).encode()
    if recache > 0:
        r += b" R" + str(recache).encode()
    return r + b"\r\n"


class Lease:
    """A meta get answer with the N/R win flags."""

    __slots__ = ("data", "flags", "cas", "win", "stale", "taken", "hit")

    def __init__(self) -> None:
        self.data = b""
        self.flags = 0
        self.cas = 0
        self.win = False
        self.stale = False
        self.taken = False
        self.hit = False


def parse_lease(meta: bool) -> Generator[int, bytes, Lease]:
    line = yield LINE
    if not line.startswith(b"VA "):
        return lease_of(line, None)
    return lease_of(line, (yield _value_head(line)[0]))


def lease_of(line: bytes, data: bytes | None) -> Lease:
    """The lease a lease get's reply line (and its value, after a ``VA`` line) gives."""
    lease = Lease()
    if line == b"EN":
        return lease
    if data is None or not line.startswith(b"VA "):
        raise raise_for(line)
    f = _value_head(line)[1]
    lease.data = data
    lease.flags = int(f.get(102, b"0"))  # f
    lease.cas = int(f.get(99, b"0"))  # c
    lease.win = 87 in f  # W
    lease.stale = 88 in f  # X
    lease.taken = 90 in f  # Z
    # a vivified stub is an empty item with flags 0 that someone holds (W for us, Z for others);
    # marked stale (a row changed while it was being filled), it is still no one's value
    stub = not lease.data and lease.flags == 0 and (lease.win or lease.taken)
    lease.hit = not stub
    return lease


# -- remote markers ----------------------------------------------------------------------------
def req_exists(kb: bytes, meta: bool) -> bytes:
    """Is ``kb`` there? Meta ``mg <key>`` (no flags: ``HD`` or ``EN``, no value sent); text ``get``."""
    return (b"mg " if meta else b"get ") + kb + b"\r\n"


def parse_exists(meta: bool) -> Generator[int, bytes, bool]:
    line = yield LINE
    if meta:
        if line == b"HD":
            return True
        if line == b"EN":
            return False
        raise raise_for(line)
    if line == b"END":
        return False
    if not line.startswith(b"VALUE "):
        raise raise_for(line)
    yield int(line.split()[3])
    end = yield LINE
    if end != b"END":
        raise raise_for(end)
    return True


def parse_lease_exists(meta: bool) -> Generator[int, bytes, tuple[Lease, bool]]:
    """The replies to a lease get and, pipelined after it, ``req_exists`` (meta only)."""
    lease = yield from parse_lease(meta)
    present = yield from parse_exists(meta)
    return lease, present


# -- misc --------------------------------------------------------------------------------------
PROBE = b"mn\r\n"


def parse_probe(meta: bool) -> Generator[int, bytes, bool]:
    """Does the server speak meta? ``mn`` gets ``MN`` from a meta server and ``ERROR`` from an old
    one (twemproxy closes the connection instead: the driver's ConnectionError)."""
    line = yield LINE
    return line == b"MN"


parse_ok = _one_line({b"OK": True})


def parse_version(meta: bool) -> Generator[int, bytes, str]:
    line = yield LINE
    if line.startswith(b"VERSION "):
        return line[8:].decode()
    raise raise_for(line)


def parse_stats(meta: bool) -> Generator[int, bytes, dict[str, str]]:
    out: dict[str, str] = {}
    while True:
        line = yield LINE
        if line == b"END":
            return out
        if not line.startswith(b"STAT "):
            raise raise_for(line)
        _, name, value = line.decode("utf-8", "replace").split(" ", 2)
        out[name] = value


# -- near-cache invalidation (memfleet's track extension) ---------------------------------------
TRACK_LISTEN = b"track listen\r\n"


def parse_tracking(line: bytes) -> int | None:
    """The reply to ``track listen``: the listener's id, or None if the server has no tracking
    (memcached and ``memfleet route`` answer ``ERROR``). ``SERVER_ERROR`` (too many listeners)
    raises: it may pass."""
    if line.startswith(b"TRACKING "):
        return int(line[9:])
    if line.startswith(b"ERROR") or line.startswith(b"CLIENT_ERROR"):
        return None
    raise raise_for(line)


def req_track(listener_id: int) -> bytes:
    return b"track %d\r\n" % listener_id


def parse_notice(line: bytes) -> bytes | None:
    """A listener's notice: the key of ``IV <key>`` (``IV <base64> b`` decoded), or None for
    ``IV_ALL``. Anything else raises ValueError."""
    if line == b"IV_ALL":
        return None
    parts = line.split(b" ")
    if parts[0] == b"IV":
        if len(parts) == 2 and parts[1]:
            return parts[1]
        if len(parts) == 3 and parts[2] == b"b":
            return base64.b64decode(parts[1], validate=True)
    raise ValueError(f"unexpected notice {line[:80]!r}")


def parse_line(meta: bool) -> Generator[int, bytes, bytes]:
    """One reply line, as it is."""
    line = yield LINE
    return line
