"""Binary-protocol request sequences for the differential test against memcached 1.6.18.

A sequence is a list of `Step`s sent on one connection. Keys contain `{kkkk}`, replaced by a
prefix of the same length unique to the sequence, so lengths in the headers stay right and
sequences never see each other's items. `parse` reads the response packets back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

K = b"{kkkk}"

# Opcodes (memcached's protocol_binary.h).
GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION = range(0x0C)
GETK, GETKQ, APPEND, PREPEND, STAT = 0x0C, 0x0D, 0x0E, 0x0F, 0x10
SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ, QUITQ, FLUSHQ, APPENDQ, PREPENDQ = range(0x11, 0x1B)
VERBOSITY, TOUCH, GAT, GATQ = 0x1B, 0x1C, 0x1D, 0x1E
SASL_LIST, SASL_AUTH, SASL_STEP, GATK, GATKQ = 0x20, 0x21, 0x22, 0x23, 0x24

ITEM_MAX = 1024 * 1024


@dataclass
class Step:
    """Bytes to send. `parts`: sent one after another with a pause, to check that a half-sent
    packet is waited for. `cas_from_last`: the CAS field is replaced by the CAS of the last
    reply that carried one. `idle`: no noop sentinel follows (the request leaves the server
    waiting for more bytes, or swallowing); the replies are what arrives within a short wait."""

    parts: list[bytes]
    cas_from_last: bool = False
    idle: bool = False
    malformed: bool = False


@dataclass
class Sequence_:
    steps: list[Step] = field(default_factory=list)

    @property
    def malformed(self) -> bool:
        return any(s.malformed for s in self.steps)


def pkt(
    opcode: int,
    key: bytes = b"",
    extras: bytes = b"",
    value: bytes = b"",
    *,
    cas: int = 0,
    opaque: int = 0x1234,
    body: int | None = None,
    keylen: int | None = None,
    extlen: int | None = None,
    magic: int = 0x80,
    datatype: int = 0,
    vbucket: int = 0,
) -> bytes:
    """One request packet; `body`, `keylen` and `extlen` override the honest lengths."""
    klen = len(key) if keylen is None else keylen
    elen = len(extras) if extlen is None else extlen
    blen = len(extras) + len(key) + len(value) if body is None else body
    head = struct.pack(
        ">BBHBBHIIQ", magic, opcode, klen, elen, datatype, vbucket, blen, opaque, cas
    )
    return head + extras + key + value


def parse(data: bytes) -> tuple[list[tuple[int, int, int, int, bytes, bytes, bytes]], bytes]:
    """Response packets in `data` (opcode, status, opaque, cas, extras, key, value), and any
    bytes left that do not form a whole packet."""
    packets = []
    while len(data) >= 24:
        magic, opcode, klen, elen, _dt, status, blen, opaque, cas = struct.unpack(
            ">BBHBBHIIQ", data[:24]
        )
        if magic != 0x81 or len(data) < 24 + blen:
            break
        body = data[24 : 24 + blen]
        packets.append(
            (
                opcode,
                status,
                opaque,
                cas,
                body[:elen],
                body[elen : elen + klen],
                body[elen + klen :],
            )
        )
        data = data[24 + blen :]
    return packets, data


def store_extras(flags: int = 0, exptime: int = 0) -> bytes:
    return struct.pack(">II", flags, exptime)


def arith_extras(delta: int, initial: int = 0, exptime: int = 0) -> bytes:
    return struct.pack(">QQI", delta, initial, exptime)


def ok(*packets: bytes, cas_from_last: bool = False) -> Step:
    return Step([b"".join(packets)], cas_from_last=cas_from_last)


def bad(*packets: bytes, idle: bool = False) -> Step:
    return Step([b"".join(packets)], idle=idle, malformed=True)


def split(*parts: bytes, idle: bool = False) -> Step:
    return Step(list(parts), idle=idle, malformed=True)


def set_(
    key: bytes, value: bytes, flags: int = 0, exptime: int = 0, op: int = SET, cas: int = 0
) -> bytes:
    return pkt(op, key, store_extras(flags, exptime), value, cas=cas)


def get(key: bytes, op: int = GET) -> bytes:
    return pkt(op, key)


def seq(*steps: Step) -> Sequence_:
    return Sequence_(list(steps))


def _storage() -> list[Sequence_]:
    out = []
    ops = [(SET, SETQ), (ADD, ADDQ), (REPLACE, REPLACEQ), (APPEND, APPENDQ), (PREPEND, PREPENDQ)]
    for loud, quiet in ops:
        for op in (loud, quiet):
            for exists in (False, True):
                steps = []
                if exists:
                    steps.append(ok(set_(K + b"a", b"old", flags=7)))
                if op in (APPEND, APPENDQ, PREPEND, PREPENDQ):
                    steps.append(ok(pkt(op, K + b"a", b"", b"new")))
                else:
                    steps.append(ok(set_(K + b"a", b"new", flags=5, op=op)))
                steps.append(ok(get(K + b"a")))
                out.append(seq(*steps))
    # CAS on every storage command: the CAS just returned, a wrong one, a missing key.
    for op in (SET, ADD, REPLACE, APPEND, PREPEND, SETQ):
        extras = b"" if op in (APPEND, PREPEND) else store_extras(3)
        good = pkt(op, K + b"c", extras, b"v2")
        out.append(
            seq(ok(set_(K + b"c", b"v1")), Step([good], cas_from_last=True), ok(get(K + b"c")))
        )
        wrong = pkt(op, K + b"c", extras, b"v3", cas=0x7777777777)
        out.append(seq(ok(set_(K + b"c", b"v1")), ok(wrong), ok(get(K + b"c"))))
        out.append(seq(ok(pkt(op, K + b"m", extras, b"v", cas=99)), ok(get(K + b"m"))))
    for flags in (0, 1, 0xFFFFFFFF):
        out.append(seq(ok(set_(K + b"f", b"x", flags=flags)), ok(get(K + b"f", GETK))))
    for exptime in (0, 100, 2592000, 0xFFFFFFFF):
        out.append(seq(ok(set_(K + b"e", b"x", exptime=exptime)), ok(get(K + b"e"))))
    out.append(
        seq(
            ok(set_(K + b"z", b"")),
            ok(get(K + b"z")),
            ok(pkt(APPEND, K + b"z", b"", b"ab")),
            ok(get(K + b"z")),
        )
    )
    out.append(seq(ok(set_(K + b" sp ace", b"v")), ok(get(K + b" sp ace", GETK))))
    out.append(seq(ok(set_(K + b"\x00\xff\r\n", b"v")), ok(get(K + b"\x00\xff\r\n", GETK))))
    long_key = K + b"L" * (250 - len(K))
    out.append(seq(ok(set_(long_key, b"v")), ok(get(long_key, GETK))))
    out.append(seq(ok(set_(K + b"b", b"\x00" * 100_000)), ok(get(K + b"b"))))
    out.append(seq(ok(set_(K + b"b", b"y" * (ITEM_MAX - 300))), ok(get(K + b"b", GETK))))
    # Pipelines: quiet stores then one noop.
    out.append(
        seq(ok(*[set_(K + b"p%d" % i, b"v%d" % i, op=SETQ) for i in range(20)], get(K + b"p7")))
    )
    out.append(seq(ok(*[set_(K + b"q%d" % i, b"v", op=ADDQ) for i in (1, 2, 1, 3, 2)])))
    return out


def _retrieval() -> list[Sequence_]:
    out = []
    for op in (GET, GETQ, GETK, GETKQ):
        out.append(seq(ok(set_(K + b"g", b"hit", flags=42)), ok(get(K + b"g", op))))
        out.append(seq(ok(get(K + b"none", op))))
    # A multi-get as clients send it: quiet gets, hits and misses mixed, then noop.
    keys = [K + b"m%d" % i for i in range(6)]
    out.append(seq(ok(*[set_(k, k) for k in keys[::2]]), ok(*[get(k, GETKQ) for k in keys])))
    out.append(
        seq(
            ok(*[set_(k, k) for k in keys[1::2]]),
            ok(*[get(k, GETQ) for k in keys], get(keys[0], GETK)),
        )
    )
    for op in (GAT, GATQ, GATK, GATKQ):
        ext = struct.pack(">I", 100)
        out.append(
            seq(ok(set_(K + b"t", b"val", flags=3)), ok(pkt(op, K + b"t", ext)), ok(get(K + b"t")))
        )
        out.append(seq(ok(pkt(op, K + b"none", ext))))
    out.append(
        seq(
            ok(set_(K + b"t", b"val", flags=3)),
            ok(pkt(TOUCH, K + b"t", struct.pack(">I", 10))),
            ok(get(K + b"t")),
        )
    )
    out.append(seq(ok(pkt(TOUCH, K + b"none", struct.pack(">I", 10)))))
    out.append(
        seq(
            ok(set_(K + b"t", b"v")),
            ok(pkt(GAT, K + b"t", struct.pack(">I", 0xFFFFFFFF))),
            ok(get(K + b"t")),
        )
    )
    return out


def _delete_arith() -> list[Sequence_]:
    out = []
    for op in (DELETE, DELETEQ):
        out.append(seq(ok(set_(K + b"d", b"v")), ok(pkt(op, K + b"d")), ok(get(K + b"d"))))
        out.append(seq(ok(pkt(op, K + b"none"))))
    out.append(
        seq(
            ok(set_(K + b"d", b"v")),
            Step([pkt(DELETE, K + b"d")], cas_from_last=True),
            ok(get(K + b"d")),
        )
    )
    out.append(
        seq(ok(set_(K + b"d", b"v")), ok(pkt(DELETE, K + b"d", cas=12345678)), ok(get(K + b"d")))
    )
    for op in (INCR, DECR, INCRQ, DECRQ):
        out.append(seq(ok(pkt(op, K + b"n", arith_extras(5, 10, 0))), ok(get(K + b"n"))))
        out.append(seq(ok(pkt(op, K + b"n", arith_extras(5, 10, 0xFFFFFFFF))), ok(get(K + b"n"))))
        out.append(
            seq(
                ok(set_(K + b"n", b"100")),
                ok(pkt(op, K + b"n", arith_extras(7))),
                ok(get(K + b"n")),
            )
        )
        out.append(seq(ok(set_(K + b"n", b"abc")), ok(pkt(op, K + b"n", arith_extras(1)))))
    out.append(
        seq(
            ok(set_(K + b"w", b"18446744073709551615")),
            ok(pkt(INCR, K + b"w", arith_extras(2))),
            ok(get(K + b"w")),
        )
    )
    out.append(
        seq(ok(set_(K + b"w", b"3")), ok(pkt(DECR, K + b"w", arith_extras(10))), ok(get(K + b"w")))
    )
    out.append(
        seq(ok(set_(K + b"w", b"10")), ok(pkt(DECR, K + b"w", arith_extras(1))), ok(get(K + b"w")))
    )
    out.append(
        seq(
            ok(set_(K + b"w", b"1")),
            Step([pkt(INCR, K + b"w", arith_extras(1))], cas_from_last=True),
            ok(get(K + b"w")),
        )
    )
    out.append(
        seq(
            ok(set_(K + b"w", b"1")),
            ok(pkt(INCR, K + b"w", arith_extras(1), cas=5555555)),
            ok(get(K + b"w")),
        )
    )
    out.append(
        seq(
            ok(set_(K + b"w", b"12345678901234567890123")), ok(pkt(INCR, K + b"w", arith_extras(1)))
        )
    )
    out.append(seq(ok(set_(K + b"w", b"")), ok(pkt(INCR, K + b"w", arith_extras(1)))))
    out.append(
        seq(
            ok(pkt(INCR, K + b"x", arith_extras(1, 2**64 - 1, 0))),
            ok(pkt(INCR, K + b"x", arith_extras(1))),
            ok(get(K + b"x")),
        )
    )
    return out


def _other() -> list[Sequence_]:
    out = []
    for op in (FLUSH, FLUSHQ):
        out.append(seq(ok(set_(K + b"f", b"v")), ok(pkt(op)), ok(get(K + b"f"))))
        out.append(
            seq(
                ok(set_(K + b"f", b"v")),
                ok(pkt(op, extras=struct.pack(">I", 0))),
                ok(get(K + b"f")),
            )
        )
    # A delay far in the future flushes nothing while the test runs.
    out.append(
        seq(
            ok(set_(K + b"f", b"v")),
            ok(pkt(FLUSH, extras=struct.pack(">I", 0xFFFFFFF0))),
            ok(get(K + b"f")),
            ok(pkt(FLUSHQ)),
        )
    )
    out.append(seq(ok(pkt(NOOP), pkt(NOOP, opaque=1), pkt(NOOP, opaque=0xFFFFFFFF))))
    out.append(seq(ok(pkt(VERSION))))
    out.append(seq(ok(pkt(QUIT)), ok(pkt(NOOP))))
    out.append(seq(ok(pkt(QUITQ)), ok(pkt(NOOP))))
    out.append(seq(ok(set_(K + b"q", b"v"), pkt(QUITQ), get(K + b"q"))))
    for key in (
        b"",
        b"settings",
        b"items",
        b"slabs",
        b"sizes",
        b"reset",
        b"detail on",
        b"detail off",
        b"detail dump",
        b"detail",
        b"bogus",
        b"conns",
        b"resetting",
        b"settingsx",
        b"itemsx",
    ):
        out.append(seq(ok(pkt(STAT, key))))
    for op in (SASL_LIST, VERBOSITY):
        out.append(seq(ok(pkt(op))))
    out.append(seq(ok(pkt(VERBOSITY, extras=struct.pack(">I", 1)))))
    out.append(seq(ok(pkt(SASL_AUTH, b"PLAIN", b"", b"\x00u\x00p"))))
    out.append(seq(ok(pkt(SASL_STEP, b"PLAIN", b"", b"\x00u\x00p"))))
    out.append(
        seq(
            ok(
                set_(K + b"o", b"v"),
                get(K + b"o", GETK),
                pkt(DELETE, K + b"o"),
                get(K + b"o", GETK),
                pkt(NOOP),
            )
        )
    )
    out.append(seq(ok(set_(K + b"v", b"v"), pkt(GET, K + b"v", vbucket=7))))
    out.append(seq(ok(set_(K + b"v", b"v"), pkt(GET, K + b"v", datatype=1))))
    return out


def _malformed() -> list[Sequence_]:
    out = []
    # Wrong magic: first packet, after a good one, a response magic, text after binary.
    for magic in (0x81, 0x00, 0x7F):
        out.append(seq(bad(pkt(NOOP, magic=magic))))
    out.append(seq(ok(set_(K + b"a", b"v")), bad(pkt(GET, K + b"a", magic=0x81))))
    out.append(seq(ok(pkt(NOOP)), bad(b"get " + K + b"a\r\n" + b" " * 20)))
    # Extras + key longer than the body.
    for op in (GET, SET, DELETE, INCR, NOOP, 0x55):
        out.append(seq(bad(pkt(op, K + b"k", b"", b"", body=2))))
    out.append(seq(bad(pkt(SET, K + b"k", store_extras(), b"v", body=8))))
    # Extras or key claimed beyond the body (the bytes they claim do arrive).
    for op in (TOUCH, GAT, APPEND, FLUSH, INCR, STAT):
        out.append(seq(bad(pkt(op, b"", b"", b"", extlen=8, body=4) + b"\x00" * 8)))
    for op in (GETQ, SETQ, DELETEQ):
        out.append(seq(bad(pkt(op, b"k" * 20, b"", b"", body=10))))
    # An error in the middle of a quiet pipeline: the replies before it still go out.
    out.append(
        seq(ok(set_(K + b"a", b"v")), bad(get(K + b"a", GETKQ), pkt(0x60), get(K + b"a", GETKQ)))
    )
    out.append(seq(ok(set_(K + b"a", b"v")), bad(get(K + b"a", GETQ), pkt(GET, K, magic=0x42))))
    # Lengths the opcode does not allow: invalid arguments, then close.
    cases = [
        pkt(GET, K + b"k", b"\x00" * 4),
        pkt(GET),
        pkt(GETK, K + b"k", b"", b"extra"),
        pkt(SET, K + b"k", b"\x00" * 4, b"v"),
        pkt(SET, b"", store_extras(), b"v"),
        pkt(ADD, K + b"k", b"", b"v"),
        pkt(APPEND, K + b"k", store_extras(), b"v"),
        pkt(PREPEND, b"", b"", b"v"),
        pkt(DELETE, K + b"k", b"\x00" * 4),
        pkt(DELETE),
        pkt(INCR, K + b"k", b"\x00" * 8),
        pkt(DECR, b"", arith_extras(1)),
        pkt(INCR, K + b"k", arith_extras(1), b"v"),
        pkt(FLUSH, K + b"k"),
        pkt(FLUSH, b"", b"\x00" * 3),
        pkt(FLUSH, b"", b"\x00" * 8),
        pkt(NOOP, b"", b"", b"x"),
        pkt(VERSION, K),
        pkt(QUIT, b"", b"\x00" * 4),
        pkt(TOUCH, K + b"k"),
        pkt(TOUCH, b"", b"\x00" * 4),
        pkt(GAT, b"", b"\x00" * 4),
        pkt(GATK, K + b"k", b"\x00" * 8),
        pkt(STAT, b"", b"\x00" * 4),
        pkt(GETQ, b"k" * 251),
        pkt(SET, b"k" * 251, store_extras(), b"v"),
        pkt(DELETE, b"k" * 300),
        pkt(SASL_LIST, b"x"),
    ]
    for c in cases:
        out.append(seq(ok(set_(K + b"k", b"before")), bad(c), ok(get(K + b"k"))))
    # Unknown opcodes: memcached swallows the body length again after extras and key; the
    # padding makes the next request start right after.
    for op, key, extras, body in [
        (0x25, b"", b"", 0),
        (0x30, K, b"", 10),
        (0x40, b"", b"\x00" * 4, 4),
        (0x55, K + b"x", b"\x01\x02", 9),
        (0xFF, b"", b"", 3),
        (0x1F, b"", b"", 0),
    ]:
        p = pkt(
            op,
            key,
            extras,
            b"\x00" * (body - len(key) - len(extras)) if body >= len(key) + len(extras) else b"",
        )
        out.append(seq(bad(p + b"\x00" * (len(key) + len(extras))), ok(pkt(NOOP, opaque=5))))
    out.append(seq(bad(pkt(SASL_AUTH, b"M" * 40, b"", b"\x00u\x00p")), ok(pkt(NOOP))))
    # Too large: the value is refused before it arrives and swallowed; a set drops the old item.
    big = b"z" * (ITEM_MAX + 1)
    for op in (SET, SETQ, ADD, REPLACE):
        out.append(
            seq(ok(set_(K + b"o", b"old")), bad(set_(K + b"o", big, op=op)), ok(get(K + b"o")))
        )
    out.append(
        seq(ok(set_(K + b"o", b"old")), bad(pkt(APPEND, K + b"o", b"", big)), ok(get(K + b"o")))
    )
    # A claimed value far over the limit whose bytes never come: memcached holds its "Too
    # large" reply until the value is discarded, so nothing comes back. (Lengths of 2^31 and
    # more are left out: memcached reads them as negative numbers, which is a bug of its own.)
    out.append(
        seq(
            ok(set_(K + b"o", b"old")),
            bad(pkt(SET, K + b"o", store_extras(), b"x" * 10, body=0x7FFFFFF0), idle=True),
        )
    )
    out.append(seq(bad(pkt(APPEND, K + b"o", b"", b"x", body=0x7FFFFFFF), idle=True)))
    out.append(
        seq(bad(pkt(NOOP), pkt(ADD, K + b"o", store_extras(), b"x", body=2 * ITEM_MAX), idle=True))
    )
    # Part of an oversized value, then the rest: the refusal comes once the value is discarded.
    part = pkt(SET, K + b"o", store_extras(), b"", body=ITEM_MAX + 100)
    out.append(
        seq(
            ok(set_(K + b"o", b"old")),
            split(part + b"a" * 5000, b"b" * (ITEM_MAX + 100 - 5000 - 8 - len(K) - 1)),
            ok(get(K + b"o")),
        )
    )
    # Half-sent packets: each part alone must get no reply; together they are one request.
    full = set_(K + b"h", b"hello", flags=9) + get(K + b"h")
    for cut in (1, 10, 23, 24, 30, 33, len(full) - 1):
        out.append(seq(split(full[:cut], full[cut:])))
    out.append(seq(split(*[bytes([b]) for b in get(K + b"h")])))
    out.append(seq(bad(pkt(GET, K + b"k")[:20], idle=True)))
    out.append(seq(bad(pkt(GET, K + b"k", keylen=65535), idle=True)))
    out.append(seq(bad(set_(K + b"k", b"value")[:-2], idle=True)))
    return out


def corpus() -> list[Sequence_]:
    return _storage() + _retrieval() + _delete_arith() + _other() + _malformed()
