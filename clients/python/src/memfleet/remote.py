"""What ``remote_write`` yields: the token its remote markers hold, and the logical decoding
message that ties them to the transaction writing the rows (docs/regions.md)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

#: The prefix of the message the invalidator reads (``remote_markers_release: message``).
MESSAGE_PREFIX = "memfleet.remote_marker"

_STYLES = {
    "format": ("%s", "%s"),
    "numeric": ("$1", "$2"),
    "qmark": ("?", "?"),
    "pyformat": ("%(prefix)s", "%(content)s"),
}


def new_token() -> str:
    """A marker token: random, so a later write's marker never holds an earlier one's."""
    return secrets.token_hex(8)


@dataclass(frozen=True)
class RemoteWrite:
    """The markers set by one ``remote_write``: ``keys`` as the cache stores them (with the
    client's ``key_prefix``), each marker holding ``token``."""

    keys: tuple[str, ...]
    token: str

    @property
    def message(self) -> str:
        """The message content: one ``<key> <token>`` line per key."""
        return "".join(f"{k} {self.token}\n" for k in self.keys)

    def pg_message(self, paramstyle: str = "format") -> tuple[str, tuple[str, str] | dict[str, str]]:
        """``(sql, params)`` that emit the message; run it in the transaction that writes the
        rows (``cur.execute(*w.pg_message())``), so the invalidator removes the markers when
        that transaction reaches the region's replica, and only if no later write set them
        again. ``paramstyle``: ``format`` (``%s``: psycopg, psycopg2, pg8000), ``numeric``
        (``$1``: asyncpg), ``qmark`` or ``pyformat``."""
        try:
            a, b = _STYLES[paramstyle]
        except KeyError:
            raise ValueError(f"paramstyle {paramstyle!r} must be one of {sorted(_STYLES)}") from None
        sql = f"SELECT pg_logical_emit_message(true, {a}::text, {b}::text)"
        if paramstyle == "pyformat":
            return sql, {"prefix": MESSAGE_PREFIX, "content": self.message}
        return sql, (MESSAGE_PREFIX, self.message)
