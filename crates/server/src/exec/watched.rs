//! What `watch` logs about requests (`crate::watch`): looked up or built here, on the
//! request's path only when a watcher asked for that kind; and the `watch` command itself.

use proto::{reply, StoreCmd};
use store::StoreResult;

use crate::exec::env::ExecEnv;
use crate::exec::flow::Flow;
use crate::io::conn::Aside;
use crate::watch;

/// `watch fetchers`: memcached logs every item lookup, including the one a storage
/// command, delete, incr/decr or touch makes first; looked at here before the request runs,
/// without touching the item. Called per key, not with the whole request, which would have
/// to be kept in memory on every request's path.
#[cold]
#[inline(never)]
pub(crate) fn fetch(env: &ExecEnv<'_>, key: &[u8]) {
    let size = env
        .shared
        .store
        .peek_resident(key, env.now, |f| f.map(|it| it.value.len()))
        .flatten();
    watch::item_get(&env.shared.watch, &env.shared.wakers, env.fd, key, size);
}

/// `fetch` for each key of a get or gat (up to a bad one).
#[cold]
#[inline(never)]
pub(crate) fn fetch_keys(env: &ExecEnv<'_>, keys: proto::Keys<'_>) {
    keys.map_while(Result::ok).for_each(|k| fetch(env, k));
}

/// `watch mutations`: a storage command's outcome, in memcached's words.
#[cold]
#[inline(never)]
pub(crate) fn store(
    env: &ExecEnv<'_>,
    cmd: StoreCmd,
    key: &[u8],
    exptime: u32,
    size: usize,
    result: StoreResult,
) {
    let status: &[u8] = match result {
        StoreResult::Stored => b"stored",
        StoreResult::NotStored => b"not_stored",
        StoreResult::Exists => b"exists",
        StoreResult::NotFound => b"not_found",
        StoreResult::TooLarge => b"too_large",
        StoreResult::NoMemory => b"no_memory",
    };
    let name: &[u8] = match cmd {
        StoreCmd::Set => b"set",
        StoreCmd::Add => b"add",
        StoreCmd::Replace => b"replace",
        StoreCmd::Append => b"append",
        StoreCmd::Prepend => b"prepend",
        StoreCmd::Cas => b"cas",
    };
    // memcached prints the seconds left unsigned, 0 for an item that never expires.
    let ttl = if exptime == 0 {
        0
    } else {
        exptime.wrapping_sub(env.now)
    };
    watch::item_store(
        &env.shared.watch,
        &env.shared.wakers,
        env.fd,
        key,
        status,
        name,
        ttl,
        size,
    );
}

/// `watch deletions`: the size of the item a delete is about to remove, if any.
#[cold]
#[inline(never)]
pub(crate) fn delete_size(env: &ExecEnv<'_>, key: &[u8]) -> Option<usize> {
    env.shared
        .store
        .peek_resident(key, env.now, |f| f.map(|it| it.value.len()))
        .flatten()
}

/// `watch [kinds]`: memcached's checks in its order, then the connection becomes a watcher
/// (`crate::watch`) and `OK` is its last reply.
#[cold]
pub(crate) fn start_watch<'a>(
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
