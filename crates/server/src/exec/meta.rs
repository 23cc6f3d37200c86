//! Replies to the meta commands (mg ms md ma me), flags echoed in request order as memcached does.

use proto::reply::{self, write_i64, write_u64};
use proto::{Key, MetaFlags, StoreCmd};
use store::{
    ArithOpts, ArithResult, DeleteOpts, DeleteResult, MetaGetOpts, StoreMode, StoreOpts,
    StoreRequest, StoreResult,
};

use crate::exec::env::ExecEnv;

/// ` k<key>`, plus ` b` when the key came base64-encoded.
fn write_key(out: &mut Vec<u8>, key: &Key<'_>) {
    out.extend_from_slice(b" k");
    out.extend_from_slice(key.wire());
    if key.is_binary() {
        out.extend_from_slice(b" b");
    }
}

/// The `O` and `k` flags, the only ones echoed on a miss or a status-only reply.
fn write_opaque_and_key(out: &mut Vec<u8>, key: &Key<'_>, flags: &MetaFlags<'_>) {
    for (f, tok) in flags.iter() {
        match f {
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(tok);
            }
            b'k' => write_key(out, key),
            _ => {}
        }
    }
}

fn write_ttl(out: &mut Vec<u8>, exptime: u32, now: u32) {
    if exptime == 0 {
        out.extend_from_slice(b"-1");
    } else {
        write_i64(out, i64::from(exptime) - i64::from(now));
    }
}

pub fn get(env: &ExecEnv<'_>, key: &Key<'_>, flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    let store = &env.shared.store;
    let now = env.now;
    let opts = MetaGetOpts {
        no_bump: flags.has(b'u'),
        touch: flags.exptime.map(|e| store.exptime(e, now)),
        vivify: flags.vivify.map(|e| store.exptime(e, now)),
        recache: flags.recache.map(|e| store.exptime(e, now)),
    };
    let want_value = flags.has(b'v');
    let hit = store.meta_get(key.as_bytes(), now, &opts, |found| {
        let Some((it, lease)) = found else {
            return false;
        };
        crate::exec::tracked::read(env, key.as_bytes(), it.exptime);
        if want_value {
            out.extend_from_slice(b"VA ");
            write_u64(out, it.value.len() as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        for (f, tok) in flags.iter() {
            match f {
                b's' => {
                    out.extend_from_slice(b" s");
                    write_u64(out, it.value.len() as u64);
                }
                b't' => {
                    out.extend_from_slice(b" t");
                    write_ttl(out, it.exptime, now);
                }
                b'c' => {
                    out.extend_from_slice(b" c");
                    write_u64(out, it.cas);
                }
                b'f' => {
                    out.extend_from_slice(b" f");
                    write_u64(out, u64::from(it.flags));
                }
                b'l' => {
                    out.extend_from_slice(b" l");
                    write_u64(out, u64::from(now.saturating_sub(it.last_access)));
                }
                b'h' => out.extend_from_slice(if it.fetched { b" h1" } else { b" h0" }),
                b'O' => {
                    out.extend_from_slice(b" O");
                    out.extend_from_slice(tok);
                }
                b'k' => write_key(out, key),
                _ => {}
            }
        }
        if lease.token_sent {
            out.extend_from_slice(b" Z");
        }
        if lease.stale {
            out.extend_from_slice(b" X");
        }
        if lease.win {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
        if want_value {
            out.extend_from_slice(it.value);
            out.extend_from_slice(b"\r\n");
        }
        true
    });
    let st = env.stats;
    if flags.exptime.is_none() {
        st.cmd_get.incr();
    } else {
        st.cmd_touch.incr();
    }
    if hit {
        st.get_hits.incr();
    } else {
        st.get_misses.incr();
        if !flags.noreply() {
            out.extend_from_slice(b"EN");
            write_opaque_and_key(out, key, flags);
            out.extend_from_slice(b"\r\n");
        }
    }
}

pub fn set(
    env: &ExecEnv<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    cmd: StoreCmd,
    data: &[u8],
    out: &mut Vec<u8>,
) {
    let store = &env.shared.store;
    let now = env.now;
    let compare = flags.cas.unwrap_or(0);
    let mode = store_mode(cmd, compare);
    let opts = StoreOpts {
        compare_cas: if cmd == StoreCmd::Cas { 0 } else { compare },
        invalidate: flags.has(b'I'),
        new_cas: flags.new_cas,
        meta: true,
    };
    let exptime = store.exptime(flags.exptime.unwrap_or(0), now);
    let req = StoreRequest::new(mode, key.as_bytes(), data)
        .flags(flags.client_flags)
        .exptime(exptime)
        .opts(opts);
    let r = store.store(req, now);
    crate::exec::tracked::changed(env, key.as_bytes());
    if env.shared.watch.wants(crate::watch::MUTATIONS) {
        crate::exec::watched::store(env, cmd, key.as_bytes(), exptime, data.len(), r.result);
    }
    let status: &[u8] = match r.result {
        StoreResult::Stored if flags.noreply() => return,
        StoreResult::Stored => b"HD",
        StoreResult::Exists => b"EX",
        StoreResult::NotFound => b"NF",
        StoreResult::NotStored => b"NS",
        StoreResult::TooLarge => {
            env.stats.store_too_large.incr();
            out.extend_from_slice(reply::SERVER_ERROR_TOO_LARGE);
            return;
        }
        StoreResult::NoMemory => {
            env.stats.store_no_memory.incr();
            out.extend_from_slice(reply::SERVER_ERROR_OOM_STORING);
            return;
        }
    };
    out.extend_from_slice(status);
    for (f, tok) in flags.iter() {
        match f {
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(tok);
            }
            b'k' => write_key(out, key),
            b'c' => {
                out.extend_from_slice(b" c");
                write_u64(out, r.cas);
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

pub fn delete(env: &ExecEnv<'_>, key: &Key<'_>, flags: &MetaFlags<'_>, out: &mut Vec<u8>) {
    let store = &env.shared.store;
    let now = env.now;
    let invalidate = flags.has(b'I');
    let opts = DeleteOpts {
        compare_cas: flags.cas,
        invalidate,
        new_exptime: flags
            .exptime
            .filter(|_| invalidate)
            .map(|e| store.exptime(e, now)),
        remove_value: flags.has(b'x'),
    };
    let size = if env.shared.watch.wants(crate::watch::DELETIONS) {
        crate::exec::watched::delete_size(env, key.as_bytes())
    } else {
        None
    };
    let result = store.delete(key.as_bytes(), now, &opts);
    if result == DeleteResult::Deleted {
        crate::exec::tracked::changed(env, key.as_bytes());
    }
    if let (DeleteResult::Deleted, Some(size)) = (result, size) {
        crate::watch::deleted(
            &env.shared.watch,
            &env.shared.wakers,
            key.as_bytes(),
            b"md",
            size,
        );
    }
    let status: &[u8] = match result {
        DeleteResult::Deleted if flags.noreply() => return,
        DeleteResult::Deleted => b"HD",
        DeleteResult::NotFound => b"NF",
        DeleteResult::Exists => b"EX",
        DeleteResult::NoMemory => {
            out.extend_from_slice(reply::SERVER_ERROR_OOM);
            return;
        }
    };
    out.extend_from_slice(status);
    write_opaque_and_key(out, key, flags);
    out.extend_from_slice(b"\r\n");
}

pub fn arithmetic(
    env: &ExecEnv<'_>,
    key: &Key<'_>,
    flags: &MetaFlags<'_>,
    incr: bool,
    out: &mut Vec<u8>,
) {
    let store = &env.shared.store;
    let now = env.now;
    let opts = ArithOpts {
        compare_cas: flags.cas.unwrap_or(0),
        new_cas: flags.new_cas,
        vivify: flags
            .vivify
            .map(|e| (flags.initial.unwrap_or(0), store.exptime(e, now))),
        new_exptime: flags.exptime.map(|e| store.exptime(e, now)),
    };
    let delta = flags.delta.unwrap_or(1);
    let r = store.incr_decr(key.as_bytes(), incr, delta, now, &opts);
    if matches!(r, ArithResult::Ok { .. }) {
        crate::exec::tracked::changed(env, key.as_bytes());
    }
    match r {
        ArithResult::Ok { .. } if flags.noreply() => {}
        ArithResult::Ok {
            value,
            cas,
            exptime,
        } => {
            let mut digits = Vec::with_capacity(20);
            write_u64(&mut digits, value);
            if flags.has(b'v') {
                out.extend_from_slice(b"VA ");
                write_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            for (f, tok) in flags.iter() {
                match f {
                    b'c' => {
                        out.extend_from_slice(b" c");
                        write_u64(out, cas);
                    }
                    b't' => {
                        out.extend_from_slice(b" t");
                        write_ttl(out, exptime, now);
                    }
                    b'O' => {
                        out.extend_from_slice(b" O");
                        out.extend_from_slice(tok);
                    }
                    b'k' => write_key(out, key),
                    _ => {}
                }
            }
            out.extend_from_slice(b"\r\n");
            if flags.has(b'v') {
                out.extend_from_slice(&digits);
                out.extend_from_slice(b"\r\n");
            }
        }
        ArithResult::NotFound => {
            out.extend_from_slice(b"NF");
            write_opaque_and_key(out, key, flags);
            out.extend_from_slice(b"\r\n");
        }
        ArithResult::Exists => {
            out.extend_from_slice(b"EX");
            write_opaque_and_key(out, key, flags);
            out.extend_from_slice(b"\r\n");
        }
        ArithResult::NonNumeric => out.extend_from_slice(reply::CLIENT_ERROR_NON_NUMERIC),
        ArithResult::NoMemory => out.extend_from_slice(reply::SERVER_ERROR_OOM),
    }
}

/// `me <key>`: memcached's debug line. `cls` is always 1 (no slab classes) and `size` is the
/// item's key + value + a nominal 48-byte header, the figure memcached would print.
/// `me`: the item's details; `read`: its flash frame when an I/O thread read it.
pub fn debug(
    env: &ExecEnv<'_>,
    key: &Key<'_>,
    read: Option<&store::Prefetched>,
    out: &mut Vec<u8>,
) {
    let now = env.now;
    env.shared
        .store
        .peek_prefetched(key.as_bytes(), now, read, |found| match found {
            Some(it) => {
                out.extend_from_slice(b"ME ");
                out.extend_from_slice(key.wire());
                out.extend_from_slice(b" exp=");
                write_ttl(out, it.exptime, now);
                out.extend_from_slice(b" la=");
                write_u64(out, u64::from(now.saturating_sub(it.last_access)));
                out.extend_from_slice(b" cas=");
                write_u64(out, it.cas);
                out.extend_from_slice(if it.fetched {
                    b" fetch=yes"
                } else {
                    b" fetch=no"
                });
                out.extend_from_slice(b" cls=1 size=");
                write_u64(out, (48 + it.key.len() + it.value.len() + 2) as u64);
                out.extend_from_slice(b"\r\n");
            }
            None => out.extend_from_slice(reply::EN),
        });
}

/// The store operation for a storage command; `cas` is the unique to compare for `Cas`.
pub fn store_mode(cmd: StoreCmd, cas: u64) -> StoreMode {
    match cmd {
        StoreCmd::Set => StoreMode::Set,
        StoreCmd::Add => StoreMode::Add,
        StoreCmd::Replace => StoreMode::Replace,
        StoreCmd::Append => StoreMode::Append,
        StoreCmd::Prepend => StoreMode::Prepend,
        StoreCmd::Cas => StoreMode::Cas(cas),
    }
}
