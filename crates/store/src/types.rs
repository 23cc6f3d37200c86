//! The store's public vocabulary: configuration, commands, options, outcomes and the item
//! view handed to read closures. No logic beyond constructors and size rules.

use crate::segbuf::{PinnedValue, ValueAt};

/// Store construction parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Hard limit on item memory (segments + large buffers + index), bytes (`-m` × 2^20).
    pub mem_limit: u64,
    /// Largest item accepted (`-I`), counted like memcached (see `item_too_large`).
    pub item_size_max: usize,
    /// Unix time the process started; absolute exptimes at or before it are already expired.
    pub process_start: u32,
    /// False (`-M`): when memory is full, stores fail instead of evicting items.
    pub evictions: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mem_limit: 64 << 20,
            item_size_max: 1 << 20,
            process_start: 0,
            evictions: true,
        }
    }
}

/// A read-only view of an item, valid while the shard lock is held (inside the closure).
/// Flag fields show the state *before* this access updated them.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    /// The item's key.
    pub key: &'a [u8],
    /// The item's value (without memcached's trailing CRLF).
    pub value: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// The item's cas unique.
    pub cas: u64,
    /// Absolute unix expiry, 0 = never.
    pub exptime: u32,
    /// Seconds left as memcached's `t` flag reports it: -1 when the item never expires.
    pub ttl_remaining: i64,
    /// Unix time of the last access or update (memcached's it->time).
    pub last_access: u32,
    /// Read at least once since it was stored (memcached's ITEM_FETCHED).
    pub fetched: bool,
    /// Marked stale by `md I` / `ms I` (meta `X`).
    pub stale: bool,
    /// A recache token was already handed out (meta `Z`).
    pub token_sent: bool,
    pub(crate) value_at: ValueAt<'a>,
}

impl ItemView<'_> {
    /// The value, kept readable once the read closure has returned and the shard is
    /// unlocked: for large items only (None otherwise), which a reply then writes without
    /// holding up other requests for the shard.
    pub fn pin(&self) -> Option<PinnedValue> {
        self.value_at.pin()
    }
}

/// Storage commands. `Cas` carries the client's cas unique.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Add the value after the existing one (flags and exptime are kept).
    Append,
    /// Add the value before the existing one (flags and exptime are kept).
    Prepend,
    /// Store only if the item's cas equals this one.
    Cas(u64),
}

/// What a storage command did, as memcached replies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreResult {
    /// `STORED`.
    Stored,
    /// `NOT_STORED`: the mode's condition failed (add of a present key, replace of an absent one…).
    NotStored,
    /// `EXISTS`: the cas did not match.
    Exists,
    /// `NOT_FOUND`: cas of an absent key.
    NotFound,
    /// The item exceeds the item size limit (or the key is empty or longer than 250 bytes).
    TooLarge,
    /// No memory could be found for the item.
    NoMemory,
}

/// Outcome of a store: result and, when stored, the item's new cas (0 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOutcome {
    /// What happened.
    pub result: StoreResult,
    /// The stored item's cas; 0 when nothing was stored.
    pub cas: u64,
}

/// Meta-protocol (`ms`) extras.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOpts {
    /// `C` with append/prepend/add modes: compare against this cas (0 = no compare).
    /// For set/replace use `StoreMode::Cas` (as memcached turns them into a cas command).
    pub compare_cas: u64,
    /// `I`: a `Cas` older than the item's stores the value as stale (keeping TTL/token).
    pub invalidate: bool,
    /// `E`: use this cas instead of a generated one.
    pub new_cas: Option<u64>,
    /// Meta semantics: a failed store (too large / no memory) removes the old item in every
    /// mode; the text protocol does so only for `set`.
    pub meta: bool,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteResult {
    /// Removed (or, with `invalidate`, marked stale).
    Deleted,
    /// No live item under the key.
    NotFound,
    /// `compare_cas` did not match.
    Exists,
    /// Only with `DeleteOpts::remove_value` when the empty replacement could not be stored.
    NoMemory,
}

/// Meta-protocol (`md`) extras.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeleteOpts {
    /// `C`: only delete when the item's cas equals this.
    pub compare_cas: Option<u64>,
    /// `I`: mark stale (new cas, token cleared) instead of removing.
    pub invalidate: bool,
    /// `T` with `I`: new internal exptime for the stale item.
    pub new_exptime: Option<u32>,
    /// `x`: keep the item but drop its value and client flags.
    pub remove_value: bool,
}

/// What a touch did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchResult {
    /// The item's exptime was updated.
    Touched,
    /// No live item under the key.
    NotFound,
}

/// Meta-protocol (`ma`) extras.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArithOpts {
    /// `C`: compare cas (0 = none).
    pub compare_cas: u64,
    /// `E`: explicit new cas.
    pub new_cas: Option<u64>,
    /// `N` + `J`: on miss create the item with (initial value, internal exptime).
    pub vivify: Option<(u64, u32)>,
    /// `T`: new internal exptime applied on success.
    pub new_exptime: Option<u32>,
}

/// What an incr/decr did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithResult {
    /// Applied.
    Ok {
        /// The new numeric value (the reply).
        value: u64,
        /// The item's new cas.
        cas: u64,
        /// The item's internal exptime (for `t`).
        exptime: u32,
    },
    /// No live item under the key (and no vivify).
    NotFound,
    /// The value is not a decimal number (memcached's "non-numeric value").
    NonNumeric,
    /// `C` did not match.
    Exists,
    /// A longer result needed a new item and no memory could be found.
    NoMemory,
}

/// Meta get (`mg`) options affecting item state. Exptimes are internal (see `Store::exptime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaGetOpts {
    /// `u`: don't bump (fetched bit, last access).
    pub no_bump: bool,
    /// `T`: touch.
    pub touch: Option<u32>,
    /// `N`: vivify on miss with this exptime.
    pub vivify: Option<u32>,
    /// `R`: win a recache token when the remaining TTL is below this (internal exptime).
    pub recache: Option<u32>,
}

/// Lease outcome of a meta get hit, decided under the shard lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// `W`: this caller won the right to recache.
    pub win: bool,
    /// `Z`: a token was already sent for this item.
    pub token_sent: bool,
    /// `X`: the item is stale.
    pub stale: bool,
    /// The item was created by vivify in this call.
    pub created: bool,
}

/// Too large by memcached's item_size_ok: 48-byte header + 8 cas + key + NUL + flags suffix
/// + value + CRLF must fit in item_size_max.
pub fn item_too_large(key_len: usize, value_len: usize, flags: u32, item_size_max: usize) -> bool {
    let suffix = if flags != 0 { 4 } else { 0 };
    48 + 8 + key_len + 1 + suffix + value_len + 2 > item_size_max
}

/// Where a storage request's value comes from.
#[derive(Debug)]
pub enum Value<'a> {
    /// Bytes the store copies into the item.
    Bytes(&'a [u8]),
    /// A buffer the caller received the value straight into, at `at..at + len`. With room in
    /// front for the item header (at least `item::encoded_len(key, len, flags, u64::MAX) - len` bytes,
    /// and either exactly that or `item::MIN_ITEM`..16,000 bytes more), set/add/replace/cas make
    /// the buffer the item's own, as for a large item, so the value is never copied (memcached
    /// likewise reads values into the item). Other modes, and buffers without such room, are
    /// stored by copying.
    Received {
        /// The whole receive buffer.
        buf: Box<[u8]>,
        /// Where the value starts in `buf`.
        at: usize,
        /// The value's length.
        len: usize,
    },
}

/// One storage command (`set`/`add`/`replace`/`append`/`prepend`/`cas`/`ms`): build it with
/// `new` or `received`, refine it with the builder methods, hand it to `Store::store`.
#[derive(Debug)]
pub struct StoreRequest<'a> {
    /// The command (a cas command carries the client's cas unique).
    pub mode: StoreMode,
    /// The key (1..=250 bytes, else the store answers `TooLarge`).
    pub key: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// Internal exptime (see `Store::exptime`), 0 = never.
    pub exptime: u32,
    /// The new value.
    pub value: Value<'a>,
    /// Meta-protocol extras (all off for the text protocol).
    pub opts: StoreOpts,
}

impl<'a> StoreRequest<'a> {
    /// Stores a copy of `value` under `key`; no flags, no expiry, no meta extras.
    pub fn new(mode: StoreMode, key: &'a [u8], value: &'a [u8]) -> Self {
        StoreRequest {
            mode,
            key,
            flags: 0,
            exptime: 0,
            value: Value::Bytes(value),
            opts: StoreOpts::default(),
        }
    }

    /// Stores the value the caller received into `buf` at `at..at + len` (see `Value::Received`).
    pub fn received(mode: StoreMode, key: &'a [u8], buf: Box<[u8]>, at: usize, len: usize) -> Self {
        StoreRequest {
            value: Value::Received { buf, at, len },
            ..StoreRequest::new(mode, key, &[])
        }
    }

    /// With client flags.
    pub fn flags(self, flags: u32) -> Self {
        StoreRequest { flags, ..self }
    }

    /// With an internal exptime.
    pub fn exptime(self, exptime: u32) -> Self {
        StoreRequest { exptime, ..self }
    }

    /// With meta-protocol extras.
    pub fn opts(self, opts: StoreOpts) -> Self {
        StoreRequest { opts, ..self }
    }
}
