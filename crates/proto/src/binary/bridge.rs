//! Binary requests carried over the text protocol, for a router whose backends speak text and
//! meta: [`forward`] writes the text command with the same effect as a binary request, and
//! [`Pending::write_reply`] turns the backend's text reply into the binary reply memcached
//! would have sent. Commands with no backend (noop, version, quit, stat, SASL) are answered
//! by the caller; [`write_stats`] and [`sasl_plain_password`] help with two of them.
//!
//! Choices: gets fetch with `gets`/`gats` (so hits carry the CAS), stores are `ms` (its `c`
//! flag returns the new item's CAS, which binary replies carry; `C` checks a request CAS on
//! any store command, as memcached does), a delete with a CAS becomes `md <key> C<cas>`, incr/decr become `ma` (its `N`/`J`
//! flags are binary's initial value and expiration, its `c` flag returns the CAS), touch is
//! `gats` without the value (binary touch answers the flags). Keys the text protocol cannot
//! carry (spaces, control bytes) are refused with invalid arguments.

use super::compose::{write_packet, Head};
use super::{BinRequest, Command, Status, RESPONSE_MAGIC};
use crate::StoreCmd;

/// memcached's `PROTOCOL_BINARY_RESPONSE_ETMPFAIL`: the router could not reach a backend.
pub const STATUS_TEMPORARY_FAILURE: u16 = 0x86;

/// How the text reply to a forwarded request reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `gets`/`gats`: get, getk (key in the reply), gat, touch (no value in the reply).
    Get { with_key: bool, touch: bool },
    /// `ms ... c`: HD (with the CAS), NS, EX, NF.
    Store { cmd: StoreCmd, cas: bool },
    /// `delete` or `md`.
    Delete,
    /// `ma ... v c`: the new value and its CAS.
    Arith,
    /// `flush_all`: OK.
    Flush,
}

/// A forwarded request waiting for its text reply: what its binary reply needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    opcode: u8,
    opaque: u32,
    quiet: bool,
    shape: Shape,
    /// getk/gatk: echoed in the reply (hit and miss).
    key: Vec<u8>,
}

fn num(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "{n}");
}

/// An expiration as the text protocol reads it: binary's is unsigned, text's a signed 32-bit
/// number, so times past 2038 (absolute either way) become the last one text can say.
fn exptime(t: u32) -> u32 {
    t.min(i32::MAX as u32)
}

/// Writes to `text` the text-protocol request with the effect of `req` and returns how to
/// translate its reply. `Ok(None)`: not a command for the backends (noop, version, quit,
/// stat, SASL), nothing written. `Err`: refused here with that status (the key cannot be
/// written in a text command).
pub fn forward(req: &BinRequest<'_>, text: &mut Vec<u8>) -> Result<Option<Pending>, Status> {
    let key = match req.command {
        Command::Get { key, .. }
        | Command::Touch { key, .. }
        | Command::Store { key, .. }
        | Command::Delete { key }
        | Command::Arith { key, .. } => key,
        Command::Flush { .. } => b"",
        _ => return Ok(None),
    };
    if !key.is_empty() && crate::check_key(key).is_err() {
        return Err(Status::InvalidArguments);
    }
    let shape = match req.command {
        Command::Get {
            touch, with_key, ..
        } => {
            match touch {
                Some(t) => {
                    text.extend_from_slice(b"gats ");
                    num(text, exptime(t));
                    text.push(b' ');
                }
                None => text.extend_from_slice(b"gets "),
            }
            text.extend_from_slice(key);
            text.extend_from_slice(b"\r\n");
            Shape::Get {
                with_key,
                touch: false,
            }
        }
        Command::Touch { exptime: t, .. } => {
            text.extend_from_slice(b"gats ");
            num(text, exptime(t));
            text.push(b' ');
            text.extend_from_slice(key);
            text.extend_from_slice(b"\r\n");
            Shape::Get {
                with_key: false,
                touch: true,
            }
        }
        Command::Store {
            cmd,
            flags,
            exptime: t,
            data,
            ..
        } => {
            // Meta, for the CAS of the stored item that binary replies carry (memccapable
            // checks it) and a request CAS on any store command, as memcached checks it.
            let mode: &[u8] = match cmd {
                StoreCmd::Set | StoreCmd::Cas => b"S",
                // A CAS makes add/replace a compare-and-swap, as in memcached.
                StoreCmd::Add | StoreCmd::Replace if req.cas != 0 => b"S",
                StoreCmd::Add => b"E",
                StoreCmd::Replace => b"R",
                StoreCmd::Append => b"A",
                StoreCmd::Prepend => b"P",
            };
            text.extend_from_slice(b"ms ");
            text.extend_from_slice(key);
            text.push(b' ');
            num(text, data.len());
            text.extend_from_slice(b" c M");
            text.extend_from_slice(mode);
            if !matches!(cmd, StoreCmd::Append | StoreCmd::Prepend) {
                text.extend_from_slice(b" F");
                num(text, flags);
                text.extend_from_slice(b" T");
                num(text, exptime(t));
            }
            if req.cas != 0 {
                text.extend_from_slice(b" C");
                num(text, req.cas);
            }
            text.extend_from_slice(b"\r\n");
            text.extend_from_slice(data);
            text.extend_from_slice(b"\r\n");
            Shape::Store {
                cmd,
                cas: req.cas != 0,
            }
        }
        Command::Delete { .. } => {
            if req.cas == 0 {
                text.extend_from_slice(b"delete ");
                text.extend_from_slice(key);
            } else {
                text.extend_from_slice(b"md ");
                text.extend_from_slice(key);
                text.extend_from_slice(b" C");
                num(text, req.cas);
            }
            text.extend_from_slice(b"\r\n");
            Shape::Delete
        }
        Command::Arith {
            incr,
            delta,
            initial,
            exptime: t,
            ..
        } => {
            text.extend_from_slice(b"ma ");
            text.extend_from_slice(key);
            text.extend_from_slice(if incr { b" MI D" } else { b" MD D" });
            num(text, delta);
            // 0xffffffff: a miss answers not found instead of creating the counter.
            if t != u32::MAX {
                text.extend_from_slice(b" N");
                num(text, exptime(t));
                text.extend_from_slice(b" J");
                num(text, initial);
            }
            if req.cas != 0 {
                text.extend_from_slice(b" C");
                num(text, req.cas);
            }
            text.extend_from_slice(b" v c\r\n");
            Shape::Arith
        }
        Command::Flush { delay } => {
            text.extend_from_slice(b"flush_all");
            if delay != 0 {
                text.push(b' ');
                num(text, delay);
            }
            text.extend_from_slice(b"\r\n");
            Shape::Flush
        }
        _ => return Ok(None),
    };
    let with_key = matches!(shape, Shape::Get { with_key: true, .. });
    Ok(Some(Pending {
        opcode: req.opcode,
        opaque: req.opaque,
        quiet: req.quiet,
        shape,
        key: if with_key { key.to_vec() } else { Vec::new() },
    }))
}

/// The first line of `reply` without its `\r\n`, and what follows it.
fn first_line(reply: &[u8]) -> (&[u8], &[u8]) {
    match reply.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let line = &reply[..i];
            (line.strip_suffix(b"\r").unwrap_or(line), &reply[i + 1..])
        }
        None => (reply, b""),
    }
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

impl Pending {
    fn packet(&self, out: &mut Vec<u8>, status: u16, cas: u64, parts: [&[u8]; 3]) {
        let head = Head {
            opcode: self.opcode,
            vbucket_or_status: status,
            opaque: self.opaque,
            cas,
        };
        write_packet(out, RESPONSE_MAGIC, head, parts[0], parts[1], parts[2]);
    }

    fn error(&self, out: &mut Vec<u8>, status: Status) {
        self.packet(out, status.code(), 0, [&[], &[], status.message()]);
    }

    fn ok(&self, out: &mut Vec<u8>, cas: u64, value: &[u8]) {
        if !self.quiet {
            self.packet(out, Status::Success.code(), cas, [&[], &[], value]);
        }
    }

    /// Appends the binary reply to the text reply `text` (nothing for a quiet success or a
    /// quiet get's miss; errors always).
    pub fn write_reply(&self, text: &[u8], out: &mut Vec<u8>) {
        let (line, rest) = first_line(text);
        match (self.shape, line) {
            (Shape::Get { with_key, touch }, _) if line.starts_with(b"VALUE ") => {
                let Some((flags, cas, value)) = parse_value(line, rest) else {
                    return self.bad_reply(out);
                };
                let key: &[u8] = if with_key { &self.key } else { b"" };
                let value = if touch { b"" } else { value };
                self.packet(
                    out,
                    Status::Success.code(),
                    cas,
                    [&flags.to_be_bytes(), key, value],
                );
            }
            (Shape::Get { with_key, .. }, b"END") => {
                if self.quiet {
                    return;
                }
                if with_key {
                    self.packet(out, Status::KeyNotFound.code(), 0, [&[], &self.key, &[]]);
                } else {
                    self.error(out, Status::KeyNotFound);
                }
            }
            (Shape::Delete, b"DELETED" | b"HD") | (Shape::Flush, b"OK") => self.ok(out, 0, b""),
            (Shape::Store { .. }, _) if meta_code(line, b"HD") => self.ok(out, meta_cas(line), b""),
            (Shape::Store { cmd, cas }, _) if meta_code(line, b"NS") => {
                // memcached's binary statuses for a refused store.
                let status = match cmd {
                    StoreCmd::Add if !cas => Status::KeyExists,
                    StoreCmd::Replace if !cas => Status::KeyNotFound,
                    _ => Status::NotStored,
                };
                self.error(out, status)
            }
            (Shape::Store { .. } | Shape::Delete | Shape::Arith, _)
                if meta_code(line, b"EX") || line == b"EXISTS" =>
            {
                self.error(out, Status::KeyExists)
            }
            (Shape::Store { .. } | Shape::Delete | Shape::Arith, _)
                if meta_code(line, b"NF") || line == b"NOT_FOUND" =>
            {
                self.error(out, Status::KeyNotFound)
            }
            (Shape::Arith, _) if meta_code(line, b"NS") => self.error(out, Status::NotStored),
            (Shape::Arith, _) if line.starts_with(b"VA ") => {
                let cas = meta_cas(line);
                let (digits, _) = first_line(rest);
                // memcached keeps a decremented value's length: "9 " after "10".
                match parse_u64(digits.trim_ascii_end()) {
                    Some(v) => self.ok(out, cas, &v.to_be_bytes()),
                    None => self.bad_reply(out),
                }
            }
            _ => self.write_error_line(line, out),
        }
    }

    /// A text error line (or anything unexpected) as a binary error.
    fn write_error_line(&self, line: &[u8], out: &mut Vec<u8>) {
        let (status, msg): (u16, &[u8]) = if line == b"ERROR" {
            (
                Status::UnknownCommand.code(),
                Status::UnknownCommand.message(),
            )
        } else if let Some(msg) = line.strip_prefix(b"CLIENT_ERROR ") {
            if msg.starts_with(b"cannot increment or decrement non-numeric value") {
                (Status::NonNumeric.code(), Status::NonNumeric.message())
            } else {
                (Status::InvalidArguments.code(), msg)
            }
        } else if let Some(msg) = line.strip_prefix(b"SERVER_ERROR ") {
            if msg.starts_with(b"object too large") {
                (Status::TooLarge.code(), Status::TooLarge.message())
            } else if msg.starts_with(b"out of memory") {
                (Status::OutOfMemory.code(), msg)
            } else {
                // The router's own errors (no server, connection refused, timeout).
                (STATUS_TEMPORARY_FAILURE, msg)
            }
        } else {
            return self.bad_reply(out);
        };
        self.packet(out, status, 0, [&[], &[], msg]);
    }

    fn bad_reply(&self, out: &mut Vec<u8>) {
        self.packet(
            out,
            STATUS_TEMPORARY_FAILURE,
            0,
            [&[], &[], b"invalid reply from server"],
        );
    }
}

/// Whether a meta reply line has return code `code` (alone or followed by flags).
fn meta_code(line: &[u8], code: &[u8]) -> bool {
    line.strip_prefix(code)
        .is_some_and(|rest| rest.is_empty() || rest[0] == b' ')
}

/// The `c<cas>` return flag of a meta reply line; 0 when absent.
fn meta_cas(line: &[u8]) -> u64 {
    line.split(|&b| b == b' ')
        .skip(1)
        .find_map(|t| t.strip_prefix(b"c").and_then(parse_u64))
        .unwrap_or(0)
}

/// `VALUE <key> <flags> <bytes> <cas>` and the data after it: flags, CAS, value.
fn parse_value<'a>(line: &[u8], rest: &'a [u8]) -> Option<(u32, u64, &'a [u8])> {
    let mut t = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).skip(2);
    let flags: u32 = std::str::from_utf8(t.next()?).ok()?.parse().ok()?;
    let len = usize::try_from(parse_u64(t.next()?)?).ok()?;
    let cas = t.next().and_then(parse_u64).unwrap_or(0);
    Some((flags, cas, rest.get(..len)?))
}

/// memcached's answer to a stat request, from text `STAT <name> <value>` lines (up to `END`):
/// one packet per statistic, then the empty one.
pub fn write_stats(opaque: u32, text: &[u8], out: &mut Vec<u8>) {
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(stat) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let (name, value) = match stat.iter().position(|&b| b == b' ') {
            Some(i) => (&stat[..i], &stat[i + 1..]),
            None => (stat, &b""[..]),
        };
        super::write_stat(out, opaque, name, value);
    }
    super::write_stat(out, opaque, b"", b"");
}

/// A complete verbosity request (4 bytes of extras, nothing else) at the head of `buf`: its
/// reply (success) and length. memcached 1.6.18 answers verbosity unknown command and then
/// reads the next request from the wrong place; a router accepts and ignores it, as it does
/// text `verbosity`.
pub fn verbosity(buf: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let h = buf.get(..super::HEADER_LEN)?;
    let plain = h[0] == super::REQUEST_MAGIC
        && h[1] == super::opcode::VERBOSITY
        && h[2..4] == [0, 0]
        && h[4] == 4
        && h[8..12] == 4u32.to_be_bytes();
    if !plain || buf.len() < super::HEADER_LEN + 4 {
        return None;
    }
    let head = Head {
        opcode: super::opcode::VERBOSITY,
        vbucket_or_status: 0,
        opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        cas: 0,
    };
    write_packet(out, RESPONSE_MAGIC, head, &[], &[], &[]);
    Some(super::HEADER_LEN + 4)
}

/// The password of a SASL PLAIN message (`authzid NUL authcid NUL passwd`), if well formed.
pub fn sasl_plain_password(data: &[u8]) -> Option<&[u8]> {
    let mut parts = data.splitn(3, |&b| b == 0);
    let (_authz, _user, pass) = (parts.next()?, parts.next()?, parts.next()?);
    Some(pass)
}

#[cfg(test)]
mod tests {
    use super::super::{opcode as op, parse_response, ResponseParse};
    use super::*;

    fn req(opcode: u8, cas: u64, quiet: bool, command: Command<'_>) -> BinRequest<'_> {
        BinRequest {
            opcode,
            opaque: 0xdead_beef,
            cas,
            quiet,
            command,
        }
    }

    fn get(key: &[u8]) -> Command<'_> {
        Command::Get {
            key,
            touch: None,
            with_key: false,
        }
    }

    fn fwd(r: &BinRequest<'_>) -> (Vec<u8>, Pending) {
        let mut text = Vec::new();
        let p = forward(r, &mut text)
            .expect("forwardable")
            .expect("for a backend");
        (text, p)
    }

    /// (status, cas, extras, key, value) of a packet.
    type Got = (u16, u64, Vec<u8>, Vec<u8>, Vec<u8>);

    fn packets(mut out: &[u8]) -> Vec<Got> {
        let mut v = Vec::new();
        while !out.is_empty() {
            let ResponseParse::Response(r, n) = parse_response(out) else {
                panic!("bad packet")
            };
            assert_eq!(r.opaque, 0xdead_beef);
            v.push((
                r.status,
                r.cas,
                r.extras.into(),
                r.key.into(),
                r.value.into(),
            ));
            out = &out[n..];
        }
        v
    }

    fn answer(p: &Pending, text: &[u8]) -> Vec<Got> {
        let mut out = Vec::new();
        p.write_reply(text, &mut out);
        packets(&out)
    }

    #[test]
    fn gets_carry_flags_cas_and_the_key_when_asked() {
        let (text, p) = fwd(&req(op::GET, 0, false, get(b"k")));
        assert_eq!(text, b"gets k\r\n");
        let hit = b"VALUE k 7 2 99\r\nhi\r\nEND\r\n";
        assert_eq!(
            answer(&p, hit),
            [(0, 99, 7u32.to_be_bytes().into(), vec![], b"hi".to_vec())]
        );
        assert_eq!(
            answer(&p, b"END\r\n"),
            [(1, 0, vec![], vec![], b"Not found".to_vec())]
        );
        let getkq = Command::Get {
            key: b"k",
            touch: None,
            with_key: true,
        };
        let (_, p) = fwd(&req(op::GETKQ, 0, true, getkq));
        assert_eq!(
            answer(&p, hit),
            [(
                0,
                99,
                7u32.to_be_bytes().into(),
                b"k".to_vec(),
                b"hi".to_vec()
            )]
        );
        assert!(
            answer(&p, b"END\r\n").is_empty(),
            "a quiet miss says nothing"
        );
        let (_, p) = fwd(&req(op::GETK, 0, false, getkq));
        assert_eq!(
            answer(&p, b"END\r\n"),
            [(1, 0, vec![], b"k".to_vec(), vec![])]
        );
    }

    #[test]
    fn gat_and_touch_go_as_gats() {
        let gat = Command::Get {
            key: b"k",
            touch: Some(60),
            with_key: false,
        };
        assert_eq!(fwd(&req(op::GAT, 0, false, gat)).0, b"gats 60 k\r\n");
        let late = Command::Get {
            key: b"k",
            touch: Some(0xf000_0000),
            with_key: false,
        };
        let text = fwd(&req(op::GAT, 0, false, late)).0;
        assert_eq!(
            text, b"gats 2147483647 k\r\n",
            "past what text can say: its last time"
        );
        let (text, p) = fwd(&req(
            op::TOUCH,
            0,
            false,
            Command::Touch {
                key: b"k",
                exptime: 10,
            },
        ));
        assert_eq!(text, b"gats 10 k\r\n");
        let hit = b"VALUE k 3 2 5\r\nhi\r\nEND\r\n";
        assert_eq!(
            answer(&p, hit),
            [(0, 5, 3u32.to_be_bytes().into(), vec![], vec![])]
        );
    }

    fn store(cmd: StoreCmd) -> Command<'static> {
        Command::Store {
            cmd,
            key: b"k",
            flags: 5,
            exptime: 0,
            data: b"val",
        }
    }

    #[test]
    fn stores_go_as_ms_and_return_the_cas() {
        let (text, p) = fwd(&req(op::SET, 0, false, store(StoreCmd::Set)));
        assert_eq!(text, b"ms k 3 c MS F5 T0\r\nval\r\n");
        assert_eq!(answer(&p, b"HD c77\r\n"), [(0, 77, vec![], vec![], vec![])]);
        let (text, p) = fwd(&req(op::SET, 42, false, store(StoreCmd::Set)));
        assert_eq!(text, b"ms k 3 c MS F5 T0 C42\r\nval\r\n");
        assert_eq!(answer(&p, b"EX c0\r\n")[0].0, 2);
        assert_eq!(answer(&p, b"NF c0\r\n")[0].0, 1);
        let (text, p) = fwd(&req(op::ADDQ, 0, true, store(StoreCmd::Add)));
        assert_eq!(text, b"ms k 3 c ME F5 T0\r\nval\r\n");
        assert!(answer(&p, b"HD c1\r\n").is_empty(), "quiet success");
        assert_eq!(answer(&p, b"NS c0\r\n")[0].0, 2, "add of an existing key");
        let (_, p) = fwd(&req(op::ADD, 9, false, store(StoreCmd::Add)));
        assert_eq!(answer(&p, b"NS c0\r\n")[0].0, 5, "add with a CAS is a CAS");
        let (_, p) = fwd(&req(op::REPLACE, 0, false, store(StoreCmd::Replace)));
        assert_eq!(answer(&p, b"NS c0\r\n")[0].0, 1);
        let (text, p) = fwd(&req(op::APPEND, 3, false, store(StoreCmd::Append)));
        assert_eq!(text, b"ms k 3 c MA C3\r\nval\r\n");
        assert_eq!(answer(&p, b"NS\r\n")[0].0, 5);
    }

    #[test]
    fn delete_with_a_cas_goes_as_meta() {
        let del = Command::Delete { key: b"k" };
        let (text, p) = fwd(&req(op::DELETE, 0, false, del));
        assert_eq!(text, b"delete k\r\n");
        assert_eq!(answer(&p, b"DELETED\r\n")[0].0, 0);
        assert_eq!(answer(&p, b"NOT_FOUND\r\n")[0].0, 1);
        let (text, p) = fwd(&req(op::DELETEQ, 7, true, del));
        assert_eq!(text, b"md k C7\r\n");
        assert!(answer(&p, b"HD\r\n").is_empty());
        assert_eq!(answer(&p, b"EX\r\n")[0].0, 2);
    }

    #[test]
    fn incr_decr_go_as_ma_with_binary_initial_semantics() {
        let arith = |incr, exptime| Command::Arith {
            incr,
            key: b"n",
            delta: 5,
            initial: 10,
            exptime,
        };
        let (text, p) = fwd(&req(op::INCREMENT, 0, false, arith(true, 0)));
        assert_eq!(text, b"ma n MI D5 N0 J10 v c\r\n");
        assert_eq!(
            answer(&p, b"VA 2 c17\r\n15\r\n"),
            [(0, 17, vec![], vec![], 15u64.to_be_bytes().to_vec())]
        );
        let (text, p) = fwd(&req(op::DECREMENT, 3, false, arith(false, u32::MAX)));
        assert_eq!(text, b"ma n MD D5 C3 v c\r\n", "0xffffffff: never create");
        assert_eq!(answer(&p, b"NF\r\n")[0].0, 1);
        assert_eq!(answer(&p, b"VA 2 c4\r\n0 \r\n")[0].4, 0u64.to_be_bytes());
        let non_numeric = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
        assert_eq!(answer(&p, non_numeric)[0].0, 6);
    }

    #[test]
    fn errors_are_sent_even_for_quiet_requests() {
        let (_, p) = fwd(&req(op::SETQ, 0, true, store(StoreCmd::Set)));
        let down = answer(&p, b"SERVER_ERROR no server is available\r\n");
        assert_eq!(
            down,
            [(0x86, 0, vec![], vec![], b"no server is available".to_vec())]
        );
        assert_eq!(
            answer(&p, b"SERVER_ERROR object too large for cache\r\n")[0].0,
            3
        );
        assert_eq!(answer(&p, b"garbage\r\n")[0].0, 0x86);
    }

    #[test]
    fn flush_and_local_commands() {
        let (text, p) = fwd(&req(op::FLUSHQ, 0, true, Command::Flush { delay: 0 }));
        assert_eq!(text, b"flush_all\r\n");
        assert!(answer(&p, b"OK\r\n").is_empty());
        let (text, _) = fwd(&req(op::FLUSH, 0, false, Command::Flush { delay: 9 }));
        assert_eq!(text, b"flush_all 9\r\n");
        let mut text = Vec::new();
        assert_eq!(
            forward(&req(op::NOOP, 0, false, Command::Noop), &mut text),
            Ok(None)
        );
        assert!(text.is_empty());
    }

    #[test]
    fn keys_text_cannot_carry_are_refused() {
        let mut text = Vec::new();
        let r = forward(&req(op::GET, 0, false, get(b"a b")), &mut text);
        assert_eq!(r, Err(Status::InvalidArguments));
        assert!(text.is_empty());
    }

    #[test]
    fn stats_become_packets() {
        let mut out = Vec::new();
        write_stats(
            0xdead_beef,
            b"STAT pid 12\r\nSTAT pool a b\r\nEND\r\n",
            &mut out,
        );
        let p = packets(&out);
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[0].3.as_slice(), p[0].4.as_slice()),
            (&b"pid"[..], &b"12"[..])
        );
        assert_eq!(p[1].4, b"a b");
        assert!(p[2].3.is_empty() && p[2].4.is_empty());
    }

    #[test]
    fn verbosity_is_accepted_whole_or_not_at_all() {
        let mut req = vec![0x80, op::VERBOSITY, 0, 0, 4, 0, 0, 0, 0, 0, 0, 4];
        req.extend_from_slice(&0xdead_beefu32.to_be_bytes());
        req.extend_from_slice(&[0; 8]);
        req.extend_from_slice(&1u32.to_be_bytes());
        let mut out = Vec::new();
        assert_eq!(verbosity(&req[..27], &mut out), None, "not all here yet");
        assert_eq!(verbosity(&req, &mut out), Some(28));
        assert_eq!(packets(&out), [(0, 0, vec![], vec![], vec![])]);
        req[4] = 0;
        assert_eq!(
            verbosity(&req, &mut out),
            None,
            "malformed: the parser's answer"
        );
    }

    #[test]
    fn sasl_plain() {
        assert_eq!(sasl_plain_password(b"\0bob\0pw"), Some(&b"pw"[..]));
        assert_eq!(sasl_plain_password(b"bob"), None);
    }
}
