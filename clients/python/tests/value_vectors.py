"""The stored-value vectors of tests/vectors/python-client-values.json, without the client: values
in a JSON form, raw items over the text protocol, and a decoder of both value formats written from
the flags tables of docs/python-client.md (zstandard, zlib, msgpack, json and pickle directly).

Shared by make_value_vectors.py (which ran the pure-Python client that wrote the vectors) and
test_value_vectors.py (today's client), so nothing here imports memfleet.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import socket
import zlib
from pathlib import Path
from typing import Any

import msgpack
import zstandard

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "python-client-values.json"

# memfleet's flags (docs/python-client.md, "Flags table")
PICKLE, INTEGER, LONG, ZLIB, TEXT = 1, 2, 4, 8, 16
MSGPACK, JSON, ZSTD, ZSTD_DICT, ZSTD_MANAGED, DICT_ITEM = 256, 512, 4096, 8192, 16384, 32768
COMPRESSION = ZLIB | ZSTD | ZSTD_DICT | ZSTD_MANAGED
# php-memcached's (docs/python-client.md, "Values shared with PHP")
PHP_TYPE, PHP_COMPRESSED, PHP_ZLIB, PHP_ZSTD = 0xF, 16, 32, 128
PHP_STRING, PHP_LONG, PHP_DOUBLE, PHP_BOOL, PHP_JSON, PHP_MSGPACK = 0, 1, 2, 3, 6, 7
DICT_KEY_PREFIX = b"memfleet-dict:"
DICT_MAGIC = b"MFD1"


def tag(v: Any) -> Any:
    """A Python value as JSON that keeps its type: ``{"bytes": hex}``, ``{"int": digits}``, ..."""
    if isinstance(v, bool):
        return {"bool": v}
    if v is None:
        return {"none": None}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, str):
        return {"str": v}
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, list):
        return {"list": [tag(x) for x in v]}
    if isinstance(v, tuple):
        return {"tuple": [tag(x) for x in v]}
    if isinstance(v, frozenset):
        return {"frozenset": [tag(x) for x in sorted(v)]}
    if isinstance(v, dict):
        return {"dict": [[tag(k), tag(x)] for k, x in v.items()]}
    raise TypeError(f"no JSON form for {type(v).__name__}")


def untag(t: Any) -> Any:
    ((kind, x),) = t.items()
    if kind == "bool":
        return bool(x)
    if kind == "none":
        return None
    if kind == "bytes":
        return bytes.fromhex(x)
    if kind == "str":
        return str(x)
    if kind == "int":
        return int(x)
    if kind == "float":
        return float(x)
    if kind == "list":
        return [untag(y) for y in x]
    if kind == "tuple":
        return tuple(untag(y) for y in x)
    if kind == "frozenset":
        return frozenset(untag(y) for y in x)
    if kind == "dict":
        return {untag(k): untag(y) for k, y in x}
    raise ValueError(f"unknown tag {kind!r}")


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(VECTORS.read_text())
    return doc


# -- raw items (text protocol: memcached and memfleet serve alike) -----------------------------
def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _read_until(s: socket.socket, buf: bytes, end: bytes) -> bytes:
    while not buf.endswith(end):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return buf


def raw_set(address: str, key: bytes, flags: int, data: bytes) -> None:
    with _connect(address) as s:
        s.sendall(b"set %s %d 0 %d\r\n%s\r\n" % (key, flags, len(data), data))
        reply = _read_until(s, b"", b"\r\n")
    if reply != b"STORED\r\n":
        raise AssertionError(f"set {key!r}: {reply!r}")


def raw_get(address: str, key: bytes) -> tuple[bytes, int] | None:
    """(data, flags) as the server holds the item, or None."""
    with _connect(address) as s:
        s.sendall(b"get %s\r\n" % key)
        buf = _read_until(s, b"", b"\r\n")
        if buf == b"END\r\n":
            return None
        head, _, rest = buf.partition(b"\r\n")
        parts = head.split()
        if parts[0] != b"VALUE" or parts[1] != key:
            raise AssertionError(f"get {key!r}: {head!r}")
        flags, size = int(parts[2]), int(parts[3])
        while len(rest) < size + len(b"\r\nEND\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            rest += chunk
    if rest[size:] != b"\r\nEND\r\n":
        raise AssertionError(f"get {key!r}: trailing {rest[size:]!r}")
    return rest[:size], flags


# -- the independent decoder ---------------------------------------------------------------------
def dictionary_from_item(payload: bytes) -> bytes:
    """The zstd dictionary a published ``memfleet-dict:<id>`` item carries: ``MFD1``, the first 16
    bytes of the dictionary's sha256, the dictionary."""
    if payload[:4] != DICT_MAGIC:
        raise ValueError("not a managed dictionary item")
    digest, body = payload[4:20], payload[20:]
    if hashlib.sha256(body).digest()[:16] != digest:
        raise ValueError("managed dictionary item does not match its digest")
    return body


def _zstd(data: bytes, dictionary: bytes | None = None) -> bytes:
    d = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dictionary) if dictionary else None)
    return bytes(d.decompressobj().decompress(data))


def decode(
    fmt: str, data: bytes, flags: int, *, user_dict: bytes | None = None, managed: dict[int, bytes] | None = None
) -> Any:
    """The value ``data``/``flags`` stand for, by the flags table of ``fmt`` ("memfleet" or
    "php-memcached"); ``managed``: dictionary id -> dictionary."""
    if fmt == "php-memcached":
        return _decode_php(data, flags)
    if flags & ZSTD_MANAGED:
        dict_id = zstandard.get_frame_parameters(data).dict_id
        data = _zstd(data, (managed or {})[dict_id])
    elif flags & ZSTD_DICT:
        data = _zstd(data, user_dict)
    elif flags & ZSTD:
        data = _zstd(data)
    elif flags & ZLIB:
        data = zlib.decompress(data)
    kind = flags & ~COMPRESSION
    if kind == 0:
        return data
    if kind == TEXT:
        return data.decode("utf-8")
    if kind in (INTEGER, LONG):
        return int(data)
    if kind == MSGPACK:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    if kind == JSON:
        return json.loads(data)
    if kind == PICKLE:
        return pickle.loads(data)
    raise ValueError(f"flags {flags} are not in the table")


def _decode_php(data: bytes, flags: int) -> Any:
    if flags & PHP_COMPRESSED:
        size, body = int.from_bytes(data[:4], "little"), data[4:]
        if flags & PHP_ZLIB:
            data = zlib.decompress(body)
        elif flags & PHP_ZSTD:
            data = _zstd(body)
        else:
            raise ValueError(f"php-memcached compression {flags:#x} is not in the table")
        if len(data) != size:
            raise ValueError("php-memcached length header does not match")
    kind = flags & PHP_TYPE
    if kind == PHP_STRING:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data
    if kind == PHP_LONG:
        return int(data)
    if kind == PHP_DOUBLE:
        return float(data)
    if kind == PHP_BOOL:
        return data == b"1"
    if kind == PHP_JSON:
        return json.loads(data)
    if kind == PHP_MSGPACK:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    raise ValueError(f"php-memcached type {kind} is not in the table")


def versions() -> dict[str, str]:
    """What the exact bytes of an encoding depend on beyond the client: the zstd and zlib libraries
    (compressed output may change between their versions) and pickle's protocol."""
    return {
        "zstd": ".".join(map(str, zstandard.ZSTD_VERSION)),
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
        "pickle": str(pickle.HIGHEST_PROTOCOL),
        "msgpack": ".".join(map(str, msgpack.version)),
    }
