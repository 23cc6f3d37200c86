"""php-memcached 3.x's value layout (``Client(value_format="php-memcached")``), so PHP pages and
Python workers read each other's values.

The 32-bit flags, as php-memcached lays them out:

- bits 0-3, the type: 0 string, 1 integer (decimal digits), 2 float (decimal, ``Infinity``,
  ``-Infinity``, ``NaN``), 3 bool (``"1"`` or empty), 4 PHP ``serialize()``, 5 igbinary, 6 JSON,
  7 msgpack;
- bits 4-15, how it is stored: 16 compressed, with 32 zlib, 64 fastlz or 128 zstd (zstd from
  php-memcached 3.3);
- bits 16-31: the PHP application's own flags (``Memcached::OPT_USER_FLAGS``), ignored here.

A compressed value starts with its uncompressed length (4 bytes, little-endian), then the zlib
stream, the zstd frame or the FastLZ block (read only: PHP's default compression).
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

import msgpack
import zstandard

from .serde import SerializationError, ZstdContexts, _json_dumps, _msgpack_dumps

STRING, LONG, DOUBLE, BOOL, SERIALIZED, IGBINARY, JSON, MSGPACK = range(8)
TYPE_MASK = 0xF
COMPRESSED = 1 << 4
ZLIB = 1 << 5
FASTLZ = 1 << 6
ZSTD = 1 << 7
_STORAGE_MASK = 0xFFF0
_DOUBLE_WORDS = {math.inf: b"Infinity", -math.inf: b"-Infinity"}


def fastlz_decompress(src: bytes, size: int) -> bytes:
    """Decode a FastLZ block (levels 1 and 2) of ``size`` bytes; ValueError if it is malformed.

    A block is a series of instructions; the first byte's top 3 bits give the level. An
    instruction byte below 32 is a run of that many plus one literal bytes. Otherwise its top 3
    bits are the match length minus 2 (7: more length bytes follow, one at level 1, a series
    ending below 255 at level 2), its low 5 bits and the next byte the distance back minus 1; at
    level 2, distance bits all ones are followed by a 16-bit big-endian distance beyond 8191.
    """
    if not src:
        raise ValueError("empty FastLZ block")
    level = (src[0] >> 5) + 1
    if level > 2:
        raise ValueError(f"unknown FastLZ level {level}")
    out = bytearray()
    end = len(src)
    ip = 1
    ctrl = src[0] & 31
    try:
        while True:
            if ctrl < 32:
                run = ctrl + 1
                if ip + run > end:
                    raise ValueError("FastLZ literal run past the end")
                out += src[ip : ip + run]
                ip += run
            else:
                length = (ctrl >> 5) + 2
                if length == 9:
                    if level == 1:
                        length += src[ip]
                        ip += 1
                    else:
                        while True:
                            code = src[ip]
                            ip += 1
                            length += code
                            if code != 255:
                                break
                code = src[ip]
                ip += 1
                distance = ((ctrl & 31) << 8) + code
                if level == 2 and code == 255 and ctrl & 31 == 31:
                    distance = (src[ip] << 8 | src[ip + 1]) + 8191
                    ip += 2
                start = len(out) - distance - 1
                if start < 0:
                    raise ValueError("FastLZ match before the start")
                if distance + 1 >= length:
                    out += out[start : start + length]
                else:  # the match overlaps what it writes: a repeating pattern
                    for i in range(start, start + length):
                        out.append(out[i])
            if len(out) > size:
                raise ValueError("FastLZ block longer than its header says")
            if ip >= end:
                return bytes(out)
            ctrl = src[ip]
            ip += 1
    except IndexError:
        raise ValueError("FastLZ block cut short") from None


def _loads_text(data: bytes) -> Any:
    """PHP strings are bytes: text when they are UTF-8, else bytes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


class PhpSerde:
    """Encodes values as php-memcached does and decodes what it stores; same interface as
    :class:`memfleet.serde.Serde`, without managed dictionaries."""

    managed: object = None  # what Serde reads managed dictionaries from; php-memcached has none

    def __init__(
        self,
        serializer: Any = "msgpack",
        compress_threshold: int | None = 2000,
        compress_level: int = 3,
        compression: str = "zlib",
    ) -> None:
        if serializer == "msgpack":
            self._dumps, self._type = _msgpack_dumps, MSGPACK
        elif serializer == "json":
            self._dumps, self._type = _json_dumps, JSON
        else:
            raise ValueError('value_format="php-memcached" takes serializer="msgpack" or "json"')
        if compression not in ("zlib", "zstd"):
            raise ValueError('php_compression must be "zlib" or "zstd"')
        self.compress_threshold = compress_threshold
        self._zstd = compression == "zstd"
        self._zlib_level = max(0, min(9, compress_level))
        self._contexts = ZstdContexts(compress_level)

    def serialize(self, value: Any) -> tuple[bytes, int]:
        t = type(value)
        if t is str:
            return value.encode("utf-8"), STRING
        if t is bytes or t is bytearray or t is memoryview:
            return bytes(value), STRING
        if t is bool:
            return (b"1" if value else b""), BOOL
        if t is int:
            return str(value).encode(), LONG
        if t is float:
            if math.isnan(value):
                return b"NaN", DOUBLE
            return _DOUBLE_WORDS.get(value) or repr(value).encode(), DOUBLE
        try:
            return self._dumps(value), self._type
        except Exception as exc:
            raise SerializationError(f"cannot serialize {t.__name__}: {exc}") from exc

    def compress(self, data: bytes, flags: int) -> tuple[bytes, int]:
        """Strings and serialized values from the threshold up, kept if they shrink by 10%
        (php-memcached does not compress numbers and bools)."""
        threshold = self.compress_threshold
        if threshold is None or len(data) < threshold or flags in (LONG, DOUBLE, BOOL):
            return data, flags
        if self._zstd:
            packed, how = self._contexts.cctx.compress(data), ZSTD
        else:
            packed, how = zlib.compress(data, self._zlib_level), ZLIB
        if (len(packed) + 4) * 10 > len(data) * 9:
            return data, flags
        return len(data).to_bytes(4, "little") + packed, flags | COMPRESSED | how

    def encode(self, value: Any) -> tuple[bytes, int]:
        data, flags = self.serialize(value)
        return self.compress(data, flags)

    def decode(self, data: bytes, flags: int) -> Any:
        if flags & COMPRESSED:
            data = self._decompress(data, flags)
        kind = flags & TYPE_MASK
        try:
            if kind == STRING:
                return _loads_text(data)
            if kind == LONG:
                return int(data)
            if kind == DOUBLE:
                return float(data)  # also reads Infinity, -Infinity, NaN
            if kind == BOOL:
                return data[:1] == b"1"
            if kind == MSGPACK:
                return msgpack.unpackb(data, raw=False, strict_map_key=False)
            if kind == JSON:
                return json.loads(data)
        except (ValueError, msgpack.ExtraData) as exc:
            raise SerializationError(f"bad php-memcached value of type {kind}: {exc}") from exc
        raise SerializationError(
            f"php-memcached type {kind} (PHP serialize or igbinary) cannot be read; "
            "use Memcached::SERIALIZER_MSGPACK or SERIALIZER_JSON_ARRAY in PHP"
        )

    def _decompress(self, data: bytes, flags: int) -> bytes:
        if len(data) < 4:
            raise SerializationError("compressed php-memcached value without its length")
        size = int.from_bytes(data[:4], "little")
        body = data[4:]
        try:
            if flags & ZLIB:
                out = zlib.decompress(body)
            elif flags & ZSTD:
                out = self._contexts.dctx.decompress(body, max_output_size=size)
            elif flags & FASTLZ:
                out = fastlz_decompress(body, size)
            else:
                raise SerializationError(f"unknown php-memcached compression in flags {flags & _STORAGE_MASK:#x}")
        except (zlib.error, zstandard.ZstdError, ValueError) as exc:
            raise SerializationError(f"bad compressed php-memcached value: {exc}") from exc
        if len(out) != size:
            raise SerializationError("php-memcached value's length does not match its header")
        return out
