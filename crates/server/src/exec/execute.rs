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
pub use crate::exec::flow::{Flow, Paused};
use crate::exec::meta::{self, store_mode};
use crate::exec::report;
use crate::exec::watched;
use crate::flash::reads::ReadFor;
use crate::io::conn::Aside;
use crate::stats::ThreadStats;
use crate::watch;

/// Executes one request, appending its reply (if any) to `out`. `skip`: keys of a get
/// already answered before it paused; `reads`: the connection's flash reads (see
/// `retrieve`). Inlined so that the request, a few hundred bytes, is
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
        if let Some(flow) = bring_in(env, &req, reads) {
            return flow;
        }
    }
    match req {
        Request::Get { keys, cas } => {
            if env.shared.watch.wants(watch::FETCHERS) && skip == 0 {
                watched::fetch_keys(env, keys);
            }
            return retrieve(env, keys, cas, None, skip, reads, out);
        }
        Request::Gat { exptime, keys, cas } => {
            if env.shared.watch.wants(watch::FETCHERS) && skip == 0 {
                watched::fetch_keys(env, keys);
            }
            return retrieve(env, keys, cas, Some(exptime), skip, reads, out);
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
        } => return start_watch(env, args, reads, out),
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
            let read = match read_once(env, key.as_bytes(), reads) {
                Ok(read) => read,
                Err(flow) => return flow,
            };
            meta::debug(env, &key, read.as_ref(), out)
        }
    }
    Flow::Continue
}

/// `watch [kinds]`: memcached's checks in its order, then the connection becomes a watcher
/// (`crate::watch`) and `OK` is its last reply.
#[cold]
fn start_watch<'a>(
    env: &ExecEnv<'_>,
    args: impl Iterator<Item = &'a [u8]>,
    aside: &mut Option<Box<Aside>>,
    out: &mut Vec<u8>,
) -> Flow {
    if !env.shared.settings.watch_enabled {
        out.extend_from_slice(b"CLIENT_ERROR watch commands not allowed\r\n");
        return Flow::Continue;
    }
    // A datagram has no connection to stream to.
    let Some((worker, token)) = env.conn else {
        out.extend_from_slice(reply::ERROR);
        return Flow::Continue;
    };
    if !out.is_empty() {
        out.extend_from_slice(b"ERROR cannot pipeline other commands before watch\r\n");
        return Flow::Continue;
    }
    let Some(kinds) = watch::parse_kinds(args) else {
        out.extend_from_slice(reply::ERROR);
        return Flow::Continue;
    };
    match env.shared.watch.add(kinds, worker, token) {
        Ok(w) => {
            *aside = Some(Box::new(Aside::Watch(w)));
            out.extend_from_slice(reply::OK);
            Flow::Watch
        }
        Err(watch::AddError::TooMany) => {
            out.extend_from_slice(b"WATCHER_TOO_MANY log watcher limit reached\r\n");
            Flow::Continue
        }
    }
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
            if env.shared.watch.wants(watch::DELETIONS) {
                let size = watched::delete_size(env, key);
                let r = store.delete(key, now, &opts);
                if let (DeleteResult::Deleted, Some(size)) = (r, size) {
                    watch::deleted(&env.shared.watch, &env.shared.wakers, key, b"delete", size);
                }
                return Some(Outcome::Deleted(r));
            }
            Outcome::Deleted(store.delete(key, now, &opts))
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
            Outcome::Arith(store.incr_decr(key, incr, delta, now, &opts))
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

/// get/gets/gat/gats from key `skip` on: one VALUE per hit, then END; a too-long key
/// discards the VALUEs. Replies beyond `env.reply_cap` wait: the request pauses and resumes
/// at the next key once they are written, so a long multi-get never builds its whole reply.
/// A key on flash pauses it too, when the connection's worker has I/O threads to read it
/// (`env.flash_reads`): it resumes at that key once the reads it asked for are back in
/// `reads`, and answers from them.
#[allow(clippy::too_many_arguments)]
fn retrieve(
    env: &ExecEnv<'_>,
    keys: proto::Keys<'_>,
    with_cas: bool,
    touch: Option<i64>,
    skip: usize,
    reads: &mut Option<Box<Aside>>,
    out: &mut Vec<u8>,
) -> Flow {
    let store = &env.shared.store;
    let touch = touch.map(|e| store.exptime(e, env.now));
    let read_aside = env.flash_reads;
    let mark = out.len();
    let mut keys = keys;
    for _ in 0..skip {
        keys.next();
    }
    let mut index = skip;
    while let Some(key) = keys.next() {
        let Ok(key) = key else {
            return bad_key(out, mark);
        };
        if index > skip && out.len() >= env.reply_cap {
            // Replies once written cannot be withdrawn: a bad key later in the request
            // must be found now (a request that paused before has none).
            let rest = std::iter::once(Ok(key)).chain(keys);
            if skip == 0 && rest.clone().any(|k| k.is_err()) {
                return look_up_until_bad_key(env, rest, touch, out, mark);
            }
            return Flow::Paused(Paused {
                next_key: Some(index),
                value: None,
            });
        }
        let at = index;
        index += 1;
        let got = match (take_read(reads, at), read_aside) {
            (Some(p), _) => from_read(env, key, touch, &p, writer(env, key, with_cas, out)),
            (None, Some(conn)) => {
                // A gat changes its item: one on flash is brought back into memory first.
                let located = match touch {
                    None => store
                        .get_or_locate(key, env.now, writer(env, key, with_cas, out))
                        .map(|got| counted(env, got)),
                    Some(_) => match store.locate(key, env.now) {
                        Some(loc) => Err(loc),
                        None => Ok(lookup(env, key, touch, writer(env, key, with_cas, out))),
                    },
                };
                match located {
                    Ok(got) => got,
                    Err(loc) => {
                        // In the write buffer or the page cache: no wait for the disk, and
                        // cheaper here than a hand-over to an I/O thread and back.
                        if let Some(p) = store.read_located_cached(loc) {
                            from_read(env, key, touch, &p, writer(env, key, with_cas, out))
                        } else {
                            // Its replies so far go out while the connection waits.
                            if skip == 0 && keys.clone().any(|k| k.is_err()) {
                                let rest = std::iter::once(Ok(key)).chain(keys);
                                return look_up_until_bad_key(env, rest, touch, out, mark);
                            }
                            if ask_reads(env, conn, reads, at, loc, keys) {
                                return Flow::Paused(Paused {
                                    next_key: Some(at),
                                    value: None,
                                });
                            }
                            // Without I/O threads (never with a flash tier on a stream).
                            lookup(env, key, touch, writer(env, key, with_cas, out))
                        }
                    }
                }
            }
            (None, None) => lookup(env, key, touch, writer(env, key, with_cas, out)),
        };
        if let Got::Pinned(value) = got {
            if skip == 0 && keys.clone().any(|k| k.is_err()) {
                return look_up_until_bad_key(env, keys, touch, out, mark);
            }
            // The last key's value carries END along, so the reply is still one write.
            let last = keys.clone().next().is_none();
            return Flow::Paused(Paused {
                next_key: (!last).then_some(index),
                value: Some((value, if last { b"\r\nEND\r\n" } else { b"\r\n" })),
            });
        }
    }
    out.extend_from_slice(reply::END);
    Flow::Continue
}

/// One key of a get or gat whose flash read `p` was made apart: a get answers from it, a gat
/// brings the item back into memory from it and runs there.
pub(crate) fn from_read(
    env: &ExecEnv<'_>,
    key: &[u8],
    touch: Option<u32>,
    p: &store::Prefetched,
    write: impl FnOnce(Option<store::ItemView<'_>>) -> Got,
) -> Got {
    let store = &env.shared.store;
    match touch {
        None => counted(env, store.get_prefetched(key, env.now, p, write)),
        Some(_) => {
            store.bring_back_prefetched(key, env.now, p);
            lookup(env, key, touch, write)
        }
    }
}

/// A command on one key that brings its item back from flash before it runs (all but get,
/// gat and a plain set): when that needs a wait for the disk, asks an I/O thread for the
/// read and pauses the command (Some), to run it again once the read is back in `reads`.
/// Otherwise the item, if on flash, is brought back here and the command runs (None).
#[inline(never)]
pub(crate) fn bring_in(
    env: &ExecEnv<'_>,
    req: &Request<'_>,
    reads: &mut Option<Box<Aside>>,
) -> Option<Flow> {
    let key = match req {
        Request::Store { cmd, key, .. } if *cmd != StoreCmd::Set => *key,
        Request::Delete { key, .. } | Request::Arith { key, .. } | Request::Touch { key, .. } => {
            *key
        }
        Request::MetaGet { key, .. }
        | Request::MetaSet { key, .. }
        | Request::MetaDelete { key, .. }
        | Request::MetaArithmetic { key, .. } => key.as_bytes(),
        _ => return None,
    };
    match read_once(env, key, reads) {
        Ok(Some(p)) => {
            env.shared.store.bring_back_prefetched(key, env.now, &p);
            None
        }
        Ok(None) => None,
        Err(flow) => Some(flow),
    }
}

/// Whether running `req` would read flash: a key it names is on flash and not in memory.
pub(crate) fn reads_flash(env: &ExecEnv<'_>, req: &Request<'_>) -> bool {
    let store = &env.shared.store;
    let on_flash = |key: &[u8]| store.locate(key, env.now).is_some();
    match req {
        Request::Get { keys, .. } | Request::Gat { keys, .. } => {
            (*keys).map_while(Result::ok).any(on_flash)
        }
        Request::Store { cmd, key, .. } => *cmd != StoreCmd::Set && on_flash(key),
        Request::Delete { key, .. } | Request::Arith { key, .. } | Request::Touch { key, .. } => {
            on_flash(key)
        }
        Request::MetaGet { key, .. }
        | Request::MetaSet { key, .. }
        | Request::MetaDelete { key, .. }
        | Request::MetaArithmetic { key, .. }
        | Request::MetaDebug { key } => on_flash(key.as_bytes()),
        _ => false,
    }
}

/// The flash read of a one-key request's key: the one made while it paused, one made here
/// without a wait for the disk, or none (Ok); or the request pauses for it (Err).
pub(crate) fn read_once(
    env: &ExecEnv<'_>,
    key: &[u8],
    reads: &mut Option<Box<Aside>>,
) -> Result<Option<store::Prefetched>, Flow> {
    if let Some(p) = take_read(reads, 0) {
        return Ok(Some(p));
    }
    match read_or_ask(env, key, reads) {
        Some(Ok(p)) => Ok(Some(p)),
        Some(Err(flow)) => Err(flow),
        None => Ok(None),
    }
}

/// The flash read made for key `index` of the request, once back.
fn take_read(reads: &mut Option<Box<Aside>>, index: usize) -> Option<store::Prefetched> {
    match reads.as_deref_mut() {
        Some(Aside::Flash(w)) => w.take(index as u32),
        _ => None,
    }
}

/// The request's one key on flash: read here when that needs no wait for the disk (Ok), or
/// asked of an I/O thread with the request paused until it is back, or until there is room
/// to ask (Err). None when memory has the key or flash does not.
fn read_or_ask(
    env: &ExecEnv<'_>,
    key: &[u8],
    reads: &mut Option<Box<Aside>>,
) -> Option<Result<store::Prefetched, Flow>> {
    let store = &env.shared.store;
    let conn = env.flash_reads?;
    let loc = store.locate(key, env.now)?;
    if let Some(p) = store.read_located_cached(loc) {
        return Some(Ok(p));
    }
    ask_reads(env, conn, reads, 0, loc, std::iter::empty()).then_some(Err(Flow::Paused(Paused {
        next_key: Some(0),
        value: None,
    })))
}

/// Writes a get's reply for the item found, if any.
fn writer<'a>(
    env: &ExecEnv<'_>,
    key: &'a [u8],
    with_cas: bool,
    out: &'a mut Vec<u8>,
) -> impl FnOnce(Option<store::ItemView<'_>>) -> Got + 'a {
    let direct = env.direct;
    move |v| match v {
        // The worker writes a large value from the item's own buffer, once the shard is
        // unlocked (memcached likewise writes values from item memory).
        Some(it) if direct && it.value.len() >= DIRECT_WRITE_MIN => {
            let cas = with_cas.then_some(it.cas);
            match it.pin() {
                Some(value) => {
                    reply::write_value_header(out, key, it.flags, it.value.len(), cas);
                    Got::Pinned(value)
                }
                None => {
                    reply::write_value(out, key, it.flags, it.value, cas);
                    Got::Hit
                }
            }
        }
        Some(it) => {
            reply::write_value(out, key, it.flags, it.value, with_cas.then_some(it.cas));
            Got::Hit
        }
        None => Got::Miss,
    }
}

/// A get met key `at` on flash (at `loc`): asks the I/O threads for its read and for those
/// of the next keys of the request on flash, up to `ext_io_depth` (`flash::reads`), for the
/// connection to wait on. When not even the first can be asked for (the bounds are
/// reached), the connection waits for room instead. False only without I/O threads.
fn ask_reads<'a>(
    env: &ExecEnv<'_>,
    (worker, token): (usize, usize),
    reads: &mut Option<Box<Aside>>,
    at: usize,
    loc: store::FlashLoc,
    rest: impl Iterator<Item = Result<&'a [u8], proto::KeyTooLong>>,
) -> bool {
    let Some(io) = &env.shared.flash_io else {
        return false;
    };
    let Aside::Flash(w) = &mut **reads.get_or_insert_with(|| Box::new(Aside::Flash(io.wait())))
    else {
        return false;
    };
    let id = w.id;
    let to = |index: usize| ReadFor {
        worker,
        token,
        id,
        index: index as u32,
    };
    if !io.submit(loc, to(at)) {
        io.starve(w, to(at));
        return true;
    }
    w.in_flight += 1;
    for (i, key) in (at + 1..).zip(rest) {
        let Ok(key) = key else { break };
        if w.in_flight >= io.depth {
            break;
        }
        if w.has(i as u32) {
            continue;
        }
        let Some(loc) = env.shared.store.locate(key, env.now) else {
            continue;
        };
        if !io.submit(loc, to(i)) {
            break;
        }
        w.in_flight += 1;
    }
    true
}

/// A get with a key over 250 bytes: memcached answers only the error, after looking up the
/// keys before it. Looks up the good keys of `rest` (counting them), then drops the VALUEs
/// built since `mark`.
fn look_up_until_bad_key<'a>(
    env: &ExecEnv<'_>,
    rest: impl Iterator<Item = Result<&'a [u8], proto::KeyTooLong>>,
    touch: Option<u32>,
    out: &mut Vec<u8>,
    mark: usize,
) -> Flow {
    for key in rest.map_while(Result::ok) {
        lookup(env, key, touch, |v| {
            if v.is_some() {
                Got::Hit
            } else {
                Got::Miss
            }
        });
    }
    bad_key(out, mark)
}

fn bad_key(out: &mut Vec<u8>, mark: usize) -> Flow {
    out.truncate(mark);
    out.extend_from_slice(reply::CLIENT_ERROR_BAD_FORMAT);
    Flow::Continue
}

/// One key of a get (a gat when `touch` has the new exptime), counted in the stats.
pub(crate) fn lookup(
    env: &ExecEnv<'_>,
    key: &[u8],
    touch: Option<u32>,
    write: impl FnOnce(Option<store::ItemView<'_>>) -> Got,
) -> Got {
    let store = &env.shared.store;
    let st = env.stats;
    let got = match touch {
        Some(exptime) => {
            st.cmd_touch.incr();
            store.gat(key, exptime, env.now, write)
        }
        None => store.get(key, env.now, write),
    };
    counted(env, got)
}

/// Counts a get's outcome.
fn counted(env: &ExecEnv<'_>, got: Got) -> Got {
    let st = env.stats;
    st.cmd_get.incr();
    if matches!(got, Got::Miss) {
        st.get_misses.incr();
    } else {
        st.get_hits.incr();
    }
    got
}

/// What a get found for one key.
pub(crate) enum Got {
    Miss,
    /// The VALUE is in `out`.
    Hit,
    /// The VALUE header is in `out`; the value goes out from the item's buffer.
    Pinned(store::PinnedValue),
}

/// Values at least this large are written from store memory instead of copied into `out`.
const DIRECT_WRITE_MIN: usize = 64 * 1024;
