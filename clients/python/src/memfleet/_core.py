"""The constructor and plumbing shared by :class:`Client` and :class:`AsyncClient`."""

from __future__ import annotations

import ssl
import weakref
from collections.abc import Sequence
from typing import Any, Callable, Generic, TypeVar

from ._base import ClientConfig, Key, ServerSpec, marker_prefix, marker_ttl, normalize_servers
from ._dicts import Dictionaries, Dictionary, ManagedDicts
from ._router import Router, ServerBase
from .near import NearCache
from .serde import DEFAULT_COMPRESS_THRESHOLD, DEFAULT_DICT_MIN_SIZE, SerializerSpec

S = TypeVar("S", bound="ServerBase[Any]")


def _abandon(servers: Sequence[ServerBase[Any]]) -> None:
    for s in servers:
        s.abandon()


class ClientCore(Generic[S]):
    """Configuration, servers and router; subclasses say which server type they pool."""

    _server_type: type[S]
    _start_dict_op: Callable[[Dictionary, bool], None]  # Operations: publish or refresh in the background

    def __init__(
        self,
        servers: ServerSpec | Sequence[ServerSpec],
        *,
        serializer: SerializerSpec = "msgpack",
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        compress_level: int = 3,
        zstd_dictionary: bytes | None = None,
        dict_min_size: int = DEFAULT_DICT_MIN_SIZE,
        allow_pickle: bool = False,
        connect_timeout: float | None = 1.0,
        timeout: float | None = 1.0,
        max_pool_size: int = 32,
        protocol: str = "auto",
        failure_limit: int = 2,
        retry_timeout: float = 2.0,
        key_prefix: str | bytes = "",
        near_cache: None | bool | NearCache = None,
        near_cache_size: int = 1024,
        near_cache_ttl: float = 1.0,
        near_cache_tracked_ttl: float = 60.0,
        near_cache_tracking: bool = True,
        ignore_errors: bool = False,
        managed_dicts: bool | ManagedDicts = True,
        value_format: str = "memfleet",
        php_compression: str = "zlib",
        tls: ssl.SSLContext | None = None,
        remote_marker_prefix: str | bytes = "rm:",
        remote_marker_ttl: int = 60,
    ) -> None:
        self._cfg = ClientConfig(
            serializer=serializer,
            compress_threshold=compress_threshold,
            compress_level=compress_level,
            zstd_dictionary=zstd_dictionary,
            dict_min_size=dict_min_size,
            allow_pickle=allow_pickle,
            key_prefix=key_prefix,
            near_cache=near_cache,
            near_cache_size=near_cache_size,
            near_cache_ttl=near_cache_ttl,
            near_cache_tracked_ttl=near_cache_tracked_ttl,
            value_format=value_format,
            php_compression=php_compression,
        )
        servers_ = [
            self._server_type(
                h,
                p,
                w,
                connect_timeout=connect_timeout,
                timeout=timeout,
                max_pool_size=max_pool_size,
                protocol=protocol,
                tls=tls,
            )
            for h, p, w in normalize_servers(servers)
        ]
        self._router: Router[S] = Router(servers_, failure_limit, retry_timeout)
        # a multi-key fetch asks with text `get k1 k2 ...` (servers answer it with less work than
        # one `mg` per key) unless the user asked for meta only
        self._text_multiget = protocol != "meta"
        # writes from a replica region: the marker of cache key K is the cache key prefix + K
        self._rm_prefix = marker_prefix(remote_marker_prefix)
        self._rm_ttl = marker_ttl(remote_marker_ttl)
        self.ignore_errors = ignore_errors
        self._serde = self._cfg.serde
        self._near = self._cfg.near
        if self._near is not None and near_cache_tracking:
            # each server's invalidation notices, followed from its first use on
            for s in servers_:
                s.source = self._near.add_source(s.address)
            # listeners hold the servers, not the client: a client dropped without close()
            # does not leave them running
            weakref.finalize(self, _abandon, servers_)
        # managed dictionaries: every client reads with them; writes use them unless turned off,
        # compression is off, the user gave a dictionary of their own, or values are PHP's
        policy: ManagedDicts | None = None
        if managed_dicts and compress_threshold is not None and zstd_dictionary is None and value_format == "memfleet":
            policy = managed_dicts if isinstance(managed_dicts, ManagedDicts) else ManagedDicts()
        self._dicts = Dictionaries(self._serde, policy, dict_min_size, self._start_dict_op)
        serde = self._serde
        self._encode = self._dicts.encode if policy is not None else lambda rk, value, ttl: serde.encode(value)

    @property
    def dictionaries(self) -> Dictionaries:
        """Managed dictionaries: ``stats()`` counts values read as misses for want of one."""
        return self._dicts

    @property
    def near_cache(self) -> NearCache | None:
        return self._near

    @property
    def servers(self) -> list[str]:
        return [s.address for s in self._router.servers]

    def server_for(self, key: Key) -> str:
        """Address of the server that holds ``key`` right now."""
        return self._router.server_for(self._cfg.key(key)[1]).address
