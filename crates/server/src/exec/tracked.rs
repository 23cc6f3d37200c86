//! `track` (near-cache invalidation, `crate::tracking`) on a request's path: the command
//! itself, a tracked read's registration, and a write's announcement.

use proto::reply::{self, write_u64};

use crate::exec::env::ExecEnv;
use crate::exec::flow::Flow;
use crate::io::conn::Aside;
use crate::shared::Shared;
use crate::tracking::Listener;

/// `track listen` (the connection becomes a listener, `TRACKING <id>` its last reply),
/// `track <id>` (this connection's reads are tracked for listener `id`), `track off`.
#[cold]
pub fn command<'a>(
    env: &ExecEnv<'_>,
    mut args: impl Iterator<Item = &'a [u8]>,
    aside: &mut Option<Box<Aside>>,
    out: &mut Vec<u8>,
) -> Flow {
    let (Some(arg), None) = (args.next(), args.next()) else {
        out.extend_from_slice(reply::ERROR);
        return Flow::Continue;
    };
    // A datagram has no connection to track or stream to.
    let Some((worker, token)) = env.conn else {
        out.extend_from_slice(reply::ERROR);
        return Flow::Continue;
    };
    let tracking = &env.shared.tracking;
    match arg {
        b"listen" => {
            if !out.is_empty() {
                out.extend_from_slice(
                    b"ERROR cannot pipeline other commands before track listen\r\n",
                );
                return Flow::Continue;
            }
            match tracking.listen(&env.shared.watch, worker, token) {
                Ok(l) => {
                    out.extend_from_slice(b"TRACKING ");
                    write_u64(out, l.id);
                    out.extend_from_slice(b"\r\n");
                    *aside = Some(Box::new(Aside::Watch(l.feed.clone())));
                    Flow::Watch
                }
                Err(_) => {
                    out.extend_from_slice(b"SERVER_ERROR too many listeners\r\n");
                    Flow::Continue
                }
            }
        }
        b"off" => {
            out.extend_from_slice(reply::OK);
            Flow::Track(0)
        }
        id => {
            let Some(id) = std::str::from_utf8(id).ok().and_then(|s| s.parse().ok()) else {
                out.extend_from_slice(b"CLIENT_ERROR bad listener id\r\n");
                return Flow::Continue;
            };
            match tracking.find(id) {
                Some(l) => {
                    out.extend_from_slice(reply::OK);
                    Flow::Track(l.handle)
                }
                None => {
                    out.extend_from_slice(reply::NOT_FOUND);
                    Flow::Continue
                }
            }
        }
    }
}

/// A hit of `key` (expiring at `exptime`, 0: never) on a tracked connection: registered
/// before the value leaves the store's lock.
#[inline]
pub fn read(env: &ExecEnv<'_>, key: &[u8], exptime: u32) {
    if let Some(l) = env.tracked {
        register(env.shared, l, key, exptime);
    }
}

#[cold]
pub fn register(shared: &Shared, l: &Listener, key: &[u8], exptime: u32) {
    shared
        .tracking
        .register(l, key, exptime, &shared.watch, &shared.wakers);
}

/// A write of `key` is done: listeners that registered it are told before it is answered.
/// Inlined, and the rest out of line: with no listener every write pays one load and a
/// branch, not a call.
#[inline(always)]
pub fn changed(env: &ExecEnv<'_>, key: &[u8]) {
    if env.shared.tracking.active() {
        announce(env.shared, key);
    }
}

#[cold]
#[inline(never)]
fn announce(shared: &Shared, key: &[u8]) {
    shared.tracking.changed(key, &shared.watch, &shared.wakers);
}
