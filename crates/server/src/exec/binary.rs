//! The binary protocol on a connection or a datagram: runs the requests `proto::binary` parses
//! against the store and writes memcached 1.6.18's replies (its `proto_bin.c`).
//!
//! A connection speaks binary from its first byte on (`-B binary`, or 0x80 under `-B auto`,
//! decided once in `batch`). Values are copied into the store (no in-place receive), but a
//! value larger than a pooled read buffer is charged to `-m` as it arrives, as on text
//! connections; the read buffer never grows past what the codec asks for, which is bounded
//! by the item size limit.

use proto::binary::{self as bin, opcode as op, BinError, BinParse, BinRequest, Command, Status};
use proto::{Request, Tokens};
use store::{ArithResult, DeleteResult, StoreResult};

use crate::config;
use crate::exec::env::ExecEnv;
use crate::exec::execute::{self, Extras, Flow, Outcome};
use crate::exec::flash_wait;
use crate::exec::get::{self, Got};
use crate::io::bufpool::BufPool;
use crate::io::conn::{Aside, Conn, Protocol};
use crate::verbose;

/// The protocol of a connection whose first byte is `first` (logged under `-vv`).
pub fn negotiate(env: &ExecEnv<'_>, first: u8, fd: i32) -> Protocol {
    let binary = datagram_is_binary(env, first);
    if env.shared.verbose() > 1 {
        let name = if binary { "binary" } else { "ascii" };
        stderr_line!("{fd}: Client using the {name} protocol");
    }
    if binary {
        Protocol::Binary
    } else {
        Protocol::Text
    }
}

/// Whether a datagram whose payload starts with `first` holds binary requests (decided per
/// datagram under `-B auto`).
pub fn datagram_is_binary(env: &ExecEnv<'_>, first: u8) -> bool {
    match env.shared.settings.binding_protocol {
        config::BINARY => true,
        config::ASCII => false,
        _ => first == bin::REQUEST_MAGIC,
    }
}

/// Runs the complete binary requests in `buf` (as `batch::process` does for text), appending
/// replies to `out`. Returns true when it stopped early with requests left in `buf`: the
/// connection's `-R` budget for this turn spent (`Conn::budget`), or `out` full.
pub fn process(
    env: &ExecEnv<'_>,
    conn: &mut Conn,
    pool: &mut BufPool,
    buf: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> bool {
    let fd = conn.stream.fd();
    let log = env.shared.verbose() > 1;
    let start = out.len();
    let mut pos = 0;
    let mut stopped_early = false;
    while pos < buf.len() && !conn.closing {
        if out.len() >= env.reply_cap || conn.budget == 0 {
            stopped_early = true;
            break;
        }
        if conn.swallow > 0 {
            let k = conn.swallow.min(buf.len() - pos);
            pos += k;
            conn.swallow -= k;
            if conn.swallow == 0 {
                if let Some(Aside::AfterSwallow(reply)) = conn.aside.take().map(|a| *a) {
                    out.extend_from_slice(&reply);
                }
            }
            continue;
        }
        let settings = codec_settings(env, conn.authenticated);
        let mark = out.len();
        match bin::parse_request(&buf[pos..], &settings) {
            BinParse::Request(req, used) => {
                // A request that paused for a flash read was logged when it started.
                let log_request = log && conn.flash_wait().is_none();
                if log_request {
                    verbose::binary_request(fd, &buf[pos..]);
                }
                conn.release_reservation(&env.shared.store);
                let fd = log_request.then_some(fd);
                match run(env, &mut conn.authenticated, &req, &mut conn.aside, out, fd) {
                    Flow::Continue => {}
                    Flow::Close => conn.closing = true,
                    Flow::Watch | Flow::Track(_) => {}
                    // It runs again once its read is back.
                    Flow::Paused(_) => {
                        stopped_early = true;
                        break;
                    }
                }
                conn.end_flash_wait();
                pos += used;
                conn.budget -= 1;
            }
            BinParse::Incomplete { total } => {
                buf.drain(..pos);
                pos = 0;
                // A value larger than a pooled buffer is charged to `-m` as it arrives (a
                // header waiting for a long key is bounded by the 64 KiB key length field,
                // and not charged).
                let charge = total > pool.buf_size() && waits_for_value(buf, total);
                if charge && !conn.reserve_to(&env.shared.store, buf.len() as u64) {
                    refuse_value(env, conn, buf, total, out);
                } else if total > buf.capacity() {
                    let mut big = pool
                        .take_large(total + GROW_SLACK)
                        .unwrap_or_else(|| Vec::with_capacity(total + GROW_SLACK));
                    big.extend_from_slice(buf);
                    pool.give(std::mem::replace(buf, big));
                }
                break;
            }
            BinParse::Error(e) => {
                if log {
                    log_error(fd, &buf[pos..]);
                }
                if e.status.is_none() {
                    // A wrong magic byte: memcached closes at once, and the replies of this
                    // read that it has not sent yet are lost with the connection.
                    out.truncate(start);
                }
                let mut reply = Vec::new();
                apply_error(env, &e, &mut reply);
                hold_or_send(conn, e.swallow, reply, out);
                pos += e.consumed;
                conn.closing |= e.close;
            }
        }
        if log {
            // (A wrong magic byte may have dropped replies from before `mark`.)
            verbose::binary_replies(fd, out.get(mark..).unwrap_or_default());
        }
    }
    if pos >= buf.len() {
        buf.clear();
    } else if pos > 0 {
        buf.drain(..pos);
    }
    stopped_early
}

/// Whether the request at the start of `buf`, incomplete at `total` bytes, has its header,
/// extras and key and waits for its value.
fn waits_for_value(buf: &[u8], total: usize) -> bool {
    bin::key_range(buf).is_some_and(|key| total > key.end)
}

/// Starts discarding `swallow` bytes of a refused value. memcached queues the refusal and
/// sends it only once the value is discarded (a client that never sends the value never gets
/// it); the replies before it go out as usual.
fn hold_or_send(conn: &mut Conn, swallow: usize, reply: Vec<u8>, out: &mut Vec<u8>) {
    conn.swallow = swallow;
    if swallow == 0 {
        out.extend_from_slice(&reply);
    } else if !reply.is_empty() {
        conn.aside = Some(Box::new(Aside::AfterSwallow(reply)));
    }
}

/// Room left past a large request so the worker's reads never grow its buffer again.
const GROW_SLACK: usize = 1024;

fn codec_settings(env: &ExecEnv<'_>, authenticated: bool) -> bin::Settings {
    bin::Settings {
        limits: env.shared.limits,
        sasl: env.shared.settings.sasl,
        authenticated,
    }
}

/// A refused frame: the reply, the counter, and the old item memcached unlinks when a set's
/// value is too large.
fn apply_error(env: &ExecEnv<'_>, e: &BinError<'_>, out: &mut Vec<u8>) {
    e.write_reply(out);
    if let Some(key) = e.unlink {
        unlink(env, key);
    }
    if e.status == Some(Status::TooLarge) {
        env.stats.store_too_large.incr();
    }
}

/// Drops the old item of a set refused before it ran, as memcached does.
fn unlink(env: &ExecEnv<'_>, key: &[u8]) {
    let delete = Request::Delete { key, noreply: true };
    execute::apply(env, delete, Extras::default());
}

fn log_error(fd: i32, raw: &[u8]) {
    verbose::binary_request(fd, raw);
    if raw[0] != bin::REQUEST_MAGIC {
        stderr_line!("Invalid magic:  {:x}", raw[0]);
    }
}

/// No memory for a large value under way: memcached's reply when it cannot allocate the item
/// (a set also drops the old item), and the value discarded as it arrives.
fn refuse_value(
    env: &ExecEnv<'_>,
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    total: usize,
    out: &mut Vec<u8>,
) {
    env.stats.store_no_memory.incr();
    let opcode = buf[1];
    let mut reply = Vec::new();
    BinRequest::from_header(buf).write_store_oom(&mut reply);
    if matches!(opcode, op::SET | op::SETQ) {
        if let Some(key) = bin::key_range(buf).and_then(|k| buf.get(k)) {
            unlink(env, key);
        }
    }
    hold_or_send(conn, total - buf.len(), reply, out);
    buf.clear();
    conn.release_reservation(&env.shared.store);
}

/// Executes one request, appending its replies to `out`. `reads`: the connection's flash
/// reads (`flash_wait::read_once`): a request on a key on flash pauses until its read is back
/// when that read would wait for the disk. `log`: the connection's fd under `-vv`.
fn run(
    env: &ExecEnv<'_>,
    authenticated: &mut bool,
    req: &BinRequest<'_>,
    reads: &mut Option<Box<Aside>>,
    out: &mut Vec<u8>,
    log: Option<i32>,
) -> Flow {
    if let Some(fd) = log {
        verbose::binary_command(fd, req);
    }
    match req.command {
        // A binary key may hold spaces, which the text request's key list splits on: each
        // get is one lookup.
        Command::Get { key, touch, .. } => {
            let touch = touch.map(|e| env.shared.store.exptime(i64::from(e), env.now));
            let write = |found: Option<store::ItemView<'_>>| match found {
                Some(it) => {
                    req.write_hit(out, it.flags, it.cas, it.value);
                    Got::Hit
                }
                None => {
                    req.write_miss(out);
                    Got::Miss
                }
            };
            let read = match flash_wait::read_once(env, key, reads) {
                Ok(read) => read,
                Err(flow) => return flow,
            };
            match read {
                Some(p) => get::from_read(env, key, touch, &p, write),
                None => get::lookup(env, key, touch, write),
            };
        }
        Command::Stat { key } => stat(env, req, key, out),
        Command::SaslListMechs => req.write_ok(out, 0, execute::SASL_MECHS),
        Command::Sasl {
            step,
            mechanism,
            data,
        } => {
            if execute::sasl_plain(env, step, mechanism, data) {
                *authenticated = true;
                req.write_ok(out, 0, b"Authenticated");
            } else {
                req.write_error(out, Status::AuthError);
            }
        }
        _ => {
            let shared = shared_request(req);
            if let (Some(r), Some(_)) = (&shared, env.flash_reads) {
                if let Some(flow) = flash_wait::bring_in(env, r, reads) {
                    return flow;
                }
            }
            match shared.and_then(|r| execute::apply(env, r, extras(req))) {
                Some(outcome) => {
                    if reply(req, outcome, out) {
                        return Flow::Close;
                    }
                }
                None => req.write_error(out, Status::UnknownCommand),
            }
        }
    }
    Flow::Continue
}

/// The shared request a binary one runs as: `BinRequest::request`'s, plus delete with a CAS,
/// incr/decr and noop, whose CAS, initial value and expiration go in `extras`.
fn shared_request<'a>(req: &BinRequest<'a>) -> Option<Request<'a>> {
    req.request().or(match req.command {
        Command::Delete { key } => Some(Request::Delete {
            key,
            noreply: req.quiet,
        }),
        Command::Arith {
            incr, key, delta, ..
        } => Some(Request::Arith {
            incr,
            key,
            delta,
            noreply: req.quiet,
        }),
        Command::Noop => Some(Request::MetaNoop),
        _ => None,
    })
}

/// What the header and extras add to `shared_request`.
fn extras(req: &BinRequest<'_>) -> Extras {
    let vivify = match req.command {
        // An expiration of 0xffffffff means "do not create the item on a miss".
        Command::Arith {
            initial, exptime, ..
        } if exptime != u32::MAX => Some((initial, exptime)),
        _ => None,
    };
    Extras {
        cas: req.cas,
        vivify,
    }
}

/// memcached's binary reply to `outcome` (quiet requests send only errors). True: close.
fn reply(req: &BinRequest<'_>, outcome: Outcome, out: &mut Vec<u8>) -> bool {
    match outcome {
        Outcome::Stored { result, cas } => match result {
            StoreResult::Stored => req.write_ok(out, cas, &[]),
            StoreResult::Exists => req.write_error(out, Status::KeyExists),
            StoreResult::NotFound => req.write_error(out, Status::KeyNotFound),
            // The codec refused values over the limit; an append can still grow past it.
            StoreResult::NotStored | StoreResult::TooLarge => {
                req.write_error(out, req.not_stored_status())
            }
            StoreResult::NoMemory => req.write_store_oom(out),
        },
        Outcome::Deleted(r) => match r {
            DeleteResult::Deleted => req.write_ok(out, 0, &[]),
            DeleteResult::NotFound => req.write_error(out, Status::KeyNotFound),
            DeleteResult::Exists => req.write_error(out, Status::KeyExists),
            DeleteResult::NoMemory => req.write_error(out, Status::OutOfMemory),
        },
        Outcome::Arith(r) => match r {
            ArithResult::Ok { value, cas, .. } => req.write_arith(out, value, cas),
            ArithResult::NotFound => req.write_error(out, Status::KeyNotFound),
            ArithResult::Exists => req.write_error(out, Status::KeyExists),
            ArithResult::NonNumeric => req.write_error(out, Status::NonNumeric),
            ArithResult::NoMemory => {
                req.write_error_message(out, Status::OutOfMemory, bin::OOM_INCREMENTING)
            }
        },
        Outcome::Touched(Some((flags, cas))) => req.write_hit(out, flags, cas, &[]),
        Outcome::Touched(None) => req.write_miss(out),
        Outcome::Flushed | Outcome::Noop => req.write_ok(out, 0, &[]),
        // memcached answers a flush under `-F` with an auth error.
        Outcome::FlushRefused => req.write_error(out, Status::AuthError),
        Outcome::Version => req.write_ok(out, 0, config::VERSION.as_bytes()),
        Outcome::Quit => {
            req.write_ok(out, 0, &[]);
            return true;
        }
    }
    false
}

/// stat: every statistic (no key) or the group the key names, as one packet per statistic
/// and an empty one to end; memcached compares `reset`, `settings` and `detail` by prefix
/// and the other group names exactly, and answers an unknown group with not found.
fn stat(env: &ExecEnv<'_>, req: &BinRequest<'_>, key: &[u8], out: &mut Vec<u8>) {
    let group: &[u8] = if key.starts_with(b"reset") {
        b"reset"
    } else if key.starts_with(b"settings") {
        b"settings"
    } else if let Some(detail) = key.strip_prefix(b"detail") {
        // Per-prefix stats are not kept: on/off change nothing, a dump is empty.
        if detail.starts_with(b" dump") {
            bin::write_stat(out, req.opaque, b"detailed", b"END\r\n");
        } else if !detail.starts_with(b" on") && !detail.starts_with(b" off") {
            return req.write_error(out, Status::KeyNotFound);
        }
        return bin::write_stat(out, req.opaque, b"", b"");
    } else if matches!(key, b"" | b"items" | b"slabs" | b"sizes") {
        key
    } else {
        return req.write_error(out, Status::KeyNotFound);
    };
    let mut text = Vec::new();
    let stats = Request::Stats {
        args: Tokens::new(group),
    };
    execute::run(env, stats, 0, &mut None, &mut text);
    text_stats_to_binary(&text, req.opaque, out);
}

/// Rewrites the text reply of `stats` (`STAT name value` lines, then `END` or `RESET`) as
/// binary stat packets: one per line, then the empty one.
fn text_stats_to_binary(text: &[u8], opaque: u32, out: &mut Vec<u8>) {
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(stat) = line.strip_prefix(b"STAT ") {
            let at = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
            let value = stat.get(at + 1..).unwrap_or_default();
            bin::write_stat(out, opaque, &stat[..at], value);
        }
    }
    bin::write_stat(out, opaque, b"", b"");
}

/// A UDP datagram of binary requests (after the frame header): their replies, each one's end
/// in `ends`.
/// Nothing is remembered between datagrams, so with `-S` every request is unauthenticated.
pub fn run_datagram(env: &ExecEnv<'_>, payload: &[u8], out: &mut Vec<u8>, ends: &mut Vec<usize>) {
    let settings = codec_settings(env, false);
    let mut authenticated = false;
    let mut pos = 0;
    while pos < payload.len() {
        match bin::parse_request(&payload[pos..], &settings) {
            BinParse::Request(req, used) => {
                pos += used;
                let flow = run(env, &mut authenticated, &req, &mut None, out, None);
                ends.push(out.len());
                if matches!(flow, Flow::Close) {
                    return;
                }
            }
            BinParse::Incomplete { .. } => return,
            BinParse::Error(e) => {
                apply_error(env, &e, out);
                ends.push(out.len());
                if e.close {
                    return;
                }
                pos += e.consumed + e.swallow;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::binary::{parse_response, ResponseParse};
    use proto::StoreCmd;

    #[test]
    fn only_a_value_under_way_is_charged() {
        let mut set = Vec::new();
        BinRequest {
            opcode: op::SET,
            opaque: 0,
            cas: 0,
            quiet: false,
            command: Command::Store {
                cmd: StoreCmd::Set,
                key: b"key",
                flags: 0,
                exptime: 0,
                data: &[0; 100_000],
            },
        }
        .encode(&mut set);
        assert!(waits_for_value(&set[..40], set.len()));
        assert!(!waits_for_value(&set[..30], 35));
        assert!(!waits_for_value(&set[..10], 24));
    }

    #[test]
    fn delete_with_cas_and_arith_run_as_shared_requests_with_extras() {
        let request = |cas, command| BinRequest {
            opcode: op::DELETE,
            opaque: 0,
            cas,
            quiet: true,
            command,
        };
        let delete = request(7, Command::Delete { key: b"k" });
        let shared = shared_request(&delete);
        let want = Request::Delete {
            key: b"k",
            noreply: true,
        };
        assert_eq!(shared, Some(want));
        assert_eq!((extras(&delete).cas, extras(&delete).vivify), (7, None));
        for (exptime, vivify) in [(60, Some((5, 60))), (u32::MAX, None)] {
            let arith = request(
                0,
                Command::Arith {
                    incr: true,
                    key: b"n",
                    delta: 2,
                    initial: 5,
                    exptime,
                },
            );
            let shared = shared_request(&arith);
            assert!(matches!(shared, Some(Request::Arith { delta: 2, .. })));
            assert_eq!(extras(&arith).vivify, vivify);
        }
        assert_eq!(
            shared_request(&request(0, Command::Noop)),
            Some(Request::MetaNoop)
        );
        let stat = request(0, Command::Stat { key: b"" });
        assert_eq!(shared_request(&stat), None);
    }

    #[test]
    fn text_stats_become_one_packet_each_then_an_empty_one() {
        let mut out = Vec::new();
        text_stats_to_binary(b"STAT pid 12\r\nSTAT a b c\r\nEND\r\n", 9, &mut out);
        let mut got = Vec::new();
        let mut rest = &out[..];
        while let ResponseParse::Response(r, n) = parse_response(rest) {
            assert_eq!((r.opcode, r.opaque, r.status), (op::STAT, 9, 0));
            got.push((r.key.to_vec(), r.value.to_vec()));
            rest = &rest[n..];
        }
        assert!(rest.is_empty());
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"pid".to_vec(), b"12".to_vec()),
            (b"a".to_vec(), b"b c".to_vec()),
            (vec![], vec![]),
        ];
        assert_eq!(got, want);
    }
}
