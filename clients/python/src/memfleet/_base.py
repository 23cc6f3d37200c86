"""Configuration shared by the blocking and the asyncio client."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Union

from ._memo import memo
from ._native import MAX_KEY, valid_key
from ._php import PhpSerde
from ._proto import check_key
from .near import NearCache
from .serde import DEFAULT_COMPRESS_THRESHOLD, DEFAULT_DICT_MIN_SIZE, Serde

ServerSpec = Union[str, tuple[str, int], tuple[str, int, int]]
Key = Union[str, bytes]


def parse_server(spec: ServerSpec) -> tuple[str, int, int]:
    """``"host"``, ``"host:port"``, ``"host:port:weight"``, ``(host, port)`` or ``(host, port, weight)``."""
    if isinstance(spec, tuple):
        if len(spec) == 2:
            host, port, weight = str(spec[0]), int(spec[1]), 1
        elif len(spec) == 3:
            host, port, weight = str(spec[0]), int(spec[1]), int(spec[2])
        else:
            raise ValueError(f"bad server tuple {spec!r}")
    else:
        s = spec.strip()
        if s.startswith("["):  # [ipv6]:port
            end = s.index("]")
            host = s[1:end]
            rest = s[end + 1 :].lstrip(":").split(":") if end + 1 < len(s) else []
        else:
            parts = s.split(":")
            host, rest = parts[0], parts[1:]
        port = int(rest[0]) if rest and rest[0] else 11211
        weight = int(rest[1]) if len(rest) > 1 else 1
    if weight < 1:
        raise ValueError("server weight must be >= 1")
    return host, port, weight


def normalize_servers(servers: ServerSpec | Sequence[ServerSpec]) -> list[tuple[str, int, int]]:
    if isinstance(servers, (str, tuple)):
        specs: Sequence[ServerSpec] = [servers]
    else:
        specs = servers
    out = [parse_server(s) for s in specs]
    if not out:
        raise ValueError("at least one server is required")
    return out


_KEY_MEMO = 65536


class ClientConfig:
    """Key handling, value encoding and the near cache; no I/O."""

    def __init__(
        self,
        *,
        key_prefix: str | bytes,
        near_cache: None | bool | NearCache,
        near_cache_size: int,
        near_cache_ttl: float,
        near_cache_tracked_ttl: float = 60.0,
        value_format: str = "memfleet",
        php_compression: str = "zlib",
        **serde_options: Any,
    ) -> None:
        """``serde_options`` are :class:`Serde`'s arguments."""
        self.serde: Serde | PhpSerde
        if value_format == "php-memcached":
            if serde_options.get("zstd_dictionary") is not None:
                raise ValueError("php-memcached cannot read values compressed with a zstd dictionary")
            self.serde = PhpSerde(
                serde_options.get("serializer", "msgpack"),
                serde_options.get("compress_threshold", DEFAULT_COMPRESS_THRESHOLD),
                serde_options.get("compress_level", 3),
                php_compression,
            )
        elif value_format == "memfleet":
            self.serde = Serde(**serde_options)
        else:
            raise ValueError(f'value_format must be "memfleet" or "php-memcached", not {value_format!r}')
        self.key_prefix = key_prefix.encode("utf-8") if isinstance(key_prefix, str) else bytes(key_prefix)
        # memo of validated keys: hot keys skip encoding and validation
        self._keys: dict[Key, tuple[bytes, bytes]] = memo()
        if near_cache is True:
            self.near: NearCache | None = NearCache(near_cache_size, near_cache_ttl, near_cache_tracked_ttl)
        elif isinstance(near_cache, NearCache):
            self.near = near_cache
        else:
            self.near = None

    def key(self, key: Key) -> tuple[bytes, bytes]:
        """(wire key with prefix, routing key without prefix, as libmemcached hashes it)."""
        try:
            hit = self._keys.get(key)
        except TypeError:  # bytearray / memoryview keys are not hashable
            key = bytes(key)  # type: ignore[arg-type]
            hit = None
        if hit is not None:
            return hit
        kb = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        wire = self.key_prefix + kb if self.key_prefix else kb
        check_key(wire)
        keys = self._keys
        if len(keys) >= _KEY_MEMO:
            keys.clear()
        keys[key] = (wire, kb)
        return wire, kb

    def unprefix(self, wire: bytes) -> bytes:
        return wire[len(self.key_prefix) :] if self.key_prefix else wire


DEFAULTS: dict[str, Any] = {
    "compress_threshold": DEFAULT_COMPRESS_THRESHOLD,
    "dict_min_size": DEFAULT_DICT_MIN_SIZE,
}


def as_list(keys: Iterable[Key]) -> list[Key]:
    return keys if isinstance(keys, list) else list(keys)


def one_or_many(keys: Key | Iterable[Key]) -> list[Key]:
    """A key (``str`` or ``bytes``) as a list of one; any other iterable of keys as a list."""
    if isinstance(keys, (str, bytes)):
        return [keys]
    return as_list(keys)


_MAX_TTL = 60 * 60 * 24 * 30


def marker_prefix(prefix: str | bytes) -> bytes:
    p = prefix.encode("utf-8") if isinstance(prefix, str) else bytes(prefix)
    if len(p) >= MAX_KEY or not valid_key(p):
        raise ValueError(f"remote_marker_prefix {prefix!r}: 1-{MAX_KEY - 1} bytes, no spaces or control characters")
    return p


def marker_ttl(ttl: int) -> int:
    """A marker's TTL in seconds: it must expire (a lost invalidation must not leave it for ever)."""
    if not 0 < ttl <= _MAX_TTL:
        raise ValueError(f"a remote marker's TTL must be 1 to {_MAX_TTL} seconds, not {ttl!r}")
    return int(ttl)
