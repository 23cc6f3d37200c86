//! Runs the requests one read brought in: parses them out of the connection's read buffer,
//! executes them, and lays the buffer out for a large request still arriving.
//!
//! A value of at least `execute::IN_PLACE_MIN` bytes is received into a buffer of its own
//! that becomes the item's. A request larger than a pooled read buffer is item memory before
//! it is an item: what has arrived of it is charged to the store's limit
//! (`store::Store::reserve`), as memcached receives values into memory under `-m`, and it is
//! refused with memcached's reply when no room can be made. Only bytes that arrived are
//! charged, so announcing values and stalling evicts nothing, and values under way hold at
//! most a quarter of `-m` together (`Store::in_flight_cap`).

use proto::reply;

use crate::exec::binary;
use crate::exec::env::ExecEnv;
use crate::exec::execute::{self, Flow, Received};
use crate::exec::flash_wait;
use crate::exec::textauth;
use crate::io::bufpool::BufPool;
use crate::io::conn::{Conn, Protocol};
use crate::io::unsent::Unsent;
use crate::verbose;

/// Read buffer size taken from the pool; larger requests grow a buffer of their own.
pub const READ_BUF: usize = 16 * 1024;
/// The reply buffer keeps capacity up to this size between batches (large values reuse it).
pub const OUT_KEEP: usize = 2 << 20;

/// Bytes kept free in front of a request whose value is received in place
/// (`execute::IN_PLACE_MIN`), for the item header to be written over the
/// command line (the header can be up to 12 bytes longer than the shortest command line, and
/// the gap left in front must be 0 or at least a minimal item).
const HEADROOM: usize = 32;
const _: () = assert!(HEADROOM <= u8::MAX as usize, "Conn::front is a u8");

/// Runs the complete requests in `buf`, appending replies to `out`, and drops consumed bytes.
/// Returns true when it stopped early, with requests left in `buf`: when the connection's `-R`
/// budget for this turn is spent (`Conn::budget`; so one pipelining client cannot starve the
/// others), when `out` reached `env.reply_cap`, or when
/// a get paused for its replies to be written (`conn.resume`, `conn.unsent`) or for flash
/// reads (`Conn::flash_wait`: the worker runs it again once they are back).
pub fn process(
    env: &ExecEnv<'_>,
    conn: &mut Conn,
    pool: &mut BufPool,
    buf: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> bool {
    if conn.waits_on_flash() {
        return true;
    }
    if conn.watcher().is_some() {
        // memcached's watchers only receive: what they send is dropped.
        buf.clear();
        return false;
    }
    let fd = conn.stream.fd();
    // An untracked connection runs on the caller's env: copying it for every batch cost
    // ~25 instructions per request.
    let tracked = match conn.tracked {
        0 => None,
        h => env.shared.tracking.by_handle(h),
    };
    let tracked_env;
    let env = match tracked.as_deref() {
        None => env,
        Some(l) => {
            tracked_env = ExecEnv {
                tracked: Some(l),
                ..*env
            };
            &tracked_env
        }
    };
    match conn.protocol {
        Protocol::Text => {}
        Protocol::Binary => return binary::process(env, conn, pool, buf, out),
        Protocol::Undecided => {
            let Some(&first) = buf.first() else {
                return false;
            };
            conn.protocol = binary::negotiate(env, first, fd);
            if conn.protocol == Protocol::Binary {
                return binary::process(env, conn, pool, buf, out);
            }
        }
    }
    let limits = &env.shared.limits;
    let mut pos = usize::from(conn.front);
    let mut stopped_early = false;
    // The request left incomplete at the front holds a charge (`Conn::reserved`).
    let mut charged = false;
    while pos < buf.len() && !conn.closing {
        if out.len() >= env.reply_cap || conn.budget == 0 {
            stopped_early = true;
            break;
        }
        if !conn.authenticated {
            let Some(auth) = &env.shared.auth else {
                conn.authenticated = true;
                continue;
            };
            match textauth::step(auth, &buf[pos..], out) {
                textauth::Step::Incomplete => break,
                textauth::Step::Answered { used, ok } => {
                    pos += used;
                    conn.budget -= 1;
                    conn.authenticated = ok;
                }
                textauth::Step::Close => {
                    conn.closing = true;
                    conn.protocol_error = true;
                }
            }
            continue;
        }
        if conn.swallow > 0 {
            let k = conn.swallow.min(buf.len() - pos);
            pos += k;
            conn.swallow -= k;
            continue;
        }
        match proto::parse(&buf[pos..], limits) {
            proto::Parse::Request(req, used) => {
                // A get resuming after a pause was counted when it started (one that paused
                // at its first key for flash reads has them).
                let resuming = conn.resume > 0 || conn.flash_wait().is_some();
                if let (Some(p), false) = (env.probe, resuming) {
                    p.note(&req);
                }
                let log = env.shared.verbose() > 1;
                if log && !resuming {
                    verbose::request(fd, &buf[pos..pos + used]);
                }
                let received = (pos == usize::from(conn.front) && conn.front > 0)
                    .then(|| Received::of(&req, buf))
                    .flatten();
                if let Some(received) = received {
                    // An add/replace/cas whose item is on flash waits for it to be read back
                    // (off the worker), with the value kept where it arrived.
                    if env.flash_reads.is_some()
                        && flash_wait::bring_in(env, &req, &mut conn.aside).is_some()
                    {
                        stopped_early = true;
                        charged = true;
                        break;
                    }
                    // The bytes after this request start a fresh buffer; this one, cut after
                    // the value, becomes the item's (charged by the store from here on).
                    let mut rest = pool.take();
                    rest.extend_from_slice(&buf[pos + used..]);
                    buf.truncate(received.value_at + received.value_len);
                    let item = std::mem::replace(buf, rest).into_boxed_slice();
                    conn.front = 0;
                    pos = 0;
                    conn.budget -= 1;
                    conn.release_reservation(&env.shared.store);
                    let mark = out.len();
                    execute::store_received(env, &received, item, out);
                    conn.end_flash_wait();
                    if log {
                        verbose::replies(fd, &out[mark..]);
                    }
                    continue;
                }
                let log_replies = log && verbose::logs_replies(&req);
                let mark = out.len();
                let flow = execute::run(env, req, conn.resume as usize, &mut conn.aside, out);
                if log_replies {
                    verbose::replies(fd, &out[mark..]);
                }
                conn.budget -= 1;
                match flow {
                    Flow::Continue => {}
                    Flow::Close => conn.closing = true,
                    Flow::Watch => {
                        pos = buf.len();
                        break;
                    }
                    Flow::Track(l) => {
                        conn.tracked = l;
                        // The requests after it see the new listener in a fresh batch.
                        stopped_early = true;
                    }
                    Flow::Paused(p) => {
                        conn.unsent = p
                            .value
                            .map(|(value, tail)| Box::new(Unsent::new(value, tail)));
                        stopped_early = true;
                        if let Some(next) = p.next_key {
                            // Bounded by the keys on one request line.
                            conn.resume = next as u32;
                            break;
                        }
                    }
                }
                conn.resume = 0;
                // Reads a get asked for end with it.
                conn.end_flash_wait();
                pos += used;
                if stopped_early {
                    break;
                }
            }
            proto::Parse::Incomplete { total } => {
                if let Some(total) = total {
                    // Charged as it arrives (what arrived is all of this request's).
                    if total > pool.buf_size() {
                        if !conn.reserve_to(&env.shared.store, (buf.len() - pos) as u64) {
                            refuse_value(env, conn, buf, pos, total, out);
                            break;
                        }
                        charged = true;
                    }
                    let in_place = total >= execute::IN_PLACE_MIN;
                    // Keep a buffer already laid out for this request.
                    if pos != usize::from(conn.front)
                        || pos + total > buf.capacity()
                        || in_place != (conn.front > 0)
                    {
                        buf.drain(..pos);
                        pos = grow_for(pool, buf, total, in_place);
                        conn.front = pos as u8;
                    }
                }
                break;
            }
            proto::Parse::Error {
                reply,
                consumed,
                swallow,
                close,
                unlink,
            } => {
                if env.shared.verbose() > 1 {
                    verbose::request(fd, &buf[pos..pos + consumed]);
                    verbose::replies(fd, reply);
                }
                if let Some(key) = unlink {
                    let _ = env
                        .shared
                        .store
                        .delete(key.as_bytes(), env.now, &Default::default());
                }
                if reply == reply::SERVER_ERROR_TOO_LARGE {
                    env.stats.store_too_large.incr();
                }
                out.extend_from_slice(reply);
                pos += consumed;
                conn.swallow = swallow;
                if close {
                    conn.closing = true;
                    conn.protocol_error = true;
                }
            }
        }
    }
    if pos >= buf.len() {
        buf.clear();
        conn.front = 0;
    } else if pos > usize::from(conn.front) {
        buf.drain(..pos);
        conn.front = 0;
    }
    if !charged {
        conn.release_reservation(&env.shared.store);
    }
    stopped_early
}

/// No memory for a value under way: answer as memcached does when it cannot allocate the
/// item, and discard the value (the part in `buf` from `at` now, the rest as it arrives).
fn refuse_value(
    env: &ExecEnv<'_>,
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    at: usize,
    total: usize,
    out: &mut Vec<u8>,
) {
    env.stats.store_no_memory.incr();
    let request = &buf[at..];
    let line_end = request
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(request.len());
    let noreply = request[..line_end]
        .split(|b| b.is_ascii_whitespace())
        .rfind(|t| !t.is_empty())
        == Some(b"noreply");
    if !noreply {
        out.extend_from_slice(reply::SERVER_ERROR_OOM_STORING);
    }
    if env.shared.verbose() > 1 {
        verbose::request(conn.stream.fd(), &request[..line_end]);
        verbose::replies(conn.stream.fd(), reply::SERVER_ERROR_OOM_STORING);
    }
    conn.swallow = total - request.len();
    buf.clear();
    conn.front = 0;
}

/// Makes room for a request of `total` bytes (a large value), preferring a buffer the pool
/// kept from an earlier large request over a fresh allocation. With `in_place`, the request
/// starts `HEADROOM` bytes into the buffer (see `execute::IN_PLACE_MIN`); returns that offset.
fn grow_for(pool: &mut BufPool, buf: &mut Vec<u8>, total: usize, in_place: bool) -> usize {
    let front = if in_place { HEADROOM } else { 0 };
    if front == 0 && total <= buf.capacity() {
        return 0;
    }
    let mut big = pool
        .take_large(front + total)
        .unwrap_or_else(|| Vec::with_capacity(front + total));
    big.resize(front, 0);
    big.extend_from_slice(buf);
    std::mem::swap(buf, &mut big);
    pool.give(big);
    front
}
