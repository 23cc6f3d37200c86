"""memfleet: a fast memcached client.

libmemcached-compatible weighted ketama, meta protocol with text fallback, msgpack + zstd values
with pylibmc/pymemcache-compatible flags, stampede-safe ``get_or_set``, an optional near cache,
an asyncio client and a Django cache backend.
"""

from ._dicts import ManagedDicts, default_family
from .aio import AsyncClient
from .client import Client
from .errors import (
    MemfleetConnectionError,
    MemfleetError,
    MemfleetServerError,
    NoServersError,
    SerializationError,
)
from .near import NearCache
from .remote import MESSAGE_PREFIX as REMOTE_MARKER_MESSAGE_PREFIX
from .remote import RemoteWrite
from .serde import Serde, train_dictionary

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Client",
    "ManagedDicts",
    "MemfleetConnectionError",
    "MemfleetError",
    "MemfleetServerError",
    "NearCache",
    "NoServersError",
    "REMOTE_MARKER_MESSAGE_PREFIX",
    "RemoteWrite",
    "SerializationError",
    "Serde",
    "default_family",
    "train_dictionary",
]
