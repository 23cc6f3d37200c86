"""Wire protocol, sans I/O: request builders for meta and text commands, and the reply parsers.

Replies are parsed by the Rust wire layer (crates/pyclient, ``wire::ReplyParser``): a ``parse_*``
function here makes the ``Reply`` of one request, which the blocking connection reads whole off
its socket (``Conn.read_reply``) and the asyncio one feeds with the chunks it receives
(``Reader.feed``). Requests are still built here: they are short byte strings, and building them
in Rust would save nothing.
"""

from __future__ import annotations

from ._native import MAX_KEY as MAX_KEY  # memcached's longest key, as the wire layer checks it
from ._native import Lease as Lease
from ._native import Reply, valid_key
from ._native import parse_notice as parse_notice  # a listener's notice: key, None (IV_ALL)
from ._native import parse_tracking as parse_tracking  # track listen's reply: id, None
from ._native import req_get_many as req_get_many  # built by the Rust wire layer
from .errors import MemfleetServerError

Parser = Reply


def check_key(kb: bytes) -> bytes:
    if not valid_key(kb):
        raise ValueError(f"invalid memcached key {kb!r}: 1-{MAX_KEY} bytes, no spaces or control characters")
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


def parse_get(meta: bool) -> Reply:
    """(data, flags, cas), or None on a miss."""
    return Reply("get", meta)


def parse_get_many(meta: bool) -> Reply:
    """{key: (data, flags)} of the hits (meta: the replies to ``mg <key> f v k q`` ... ``mn``,
    text: ``VALUE`` items up to ``END``)."""
    return Reply("get_many", meta)


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


def parse_store(meta: bool) -> Reply:
    """Stored or not (``NS``, ``EX``, ``NF``); any other line raises."""
    return Reply("store", meta)


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


def parse_set_many(meta: bool, kbs: list[bytes]) -> Reply:
    """The keys that were not stored (a ``SERVER_ERROR`` fails its own store only)."""
    return Reply("set_many", meta, keys=kbs)


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


def parse_add_token_many(meta: bool, kbs: list[bytes]) -> Reply:
    """The markers that hold no token of this write (neither store took)."""
    return Reply("add_token_many", meta, keys=kbs)


# -- deletes, touch, arithmetic ----------------------------------------------------------------
def req_delete(kb: bytes, meta: bool) -> bytes:
    return (b"md " if meta else b"delete ") + kb + b"\r\n"


def parse_delete(meta: bool) -> Reply:
    """Whether the key existed."""
    return Reply("delete", meta)


def req_delete_many(kbs: list[bytes], meta: bool) -> bytes:
    if meta:
        return b"".join([b"md " + kb + b" q\r\n" for kb in kbs]) + b"mn\r\n"
    return b"".join([b"delete " + kb + b"\r\n" for kb in kbs])


def parse_delete_many(meta: bool, count: int) -> Reply:
    """How many of the ``count`` keys existed."""
    return Reply("delete_many", meta, count)


def req_invalidate(kb: bytes, ttl: int | None) -> bytes:
    return b"md " + kb + b" I" + (b" T" + _ttl(ttl) if ttl is not None else b"") + b"\r\n"


def req_touch(kb: bytes, ttl: int, meta: bool) -> bytes:
    if meta:
        return b"mg " + kb + b" T" + _ttl(ttl) + b"\r\n"
    return b"touch " + kb + b" " + _ttl(ttl) + b"\r\n"


def parse_touch(meta: bool) -> Reply:
    """Whether the key existed."""
    return Reply("touch", meta)


def req_arith(kb: bytes, delta: int, decr: bool, initial: int | None, ttl: int, meta: bool) -> bytes:
    if meta:
        r = b"ma " + kb + b" v D" + str(delta).encode()
        if decr:
            r += b" MD"
        if initial is not None:
            r += b" N" + _ttl(ttl) + b" J" + str(initial).encode()
        return r + b"\r\n"
    return (b"decr " if decr else b"incr ") + kb + b" " + str(delta).encode() + b"\r\n"


def parse_arith(meta: bool) -> Reply:
    """The new value, or None if the key is missing (meta: or was not created)."""
    return Reply("arith", meta)


# -- stampede protection (meta only) -----------------------------------------------------------
def req_lease_get(kb: bytes, lock_ttl: int, recache: int) -> bytes:
    r = b"mg " + kb + b" f v c N" + str(lock_ttl).encode()
    if recache > 0:
        r += b" R" + str(recache).encode()
    return r + b"\r\n"


def parse_lease(meta: bool) -> Reply:
    """A ``Lease``: the meta get's value with its win (W), stale (X) and taken (Z) flags; ``hit``
    is false for a miss and for a vivified stub (an empty item with flags 0 that someone holds)."""
    return Reply("lease", meta)


# -- remote markers ----------------------------------------------------------------------------
def req_exists(kb: bytes, meta: bool) -> bytes:
    """Is ``kb`` there? Meta ``mg <key>`` (no flags: ``HD`` or ``EN``, no value sent); text ``get``."""
    return (b"mg " if meta else b"get ") + kb + b"\r\n"


def parse_exists(meta: bool) -> Reply:
    return Reply("exists", meta)


def parse_lease_exists(meta: bool) -> Reply:
    """(Lease, bool): the replies to a lease get and, pipelined after it, ``req_exists`` (meta only)."""
    return Reply("lease_exists", meta)


# -- misc --------------------------------------------------------------------------------------
PROBE = b"mn\r\n"


def parse_probe(meta: bool) -> Reply:
    """Does the server speak meta? ``mn`` gets ``MN`` from a meta server and ``ERROR`` from an old
    one (twemproxy closes the connection instead: the driver's ConnectionError)."""
    return Reply("probe", meta)


def parse_ok(meta: bool) -> Reply:
    return Reply("ok", meta)


def parse_version(meta: bool) -> Reply:
    return Reply("version", meta)


def parse_stats(meta: bool) -> Reply:
    """{name: value} of the ``STAT`` lines."""
    return Reply("stats", meta)


# -- near-cache invalidation (memfleet's track extension) ---------------------------------------
TRACK_LISTEN = b"track listen\r\n"


def req_track(listener_id: int) -> bytes:
    return b"track %d\r\n" % listener_id


def parse_line(meta: bool) -> Reply:
    """One reply line, as it is."""
    return Reply("line", meta)
