//! Runs parsed requests against the store and writes memcached's replies.
//!
//! No I/O here: the worker hands in a request and an output buffer. Parsing decisions (what is
//! malformed) belong to `proto`; item semantics to `store`; this module maps one onto the other.

use proto::reply::{self, write_u64};
use proto::{Request, ShutdownMode, StoreCmd};
use store::{
    ArithOpts, ArithResult, DeleteOpts, DeleteResult, StoreMode, StoreRequest, StoreResult,
    TouchResult,
};

use crate::meta;
use crate::report;
use crate::stats::ThreadStats;
use crate::worker::ExecEnv;

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
}

/// Executes one request, appending its reply (if any) to `out`.
pub fn run(env: &ExecEnv<'_>, req: Request<'_>, out: &mut Vec<u8>) -> Flow {
    let store = &env.shared.store;
    let st = env.stats;
    let now = env.now;
    match req {
        Request::Get { keys, cas } => retrieve(env, keys, cas, None, out),
        Request::Gat { exptime, keys, cas } => retrieve(env, keys, cas, Some(exptime), out),
        Request::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas_unique,
            noreply,
        } => {
            st.cmd_set.incr();
            let mode = store_mode(cmd, cas_unique);
            let req = StoreRequest::new(mode, key, data)
                .flags(flags)
                .exptime(store.exptime(exptime, now));
            let r = store.store(req, now);
            reply_stored(st, r.result, noreply, out);
        }
        Request::Delete { key, noreply } => {
            let r = store.delete(key, now, &DeleteOpts::default());
            if !noreply {
                out.extend_from_slice(match r {
                    DeleteResult::Deleted => reply::DELETED,
                    DeleteResult::NotFound => reply::NOT_FOUND,
                    DeleteResult::Exists => reply::EXISTS,
                    DeleteResult::NoMemory => reply::SERVER_ERROR_OOM,
                });
            }
        }
        Request::Arith {
            incr,
            key,
            delta,
            noreply,
        } => {
            let r = store.incr_decr(key, incr, delta, now, &ArithOpts::default());
            if !noreply {
                match r {
                    ArithResult::Ok { value, .. } => {
                        write_u64(out, value);
                        out.extend_from_slice(b"\r\n");
                    }
                    ArithResult::NotFound => out.extend_from_slice(reply::NOT_FOUND),
                    ArithResult::NonNumeric => {
                        out.extend_from_slice(reply::CLIENT_ERROR_NON_NUMERIC)
                    }
                    ArithResult::Exists => out.extend_from_slice(reply::EXISTS),
                    ArithResult::NoMemory => out.extend_from_slice(reply::SERVER_ERROR_OOM),
                }
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            st.cmd_touch.incr();
            let r = store.touch(key, store.exptime(exptime, now), now);
            if !noreply {
                out.extend_from_slice(match r {
                    TouchResult::Touched => reply::TOUCHED,
                    TouchResult::NotFound => reply::NOT_FOUND,
                });
            }
        }
        Request::FlushAll { delay, noreply } => {
            if env.shared.settings.disable_flush_all {
                out.extend_from_slice(reply::CLIENT_ERROR_FLUSH_NOT_ALLOWED);
                return Flow::Continue;
            }
            st.cmd_flush.incr();
            store.flush_all(delay, now);
            if !noreply {
                out.extend_from_slice(reply::OK);
            }
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(crate::VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Request::Verbosity { level, noreply } => {
            env.shared.verbosity.store(
                level.min(u8::MAX as u32) as u8,
                std::sync::atomic::Ordering::Relaxed,
            );
            if !noreply {
                out.extend_from_slice(reply::OK);
            }
        }
        Request::Quit => return Flow::Close,
        Request::Shutdown(mode) => {
            if !env.shared.settings.enable_shutdown {
                out.extend_from_slice(reply::ERROR_SHUTDOWN_NOT_ENABLED);
                return Flow::Continue;
            }
            if mode == ShutdownMode::Invalid {
                out.extend_from_slice(reply::CLIENT_ERROR_INVALID_SHUTDOWN);
                return Flow::Continue;
            }
            env.shared.request_shutdown();
            return Flow::Close;
        }
        Request::Stats { args } => report::stats(env, args, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            if megabytes < 8 {
                out.extend_from_slice(reply::MEMLIMIT_TOO_SMALL);
            } else {
                store.set_mem_limit(u64::from(megabytes) << 20);
                if !noreply {
                    out.extend_from_slice(reply::OK);
                }
            }
        }
        // slabs/lru/lru_crawler/watch/extstore tune memcached's slab allocator and crawler,
        // which memfleet does not have: refuse them the way memcached refuses a command it lacks.
        Request::Admin { .. } => out.extend_from_slice(reply::ERROR),
        Request::MetaGet {
            key,
            flags,
            late_error,
        } => {
            st.cmd_meta.incr();
            let mark = out.len();
            meta::get(env, &key, &flags, out);
            replace_with_error(out, mark, late_error);
        }
        Request::MetaSet {
            key,
            flags,
            cmd,
            data,
        } => {
            st.cmd_meta.incr();
            st.cmd_set.incr();
            meta::set(env, &key, &flags, cmd, data, out);
        }
        Request::MetaDelete { key, flags } => {
            st.cmd_meta.incr();
            meta::delete(env, &key, &flags, out);
        }
        Request::MetaArithmetic {
            key,
            flags,
            incr,
            late_error,
        } => {
            st.cmd_meta.incr();
            let mark = out.len();
            meta::arithmetic(env, &key, &flags, incr, out);
            replace_with_error(out, mark, late_error);
        }
        Request::MetaNoop => out.extend_from_slice(reply::MN),
        Request::MetaDebug { key } => meta::debug(env, &key, out),
    }
    Flow::Continue
}

/// Values at least this large are received straight into a buffer that becomes the item's
/// (`store::Value::Received`), instead of being copied from the read buffer into the store.
pub const IN_PLACE_MIN: usize = 64 * 1024;

/// A text storage command whose value was received in place (see `IN_PLACE_MIN`).
pub struct Received {
    pub cmd: StoreCmd,
    pub key: Vec<u8>,
    pub flags: u32,
    pub exptime: i64,
    pub cas_unique: u64,
    pub noreply: bool,
    /// Where the value sits in the buffer handed over with it.
    pub value_at: usize,
    pub value_len: usize,
}

impl Received {
    /// The storage request `req`, parsed from `buf`, if its value is stored in place:
    /// set/add/replace/cas of at least `IN_PLACE_MIN` bytes (append/prepend need the old value).
    pub fn of(req: &Request<'_>, buf: &[u8]) -> Option<Received> {
        let Request::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas_unique,
            noreply,
        } = *req
        else {
            return None;
        };
        if data.len() < IN_PLACE_MIN || matches!(cmd, StoreCmd::Append | StoreCmd::Prepend) {
            return None;
        }
        Some(Received {
            cmd,
            key: key.to_vec(),
            flags,
            exptime,
            cas_unique,
            noreply,
            value_at: data.as_ptr() as usize - buf.as_ptr() as usize,
            value_len: data.len(),
        })
    }
}

/// Stores a value received straight into `item` (the request's own buffer) without copying.
pub fn store_received(env: &ExecEnv<'_>, r: &Received, item: Box<[u8]>, out: &mut Vec<u8>) {
    let store = &env.shared.store;
    env.stats.cmd_set.incr();
    let mode = store_mode(r.cmd, r.cas_unique);
    let exptime = store.exptime(r.exptime, env.now);
    let req = StoreRequest::received(mode, &r.key, item, r.value_at, r.value_len)
        .flags(r.flags)
        .exptime(exptime);
    let o = store.store(req, env.now);
    reply_stored(env.stats, o.result, r.noreply, out);
}

fn reply_stored(st: &ThreadStats, result: StoreResult, noreply: bool, out: &mut Vec<u8>) {
    if result == StoreResult::TooLarge {
        st.store_too_large.incr();
    } else if result == StoreResult::NoMemory {
        st.store_no_memory.incr();
    }
    if !noreply {
        out.extend_from_slice(match result {
            StoreResult::Stored => reply::STORED,
            StoreResult::NotStored => reply::NOT_STORED,
            StoreResult::Exists => reply::EXISTS,
            StoreResult::NotFound => reply::NOT_FOUND,
            StoreResult::TooLarge => reply::SERVER_ERROR_TOO_LARGE,
            StoreResult::NoMemory => reply::SERVER_ERROR_OOM_STORING,
        });
    }
}

/// memcached finds some meta errors only while writing the reply, after the lookup and its
/// side effects: the error replaces this request's reply (from `mark` on).
fn replace_with_error(out: &mut Vec<u8>, mark: usize, late_error: Option<&'static [u8]>) {
    if let Some(err) = late_error {
        out.truncate(mark);
        out.extend_from_slice(err);
    }
}

/// The store operation for a storage command; `cas` is the unique to compare for `Cas`.
pub(crate) fn store_mode(cmd: StoreCmd, cas: u64) -> StoreMode {
    match cmd {
        StoreCmd::Set => StoreMode::Set,
        StoreCmd::Add => StoreMode::Add,
        StoreCmd::Replace => StoreMode::Replace,
        StoreCmd::Append => StoreMode::Append,
        StoreCmd::Prepend => StoreMode::Prepend,
        StoreCmd::Cas => StoreMode::Cas(cas),
    }
}

/// get/gets/gat/gats: one VALUE per hit, then END; a too-long key discards the VALUEs.
fn retrieve(
    env: &ExecEnv<'_>,
    keys: proto::Keys<'_>,
    with_cas: bool,
    touch: Option<i64>,
    out: &mut Vec<u8>,
) {
    let store = &env.shared.store;
    let st = env.stats;
    let now = env.now;
    let mark = out.len();
    let touch = touch.map(|e| store.exptime(e, now));
    let mut keys = keys;
    // Set when a large value was written directly together with the closing END.
    let mut end_written = false;
    while let Some(key) = keys.next() {
        let Ok(key) = key else {
            out.truncate(mark);
            out.extend_from_slice(reply::CLIENT_ERROR_BAD_FORMAT);
            return;
        };
        let rest = &keys;
        let write = |v: Option<store::ItemView<'_>>| match v {
            // Once written to the socket a VALUE cannot be withdrawn, which memcached does
            // when a later key is too long: go direct only when every later key is valid.
            Some(it)
                if env.direct
                    && it.value.len() >= DIRECT_WRITE_MIN
                    && rest.clone().all(|k| k.is_ok()) =>
            {
                reply::write_value_header(
                    out,
                    key,
                    it.flags,
                    it.value.len(),
                    with_cas.then_some(it.cas),
                );
                // The last key's value carries END along, so the reply is still one write.
                let last = rest.clone().next().is_none();
                let tail: &'static [u8] = if last { b"\r\nEND\r\n" } else { b"\r\n" };
                end_written = last;
                match it.pin() {
                    Some(value) => Got::Pinned(value, tail),
                    None => {
                        write_large_value(env, out, it.value, tail);
                        Got::Hit
                    }
                }
            }
            Some(it) => {
                reply::write_value(out, key, it.flags, it.value, with_cas.then_some(it.cas));
                Got::Hit
            }
            None => Got::Miss,
        };
        let got = match touch {
            Some(exptime) => {
                st.cmd_touch.incr();
                store.gat(key, exptime, now, write)
            }
            None => store.get(key, now, write),
        };
        // The shard is unlocked by now: other requests for it need not wait for this write.
        if let Got::Pinned(value, tail) = &got {
            write_large_value(env, out, value.bytes(), tail);
        }
        let hit = !matches!(got, Got::Miss);
        st.cmd_get.incr();
        if hit {
            st.get_hits.incr();
        } else {
            st.get_misses.incr();
        }
    }
    if !end_written {
        out.extend_from_slice(reply::END);
    }
}

/// What a get found for one key.
enum Got {
    Miss,
    /// The VALUE is in `out` (or already on the socket).
    Hit,
    /// A large value to write once the shard is unlocked, then the bytes that follow it.
    Pinned(store::PinnedValue, &'static [u8]),
}

/// Values at least this large are written from store memory instead of copied into `out`.
const DIRECT_WRITE_MIN: usize = 64 * 1024;

/// Sends the pending replies in `out` and then `value` + `tail` with one writev, straight from
/// the store's memory (memcached likewise writes values from item memory). Whatever the
/// socket does not take now is copied into `out` and goes out with the rest of the batch.
///
/// A value pinned out of a large segment is written with the shard unlocked. Otherwise this
/// runs inside the store's closure, holding the shard lock for one non-blocking writev.
fn write_large_value(env: &ExecEnv<'_>, out: &mut Vec<u8>, value: &[u8], tail: &[u8]) {
    let iov = [
        libc::iovec {
            iov_base: out.as_ptr() as *mut libc::c_void,
            iov_len: out.len(),
        },
        libc::iovec {
            iov_base: value.as_ptr() as *mut libc::c_void,
            iov_len: value.len(),
        },
        libc::iovec {
            iov_base: tail.as_ptr() as *mut libc::c_void,
            iov_len: tail.len(),
        },
    ];
    // SAFETY: the iovecs point at live, initialised buffers that outlive the call; writev
    // only reads them. A negative result (EAGAIN or a socket error) counts as nothing sent:
    // the bytes stay queued and the normal write path reports any error.
    let sent = unsafe { libc::writev(env.fd, iov.as_ptr(), iov.len() as libc::c_int) };
    let mut sent = usize::try_from(sent).unwrap_or(0);
    env.stats.bytes_written.add(sent as u64);
    if sent < out.len() {
        out.drain(..sent);
        sent = 0;
    } else {
        sent -= out.len();
        out.clear();
    }
    if sent < value.len() {
        out.extend_from_slice(&value[sent..]);
        out.extend_from_slice(tail);
    } else {
        out.extend_from_slice(&tail[sent - value.len()..]);
    }
}

/// A UDP datagram holds whole requests; replies go back in one framed response.
pub fn run_datagram(env: &ExecEnv<'_>, payload: &[u8], out: &mut Vec<u8>) {
    let mut pos = 0;
    while pos < payload.len() {
        match proto::parse(&payload[pos..], &env.shared.limits) {
            proto::Parse::Request(req, used) => {
                pos += used;
                if run(env, req, out) == Flow::Close {
                    return;
                }
            }
            proto::Parse::Incomplete { .. } => return,
            proto::Parse::Error {
                reply,
                consumed,
                swallow,
                close,
                ..
            } => {
                out.extend_from_slice(reply);
                pos += consumed + swallow;
                if close {
                    return;
                }
            }
        }
    }
}
