//! memcached binary protocol (memcached 1.6.18's `proto_bin.c`): request framing and parsing
//! ([`parse_request`]), response composition ([`BinRequest`]'s `write_*` methods and
//! [`write_stat`]), and, for clients and tests, request encoding ([`BinRequest::encode`]) and
//! response parsing ([`parse_response`]). Pure: no I/O, no allocation.
//!
//! The server keeps the bytes it has read in a buffer and calls [`parse_request`] in a loop:
//!
//! * [`BinParse::Request`]`(req, consumed)`: execute `req` (slices borrow the buffer), write
//!   its reply with the `write_*` methods, then drop `consumed` bytes.
//! * [`BinParse::Incomplete`]`{ total }`: read until the buffer holds `total` bytes. `total` is
//!   24 (a header), then header + extras + key (at most 24 + 255 + 65,535), then header + body
//!   for commands with a value; a value is only waited for when it is small enough to be
//!   stored, so the buffer never needs more than
//!   `max(65_814, 24 + 8 + 250 + item_size_max)` bytes (1,048,858 with the default 1 MiB).
//! * [`BinParse::Error`]: write [`BinError::write_reply`] (nothing after a wrong magic byte),
//!   drop `consumed` bytes, unlink `unlink` from the store if set, discard the next `swallow`
//!   bytes (from the buffer, then from the socket), then close if `close`.
//!
//! memcached switches a connection to this protocol when its first byte is 0x80 and keeps it
//! binary from then on; that choice is the server's.

pub mod bridge;
mod compose;
mod parse;
mod response;

#[cfg(test)]
mod tests;

pub use compose::write_stat;
pub use parse::{key_range, parse_request};
pub use response::{parse_response, BinResponse, ResponseParse};

use crate::{Limits, StoreCmd};

/// First byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Size of the fixed header of requests and responses.
pub const HEADER_LEN: usize = 24;
/// memcached's `MAX_SASL_MECH_LEN`: longest SASL mechanism name (the key of auth/step).
pub const MAX_SASL_MECH_LEN: usize = 32;

/// Opcodes of memcached 1.6.18's binary protocol (`protocol_binary.h`).
pub mod opcode {
    /// Get (reply: flags + value).
    pub const GET: u8 = 0x00;
    /// Set.
    pub const SET: u8 = 0x01;
    /// Add.
    pub const ADD: u8 = 0x02;
    /// Replace.
    pub const REPLACE: u8 = 0x03;
    /// Delete.
    pub const DELETE: u8 = 0x04;
    /// Increment.
    pub const INCREMENT: u8 = 0x05;
    /// Decrement.
    pub const DECREMENT: u8 = 0x06;
    /// Quit.
    pub const QUIT: u8 = 0x07;
    /// Flush.
    pub const FLUSH: u8 = 0x08;
    /// Quiet get.
    pub const GETQ: u8 = 0x09;
    /// No-op (flushes quiet replies).
    pub const NOOP: u8 = 0x0a;
    /// Version.
    pub const VERSION: u8 = 0x0b;
    /// Get, key in the reply.
    pub const GETK: u8 = 0x0c;
    /// Quiet get, key in the reply.
    pub const GETKQ: u8 = 0x0d;
    /// Append.
    pub const APPEND: u8 = 0x0e;
    /// Prepend.
    pub const PREPEND: u8 = 0x0f;
    /// Stat (all, or the group named by the key).
    pub const STAT: u8 = 0x10;
    /// Quiet set.
    pub const SETQ: u8 = 0x11;
    /// Quiet add.
    pub const ADDQ: u8 = 0x12;
    /// Quiet replace.
    pub const REPLACEQ: u8 = 0x13;
    /// Quiet delete.
    pub const DELETEQ: u8 = 0x14;
    /// Quiet increment.
    pub const INCREMENTQ: u8 = 0x15;
    /// Quiet decrement.
    pub const DECREMENTQ: u8 = 0x16;
    /// Quiet quit.
    pub const QUITQ: u8 = 0x17;
    /// Quiet flush.
    pub const FLUSHQ: u8 = 0x18;
    /// Quiet append.
    pub const APPENDQ: u8 = 0x19;
    /// Quiet prepend.
    pub const PREPENDQ: u8 = 0x1a;
    /// Verbosity: listed in protocol_binary.txt, but memcached 1.6.18 answers unknown command.
    pub const VERBOSITY: u8 = 0x1b;
    /// Touch (reply: flags, no value).
    pub const TOUCH: u8 = 0x1c;
    /// Get and touch.
    pub const GAT: u8 = 0x1d;
    /// Quiet get and touch.
    pub const GATQ: u8 = 0x1e;
    /// SASL: list mechanisms.
    pub const SASL_LIST_MECHS: u8 = 0x20;
    /// SASL: start authentication.
    pub const SASL_AUTH: u8 = 0x21;
    /// SASL: authentication step.
    pub const SASL_STEP: u8 = 0x22;
    /// Get and touch, key in the reply.
    pub const GATK: u8 = 0x23;
    /// Quiet get and touch, key in the reply.
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// 0x0000
    Success,
    /// 0x0001 key not found
    KeyNotFound,
    /// 0x0002 key exists (CAS mismatch, add of an existing key)
    KeyExists,
    /// 0x0003 value too large
    TooLarge,
    /// 0x0004 invalid arguments
    InvalidArguments,
    /// 0x0005 item not stored
    NotStored,
    /// 0x0006 incr/decr on a non-numeric value
    NonNumeric,
    /// 0x0020 authentication error (also: flush disabled with `-F`)
    AuthError,
    /// 0x0021 authentication continue
    AuthContinue,
    /// 0x0081 unknown command
    UnknownCommand,
    /// 0x0082 out of memory
    OutOfMemory,
}

impl Status {
    /// The wire value.
    pub fn code(self) -> u16 {
        match self {
            Status::Success => 0x00,
            Status::KeyNotFound => 0x01,
            Status::KeyExists => 0x02,
            Status::TooLarge => 0x03,
            Status::InvalidArguments => 0x04,
            Status::NotStored => 0x05,
            Status::NonNumeric => 0x06,
            Status::AuthError => 0x20,
            Status::AuthContinue => 0x21,
            Status::UnknownCommand => 0x81,
            Status::OutOfMemory => 0x82,
        }
    }

    /// The status with this wire value, if memcached defines it.
    pub fn from_code(code: u16) -> Option<Status> {
        Some(match code {
            0x00 => Status::Success,
            0x01 => Status::KeyNotFound,
            0x02 => Status::KeyExists,
            0x03 => Status::TooLarge,
            0x04 => Status::InvalidArguments,
            0x05 => Status::NotStored,
            0x06 => Status::NonNumeric,
            0x20 => Status::AuthError,
            0x21 => Status::AuthContinue,
            0x81 => Status::UnknownCommand,
            0x82 => Status::OutOfMemory,
            _ => return None,
        })
    }

    /// The text memcached puts in the body of an error response with this status (its
    /// `write_bin_error` default; out-of-memory replies usually carry a more specific text,
    /// see [`OOM_ALLOCATING_ITEM`]). Empty for the non-error statuses.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }
}

/// Out-of-memory text of a failed set/append item allocation (memcached strips the
/// `SERVER_ERROR ` of its text reply).
pub const OOM_ALLOCATING_ITEM: &[u8] = b"Out of memory allocating item";
/// Out-of-memory text of incr/decr when the new value cannot be stored.
pub const OOM_INCREMENTING: &[u8] = b"Out of memory incrementing value";
/// Out-of-memory text of incr/decr when the initial item cannot be allocated.
pub const OOM_ALLOCATING_NEW_ITEM: &[u8] = b"Out of memory allocating new item";

/// Server settings and connection state that change what [`parse_request`] answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Item size limit (`-I`) and CAS (`-C`), as for the text protocol.
    pub limits: Limits,
    /// `-S`: SASL required. Off: the SASL opcodes answer unknown command.
    pub sasl: bool,
    /// With `sasl`: this connection has authenticated. Otherwise every opcode but version
    /// and the SASL ones answers auth error and closes.
    pub authenticated: bool,
}

/// One parsed request: the command plus what the reply needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinRequest<'a> {
    /// The opcode as sent (quiet variants included); every reply repeats it.
    pub opcode: u8,
    /// Echoed in every reply.
    pub opaque: u32,
    /// The header's CAS: compare-and-swap for set/add/replace/append/prepend/delete/incr/decr.
    pub cas: u64,
    /// A quiet opcode: success replies (and get misses) are not sent; errors are.
    pub quiet: bool,
    /// What to do.
    pub command: Command<'a>,
}

/// The command of a [`BinRequest`]. Expiration times are memcached's unsigned 32-bit values
/// (binary never gives a negative time, unlike the text protocol's int32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// get/getq/getk/getkq, and with `touch` gat/gatq/gatk/gatkq.
    Get {
        /// The key.
        key: &'a [u8],
        /// gat*: the new expiration time.
        touch: Option<u32>,
        /// getk*/gatk*: the key goes into the reply (hit and miss).
        with_key: bool,
    },
    /// touch: reply flags without the value.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiration time.
        exptime: u32,
    },
    /// set/add/replace (flags and exptime from the extras) and append/prepend (both 0).
    Store {
        /// Set, Add, Replace, Append or Prepend (a non-zero request CAS makes set/add/replace a
        /// [`StoreCmd::Cas`] in [`BinRequest::request`]).
        cmd: StoreCmd,
        /// The key.
        key: &'a [u8],
        /// Client flags.
        flags: u32,
        /// Expiration time.
        exptime: u32,
        /// The value.
        data: &'a [u8],
    },
    /// delete (with the request CAS, if non-zero, as a condition).
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// incr/decr. A miss creates the item with `initial` unless `exptime` is 0xffffffff.
    Arith {
        /// incr (true) or decr (false).
        incr: bool,
        /// The key.
        key: &'a [u8],
        /// Amount.
        delta: u64,
        /// Value of the item created on a miss.
        initial: u64,
        /// Expiration of the item created on a miss; 0xffffffff: answer not found instead.
        exptime: u32,
    },
    /// quit: reply (unless quiet), then close.
    Quit,
    /// flush, with the delay of the optional extras (0 when absent).
    Flush {
        /// Seconds until the flush takes effect.
        delay: u32,
    },
    /// noop: reply; a server that delays quiet replies must flush here.
    Noop,
    /// version: reply the version string.
    Version,
    /// stat: all statistics (empty key) or the group the key names.
    Stat {
        /// The group (memcached compares it by prefix: `reset`, `settings`, `detail ...`).
        key: &'a [u8],
    },
    /// SASL list mechanisms (only when [`Settings::sasl`]).
    SaslListMechs,
    /// SASL auth (`step` false) or step (`step` true); only when [`Settings::sasl`].
    Sasl {
        /// SASL step rather than auth.
        step: bool,
        /// The mechanism (the key).
        mechanism: &'a [u8],
        /// The challenge (the value).
        data: &'a [u8],
    },
}

/// Result of [`parse_request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinParse<'a> {
    /// One whole request and the number of bytes of the buffer it used.
    Request(BinRequest<'a>, usize),
    /// Read until the buffer holds `total` bytes.
    Incomplete {
        /// The buffer size needed for the next step.
        total: usize,
    },
    /// A refused request; see the module documentation.
    Error(BinError<'a>),
}

/// A request memcached refuses while framing it. See the module documentation for the
/// server's duties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinError<'a> {
    /// The error reply's status; `None`: no reply (wrong magic byte, connection closed).
    pub status: Option<Status>,
    /// The request's opcode, echoed in the reply.
    pub opcode: u8,
    /// The request's opaque, echoed in the reply.
    pub opaque: u32,
    /// Bytes of the buffer to drop.
    pub consumed: usize,
    /// Bytes to discard after those, from the buffer and then from the socket.
    pub swallow: usize,
    /// Close the connection once the reply is written.
    pub close: bool,
    /// Delete this key (memcached drops the old value when a set is refused as too large).
    pub unlink: Option<&'a [u8]>,
}

impl BinError<'_> {
    /// Appends memcached's reply (header + text body) to `out`; nothing when `status` is None.
    pub fn write_reply(&self, out: &mut Vec<u8>) {
        if let Some(status) = self.status {
            compose::write_packet(
                out,
                RESPONSE_MAGIC,
                compose::Head {
                    opcode: self.opcode,
                    vbucket_or_status: status.code(),
                    opaque: self.opaque,
                    cas: 0,
                },
                &[],
                &[],
                status.message(),
            );
        }
    }
}

impl BinRequest<'static> {
    /// The opcode and opaque of a request header (a byte not received yet counts as 0), as a
    /// no-op request: for answering a packet refused before it is parsed, such as a value
    /// there is no memory to receive.
    pub fn from_header(header: &[u8]) -> BinRequest<'static> {
        let byte = |i: usize| header.get(i).copied().unwrap_or(0);
        BinRequest {
            opcode: byte(1),
            opaque: u32::from_be_bytes([byte(12), byte(13), byte(14), byte(15)]),
            cas: 0,
            quiet: false,
            command: Command::Noop,
        }
    }
}

impl<'a> BinRequest<'a> {
    /// The text-protocol [`crate::Request`] with the same effect on the store, for the
    /// commands that have one: set/add/replace (a non-zero CAS makes them `cas`, as in
    /// memcached), append/prepend (`cas_unique` carries the request CAS, which memcached also
    /// checks for them), delete without CAS, touch, flush, version, quit. `noreply` is the
    /// quiet bit. `None` for get/gat (a binary key may contain spaces, which `Keys` splits on),
    /// incr/decr (initial value and expiration), delete with CAS, stat, noop and SASL.
    pub fn request(&self) -> Option<crate::Request<'a>> {
        use crate::Request;
        Some(match self.command {
            Command::Store {
                cmd,
                key,
                flags,
                exptime,
                data,
            } => Request::Store {
                cmd: match cmd {
                    StoreCmd::Set | StoreCmd::Add | StoreCmd::Replace if self.cas != 0 => {
                        StoreCmd::Cas
                    }
                    other => other,
                },
                key,
                flags,
                exptime: i64::from(exptime),
                data,
                cas_unique: self.cas,
                noreply: self.quiet,
            },
            Command::Delete { key } if self.cas == 0 => Request::Delete {
                key,
                noreply: self.quiet,
            },
            Command::Touch { key, exptime } => Request::Touch {
                key,
                exptime: i64::from(exptime),
                noreply: false,
            },
            Command::Flush { delay } => Request::FlushAll {
                delay: i64::from(delay),
                noreply: self.quiet,
            },
            Command::Version => Request::Version,
            Command::Quit => Request::Quit,
            _ => return None,
        })
    }
}
