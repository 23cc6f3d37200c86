//! Handing a request's flash reads to the I/O threads and taking them back, so that no
//! worker waits for the disk.

use proto::{Request, StoreCmd};

use crate::exec::env::ExecEnv;
use crate::exec::flow::{Flow, Paused};
use crate::flash::reads::ReadFor;
use crate::io::conn::Aside;

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
pub(crate) fn take_read(reads: &mut Option<Box<Aside>>, index: usize) -> Option<store::Prefetched> {
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

/// A get met key `at` on flash (at `loc`): asks the I/O threads for its read and for those
/// of the next keys of the request on flash, up to `ext_io_depth` (`flash::reads`), for the
/// connection to wait on. When not even the first can be asked for (the bounds are
/// reached), the connection waits for room instead. False only without I/O threads.
pub(crate) fn ask_reads<'a>(
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
