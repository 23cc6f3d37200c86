"""libmemcached-compatible weighted ketama ring (MEMCACHED_DISTRIBUTION_CONSISTENT_WEIGHTED, md5).

This is the ring php-memcached's OPT_LIBKETAMA_COMPATIBLE, pylibmc's ``ketama_weighted`` and
twemproxy's ``distribution: ketama`` + ``hash: md5`` build, so a mixed fleet agrees on which
server holds each key.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence
from hashlib import md5
from math import floor

POINTS_PER_SERVER = 160

_F32 = struct.Struct("<f")
_U32X4 = struct.Struct("<4I")
_U32 = struct.Struct("<I")


def _f32(x: float) -> float:
    """Round to the nearest float32, as C's float arithmetic does after every operation."""
    return float(_F32.unpack(_F32.pack(x))[0])


def point_name(host: str, port: int) -> str:
    """libmemcached names a server ``host`` when it uses the default port, else ``host:port``."""
    return host if port == 11211 else f"{host}:{port}"


def points_for(weight: int, total_weight: int, live_servers: int) -> int:
    """Number of ring points of one server, reproducing libmemcached's float32 arithmetic."""
    pct = _f32(_f32(float(weight)) / _f32(float(total_weight)))
    x = _f32(pct * POINTS_PER_SERVER)
    x = _f32(x / 4)
    x = _f32(x * _f32(float(live_servers)))
    # the C code adds a double constant, so this last addition happens in double precision
    return int(floor(x + 0.0000000001)) * 4


def key_hash(key: bytes) -> int:
    """md5 key hash: little-endian uint32 of the first 4 digest bytes."""
    return int(_U32.unpack_from(md5(key).digest())[0])


class Ring:
    """Sorted continuum of (point, server index)."""

    __slots__ = ("_points", "_owners", "_single")

    def __init__(self, names: Sequence[str], weights: Sequence[int]) -> None:
        if len(names) != len(weights):
            raise ValueError("names and weights differ in length")
        total = sum(weights)
        n = len(names)
        pairs: list[tuple[int, int]] = []
        for index, (name, weight) in enumerate(zip(names, weights)):
            count = points_for(weight, total, n)
            prefix = name.encode("utf-8") + b"-"
            for i in range(count // 4):
                digest = md5(prefix + str(i).encode()).digest()
                for p in _U32X4.unpack(digest):
                    pairs.append((p, index))
        pairs.sort()
        self._points = [p for p, _ in pairs]
        self._owners = [o for _, o in pairs]
        self._single = n == 1

    def __len__(self) -> int:
        return len(self._points)

    def index_for_hash(self, h: int) -> int:
        i = bisect_left(self._points, h)
        if i == len(self._points):
            i = 0
        return self._owners[i]

    def index_for(self, key: bytes) -> int:
        if self._single:
            return 0
        return self.index_for_hash(key_hash(key))
