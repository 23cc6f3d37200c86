//! Runs parsed requests against the store and writes memcached's replies.
//!
//! No I/O here: the worker hands in a request and an output buffer, and writes what comes
//! back. Parsing decisions (what is malformed) belong to `proto`; item semantics to `store`;
//! this module maps one onto the other.

use proto::reply::{self, write_u64};
use proto::{Request, ShutdownMode, StoreCmd};
use store::{
    ArithOpts, ArithResult, DeleteOpts, DeleteResult, StoreOpts, StoreRequest, StoreResult,
};

use crate::exec::dump;
use crate::exec::env::ExecEnv;
use crate::exec::flash_wait;
pub use crate::exec::flow::Flow;
use crate::exec::get;
use crate::exec::meta::{self, store_mode};
use crate::exec::report;
use crate::exec::tracked;
use crate::exec::watched;
use crate::io::conn::Aside;
use crate::stats::ThreadStats;
use crate::watch;

/// Executes one request, appending its reply (if any) to `out`. `skip`: keys of a get
/// already answered before it paused; `reads`: the connection's flash reads (see
/// `get::retrieve`). Inlined so that the request, a few hundred bytes, is
/// not copied again into the call (one copy more per request costs ~1% of a set).
#[inline(always)]
pub fn run(
    env: &ExecEnv<'_>,
    req: Request<'_>,
    skip: usize,
    reads: &mut Option<Box<Aside>>,
    out: &mut Vec<u8>,
) -> Flow {
    let store = &env.shared.store;
    let st = env.stats;
    if env.flash_reads.is_some() {
        if let Some(flow) = flash_wait::bring_in(env, &req, reads) {
            return flow;
        }
    }
    match req {
        Request::Get { keys, cas } => {
            if env.shared.watch.wants(watch::FETCHERS) && skip == 0 {
                watched::fetch_keys(env, keys);
            }
            return get::retrieve(env, keys, cas, None, skip, reads, out);
        }
        Request::Gat { exptime, keys, cas } => {
            if env.shared.watch.wants(watch::FETCHERS) && skip == 0 {
                watched::fetch_keys(env, keys);
            }
            return get::retrieve(env, keys, cas, Some(exptime), skip, reads, out);
        }
        Request::Store { noreply, .. }
        | Request::Delete { noreply, .. }
        | Request::Arith { noreply, .. }
        | Request::Touch { noreply, .. }
        | Request::FlushAll { noreply, .. } => return run_shared(env, req, noreply, out),
        Request::Version | Request::Quit | Request::MetaNoop => {
            return run_shared(env, req, false, out)
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
        Request::Shutdown(mode) => {
            if !env.shared.settings.enable_shutdown {
                out.extend_from_slice(reply::ERROR_SHUTDOWN_NOT_ENABLED);
                return Flow::Continue;
            }
            if mode == ShutdownMode::Invalid {
                out.extend_from_slice(reply::CLIENT_ERROR_INVALID_SHUTDOWN);
                return Flow::Continue;
            }
            if mode == ShutdownMode::Graceful {
                env.shared.request_graceful_shutdown();
            } else {
                env.shared.request_shutdown();
            }
            return Flow::Close;
        }
        Request::Stats { args } => report::stats(env, args, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            // memcached's bounds: under 8 MB is refused, and so is anything over 10^9 MB,
            // which is surely a byte count given by mistake.
            let answer = if megabytes < 8 {
                reply::MEMLIMIT_TOO_SMALL
            } else if megabytes > MEMLIMIT_MAX_MB {
                reply::MEMLIMIT_ADJUST_FAILED_UNITS
            } else {
                store.set_mem_limit(u64::from(megabytes) << 20);
                reply::OK
            };
            if !noreply {
                out.extend_from_slice(answer);
            }
        }
        // slabs/lru/watch/extstore and lru_crawler's other subcommands tune memcached's slab allocator and crawler,
        // which memfleet does not have: refuse them the way memcached refuses a command it lacks.
        Request::Admin {
            command: b"refresh_certs",
            mut args,
        } => refresh_certs(env, args.any(|a| a == b"noreply"), out),
        Request::Admin {
            command: b"lru_crawler",
            args,
        } => match dump::run(env, args, skip, out) {
            Some(flow) => return flow,
            None => out.extend_from_slice(reply::ERROR),
        },
        Request::Admin {
            command: b"watch",
            args,
        } => return watched::start_watch(env, args, reads, out),
        Request::Admin {
            command: b"track",
            args,
        } => return tracked::command(env, args, reads, out),
        Request::Admin { .. } => out.extend_from_slice(reply::ERROR),
        // mcrouter's lease commands, which memcached does not know (`proto::parse` never
        // gives them to a server).
        Request::LeaseGet { .. } | Request::LeaseSet { .. } => out.extend_from_slice(reply::ERROR),
        Request::MetaGet {
            key,
            flags,
            late_error,
        } => {
            st.cmd_meta.incr();
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key.as_bytes());
            }
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
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key.as_bytes());
            }
            meta::set(env, &key, &flags, cmd, data, out);
        }
        Request::MetaDelete { key, flags } => {
            st.cmd_meta.incr();
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key.as_bytes());
            }
            meta::delete(env, &key, &flags, out);
        }
        Request::MetaArithmetic {
            key,
            flags,
            incr,
            late_error,
        } => {
            st.cmd_meta.incr();
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key.as_bytes());
            }
            let mark = out.len();
            meta::arithmetic(env, &key, &flags, incr, out);
            replace_with_error(out, mark, late_error);
        }
        Request::MetaDebug { key } => {
            // Its item's details are in the flash frame: read off the worker when on flash.
            let read = match flash_wait::read_once(env, key.as_bytes(), reads) {
                Ok(read) => read,
                Err(flow) => return flow,
            };
            meta::debug(env, &key, read.as_ref(), out)
        }
    }
    Flow::Continue
}

/// `refresh_certs [noreply]`: memcached's replies, `OK` or the loading error.
fn refresh_certs(env: &ExecEnv<'_>, noreply: bool, out: &mut Vec<u8>) {
    let reply = match &env.shared.tls {
        None => "Error TLS not enabled".to_string(),
        Some(tls) => match tls.refresh(env.now) {
            Ok(()) => "OK".to_string(),
            Err(e) => e,
        },
    };
    if !noreply {
        out.extend_from_slice(reply.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// The mechanisms LIST_MECHS announces.
pub const SASL_MECHS: &[u8] = b"PLAIN";

/// SASL auth/step: PLAIN (`[authzid] NUL user NUL password`) in one step, checked against the
/// `-S` password file (counted in `auth_cmds` / `auth_errors`). A step is never expected, and
/// an authorization id other than the user is refused, so both fail.
pub fn sasl_plain(env: &ExecEnv<'_>, step: bool, mechanism: &[u8], data: &[u8]) -> bool {
    let Some(users) = &env.shared.auth else {
        return false;
    };
    let mut parts = data.splitn(3, |&b| b == 0);
    let (authzid, user, pass) = match (parts.next(), parts.next(), parts.next()) {
        (Some(z), Some(u), Some(p)) => (z, u, p),
        _ => (&b"-"[..], &b""[..], &b""[..]),
    };
    let usable = !step && mechanism == SASL_MECHS && (authzid.is_empty() || authzid == user);
    // Checked (and counted) even when unusable, so a bad request costs what a bad password does.
    users.verify(user, pass) && usable
}

/// The largest `cache_memlimit` memcached accepts, in megabytes.
const MEMLIMIT_MAX_MB: u32 = 1_000_000_000;

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
    if env.shared.watch.wants(watch::FETCHERS) {
        watched::fetch(env, &r.key);
    }
    let mode = store_mode(r.cmd, r.cas_unique);
    let exptime = store.exptime(r.exptime, env.now);
    let req = StoreRequest::received(mode, &r.key, item, r.value_at, r.value_len)
        .flags(r.flags)
        .exptime(exptime);
    let result = store.store(req, env.now);
    tracked::changed(env, &r.key);
    if env.shared.watch.wants(watch::MUTATIONS) {
        watched::store(env, r.cmd, &r.key, exptime, r.value_len, result.result);
    }
    let outcome = stored(env.stats, result);
    reply_text(outcome, r.noreply, out);
}

/// What every protocol's request did, for each to reply in its own way (`reply_text` here,
/// `binary::reply` for the binary protocol).
pub enum Outcome {
    /// A storage command: the result and the new item's CAS.
    Stored {
        result: StoreResult,
        cas: u64,
    },
    Deleted(DeleteResult),
    Arith(ArithResult),
    /// A touch: the item's flags and CAS; None on a miss.
    Touched(Option<(u32, u64)>),
    Flushed,
    /// flush_all under `-F`.
    FlushRefused,
    Version,
    Noop,
    /// quit: the connection closes once the reply, if any, is written.
    Quit,
}

/// What a binary request adds to the shared request (text requests have none): the CAS a
/// delete or incr/decr must match (0: any), and the initial value and expiration an
/// incr/decr creates its item with on a miss.
#[derive(Clone, Copy, Default)]
pub struct Extras {
    pub cas: u64,
    pub vivify: Option<(u64, u32)>,
}

/// Runs the requests every protocol has (storage, delete, incr/decr, touch, flush_all,
/// version, noop, quit) and says what happened; None for the others.
// Inlined: a text set's request then stays in registers (a call moved it through memory,
// one memcpy per request, ~60 instructions in callgrind).
#[inline(always)]
pub fn apply(env: &ExecEnv<'_>, req: Request<'_>, x: Extras) -> Option<Outcome> {
    let store = &env.shared.store;
    let st = env.stats;
    let now = env.now;
    Some(match req {
        Request::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas_unique,
            ..
        } => {
            st.cmd_set.incr();
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key);
            }
            // memcached checks a binary append/prepend's CAS too (a text one has none).
            let compare_cas = match cmd {
                StoreCmd::Append | StoreCmd::Prepend => cas_unique,
                _ => 0,
            };
            let exptime = store.exptime(exptime, now);
            let req = StoreRequest::new(store_mode(cmd, cas_unique), key, data)
                .flags(flags)
                .exptime(exptime)
                .opts(StoreOpts {
                    compare_cas,
                    ..StoreOpts::default()
                });
            let r = store.store(req, now);
            // Even a failed set removes the old value.
            tracked::changed(env, key);
            if env.shared.watch.wants(watch::MUTATIONS) {
                watched::store(env, cmd, key, exptime, data.len(), r.result);
            }
            stored(st, r)
        }
        Request::Delete { key, .. } => {
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key);
            }
            let opts = DeleteOpts {
                compare_cas: (x.cas != 0).then_some(x.cas),
                ..DeleteOpts::default()
            };
            let size = if env.shared.watch.wants(watch::DELETIONS) {
                watched::delete_size(env, key)
            } else {
                None
            };
            let r = store.delete(key, now, &opts);
            if r == DeleteResult::Deleted {
                tracked::changed(env, key);
                if let Some(size) = size {
                    watch::deleted(&env.shared.watch, &env.shared.wakers, key, b"delete", size);
                }
            }
            Outcome::Deleted(r)
        }
        Request::Arith {
            incr, key, delta, ..
        } => {
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key);
            }
            let opts = ArithOpts {
                compare_cas: x.cas,
                vivify: x
                    .vivify
                    .map(|(initial, exptime)| (initial, store.exptime(i64::from(exptime), now))),
                ..ArithOpts::default()
            };
            let r = store.incr_decr(key, incr, delta, now, &opts);
            if matches!(r, ArithResult::Ok { .. }) {
                tracked::changed(env, key);
            }
            Outcome::Arith(r)
        }
        Request::Touch { key, exptime, .. } => {
            st.cmd_touch.incr();
            if env.shared.watch.wants(watch::FETCHERS) {
                watched::fetch(env, key);
            }
            let exptime = store.exptime(exptime, now);
            Outcome::Touched(store.gat(key, exptime, now, |found| {
                found.map(|it| (it.flags, it.cas))
            }))
        }
        Request::FlushAll { delay, .. } => {
            if env.shared.settings.disable_flush_all {
                return Some(Outcome::FlushRefused);
            }
            st.cmd_flush.incr();
            store.flush_all(delay, now);
            // A delayed flush takes effect when memcached's cutoff comes (`Store::flush_all`).
            let at = (delay > 0).then(|| store.exptime(delay, now).saturating_sub(1));
            env.shared
                .tracking
                .flush_all(at, &env.shared.watch, &env.shared.wakers);
            Outcome::Flushed
        }
        Request::Version => Outcome::Version,
        Request::MetaNoop => Outcome::Noop,
        Request::Quit => Outcome::Quit,
        _ => return None,
    })
}

/// A storage command's outcome, with its failures counted.
fn stored(st: &ThreadStats, r: store::StoreOutcome) -> Outcome {
    if r.result == StoreResult::TooLarge {
        st.store_too_large.incr();
    } else if r.result == StoreResult::NoMemory {
        st.store_no_memory.incr();
    }
    Outcome::Stored {
        result: r.result,
        cas: r.cas,
    }
}

/// A shared request on a text connection.
#[inline(always)]
fn run_shared(env: &ExecEnv<'_>, req: Request<'_>, noreply: bool, out: &mut Vec<u8>) -> Flow {
    match apply(env, req, Extras::default()) {
        Some(outcome) => reply_text(outcome, noreply, out),
        None => Flow::Continue,
    }
}

/// memcached's text reply to `outcome` (none with `noreply`, but for a refused flush_all).
#[inline(always)]
fn reply_text(outcome: Outcome, noreply: bool, out: &mut Vec<u8>) -> Flow {
    let line: &[u8] = match outcome {
        Outcome::Stored { result, .. } => match result {
            StoreResult::Stored => reply::STORED,
            StoreResult::NotStored => reply::NOT_STORED,
            StoreResult::Exists => reply::EXISTS,
            StoreResult::NotFound => reply::NOT_FOUND,
            StoreResult::TooLarge => reply::SERVER_ERROR_TOO_LARGE,
            StoreResult::NoMemory => reply::SERVER_ERROR_OOM_STORING,
        },
        Outcome::Deleted(r) => match r {
            DeleteResult::Deleted => reply::DELETED,
            DeleteResult::NotFound => reply::NOT_FOUND,
            DeleteResult::Exists => reply::EXISTS,
            DeleteResult::NoMemory => reply::SERVER_ERROR_OOM,
        },
        Outcome::Arith(r) => match r {
            ArithResult::Ok { value, .. } => {
                if !noreply {
                    write_u64(out, value);
                    out.extend_from_slice(b"\r\n");
                }
                return Flow::Continue;
            }
            ArithResult::NotFound => reply::NOT_FOUND,
            ArithResult::NonNumeric => reply::CLIENT_ERROR_NON_NUMERIC,
            ArithResult::Exists => reply::EXISTS,
            ArithResult::NoMemory => reply::SERVER_ERROR_OOM,
        },
        Outcome::Touched(Some(_)) => reply::TOUCHED,
        Outcome::Touched(None) => reply::NOT_FOUND,
        Outcome::FlushRefused => {
            out.extend_from_slice(reply::CLIENT_ERROR_FLUSH_NOT_ALLOWED);
            return Flow::Continue;
        }
        Outcome::Flushed => reply::OK,
        Outcome::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(crate::config::VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
            return Flow::Continue;
        }
        Outcome::Noop => reply::MN,
        Outcome::Quit => return Flow::Close,
    };
    if !noreply {
        out.extend_from_slice(line);
    }
    Flow::Continue
}

/// memcached finds some meta errors only while writing the reply, after the lookup and its
/// side effects: the error replaces this request's reply (from `mark` on).
fn replace_with_error(out: &mut Vec<u8>, mark: usize, late_error: Option<&'static [u8]>) {
    if let Some(err) = late_error {
        out.truncate(mark);
        out.extend_from_slice(err);
    }
}
