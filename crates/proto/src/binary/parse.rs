//! Request framing and validation, in the order memcached 1.6.18's `try_read_command_binary`
//! and `dispatch_bin_command` check things.

use super::{
    opcode as op, BinError, BinParse, BinRequest, Command, Settings, Status, HEADER_LEN,
    MAX_SASL_MECH_LEN, REQUEST_MAGIC,
};
use crate::{StoreCmd, KEY_MAX_LENGTH};

/// The fixed header fields a request is framed by.
#[derive(Clone, Copy)]
struct Frame {
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    body_len: usize,
    opaque: u32,
    cas: u64,
}

impl Frame {
    fn read(h: &[u8]) -> Frame {
        Frame {
            opcode: h[1],
            key_len: usize::from(u16::from_be_bytes([h[2], h[3]])),
            extras_len: usize::from(h[4]),
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize,
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        }
    }

    /// Header + extras + key: what memcached reads before it looks at the opcode.
    fn head_len(&self) -> usize {
        HEADER_LEN + self.extras_len + self.key_len
    }

    fn error(&self, status: Status, swallow: usize, close: bool) -> BinParse<'static> {
        BinParse::Error(BinError {
            status: Some(status),
            opcode: self.opcode,
            opaque: self.opaque,
            consumed: self.head_len(),
            swallow,
            close,
            unlink: None,
        })
    }

    /// memcached's `handle_binary_protocol_error`: invalid arguments, then close.
    fn einval(&self) -> BinParse<'static> {
        self.error(Status::InvalidArguments, 0, true)
    }
}

/// Where the key lies in the request `buf` starts with (after header and extras), once its
/// header has arrived: what a server needs of a request it has not received whole.
pub fn key_range(buf: &[u8]) -> Option<std::ops::Range<usize>> {
    let f = Frame::read(buf.get(..HEADER_LEN)?);
    Some(HEADER_LEN + f.extras_len..f.head_len())
}

/// The unquiet opcode and whether `code` was the quiet variant.
fn unquiet(code: u8) -> (u8, bool) {
    let base = match code {
        op::SETQ => op::SET,
        op::ADDQ => op::ADD,
        op::REPLACEQ => op::REPLACE,
        op::DELETEQ => op::DELETE,
        op::INCREMENTQ => op::INCREMENT,
        op::DECREMENTQ => op::DECREMENT,
        op::QUITQ => op::QUIT,
        op::FLUSHQ => op::FLUSH,
        op::APPENDQ => op::APPEND,
        op::PREPENDQ => op::PREPEND,
        op::GETQ => op::GET,
        op::GETKQ => op::GETK,
        op::GATQ => op::GAT,
        op::GATKQ => op::GATK,
        other => return (other, false),
    };
    (base, true)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Parses the first request in `buf`. Never panics, never allocates, never asks for more than
/// the bounded amounts described in the module documentation.
pub fn parse_request<'a>(buf: &'a [u8], settings: &Settings) -> BinParse<'a> {
    if buf.len() < HEADER_LEN {
        return BinParse::Incomplete { total: HEADER_LEN };
    }
    if buf[0] != REQUEST_MAGIC {
        // memcached closes without a reply.
        return BinParse::Error(BinError {
            status: None,
            opcode: buf[1],
            opaque: 0,
            consumed: buf.len(),
            swallow: 0,
            close: true,
            unlink: None,
        });
    }
    let f = Frame::read(&buf[..HEADER_LEN]);
    let head = f.head_len();
    if buf.len() < head {
        return BinParse::Incomplete { total: head };
    }
    if f.key_len + f.extras_len > f.body_len {
        // memcached calls lying lengths an unknown command, and closes.
        return f.error(Status::UnknownCommand, 0, true);
    }
    let (base, quiet) = unquiet(f.opcode);
    if settings.sasl
        && !settings.authenticated
        && !matches!(
            base,
            op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP | op::VERSION
        )
    {
        return f.error(Status::AuthError, 0, true);
    }
    if f.key_len > KEY_MAX_LENGTH {
        return f.einval();
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + f.extras_len];
    let key = &buf[HEADER_LEN + f.extras_len..head];
    let (ext, klen, body) = (f.extras_len, f.key_len, f.body_len);
    let empty = ext == 0 && klen == 0 && body == 0;
    let ok = |command: Command<'a>, consumed: usize| {
        BinParse::Request(
            BinRequest {
                opcode: f.opcode,
                opaque: f.opaque,
                cas: f.cas,
                quiet,
                command,
            },
            consumed,
        )
    };
    // A command with a value: wait for all of it (the caller has checked its size).
    let with_value = |make: &dyn Fn(&'a [u8]) -> Command<'a>| {
        let total = HEADER_LEN + body;
        if buf.len() < total {
            BinParse::Incomplete { total }
        } else {
            ok(make(&buf[head..total]), total)
        }
    };
    match base {
        op::VERSION if empty => ok(Command::Version, HEADER_LEN),
        op::NOOP if empty => ok(Command::Noop, HEADER_LEN),
        op::QUIT if empty => ok(Command::Quit, HEADER_LEN),
        op::FLUSH if klen == 0 && body == ext && (ext == 0 || ext == 4) => {
            let delay = if ext == 4 { be32(extras) } else { 0 };
            ok(Command::Flush { delay }, head)
        }
        op::SET | op::ADD | op::REPLACE if ext == 8 && klen != 0 => {
            let cmd = match base {
                op::SET => StoreCmd::Set,
                op::ADD => StoreCmd::Add,
                _ => StoreCmd::Replace,
            };
            let (flags, exptime) = (be32(&extras[..4]), be32(&extras[4..]));
            let vlen = body - klen - ext;
            if settings.limits.item_too_large(klen, flags, vlen) {
                let unlink = (cmd == StoreCmd::Set).then_some(key);
                return BinParse::Error(BinError {
                    unlink,
                    ..too_large(&f, vlen)
                });
            }
            with_value(&|data| Command::Store {
                cmd,
                key,
                flags,
                exptime,
                data,
            })
        }
        op::APPEND | op::PREPEND if klen != 0 && ext == 0 => {
            let cmd = if base == op::APPEND {
                StoreCmd::Append
            } else {
                StoreCmd::Prepend
            };
            let vlen = body - klen;
            if settings.limits.item_too_large(klen, 0, vlen) {
                return BinParse::Error(too_large(&f, vlen));
            }
            with_value(&|data| Command::Store {
                cmd,
                key,
                flags: 0,
                exptime: 0,
                data,
            })
        }
        op::GET | op::GETK if ext == 0 && body == klen && klen > 0 => ok(
            Command::Get {
                key,
                touch: None,
                with_key: base == op::GETK,
            },
            head,
        ),
        op::DELETE if klen > 0 && ext == 0 && body == klen => ok(Command::Delete { key }, head),
        op::INCREMENT | op::DECREMENT if klen > 0 && ext == 20 && body == klen + ext => ok(
            Command::Arith {
                incr: base == op::INCREMENT,
                key,
                delta: be64(&extras[..8]),
                initial: be64(&extras[8..16]),
                exptime: be32(&extras[16..]),
            },
            head,
        ),
        // Body bytes past the key are not read: memcached parses them as the next request.
        op::STAT if ext == 0 => ok(Command::Stat { key }, head),
        op::TOUCH if ext == 4 && klen != 0 => ok(
            Command::Touch {
                key,
                exptime: be32(extras),
            },
            head,
        ),
        op::GAT | op::GATK if ext == 4 && klen != 0 => ok(
            Command::Get {
                key,
                touch: Some(be32(extras)),
                with_key: base == op::GATK,
            },
            head,
        ),
        op::SASL_LIST_MECHS if empty => {
            if settings.sasl {
                ok(Command::SaslListMechs, HEADER_LEN)
            } else {
                f.error(Status::UnknownCommand, 0, false)
            }
        }
        op::SASL_AUTH | op::SASL_STEP if ext == 0 && klen != 0 => {
            let vlen = body - klen;
            if !settings.sasl {
                f.error(Status::UnknownCommand, vlen, false)
            } else if klen > MAX_SASL_MECH_LEN {
                f.error(Status::InvalidArguments, vlen, false)
            } else if settings.limits.item_too_large(klen, 0, vlen) {
                f.error(Status::OutOfMemory, vlen, false)
            } else {
                let step = base == op::SASL_STEP;
                with_value(&|data| Command::Sasl {
                    step,
                    mechanism: key,
                    data,
                })
            }
        }
        op::VERSION
        | op::NOOP
        | op::QUIT
        | op::FLUSH
        | op::SET
        | op::ADD
        | op::REPLACE
        | op::APPEND
        | op::PREPEND
        | op::GET
        | op::GETK
        | op::DELETE
        | op::INCREMENT
        | op::DECREMENT
        | op::STAT
        | op::TOUCH
        | op::GAT
        | op::GATK
        | op::SASL_LIST_MECHS
        | op::SASL_AUTH
        | op::SASL_STEP => f.einval(),
        // memcached has already consumed extras and key, and then swallows the whole body
        // length again: the extras + key bytes that follow are lost too.
        _ => f.error(Status::UnknownCommand, body, false),
    }
}

fn too_large(f: &Frame, vlen: usize) -> BinError<'static> {
    BinError {
        status: Some(Status::TooLarge),
        opcode: f.opcode,
        opaque: f.opaque,
        consumed: f.head_len(),
        swallow: vlen,
        close: false,
        unlink: None,
    }
}
