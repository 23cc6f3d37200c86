//! Classic text commands: dispatch as in memcached's `process_command_ascii`.

use crate::num::{strtol_i32, strtoul_u32, strtoull};
use crate::reply as r;
use crate::tokens::{Keys, Line, Tokens};
use crate::{err, meta, Limits, Parse, Request, ShutdownMode, StoreCmd, KEY_MAX_LENGTH};

/// `out_string` honours noreply: the error is suppressed.
#[inline]
fn err_nr<'a>(reply: &'static [u8], consumed: usize, noreply: bool) -> Parse<'a> {
    err(if noreply { b"" } else { reply }, consumed)
}

/// Rest of `line` after its first token.
#[inline]
fn after_first(line: &[u8]) -> (&[u8], &[u8]) {
    let start = line.iter().position(|&b| b != b' ').unwrap_or(line.len());
    let s = &line[start..];
    let end = memchr::memchr(b' ', s).unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// `line`: the command line without `\n`, optional `\r`, and anything after a NUL.
/// `after`: offset in `buf` just past the `\n`.
pub(crate) fn parse_line<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    after: usize,
    limits: &Limits,
    leases: bool,
) -> Parse<'a> {
    let (cmd, rest) = after_first(line);
    if cmd.len() < 2 {
        return err(r::ERROR, after);
    }
    // Hot path: get / gets without counting every token of a long multiget.
    if cmd[0] == b'g' {
        let has_key = Tokens::new(rest).next().is_some();
        if !has_key {
            return err(r::ERROR, after);
        }
        return match cmd {
            b"get" => Parse::Request(
                Request::Get {
                    keys: Keys::new(rest),
                    cas: false,
                },
                after,
            ),
            b"gets" => Parse::Request(
                Request::Get {
                    keys: Keys::new(rest),
                    cas: true,
                },
                after,
            ),
            b"gat" | b"gats" => {
                let mut t = Tokens::new(rest);
                let exp = t.next().unwrap_or(b"");
                match strtol_i32(exp) {
                    Some(e) => Parse::Request(
                        Request::Gat {
                            exptime: i64::from(e),
                            keys: Keys::new(t.remainder()),
                            cas: cmd == b"gats",
                        },
                        after,
                    ),
                    None => err(r::CLIENT_ERROR_INVALID_EXPTIME, after),
                }
            }
            _ => err(r::ERROR, after),
        };
    }
    let l = Line::split(line);
    let n = l.ntokens;
    if cmd[0] == b'm' && cmd.len() == 2 {
        return meta::parse_meta(buf, cmd[1], &l, rest, after, limits);
    }
    match cmd[0] {
        b's' => match cmd {
            b"set" if n == 6 || n == 7 => {
                storage(buf, &l, after, Storage::Cmd(StoreCmd::Set), limits)
            }
            b"stats" => Parse::Request(
                Request::Stats {
                    args: Tokens::new(rest),
                },
                after,
            ),
            b"shutdown" => {
                let mode = if n == 2 {
                    ShutdownMode::Immediate
                } else if n == 3 && l.get(1) == b"graceful" {
                    ShutdownMode::Graceful
                } else {
                    ShutdownMode::Invalid
                };
                Parse::Request(Request::Shutdown(mode), after)
            }
            b"slabs" => admin(cmd, rest, after),
            _ => err(r::ERROR, after),
        },
        b'a' => match cmd {
            b"add" if n == 6 || n == 7 => {
                storage(buf, &l, after, Storage::Cmd(StoreCmd::Add), limits)
            }
            b"append" if n == 6 || n == 7 => {
                storage(buf, &l, after, Storage::Cmd(StoreCmd::Append), limits)
            }
            _ => err(r::ERROR, after),
        },
        b'c' => match cmd {
            b"cas" if n == 7 || n == 8 => {
                storage(buf, &l, after, Storage::Cmd(StoreCmd::Cas), limits)
            }
            b"cache_memlimit" if n == 3 || n == 4 => {
                let noreply = l.noreply();
                match strtoul_u32(l.get(1)) {
                    Some(megabytes) => {
                        Parse::Request(Request::CacheMemlimit { megabytes, noreply }, after)
                    }
                    None => err_nr(r::ERROR, after, noreply),
                }
            }
            _ => err(r::ERROR, after),
        },
        b'i' => match cmd {
            b"incr" if n == 4 || n == 5 => arith(&l, after, true),
            _ => err(r::ERROR, after),
        },
        b'd' => match cmd {
            b"delete" if (3..=5).contains(&n) => delete(&l, after),
            b"decr" if n == 4 || n == 5 => arith(&l, after, false),
            _ => err(r::ERROR, after),
        },
        b'l' if leases => match cmd {
            b"lease-get" if n >= 3 => Parse::Request(
                Request::LeaseGet {
                    keys: Keys::new(rest),
                },
                after,
            ),
            b"lease-set" if n == 7 || n == 8 => storage(buf, &l, after, Storage::LeaseSet, limits),
            _ => err(r::ERROR, after),
        },
        b't' => match cmd {
            b"touch" if n == 4 || n == 5 => {
                let noreply = l.noreply();
                let key = l.get(1);
                if key.len() > KEY_MAX_LENGTH {
                    return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply);
                }
                match strtol_i32(l.get(2)) {
                    Some(e) => Parse::Request(
                        Request::Touch {
                            key,
                            exptime: i64::from(e),
                            noreply,
                        },
                        after,
                    ),
                    None => err_nr(r::CLIENT_ERROR_INVALID_EXPTIME, after, noreply),
                }
            }
            b"track" => admin(cmd, rest, after),
            _ => err(r::ERROR, after),
        },
        _ => match cmd {
            b"replace" | b"prepend" => {
                if n == 6 || n == 7 {
                    let c = if cmd == b"replace" {
                        StoreCmd::Replace
                    } else {
                        StoreCmd::Prepend
                    };
                    storage(buf, &l, after, Storage::Cmd(c), limits)
                } else {
                    err(r::ERROR, after)
                }
            }
            b"bget" => {
                if n >= 3 {
                    Parse::Request(
                        Request::Get {
                            keys: Keys::new(rest),
                            cas: false,
                        },
                        after,
                    )
                } else {
                    err(r::ERROR, after)
                }
            }
            b"flush_all" => {
                if !(2..=4).contains(&n) {
                    return err(r::ERROR, after);
                }
                let noreply = l.noreply();
                let mut delay = 0;
                if n != if noreply { 3 } else { 2 } {
                    match strtol_i32(l.get(1)) {
                        Some(d) => delay = i64::from(d),
                        None => return err_nr(r::CLIENT_ERROR_INVALID_EXPTIME, after, noreply),
                    }
                }
                Parse::Request(Request::FlushAll { delay, noreply }, after)
            }
            b"version" => Parse::Request(Request::Version, after),
            b"quit" => Parse::Request(Request::Quit, after),
            b"lru_crawler" | b"watch" | b"refresh_certs" => admin(cmd, rest, after),
            b"verbosity" => {
                if n != 3 && n != 4 {
                    return err(r::ERROR, after);
                }
                let noreply = l.noreply();
                match strtoul_u32(l.get(1)) {
                    Some(level) => Parse::Request(Request::Verbosity { level, noreply }, after),
                    None => err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply),
                }
            }
            b"lru" | b"extstore" => {
                if n >= 3 {
                    admin(cmd, rest, after)
                } else {
                    err(r::ERROR, after)
                }
            }
            _ => {
                if l.last.starts_with(b"HTTP/") {
                    Parse::Error {
                        reply: b"",
                        consumed: after,
                        swallow: 0,
                        close: true,
                        unlink: None,
                    }
                } else {
                    err(r::ERROR, after)
                }
            }
        },
    }
}

fn admin<'a>(command: &'a [u8], rest: &'a [u8], after: usize) -> Parse<'a> {
    Parse::Request(
        Request::Admin {
            command,
            args: Tokens::new(rest),
        },
        after,
    )
}

fn arith<'a>(l: &Line<'a>, after: usize, incr: bool) -> Parse<'a> {
    let noreply = l.noreply();
    let key = l.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply);
    }
    match strtoull(l.get(2)) {
        Some(delta) => Parse::Request(
            Request::Arith {
                incr,
                key,
                delta,
                noreply,
            },
            after,
        ),
        None => err_nr(r::CLIENT_ERROR_INVALID_DELTA, after, noreply),
    }
}

fn delete<'a>(l: &Line<'a>, after: usize) -> Parse<'a> {
    let n = l.ntokens;
    let mut noreply = false;
    if n > 3 {
        let hold_is_zero = l.get(2) == b"0";
        noreply = l.noreply();
        let valid = (n == 4 && (hold_is_zero || noreply)) || (n == 5 && hold_is_zero && noreply);
        if !valid {
            return err_nr(r::CLIENT_ERROR_DELETE_USAGE, after, noreply);
        }
    }
    let key = l.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply);
    }
    Parse::Request(Request::Delete { key, noreply }, after)
}

/// What a storage line is: a memcached command, or mcrouter's `lease-set`, whose lease
/// token comes before the flags.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Storage {
    Cmd(StoreCmd),
    LeaseSet,
}

/// memcached's `process_update_command` followed by the data block read.
fn storage<'a>(
    buf: &'a [u8],
    l: &Line<'a>,
    after: usize,
    kind: Storage,
    limits: &Limits,
) -> Parse<'a> {
    let noreply = l.noreply();
    let key = l.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply);
    }
    let at = if kind == Storage::LeaseSet { 3 } else { 2 };
    let (flags, exptime, vlen) = match (
        strtoul_u32(l.get(at)),
        strtol_i32(l.get(at + 1)),
        strtol_i32(l.get(at + 2)),
    ) {
        (Some(f), Some(e), Some(v)) => (f, e, v),
        _ => return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply),
    };
    // The cas unique, or the lease token.
    let token_at = match kind {
        Storage::Cmd(StoreCmd::Cas) => Some(5),
        Storage::LeaseSet => Some(2),
        Storage::Cmd(_) => None,
    };
    let mut cas_unique = 0;
    if let Some(i) = token_at {
        match strtoull(l.get(i)) {
            Some(c) => cas_unique = c,
            None => return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply),
        }
    }
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return err_nr(r::CLIENT_ERROR_BAD_FORMAT, after, noreply);
    }
    let vlen = vlen as usize;
    if limits.item_too_large(key.len(), flags, vlen) {
        return Parse::Error {
            reply: if noreply {
                b""
            } else {
                r::SERVER_ERROR_TOO_LARGE
            },
            consumed: after,
            swallow: vlen + 2,
            close: false,
            // Only a plain set drops the old value (memcached: "Unacceptable for SET").
            unlink: (kind == Storage::Cmd(StoreCmd::Set)).then(|| crate::Key::raw(key)),
        };
    }
    let total = after + vlen + 2;
    if buf.len() < total {
        return Parse::Incomplete { total: Some(total) };
    }
    if &buf[total - 2..total] != b"\r\n" {
        return err_nr(r::CLIENT_ERROR_BAD_DATA_CHUNK, total, noreply);
    }
    let data = &buf[after..after + vlen];
    let exptime = i64::from(exptime);
    let req = match kind {
        Storage::Cmd(cmd) => Request::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas_unique,
            noreply,
        },
        Storage::LeaseSet => Request::LeaseSet {
            key,
            token: cas_unique,
            flags,
            exptime,
            data,
            noreply,
        },
    };
    Parse::Request(req, total)
}
