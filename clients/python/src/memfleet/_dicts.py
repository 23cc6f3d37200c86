"""Managed zstd dictionaries: per-family sampling, background training, and the registry of
dictionaries a client can decompress with. No I/O: publishing, refreshing and fetching a
dictionary are operations in ``_ops`` that this module asks its client to start.

A family is a set of keys whose values look alike (``user:*:profile``). While a family has no
dictionary, the encoded values written to it are sampled; once it has ``min_samples`` values or
``min_bytes``, a background thread trains a dictionary with a random 32-bit id. The client then
publishes it under ``memfleet-dict:<id>`` on every server and only afterwards compresses with it,
so a value never names a dictionary that was not published. Readers load dictionaries by the id
in the zstd frame and check them against the content hash stored with them.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import re
import secrets
import threading
import time
from time import time as _time
from typing import Any, Callable, Union

import zstandard

from ._memo import memo
from ._native import zstd_sequences_use_dictionary_tables as sequences_use_dictionary_tables
from ._php import PhpSerde
from .serde import (
    FLAG_BYTES,
    FLAG_INTEGER,
    FLAG_ZSTD,
    FLAG_ZSTD_MANAGED,
    MissingDictionary,
    Serde,
    SerializationError,
)

log = logging.getLogger("memfleet")

KEY_PREFIX = b"memfleet-dict:"
# client flags of a published dictionary item: a bit no value uses, so a plain get returns raw bytes
ITEM_FLAGS = 1 << 15
_MAGIC = b"MFD1"
_DIGEST = 16  # bytes of sha256 stored before the dictionary
_ZSTD_DICT_MAGIC = b"\x37\xa4\x30\xec"
_THIRTY_DAYS = 60 * 60 * 24 * 30
_FOREVER = float("inf")
# values this big compress well without a dictionary and are not sampled
_MANAGED_MAX = 16 * 1024
_FAMILY_MEMO = 65536
# log2 of the entries in a dictionary's match-finder tables at levels 1-3: 16 KB each instead of
# level 3's 128 KB and 64 KB. Values come out 0.5% bigger; a compression that finds the caches cold
# (as it does between two requests) misses ~20% fewer cache lines, and a dictionary takes 6x less
# memory. Levels that search (4 and up) keep zstd's sizes: in 16 KB they find fewer matches (level
# 4 would gain 10-30% less over level 3) and are no faster
_TABLE_LOG = 12
# a frame carries zstd's 4-byte content checksum unless it is of a value under this size and codes
# its sequences with the dictionary's own tables. Read with another dictionary of the same id (an
# id evicted everywhere, drawn again), zstd's own checks reject all but about 1 in 26,000 of those
# (bench/same_id_dicts.py), while a frame that copies the dictionary with zstd's default tables
# decodes to the other dictionary's bytes: 4 bytes saved on nearly every small value, for that
# chance after a collision of 1 in 2**31
_CHECKED_FROM = 1024
# a family compresses at the next level up when that makes its held-out samples this much smaller
_LEVEL_UP_GAIN = 0.02
_MANAGED_FLAGS = FLAG_ZSTD | FLAG_ZSTD_MANAGED
_UNMANAGED_TYPES = frozenset((FLAG_BYTES, FLAG_INTEGER))  # raw bytes and counters stay as they are
# a zstd frame's header descriptor byte (after the 4-byte magic) and the dictionary id after it,
# when the descriptor says single segment (no window byte) and a 4-byte id
_FRAME_HEAD = slice(4, 9)
_SINGLE_SEGMENT_ID4 = 0x20 | 0x03
_HEAD_MEMO = 4096
_PREPARE = threading.Lock()  # one thread prepares a dictionary's tables
_NOT_FOUND_FOR = 1.0  # seconds a dictionary that could not be fetched is not asked for again
_VARIABLE_SEGMENT = re.compile(rb"[^:]*[0-9][^:]*")

FamilyFunc = Callable[[bytes], Union[bytes, str, None]]


def default_family(key: bytes) -> bytes:
    """Every ``:``-separated segment that contains a digit becomes ``*``: ``user:42:profile`` ->
    ``user:*:profile``, ``session:9f2c41`` -> ``session:*``, ``feed:2024-05-01:top`` -> ``feed:*:top``."""
    return _VARIABLE_SEGMENT.sub(b"*", key)


class ManagedDicts:
    """Settings of managed dictionaries (``Client(managed_dicts=ManagedDicts(...))``).

    ``family(key) -> name`` groups keys (bytes, without the client's key prefix); returning None
    leaves a key out. A family trains once it has ``min_samples`` values or ``min_bytes`` of them;
    at most ``max_families`` families are sampled at a time. Dictionaries are ``dict_size`` bytes,
    live at least ``dict_ttl`` seconds on the servers (longer if values written with them do), and
    are touched every ``refresh_interval`` seconds while in use. A family retrains when its values
    save ``drift`` times less over plain zstd than the dictionary did on held-out samples
    (checked on every 64th value, over windows of ``drift_window`` values). Dictionaries are trained
    for, and values compressed at, zstd ``level``; with ``level_up``, a family whose held-out
    samples come out at least 2% smaller at ``level + 1`` is compressed at that level (which takes
    1.6-3 times as long to compress).
    """

    def __init__(
        self,
        *,
        family: FamilyFunc = default_family,
        # 500 samples train as good a dictionary as 1,000 for records of 0.1-1 KB (within 1% on 8
        # shapes, bench/unseen_shapes.py), and in half the writes: in use well before a family's
        # 2,000th write even when training and publishing are slow
        min_samples: int = 500,
        min_bytes: int = 1 << 20,
        dict_size: int = 8192,
        max_families: int = 16,
        dict_ttl: int = 86400,
        refresh_interval: float = 60.0,
        drift: float = 1.25,
        drift_window: int = 2000,
        level: int = 3,
        level_up: bool = True,
    ) -> None:
        if min_samples < 10:
            raise ValueError("min_samples must be >= 10")
        self.family = family
        self.min_samples = min_samples
        self.min_bytes = min_bytes
        self.dict_size = dict_size
        self.max_families = max_families
        self.dict_ttl = dict_ttl
        self.refresh_interval = refresh_interval
        self.drift = drift
        self.drift_window = drift_window
        self.level = level
        self.level_up = level_up


def dict_key(dict_id: int) -> bytes:
    return KEY_PREFIX + b"%08x" % dict_id


class Dictionary:
    """One trained dictionary and what this client knows of its copies on the servers."""

    def __init__(self, data: bytes, level: int, family: Family | None = None) -> None:
        self.data = data
        self.id = int.from_bytes(data[4:8], "little")
        self.key = dict_key(self.id)
        self.digest = hashlib.sha256(data).digest()[:_DIGEST]
        self.family = family
        self.baseline = 1.0  # size with it / size with plain zstd, on held-out samples
        self.level = level
        self._zdict = zstandard.ZstdCompressionDict(data)
        self._precomputed = False
        self.local = threading.local()  # zstd contexts are not shared between threads
        # the latest expiry (Unix time) of a value written with it; what the servers' copies cover;
        # the smaller of the two: a value that expires by then needs no refresh
        self.need_until = 0.0
        self.covered_until = 0.0
        self.settled_until = 0.0
        self.next_refresh = 0.0
        self.refreshing = False

    @property
    def payload(self) -> bytes:
        """The item stored under :attr:`key`: magic, content hash, dictionary."""
        return _MAGIC + self.digest + self.data

    @classmethod
    def from_payload(cls, dict_id: int, payload: bytes, level: int) -> Dictionary | None:
        """The dictionary in a fetched item, or None if it is not dictionary ``dict_id`` intact."""
        body = payload[len(_MAGIC) + _DIGEST :]
        if (
            payload[: len(_MAGIC)] != _MAGIC
            or hashlib.sha256(body).digest()[:_DIGEST] != payload[len(_MAGIC) : len(_MAGIC) + _DIGEST]
            or body[:4] != _ZSTD_DICT_MAGIC
            or int.from_bytes(body[4:8], "little") != dict_id
        ):
            return None
        try:
            return cls(body, level)
        except zstandard.ZstdError:
            return None

    def at_level(self, level: int) -> Dictionary:
        """The same dictionary, compressing at ``level``."""
        d = Dictionary(self.data, level, self.family)
        d.baseline = self.baseline
        return d

    def renumbered(self) -> Dictionary:
        """The same dictionary under a new random id (its id collided with another's)."""
        d = Dictionary(self.data[:4] + new_id().to_bytes(4, "little") + self.data[8:], self.level, self.family)
        d.baseline = self.baseline
        return d

    def set_need(self, need_until: float) -> None:
        self.need_until = need_until
        self.settled_until = min(need_until, self.covered_until)

    def set_covered(self, covered_until: float) -> None:
        self.covered_until = covered_until
        self.settled_until = min(self.need_until, covered_until)

    def compressor(self) -> zstandard.ZstdCompressor:
        """This thread's compressor of frames without the content checksum (zstd contexts are not
        shared between threads)."""
        c: zstandard.ZstdCompressor | None = getattr(self.local, "c", None)
        if c is None:
            c = self.local.c = self._new_compressor(checksum=False)
        return c

    def checked_compressor(self) -> zstandard.ZstdCompressor:
        """This thread's compressor of frames with the content checksum."""
        c: zstandard.ZstdCompressor | None = getattr(self.local, "cc", None)
        if c is None:
            c = self.local.cc = self._new_compressor(checksum=True)
        return c

    def _new_compressor(self, checksum: bool) -> zstandard.ZstdCompressor:
        params = compression_params(self.level, len(self.data), checksum)
        with _PREPARE:
            if not self._precomputed:
                # the prepared tables hold no frame settings: both compressors share them
                self._zdict.precompute_compress(compression_params=params)
                self._precomputed = True
        return zstandard.ZstdCompressor(compression_params=params, dict_data=self._zdict)

    def decompressor(self) -> zstandard.ZstdDecompressor:
        """This thread's decompressor."""
        d: zstandard.ZstdDecompressor | None = getattr(self.local, "d", None)
        if d is None:
            d = self.local.d = zstandard.ZstdDecompressor(dict_data=self._zdict)
        return d

    def compress(self, data: bytes) -> bytes:
        """``data`` as a frame, with the content checksum where zstd's own checks are weak against
        a read with another dictionary of this id (see ``_CHECKED_FROM``)."""
        if len(data) < _CHECKED_FROM:
            c = getattr(self.local, "c", None)
            frame: bytes = (c if c is not None else self.compressor()).compress(data)
            if sequences_use_dictionary_tables(frame):
                return frame
        return self.checked_compressor().compress(data)

    def decompress(self, data: bytes) -> bytes:
        return self.decompressor().decompress(data)


def compression_params(level: int, dict_size: int, checksum: bool) -> zstandard.ZstdCompressionParameters:
    """zstd ``level`` with tables sized for a dictionary and a small value (not zstd's defaults for
    a stream of unknown size, ten times larger), capped at ``_TABLE_LOG`` for levels that do not
    search; frames with the content checksum if ``checksum``."""
    sized = zstandard.ZstdCompressionParameters.from_level(level, source_size=2048, dict_size=dict_size)
    searching = sized.strategy > zstandard.STRATEGY_DFAST
    return zstandard.ZstdCompressionParameters.from_level(
        level,
        source_size=2048,
        dict_size=dict_size,
        hash_log=sized.hash_log if searching else min(sized.hash_log, _TABLE_LOG),
        chain_log=sized.chain_log if searching else min(sized.chain_log, _TABLE_LOG),
        write_dict_id=1,
        write_content_size=1,
        write_checksum=int(checksum),
    )


def train(samples: list[bytes], dict_size: int, level: int, family: Family | None = None) -> Dictionary:
    """A dictionary with a new random id for ``samples`` (encoded values), of ``dict_size`` bytes
    at most and an eighth of the samples' size at most; raises ``zstandard.ZstdError`` when zstd
    cannot train one."""
    training: list[bytes | bytearray | memoryview] = list(samples)
    size = min(dict_size, max(1024, sum(map(len, training)) // 8))
    zd = zstandard.train_dictionary(size, training, dict_id=new_id(), level=level)
    return Dictionary(zd.as_bytes(), level, family)


def new_id() -> int:
    # zstd leaves ids below 32768 and from 2**31 to registered dictionaries
    return 32768 + secrets.randbelow((1 << 31) - 32768)


class Family:
    """Samples, the dictionary in use, and the compression ratio it is getting."""

    __slots__ = (
        "name",
        "samples",
        "sample_bytes",
        "sampling",
        "last_sample",
        "active",
        "pending",
        "publishing",
        "publish_after",
        "count",
        "held",
        "ready",
    )

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.samples: list[bytes] = []
        self.sample_bytes = 0
        self.sampling = True
        self.last_sample = time.monotonic()
        self.active: Dictionary | None = None
        self.pending: Dictionary | None = None  # trained, not published yet
        self.publishing = False
        self.publish_after = 0.0
        # the current drift window: values written with the dictionary, and every 64th of them with
        # its size as written (so the worker compresses it only without the dictionary)
        self.count = 0
        self.held: list[tuple[bytes, int]] = []
        # the dictionary to compress with when nothing else is due (not sampling, nothing to
        # publish): the fast path of a write reads this alone
        self.ready: Dictionary | None = None

    def settle(self) -> None:
        """Recompute :attr:`ready` after a change of state."""
        self.ready = self.active if not self.sampling and self.pending is None else None


_UNSEEN = Family(b"")  # a key whose family has not been looked up yet


class Dictionaries:
    """The dictionaries a client knows, and (when ``policy`` is given) the families it manages.

    ``start(dictionary, publish)`` is the client's: it starts the publish (or refresh) operation in
    the background. ``submit`` runs a function on this object's worker thread.
    """

    def __init__(
        self,
        serde: Serde | PhpSerde,
        policy: ManagedDicts | None,
        min_size: int,
        start: Callable[[Dictionary, bool], None],
    ) -> None:
        self._serde = serde
        self._serialize = serde.serialize
        self._compress = serde.compress
        self.policy = policy
        self._level = policy.level if policy is not None else 3
        self._min = min_size
        self._start = start
        self._known: dict[int, Dictionary] = {}
        self._by_head: dict[bytes, Dictionary] = memo()  # see _dictionary_of
        self._not_found: dict[int, float] = {}
        self.fetching: set[int] = set()
        self._families: dict[bytes, Family] = {}
        self._by_key: dict[bytes, Family | None] = memo()
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._logged: set[int] = set()
        self._local = threading.local()
        self.counts = {"trained": 0, "published": 0, "fetched": 0, "unreadable": 0, "lost": 0}
        serde.managed = self

    # -- writes --------------------------------------------------------------------------------
    def encode(self, rk: bytes, value: Any, ttl: int) -> tuple[bytes, int]:
        """Serialize, sample and compress ``value`` for routing key ``rk``."""
        data, flags = self._serialize(value)
        n = len(data)
        if not self._min <= n < _MANAGED_MAX or flags in _UNMANAGED_TYPES:
            return self._compress(data, flags)
        fam = self._by_key.get(rk, _UNSEEN)
        if fam is _UNSEEN:
            fam = self._family_of(rk)
        if fam is None:
            return self._compress(data, flags)
        d = fam.ready
        if d is None:
            d = self._due(fam, data)
            if d is None:
                return self._compress(data, flags)
        packed = d.compress(data)
        m = len(packed)
        count = fam.count = fam.count + 1
        if not count & 63:
            self._hold(fam, d, data, m, count)
        # keep the servers' copy alive as long as this value may live
        now = _time()
        expiry = (now + ttl if ttl <= _THIRTY_DAYS else float(ttl)) if ttl else _FOREVER
        if expiry > d.settled_until or now >= d.next_refresh:
            self._cover(d, expiry, now)
        if m * 10 <= n * 9:
            return packed, flags | _MANAGED_FLAGS
        return self._compress(data, flags)

    def _due(self, fam: Family, data: bytes) -> Dictionary | None:
        """A write to a family that is sampling, has a dictionary to publish, or has none: do what
        is due; the dictionary to compress with, if any."""
        if fam.sampling:
            self._sample(fam, data)
        if fam.pending is not None and not fam.publishing:
            self._publish(fam)
        return fam.active

    def _hold(self, fam: Family, d: Dictionary, data: bytes, packed: int, count: int) -> None:
        """Keep every 64th value of a drift window and its size with ``d``; at the window's end, the
        worker checks them for drift."""
        fam.held.append((data, packed))
        if count >= self.policy.drift_window:  # type: ignore[union-attr]
            held, fam.held, fam.count = fam.held, [], 0
            self.submit(lambda: self._check_drift(fam, d, held))

    def _family_of(self, rk: bytes) -> Family | None:
        policy = self.policy
        assert policy is not None
        name = policy.family(rk)
        fam: Family | None = None
        if name is not None:
            name_b = name.encode("utf-8") if isinstance(name, str) else name
            with self._lock:
                fam = self._families.get(name_b)
                if fam is None:
                    fam = self._admit(name_b, policy.max_families)
        if len(self._by_key) >= _FAMILY_MEMO:
            self._by_key.clear()
        self._by_key[rk] = fam
        return fam

    def _admit(self, name: bytes, limit: int) -> Family | None:
        """A new family, if there is room: one that never trained and got no sample for a minute
        makes way."""
        if len(self._families) >= limit:
            idle = [
                f
                for f in self._families.values()
                if f.active is None and f.pending is None and time.monotonic() - f.last_sample > 60
            ]
            if not idle:
                return None
            victim = min(idle, key=lambda f: f.last_sample)
            del self._families[victim.name]
            self._by_key.clear()
        fam = self._families[name] = Family(name)
        return fam

    def _sample(self, fam: Family, data: bytes) -> None:
        policy = self.policy
        assert policy is not None
        fam.samples.append(data)
        fam.sample_bytes += len(data)
        fam.last_sample = time.monotonic()
        if len(fam.samples) < policy.min_samples and fam.sample_bytes < policy.min_bytes:
            return
        with self._lock:
            if not fam.sampling:
                return
            fam.sampling = False
            samples, fam.samples, fam.sample_bytes = fam.samples, [], 0
            fam.settle()
        self.submit(lambda: self._train(fam, samples))

    def _train(self, fam: Family, samples: list[bytes]) -> None:
        """Runs on the worker thread."""
        policy = self.policy
        assert policy is not None
        held_out = samples[::10]
        try:
            d = train([s for i, s in enumerate(samples) if i % 10], policy.dict_size, self._level, fam)
        except zstandard.ZstdError as exc:
            log.warning("memfleet: training a dictionary for %r failed: %s", fam.name, exc)
            fam.sampling = True
            fam.settle()
            return
        with_dict = sum(len(d.compress(s)) for s in held_out)
        if policy.level_up and 1 <= self._level < zstandard.MAX_COMPRESSION_LEVEL:
            # the next level searches for longer matches; worth its time only where it finds them
            up = d.at_level(self._level + 1)
            with_up = sum(len(up.compress(s)) for s in held_out)
            if with_up <= with_dict * (1 - _LEVEL_UP_GAIN):
                saved = (with_dict - with_up) * 100 // with_dict
                log.info("memfleet: family %r compresses at level %d (%d%% smaller)", fam.name, up.level, saved)
                d, with_dict = up, with_up
        d.baseline = with_dict / max(1, sum(len(self._plain(s)) for s in held_out))
        self.counts["trained"] += 1
        if with_dict * 10 > sum(map(len, held_out)) * 9:
            # the family's values do not shrink by 10% even with a dictionary: stay plain
            log.info("memfleet: family %r does not gain from a dictionary", fam.name)
            return
        fam.pending = d
        fam.settle()

    def _plain(self, data: bytes) -> bytes:
        """``data`` compressed without a dictionary, to see what the dictionary gains."""
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = zstandard.ZstdCompressor(level=self._level)
        return c.compress(data)

    def _publish(self, fam: Family) -> None:
        now = time.monotonic()
        with self._lock:
            if fam.publishing or fam.pending is None or now < fam.publish_after:
                return
            fam.publishing = True
        self._start(fam.pending, True)

    def _check_drift(self, fam: Family, d: Dictionary, held: list[tuple[bytes, int]]) -> None:
        """Runs on the worker thread: retrain when the dictionary saves much less over plain zstd on
        ``held`` (values and their sizes with ``d``) than it did on its held-out samples."""
        gain = sum(m for _, m in held) / max(1, sum(len(self._plain(v)) for v, _ in held))
        with self._lock:
            if fam.active is not d or fam.sampling or fam.pending is not None:
                return
            if gain > d.baseline * self.policy.drift:  # type: ignore[union-attr]
                log.info("memfleet: family %r drifted (%.2f vs %.2f): retraining", fam.name, gain, d.baseline)
                fam.sampling = True
                fam.settle()

    def _cover(self, d: Dictionary, expiry: float, now: float) -> None:
        """A value that lives until ``expiry`` was written with ``d`` at ``now``: refresh the
        servers' copy if it would not live as long, or if its refresh is due."""
        if expiry > d.need_until:
            d.set_need(expiry)
        if (expiry > d.covered_until or now >= d.next_refresh) and not d.refreshing:
            d.refreshing = True
            self._start(d, False)

    # -- what the publish / refresh operations report -----------------------------------------
    def item_ttl(self, d: Dictionary) -> int:
        """TTL for ``d``'s item: at least ``dict_ttl``, and past every value written with it."""
        policy = self.policy
        if d.need_until == _FOREVER:
            return 0
        now = _time()
        seconds = max(policy.dict_ttl if policy else 86400, d.need_until - now + 60)
        return int(seconds) if seconds <= _THIRTY_DAYS else int(now + seconds)

    def covered(self, d: Dictionary, ttl: int) -> None:
        """The servers hold ``d`` with ``ttl``."""
        now = _time()
        d.set_covered(_FOREVER if ttl == 0 else float(ttl) if ttl > _THIRTY_DAYS else now + ttl)
        d.next_refresh = now + (self.policy.refresh_interval if self.policy else 60.0)

    def published(self, d: Dictionary, ttl: int) -> None:
        fam = d.family
        self._known[d.id] = d
        self._by_head.clear()
        self.covered(d, ttl)
        self.counts["published"] += 1
        if fam is not None:
            fam.active, fam.pending, fam.publishing = d, None, False
            fam.count, fam.held = 0, []
            fam.settle()

    def publish_failed(self, d: Dictionary) -> None:
        fam = d.family
        if fam is not None:
            fam.publishing = False
            fam.publish_after = time.monotonic() + 1.0

    def lost(self, d: Dictionary) -> None:
        """No server has ``d`` any more: its family stops using it and trains a new one."""
        fam = d.family
        self.counts["lost"] += 1
        d.refreshing = False
        log.warning("memfleet: dictionary %08x was evicted from every server; retraining", d.id)
        if fam is not None and fam.active is d:
            fam.active = None
            fam.count, fam.held = 0, []
            fam.sampling = True
            fam.settle()

    # -- reads ---------------------------------------------------------------------------------
    def decompress(self, data: bytes) -> bytes:
        d = self._by_head.get(data[_FRAME_HEAD])
        try:
            if d is None:
                d = self._dictionary_of(data)
            dctx = getattr(d.local, "d", None)
            return (dctx if dctx is not None else d.decompressor()).decompress(data)
        except zstandard.ZstdError as exc:
            raise SerializationError(f"bad zstd frame: {exc}") from exc

    def _dictionary_of(self, data: bytes) -> Dictionary:
        """The dictionary a frame names; remembered by the frame's first header bytes when they
        hold its whole id (single-segment frames with a 4-byte id: what this client writes)."""
        dict_id = zstandard.get_frame_parameters(data).dict_id
        d = self._known.get(dict_id)
        if d is None:
            raise MissingDictionary(dict_id)
        if data[4] & _SINGLE_SEGMENT_ID4 == _SINGLE_SEGMENT_ID4:
            heads = self._by_head
            if len(heads) >= _HEAD_MEMO:
                heads.clear()
            heads[data[_FRAME_HEAD]] = d
        return d

    def wanted(self, dict_id: int) -> bool:
        """Whether to fetch ``dict_id``: not known, and not found just now."""
        if dict_id in self._known:
            return False
        missed = self._not_found.get(dict_id)
        return missed is None or time.monotonic() - missed > _NOT_FOUND_FOR

    def fetched(self, dict_id: int, payload: bytes) -> bool:
        d = Dictionary.from_payload(dict_id, payload, self._level)
        if d is None:
            return False
        self._known[dict_id] = d
        self._by_head.clear()
        self._not_found.pop(dict_id, None)
        self.counts["fetched"] += 1
        return True

    def not_found(self, dict_id: int) -> None:
        if len(self._not_found) > 1024:
            self._not_found.clear()
        self._not_found[dict_id] = time.monotonic()

    def unreadable(self, dict_id: int) -> None:
        """A value read as a miss because its dictionary is nowhere to be found."""
        self.counts["unreadable"] += 1
        if dict_id not in self._logged and len(self._logged) < 1024:
            self._logged.add(dict_id)
            log.warning("memfleet: dictionary %08x not found on any server; its values read as misses", dict_id)

    def stats(self) -> dict[str, Any]:
        """Counters, each managed family's dictionary id (hex) or None, and the zstd level its
        values are compressed at (None while it has no dictionary)."""
        with self._lock:
            active = [(f.name.decode("utf-8", "replace"), f.active) for f in self._families.values()]
        families = {name: (f"{d.id:08x}" if d else None) for name, d in active}
        levels = {name: (d.level if d else None) for name, d in active}
        return {**self.counts, "known": len(self._known), "families": families, "levels": levels}

    # -- the worker thread ---------------------------------------------------------------------
    def submit(self, job: Callable[[], Any]) -> None:
        """Run ``job`` on the worker thread (started on demand, gone after 5 idle seconds)."""
        self._jobs.put(job)
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="memfleet-dicts", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=5.0)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._worker = None
                        return
                continue
            try:
                job()
            except Exception:
                log.exception("memfleet: dictionary job failed")
