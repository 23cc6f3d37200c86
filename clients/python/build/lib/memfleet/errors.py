"""Exceptions raised by memfleet."""

from __future__ import annotations

from .serde import SerializationError


class MemfleetError(Exception):
    """Base class of memfleet errors."""


class MemfleetConnectionError(MemfleetError, ConnectionError):
    """A server could not be reached, timed out or closed the connection."""


class MemfleetServerError(MemfleetError):
    """The server answered ERROR, CLIENT_ERROR or SERVER_ERROR."""


class NoServersError(MemfleetConnectionError):
    """Every server is marked dead."""


__all__ = [
    "MemfleetError",
    "MemfleetConnectionError",
    "MemfleetServerError",
    "NoServersError",
    "SerializationError",
]
