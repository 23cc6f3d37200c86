"""libmemcached-compatible weighted ketama ring (MEMCACHED_DISTRIBUTION_CONSISTENT_WEIGHTED, md5).

This is the ring php-memcached's OPT_LIBKETAMA_COMPATIBLE, pylibmc's ``ketama_weighted`` and
twemproxy's ``distribution: ketama`` + ``hash: md5`` build, so a mixed fleet agrees on which
server holds each key. The ring itself is the server's (memfleet's Rust ring crate), reached
through the ``memfleet._native`` extension.
"""

from __future__ import annotations

from ._native import Ring, key_hash, points_for

POINTS_PER_SERVER = 160


def point_name(host: str, port: int) -> str:
    """libmemcached names a server ``host`` when it uses the default port, else ``host:port``."""
    return host if port == 11211 else f"{host}:{port}"


__all__ = ["POINTS_PER_SERVER", "Ring", "key_hash", "point_name", "points_for"]
