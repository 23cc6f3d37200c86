"""memfleet.django.MemfleetCache through Django's cache API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings

if not settings.configured:
    settings.configure(
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        USE_TZ=True,
    )
    django.setup()

from django.core.cache import InvalidCacheKey, caches  # noqa: E402
from django.test.utils import override_settings  # noqa: E402


@pytest.fixture()
def cache(server: Any) -> Iterator[Any]:
    conf = {
        "default": {
            "BACKEND": "memfleet.django.MemfleetCache",
            "LOCATION": server.address,
            "KEY_PREFIX": "site",
            "TIMEOUT": 60,
        },
        "v2": {
            "BACKEND": "memfleet.django.MemfleetCache",
            "LOCATION": [server.address],
            "KEY_PREFIX": "site",
            "VERSION": 2,
            "OPTIONS": {"near_cache": False, "serializer": "json"},
        },
        "near": {
            "BACKEND": "memfleet.django.MemfleetCache",
            "LOCATION": server.address,
            "KEY_PREFIX": "near",
            "OPTIONS": {"near_cache": True, "near_cache_ttl": 60},
        },
    }
    with override_settings(CACHES=conf):
        c = caches["default"]
        c.clear()
        yield c


def test_basic_api(cache: Any) -> None:
    cache.set("k", {"a": [1, 2]})
    assert cache.get("k") == {"a": [1, 2]}
    assert cache.get("missing", "dflt") == "dflt"
    assert cache.add("k", "no") is False
    assert cache.add("new", "yes") is True
    assert cache.has_key("new")
    assert cache.delete("new") is True
    assert cache.delete("new") is False
    assert cache.get_or_set("gos", lambda: "computed") == "computed"
    assert cache.get_or_set("gos", lambda: "other") == "computed"
    cache.set("none", None)
    assert cache.get("none", "dflt") is None


def test_prefix_and_versioning(cache: Any) -> None:
    cache.set("v", "one")
    raw = __import__("memfleet").Client([caches["default"]._servers[0]])
    assert raw.get("site:1:v") == "one"
    assert cache.get("v", version=2) is None
    cache.set("v", "two", version=2)
    assert caches["v2"].get("v") == "two"
    assert cache.incr_version("v") == 2
    assert cache.get("v", version=2) == "one"


def test_timeouts(cache: Any) -> None:
    cache.set("forever", 1, timeout=None)
    cache.set("now", 1, timeout=0)
    cache.set("short", 1, timeout=2)  # 1 may expire at the next clock tick, before the touch
    cache.set("long", 1, timeout=60 * 60 * 24 * 40)  # > 30 days: sent as an absolute time
    assert cache.get("now") is None
    assert cache.get("forever") == 1 and cache.get("long") == 1
    assert cache.touch("short", 100)
    assert cache.touch("absent") is False
    cache.set("short2", 1, timeout=1)
    time.sleep(2.1)
    assert cache.get("short") == 1 and cache.get("short2") is None
    assert cache.get_backend_timeout(None) == 0
    assert cache.get_backend_timeout(0) == -1
    assert cache.get_backend_timeout(60 * 60 * 24 * 31) > time.time()


def test_timeout_zero_expires_at_once_with_the_near_cache(cache: Any) -> None:
    near = caches["near"]
    near.set("now", 1, timeout=0)
    assert near.get("now") is None
    near.set("soon", 1, timeout=60)
    assert near.get("soon") == 1
    assert near.touch("soon", timeout=0)  # expire it now
    assert near.get("soon") is None
    assert near.get_or_set("lazy", 2, timeout=0) == 2
    assert near.get("lazy") is None


def test_many_incr_decr(cache: Any) -> None:
    assert cache.set_many({"a": 1, "b": "x", "c": [3]}) == []
    assert cache.get_many(["a", "b", "c", "d"]) == {"a": 1, "b": "x", "c": [3]}
    cache.delete_many(["a", "b"])
    assert cache.get_many(["a", "b", "c"]) == {"c": [3]}
    cache.set("n", 10)
    assert cache.incr("n") == 11
    assert cache.incr("n", 5) == 16
    assert cache.decr("n", 6) == 10
    assert cache.incr("n", -3) == 7
    with pytest.raises(ValueError):
        cache.incr("absent")


def test_invalid_keys(cache: Any) -> None:
    with pytest.raises(InvalidCacheKey):
        cache.set("has space", 1)
    with pytest.raises(InvalidCacheKey):
        cache.get("x" * 300)


def test_clear_and_locked_get_or_set(cache: Any) -> None:
    cache.set("x", 1)
    cache.clear()
    assert cache.get("x") is None
    assert cache.get_or_set_locked("l", lambda: "loaded", 30) == "loaded"
    assert cache.get("l") == "loaded"


def test_async_django_api(cache: Any) -> None:
    import asyncio

    async def main() -> None:
        await cache.aset("ak", "av")
        assert await cache.aget("ak") == "av"
        assert await cache.aget_many(["ak"]) == {"ak": "av"}

    asyncio.run(main())
