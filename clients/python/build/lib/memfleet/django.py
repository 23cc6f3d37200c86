"""Django cache backend.

    CACHES = {
        "default": {
            "BACKEND": "memfleet.django.MemfleetCache",
            "LOCATION": ["10.0.0.1:11211", "10.0.0.2:11211"],   # or "a:11211;b:11211"
            "TIMEOUT": 300,
            "KEY_PREFIX": "site1",
            "OPTIONS": {"serializer": "msgpack", "near_cache": True},   # memfleet.Client arguments
        }
    }

Semantics follow Django's memcached backends: timeout None = never expire, 0 = expire now,
more than 30 days = converted to an absolute Unix time; keys are built with KEY_PREFIX, VERSION
and KEY_FUNCTION and validated for memcached.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache, InvalidCacheKey, memcache_key_warnings

from .client import Client

_THIRTY_DAYS = 60 * 60 * 24 * 30


class MemfleetCache(BaseCache):  # type: ignore[misc]
    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(params)
        if isinstance(server, str):
            self._servers = [s for s in server.replace(",", ";").split(";") if s.strip()]
        else:
            self._servers = list(server)
        self._options: dict[str, Any] = dict(params.get("OPTIONS") or {})
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._servers, **self._options)
        return self._client

    def get_backend_timeout(self, timeout: Any = DEFAULT_TIMEOUT) -> int:
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return 0  # memcached: never expire
        timeout = int(timeout)
        if timeout <= 0:
            return -1  # memcached treats a negative TTL as already expired
        if timeout > _THIRTY_DAYS:
            # memcached reads anything above 30 days as an absolute Unix timestamp
            timeout += int(time.time())
        return int(timeout)

    def validate_key(self, key: str) -> None:
        for warning in memcache_key_warnings(key):
            raise InvalidCacheKey(warning)

    def _key(self, key: Any, version: int | None) -> str:
        return str(self.make_and_validate_key(key, version=version))

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        return self.client.add(self._key(key, version), value, self.get_backend_timeout(timeout))

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        return self.client.get(self._key(key, version), default)

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        if not self.client.set(self._key(key, version), value, self.get_backend_timeout(timeout)):
            # like Django's memcached backends: make sure a failed set does not leave an old value
            self.client.delete(self._key(key, version))

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        return self.client.touch(self._key(key, version), self.get_backend_timeout(timeout))

    def delete(self, key: Any, version: int | None = None) -> bool:
        return self.client.delete(self._key(key, version))

    def get_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        key_map = {self._key(k, version): k for k in keys}
        found = self.client.get_many(list(key_map))
        return {key_map[k]: v for k, v in found.items()}  # type: ignore[index]

    def close(self, **kwargs: Any) -> None:
        # keep the connection pools across requests
        pass

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        k = self._key(key, version)
        if delta < 0:
            value = self.client.decr(k, -delta)
        else:
            value = self.client.incr(k, delta)
        if value is None:
            raise ValueError(f"Key '{key}' not found")
        return value

    def decr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return self.incr(key, -delta, version)

    def set_many(self, data: dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> list[Any]:
        original = {self._key(k, version): k for k in data}
        failed = self.client.set_many(
            {self._key(k, version): v for k, v in data.items()}, self.get_backend_timeout(timeout)
        )
        return [original[k] for k in failed]  # type: ignore[index]

    def delete_many(self, keys: Iterable[Any], version: int | None = None) -> None:
        self.client.delete_many([self._key(k, version) for k in keys])

    def clear(self) -> None:
        self.client.flush_all()

    def get_or_set_locked(
        self, key: Any, loader: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        """Stampede-safe get_or_set (memfleet's meta-protocol leases); Django's own get_or_set is not."""
        return self.client.get_or_set(self._key(key, version), loader, self.get_backend_timeout(timeout))
