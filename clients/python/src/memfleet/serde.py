"""Value encoding: type flags shared with pylibmc / pymemcache, serializers and zstd compression.

Flags table (the 32-bit client flags field of every item):

====== ================ ======================================================
bit    name             meaning
====== ================ ======================================================
0      (none set)       raw bytes                       (pylibmc, pymemcache)
1      FLAG_PICKLE      pickle                          (pylibmc, pymemcache)
2      FLAG_INTEGER     int as ASCII digits             (pymemcache; pylibmc reads it)
4      FLAG_LONG        int as ASCII digits, read only  (pylibmc writes it)
8      FLAG_ZLIB        zlib-compressed, read only      (pylibmc, pymemcache)
16     FLAG_TEXT        str as UTF-8                    (pylibmc, pymemcache)
256    FLAG_MSGPACK     msgpack                         (memfleet)
512    FLAG_JSON        JSON (UTF-8)                    (memfleet)
1024   FLAG_CUSTOM      custom serializer               (memfleet)
2048   FLAG_MSGPACK_DELTA msgpack, sorted int lists as differences (memfleet, opt-in; earlier
                        memfleet clients return these values as bytes)
4096   FLAG_ZSTD        zstd-compressed                 (memfleet)
8192   FLAG_ZSTD_DICT   zstd with the trained dictionary (memfleet, with FLAG_ZSTD)
16384  FLAG_ZSTD_MANAGED zstd with a managed dictionary named by the frame's dictionary id
                        (memfleet, with FLAG_ZSTD; see ``_dicts``)
====== ================ ======================================================
"""

from __future__ import annotations

import itertools
import json
import operator
import pickle
import threading
import zlib
from collections.abc import Iterable
from typing import Any, Callable, Protocol, Union

import msgpack
import zstandard

FLAG_BYTES = 0
FLAG_PICKLE = 1
FLAG_INTEGER = 2
FLAG_LONG = 4
FLAG_ZLIB = 8
FLAG_TEXT = 16
FLAG_MSGPACK = 1 << 8
FLAG_JSON = 1 << 9
FLAG_CUSTOM = 1 << 10
FLAG_MSGPACK_DELTA = 1 << 11
FLAG_ZSTD = 1 << 12
FLAG_ZSTD_DICT = 1 << 13
FLAG_ZSTD_MANAGED = 1 << 14

_COMPRESSION_MASK = FLAG_ZLIB | FLAG_ZSTD | FLAG_ZSTD_DICT | FLAG_ZSTD_MANAGED
_TYPE_MASK = ~_COMPRESSION_MASK & 0xFFFFFFFF

# Default compression threshold, from measurements of zstd level 3 on msgpack'd records and HTML
# (docs/python-client.md): at 128-256 bytes records shrink by 0-8% (below the 10% bar), at 512 bytes
# by ~18% for ~5 us, at 1 KB by ~40%; HTML shrinks far more. 512 keeps nearly all of the savings.
DEFAULT_COMPRESS_THRESHOLD = 512
# With a trained dictionary, small records compress well, so try from this size up.
DEFAULT_DICT_MIN_SIZE = 64

# Values at least this big are tested on a sample first, so incompressible blobs cost little.
_SAMPLE_FROM = 32 * 1024
_SAMPLE = 2048

Dumps = Callable[[Any], bytes]
Loads = Callable[[bytes], Any]
SerializerSpec = Union[str, tuple[Dumps, Loads]]


class SerializationError(ValueError):
    """A value could not be encoded or decoded."""


class MissingDictionary(Exception):
    """A value needs managed dictionary ``dict_id``, which this client has not loaded."""

    def __init__(self, dict_id: int) -> None:
        super().__init__(f"zstd dictionary {dict_id:08x} is not loaded")
        self.dict_id = dict_id


class DictionarySource(Protocol):
    """Where a :class:`Serde` finds managed dictionaries (``_dicts.Dictionaries``)."""

    def decompress(self, data: bytes) -> bytes:
        """Decompress a frame made with a managed dictionary; raises :class:`MissingDictionary`."""


class ZstdContexts(threading.local):
    """This thread's zstd contexts. python-zstandard's may not be shared between threads: a call
    releases the GIL while it works in its context, so two threads at once corrupt it (a crash)."""

    def __init__(self, level: int, zdict: zstandard.ZstdCompressionDict | None = None) -> None:
        self.cctx = zstandard.ZstdCompressor(level=level)
        self.dctx = zstandard.ZstdDecompressor()
        self.dict_cctx: zstandard.ZstdCompressor | None = None
        self.dict_dctx: zstandard.ZstdDecompressor | None = None
        if zdict is not None:
            self.dict_cctx = zstandard.ZstdCompressor(level=level, dict_data=zdict)
            self.dict_dctx = zstandard.ZstdDecompressor(dict_data=zdict)


def _msgpack_dumps(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def _msgpack_loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


# msgpack extension type of a sorted list of ints: the msgpack array of its first value and the
# differences between neighbours (small, where the values themselves are not)
_DELTA_EXT = 1
_DELTA_MIN = 8  # shorter lists gain less than the extension's header costs
_INTS = {int}
_SCALARS = frozenset((int, float, str, bytes, bool, type(None)))


def _delta_encode(value: Any) -> Any:
    """``value`` with every sorted list (or tuple) of at least ``_DELTA_MIN`` ints replaced by an
    extension of their differences; other values as they are."""
    t = type(value)
    if t is dict:
        return {k: _delta_encode(v) for k, v in value.items()}
    if t is not list and t is not tuple:
        return value
    types = set(map(type, value))
    if types == _INTS and len(value) >= _DELTA_MIN:
        deltas = list(map(operator.sub, value[1:], value[:-1]))
        if min(deltas) >= 0:
            try:
                packed = msgpack.packb([value[0], *deltas])
            except OverflowError:  # differences beyond 64 bits: as the plain list
                return value
            return msgpack.ExtType(_DELTA_EXT, packed)
    if types <= _SCALARS:  # nothing inside to look at
        return value
    return [_delta_encode(v) for v in value]


def _delta_ext(code: int, data: bytes) -> Any:
    if code != _DELTA_EXT:
        return msgpack.ExtType(code, data)
    return list(itertools.accumulate(msgpack.unpackb(data)))


def _msgpack_delta_dumps(value: Any) -> bytes:
    return msgpack.packb(_delta_encode(value), use_bin_type=True)  # type: ignore[no-any-return]


def _msgpack_delta_loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_delta_ext)


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json_loads(data: bytes) -> Any:
    return json.loads(data)


def _pickle_dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def train_dictionary(samples: Iterable[Any], size: int = 16384, serializer: SerializerSpec = "msgpack") -> bytes:
    """Train a zstd dictionary from sample values (objects or bytes) and return it as bytes.

    Pass the result as ``zstd_dictionary=`` to :class:`memfleet.Client`. Every client that reads
    the values must use the same dictionary.
    """
    serde = Serde(serializer=serializer, compress_threshold=None, allow_pickle=True)
    encoded: list[bytes | bytearray | memoryview] = [serde.encode(s)[0] for s in samples]
    if not encoded:
        raise ValueError("train_dictionary needs samples")
    return bytes(zstandard.train_dictionary(size, encoded).as_bytes())


class Serde:
    """Encodes Python values to (bytes, flags) and back."""

    def __init__(
        self,
        serializer: SerializerSpec = "msgpack",
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        compress_level: int = 3,
        zstd_dictionary: bytes | None = None,
        dict_min_size: int = DEFAULT_DICT_MIN_SIZE,
        allow_pickle: bool = False,
        managed: DictionarySource | None = None,
    ) -> None:
        self.managed = managed
        self._type_flag: int
        self._dumps: Dumps
        if isinstance(serializer, tuple):
            self._dumps, custom_loads = serializer
            self._type_flag = FLAG_CUSTOM
        elif serializer == "msgpack":
            self._dumps, custom_loads = _msgpack_dumps, _msgpack_loads
            self._type_flag = FLAG_MSGPACK
        elif serializer == "msgpack-delta":
            self._dumps, custom_loads = _msgpack_delta_dumps, _msgpack_delta_loads
            self._type_flag = FLAG_MSGPACK_DELTA
        elif serializer == "json":
            self._dumps, custom_loads = _json_dumps, _json_loads
            self._type_flag = FLAG_JSON
        elif serializer == "pickle":
            self._dumps, custom_loads = _pickle_dumps, pickle.loads
            self._type_flag = FLAG_PICKLE
            allow_pickle = True
        else:
            raise ValueError(f"unknown serializer {serializer!r}")
        self.allow_pickle = allow_pickle
        self._loaders: dict[int, Loads] = {
            FLAG_MSGPACK: _msgpack_loads,
            FLAG_JSON: _json_loads,
            FLAG_CUSTOM: custom_loads,
            FLAG_MSGPACK_DELTA: _msgpack_delta_loads,
        }
        self.compress_threshold = compress_threshold
        # smallest size that may be compressed at all (plain threshold or dictionary minimum)
        self._min_compress = min(
            compress_threshold if compress_threshold is not None else 1 << 62,
            dict_min_size if zstd_dictionary is not None else 1 << 62,
        )
        self._level = compress_level
        self._dict_min = dict_min_size
        self._has_dict = zstd_dictionary is not None
        self._zstd = ZstdContexts(
            compress_level, zstandard.ZstdCompressionDict(zstd_dictionary) if zstd_dictionary is not None else None
        )

    # -- encoding ---------------------------------------------------------------------------
    def encode(self, value: Any) -> tuple[bytes, int]:
        data, flags = self.serialize(value)
        if len(data) < self._min_compress:
            return data, flags
        return self.compress(data, flags)

    def serialize(self, value: Any) -> tuple[bytes, int]:
        """(bytes, type flag), uncompressed."""
        t = type(value)
        if t is bytes:
            data: bytes = value
            flags = FLAG_BYTES
        elif t is str:
            data = value.encode("utf-8")
            flags = FLAG_TEXT
        elif t is int:
            data = str(value).encode()
            flags = FLAG_INTEGER
        elif t is bytearray or t is memoryview:
            data = bytes(value)
            flags = FLAG_BYTES
        else:
            try:
                data = self._dumps(value)
            except Exception as exc:
                raise SerializationError(f"cannot serialize {t.__name__}: {exc}") from exc
            flags = self._type_flag
        return data, flags

    def compress(self, data: bytes, flags: int) -> tuple[bytes, int]:
        """Compress a serialized value if that pays (the threshold and the 10% rule)."""
        n = len(data)
        if self._has_dict and n >= self._dict_min:
            packed = self._zstd.dict_cctx.compress(data)  # type: ignore[union-attr]
            if len(packed) * 10 <= n * 9:
                return packed, flags | FLAG_ZSTD | FLAG_ZSTD_DICT
            return data, flags
        threshold = self.compress_threshold
        if threshold is not None and n >= threshold:
            cctx = self._zstd.cctx
            if n >= _SAMPLE_FROM and len(cctx.compress(data[:_SAMPLE])) * 10 > _SAMPLE * 9:
                # a big value whose first 2 KB do not compress by 10% is almost surely incompressible
                return data, flags
            packed = cctx.compress(data)
            # keep compression only when it saves at least 10%
            if len(packed) * 10 <= n * 9:
                return packed, flags | FLAG_ZSTD
        return data, flags

    # -- decoding ---------------------------------------------------------------------------
    def decode(self, data: bytes, flags: int) -> Any:
        if flags == FLAG_BYTES:
            return data
        if flags & _COMPRESSION_MASK:
            managed = self.managed
            if flags & FLAG_ZSTD_MANAGED and managed is not None:
                data = managed.decompress(data)
            else:
                data = self._decompress(data, flags)
            flags &= _TYPE_MASK
        if flags == FLAG_TEXT:
            return data.decode("utf-8")
        if flags == FLAG_MSGPACK:
            return _msgpack_loads(data)
        if flags == FLAG_INTEGER or flags == FLAG_LONG:
            return int(data)
        if flags == FLAG_BYTES:
            return data
        if flags == FLAG_PICKLE:
            if not self.allow_pickle:
                raise SerializationError(
                    "value is pickled; pass allow_pickle=True (or serializer='pickle') only if "
                    "nobody else can write to this cache"
                )
            return pickle.loads(data)
        loads = self._loaders.get(flags)
        if loads is None:
            # unknown flags from another client: hand back the raw bytes
            return data
        return loads(data)

    def _decompress(self, data: bytes, flags: int) -> bytes:
        if flags & FLAG_ZSTD_MANAGED:
            if self.managed is None:
                raise SerializationError("value was compressed with a managed dictionary; none available")
            return self.managed.decompress(data)
        if flags & FLAG_ZSTD_DICT:
            dict_dctx = self._zstd.dict_dctx
            if dict_dctx is None:
                raise SerializationError("value was compressed with a zstd dictionary; none configured")
            return bytes(dict_dctx.decompress(data))
        if flags & FLAG_ZSTD:
            return bytes(self._zstd.dctx.decompress(data))
        if flags & FLAG_ZLIB:
            return zlib.decompress(data)
        return data
