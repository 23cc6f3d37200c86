//! The text get path (get/gets/gat/gats), apart from the other commands because it is the
//! one that answers many keys, pauses between them and waits on flash reads.

use proto::reply;

use crate::exec::env::ExecEnv;
use crate::exec::flash_wait::{ask_reads, take_read};
use crate::exec::flow::{Flow, Paused};
use crate::exec::tracked;
use crate::io::conn::Aside;

/// get/gets/gat/gats from key `skip` on: one VALUE per hit, then END; a too-long key
/// discards the VALUEs. Replies beyond `env.reply_cap` wait: the request pauses and resumes
/// at the next key once they are written, so a long multi-get never builds its whole reply.
/// A key on flash pauses it too, when the connection's worker has I/O threads to read it
/// (`env.flash_reads`): it resumes at that key once the reads it asked for are back in
/// `reads`, and answers from them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn retrieve(
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

/// Writes a get's reply for the item found, if any (registered first on a tracked
/// connection, under the item's lock).
fn writer<'a, 'e: 'a>(
    env: &ExecEnv<'e>,
    key: &'a [u8],
    with_cas: bool,
    out: &'a mut Vec<u8>,
) -> impl FnOnce(Option<store::ItemView<'_>>) -> Got + 'a {
    let direct = env.direct;
    let tracked = env.tracked.map(|l| (l, env.shared));
    move |v| {
        if let (Some((l, shared)), Some(it)) = (tracked, &v) {
            tracked::register(shared, l, key, it.exptime);
        }
        write_found(v, key, with_cas, direct, out)
    }
}

fn write_found(
    v: Option<store::ItemView<'_>>,
    key: &[u8],
    with_cas: bool,
    direct: bool,
    out: &mut Vec<u8>,
) -> Got {
    match v {
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
