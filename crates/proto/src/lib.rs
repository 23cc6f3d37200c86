//! memcached text + meta protocol request parser and reply helpers. Pure: no I/O.
//!
//! The server keeps the bytes it has read in a buffer and calls [`parse`] in a loop:
//!
//! * [`Parse::Request`]`(req, consumed)`: one whole request (command line plus, for storage
//!   commands, its data block). `req` borrows `buf` (keys and data are `&[u8]` slices, zero copy);
//!   execute it, then drop `consumed` bytes.
//! * [`Parse::Incomplete`]`{ total }`: read more. `total` is the number of bytes needed from the
//!   start of `buf` when it is known (a data block announced by a valid, not too large length),
//!   so the buffer can be reserved once. A line without `\n` that is already too long is never
//!   `Incomplete`: it becomes an `Error` with `close` (memcached closes silently on a non-get line
//!   of more than 2048 bytes; get/gets lines may be up to [`Limits::max_get_line`]).
//! * [`Parse::Error`]: write `reply` (exact memcached bytes, possibly empty because of
//!   `noreply`), drop `consumed` bytes, unlink `unlink` from the store if set (memcached
//!   deletes the old item when a set/ms is refused as too large), then discard the next
//!   `swallow` bytes (from the buffer and then from the socket), then close if `close`.
//!
//! Everything memcached 1.6.18 decides while parsing is decided here, with its exact error
//! strings and quirks (32-bit truncation of numbers, `noreply` only as last token, line cut at
//! the first NUL byte, `\r` optional, meta flag validation, base64 keys). What depends on the
//! store (NOT_FOUND, EXISTS, ...) or on server settings (`-A` for shutdown, `-F` for flush_all)
//! is left to the server; the relevant fields are in [`Request`].
//!
//! Replies are built with the helpers in [`reply`]; a client or proxy reads them back with
//! [`response`] (memcached) and [`resp`] (RESP2, for Redis pools), and passes a parsed request
//! on to another server with [`forward`].
//!
//! Server duties that mirror memcached but are not visible to a parser:
//! * get/gets/gat/gats: iterate [`Keys`]; on `Err(KeyTooLong)` drop the VALUEs built so far and
//!   answer only `CLIENT_ERROR bad command line format`. memcached 1.6.18 even drops *every*
//!   reply not yet written to the socket (e.g. a pipelined `STORED`), because it flushes only
//!   after get-family commands, `mn`, or when its read buffer is drained.
//! * `mg`/`ma` with `late_error`: execute, then answer the error instead of the normal reply.
//! * Read at least 16 KiB per socket read: memcached's read buffer is 16 KiB, so a long
//!   non-get line that arrives whole is processed; only a partial one > 2048 bytes closes.
//! * `reply::write_base64` echoes a binary key for the `k` flag.
//!
//! [`binary`] is the binary protocol codec (framing, validation and replies of memcached
//! 1.6.18's `proto_bin.c`); it has its own entry point, [`binary::parse_request`].
//!
//! [`stream::run`] is the reference consume/swallow loop (used by the fuzz target and tests).

#![warn(missing_docs)]

pub mod bigvalue;
pub mod binary;
pub mod forward;
mod frame;
mod key;
mod meta;
mod num;
pub mod redis_cmd;
pub mod reply;
pub mod resp;
pub mod response;
#[doc(hidden)]
pub mod stream;
mod text;
mod tokens;

pub use key::{check_key, url_encode, BadKey};
pub use meta::{base64_decode, Key, MetaFlagIter, MetaFlags};
pub use num::{strtol_i32, strtoll, strtoul_u32, strtoull};
pub use tokens::{KeyTooLong, Keys, Tokens};

/// memcached's KEY_MAX_LENGTH.
pub const KEY_MAX_LENGTH: usize = 250;

/// A non-get line without `\n` longer than this closes the connection (memcached.c).
pub const MAX_COMMAND_LINE: usize = 2048;

/// Settings of the server that change what the parser answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `-I`: largest item (header + key + value) the server accepts. Default 1 MiB.
    pub item_size_max: usize,
    /// `-C` turns CAS off; with CAS on, each item is 8 bytes larger (too-large boundary).
    pub use_cas: bool,
    /// Largest get/gets line (without `\n`) we buffer before giving up and closing.
    /// memcached has no limit; 5,000 keys of 250 bytes need about 1.3 MB.
    pub max_get_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            item_size_max: 1024 * 1024,
            use_cas: true,
            max_get_line: 4 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// memcached's `item_size_ok`: 48-byte item header, key + NUL, 4 bytes if the client
    /// flags are non-zero, value + CRLF, 8 bytes of CAS.
    pub fn item_too_large(&self, nkey: usize, client_flags: u32, data_len: usize) -> bool {
        let fixed: usize =
            48 + 1 + 2 + if client_flags != 0 { 4 } else { 0 } + if self.use_cas { 8 } else { 0 };
        fixed.saturating_add(nkey).saturating_add(data_len) > self.item_size_max
    }
}

/// Result of [`parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    /// One whole request and the number of bytes of `buf` it used.
    Request(Request<'a>, usize),
    /// More bytes are needed; `total` is how many (from the start of `buf`) when known.
    Incomplete {
        /// The buffer size needed, when known.
        total: Option<usize>,
    },
    /// Malformed or refused input; see the crate documentation for the server's duties.
    Error {
        /// The error reply to write (possibly empty for `noreply`).
        reply: &'static [u8],
        /// Bytes of the buffer to drop.
        consumed: usize,
        /// Bytes to discard after those (a refused data block), from the buffer and then the socket.
        swallow: usize,
        /// Close the connection once the reply is written.
        close: bool,
        /// Delete this key from the store (memcached's "avoid stale data" on a too large set).
        unlink: Option<Key<'a>>,
    },
}

/// An error reply that consumes just the command line (the text and meta parsers share it).
#[inline]
pub(crate) fn err<'a>(reply: &'static [u8], consumed: usize) -> Parse<'a> {
    Parse::Error {
        reply,
        consumed,
        swallow: 0,
        close: false,
        unlink: None,
    }
}

/// Classic storage commands (and what `ms` maps to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreCmd {
    /// `set`
    Set,
    /// `add`
    Add,
    /// `replace`
    Replace,
    /// `append`
    Append,
    /// `prepend`
    Prepend,
    /// `cas`
    Cas,
}

impl StoreCmd {
    /// The text protocol's command name.
    pub fn name(self) -> &'static str {
        match self {
            StoreCmd::Set => "set",
            StoreCmd::Add => "add",
            StoreCmd::Replace => "replace",
            StoreCmd::Append => "append",
            StoreCmd::Prepend => "prepend",
            StoreCmd::Cas => "cas",
        }
    }
}

/// `shutdown` argument check; the server first answers `ERROR: shutdown not enabled` if
/// it was not started with `-A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown` (or `shutdown immediate`).
    Immediate,
    /// `shutdown graceful`.
    Graceful,
    /// Reply `CLIENT_ERROR invalid shutdown mode` (when shutdown is enabled).
    Invalid,
}

/// One request. Slices borrow the parse buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// get / gets / bget. Reply VALUE lines then `END`; see [`KeyTooLong`].
    Get {
        /// The requested keys, in order.
        keys: Keys<'a>,
        /// `gets` / `gats`: reply with each item's CAS unique.
        cas: bool,
    },
    /// gat / gats: `exptime` is memcached's int32 value; reply like get.
    Gat {
        /// The expiration time as memcached reads it (int32).
        exptime: i64,
        /// The requested keys, in order.
        keys: Keys<'a>,
        /// `gets` / `gats`: reply with each item's CAS unique.
        cas: bool,
    },
    /// set/add/replace/append/prepend/cas. `data` excludes the trailing CRLF.
    Store {
        /// Which storage command.
        cmd: StoreCmd,
        /// The key.
        key: &'a [u8],
        /// The client flags stored with the item.
        flags: u32,
        /// The expiration time as memcached reads it (int32).
        exptime: i64,
        /// The data block, without its CRLF.
        data: &'a [u8],
        /// The `cas` command's unique (0 for the others).
        cas_unique: u64,
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// `delete <key> [noreply]`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// incr/decr: reply the new value, `NOT_FOUND`, or
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    Arith {
        /// incr (true) or decr (false).
        incr: bool,
        /// The key.
        key: &'a [u8],
        /// The amount to add or subtract.
        delta: u64,
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The expiration time as memcached reads it (int32).
        exptime: i64,
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// `delay` 0 when absent. memcached answers `CLIENT_ERROR flush_all not allowed` with -F.
    FlushAll {
        /// Seconds until the flush takes effect.
        delay: i64,
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// Reply `VERSION <version>`.
    Version,
    /// `verbosity <level> [noreply]`: reply `OK`.
    Verbosity {
        /// The requested level.
        level: u32,
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// Close the connection after writing pending replies.
    Quit,
    /// `shutdown [graceful|immediate]`.
    Shutdown(ShutdownMode),
    /// `stats [args...]`; `args` are the tokens after `stats`.
    Stats {
        /// The tokens after the command name.
        args: Tokens<'a>,
    },
    /// `cache_memlimit <megabytes> [noreply]`.
    CacheMemlimit {
        /// The new memory limit in megabytes.
        megabytes: u32,
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
    /// Administrative commands memcached knows but whose effect is server specific:
    /// slabs, lru, lru_crawler, watch, extstore, refresh_certs. `args` after the command name.
    Admin {
        /// The command name.
        command: &'a [u8],
        /// The tokens after the command name.
        args: Tokens<'a>,
    },
    /// mg. `late_error`: perform the lookup (with its side effects) but answer this error
    /// instead of the normal reply (memcached checks opaque length while writing the reply).
    MetaGet {
        /// The key (base64-decoded on demand with the `b` flag).
        key: Key<'a>,
        /// The meta flags.
        flags: MetaFlags<'a>,
        /// An error to answer after executing (see the variant).
        late_error: Option<&'static [u8]>,
    },
    /// ms. `cmd` is memcached's mapping of the M flag, upgraded to `Cas` when a C flag is
    /// given in set/replace mode. `data` excludes the trailing CRLF.
    MetaSet {
        /// The key (base64-decoded on demand with the `b` flag).
        key: Key<'a>,
        /// The meta flags.
        flags: MetaFlags<'a>,
        /// Which storage command.
        cmd: StoreCmd,
        /// The data block, without its CRLF.
        data: &'a [u8],
    },
    /// md.
    MetaDelete {
        /// The key (base64-decoded on demand with the `b` flag).
        key: Key<'a>,
        /// The meta flags.
        flags: MetaFlags<'a>,
    },
    /// ma. Delta is `flags.delta.unwrap_or(1)`, initial value `flags.initial.unwrap_or(0)`.
    /// `late_error` as for MetaGet (memcached applies the delta, then reports the error).
    MetaArithmetic {
        /// The key (base64-decoded on demand with the `b` flag).
        key: Key<'a>,
        /// The meta flags.
        flags: MetaFlags<'a>,
        /// incr (true) or decr (false).
        incr: bool,
        /// An error to answer after executing (see the variant).
        late_error: Option<&'static [u8]>,
    },
    /// mn: reply `MN`.
    MetaNoop,
    /// `me <key> [b]`: reply `ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..` or `EN`.
    MetaDebug {
        /// The key (base64-decoded on demand with the `b` flag).
        key: Key<'a>,
    },
    /// mcrouter's `lease-get <key>*` (only from [`parse_mcrouter`]): a get whose miss
    /// answers `LVALUE <key> <token> <flags> <bytes>` with a lease token.
    LeaseGet {
        /// The requested keys, in order.
        keys: Keys<'a>,
    },
    /// mcrouter's `lease-set <key> <token> <flags> <exptime> <bytes> [noreply]` (only from
    /// [`parse_mcrouter`]): a set allowed by the lease token of a `lease-get` miss.
    LeaseSet {
        /// The key.
        key: &'a [u8],
        /// The lease token the `lease-get` handed out.
        token: u64,
        /// The client flags stored with the item.
        flags: u32,
        /// The expiration time as memcached reads it (int32).
        exptime: i64,
        /// The data block, without its CRLF.
        data: &'a [u8],
        /// `noreply` was given: no reply unless an error.
        noreply: bool,
    },
}

/// Parses the first request in `buf`. Never panics, never allocates.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parse<'a> {
    parse_dialect(buf, limits, false)
}

/// [`parse`] for a router speaking mcrouter's dialect: also `lease-get` and `lease-set`
/// (which memcached, and so [`parse`], answers with `ERROR`).
pub fn parse_mcrouter<'a>(buf: &'a [u8], limits: &Limits) -> Parse<'a> {
    parse_dialect(buf, limits, true)
}

fn parse_dialect<'a>(buf: &'a [u8], limits: &Limits, leases: bool) -> Parse<'a> {
    if buf.is_empty() {
        return Parse::Incomplete { total: None };
    }
    let nl = match memchr::memchr(b'\n', buf) {
        Some(nl) => nl,
        None => return no_newline(buf, limits),
    };
    let mut end = nl;
    if nl > 1 && buf[nl - 1] == b'\r' {
        end -= 1;
    }
    let mut line = &buf[..end];
    // memcached works on a C string: a NUL byte ends the command.
    if let Some(z) = memchr::memchr(0, line) {
        line = &line[..z];
    }
    text::parse_line(buf, line, nl + 1, limits, leases)
}

fn no_newline<'a>(buf: &'a [u8], limits: &Limits) -> Parse<'a> {
    if buf.len() <= MAX_COMMAND_LINE {
        return Parse::Incomplete { total: None };
    }
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    let is_get = rest.starts_with(b"get ") || rest.starts_with(b"gets ");
    if spaces > 100 || !is_get || buf.len() > limits.max_get_line {
        return Parse::Error {
            reply: b"",
            consumed: buf.len(),
            swallow: 0,
            close: true,
            unlink: None,
        };
    }
    Parse::Incomplete { total: None }
}

#[cfg(test)]
mod tests;
