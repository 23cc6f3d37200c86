//! The read path under the shard lock: lookups that bump, touch or decide meta-get leases,
//! and the `ItemView` handed to read closures.

use crate::item::{self, Header, FETCHED, STALE, TOKEN_SENT};
use crate::segbuf::ValueAt;
use crate::segments::Queue;
use crate::shard::{Found, Global, NeedMem, Shard};
use crate::types::{ItemView, MetaFlags, MetaGetOpts};

/// The view of item `f` for a read closure, valid while the shard stays locked; `pre_bits`
/// and `pre_time` are its bits and last-access time from before this access changed them.
#[inline]
pub(crate) fn view<'a>(
    s: &'a Shard,
    f: &Found,
    now: u32,
    pre_bits: u8,
    pre_time: u32,
) -> ItemView<'a> {
    let buf = s.buf(f.seg, f.off);
    view_of(buf, &f.l, now, pre_bits, pre_time, s.value_at(f))
}

/// The view of an item read from flash into `bytes` (laid out as `l`); nothing to pin.
pub(crate) fn flash_view<'a>(bytes: &'a [u8], l: &item::Layout, now: u32) -> ItemView<'a> {
    let time = item::time(bytes, l, now);
    view_of(bytes, l, now, l.bits, time, ValueAt::elsewhere())
}

/// The view of the item at the start of `buf`, laid out as `l`, with these bits and time.
#[inline]
fn view_of<'a>(
    buf: &'a [u8],
    l: &item::Layout,
    now: u32,
    bits: u8,
    time: u32,
    value_at: ValueAt<'a>,
) -> ItemView<'a> {
    let exptime = item::exptime(buf, l);
    ItemView {
        key: &buf[l.key..l.key + l.key_len],
        value: &buf[l.value..l.value + l.value_len],
        flags: item::flags(buf, l),
        cas: item::cas(buf, l),
        exptime,
        ttl_remaining: if exptime == 0 {
            -1
        } else {
            exptime as i64 - now as i64
        },
        last_access: time,
        fetched: bits & FETCHED != 0,
        stale: bits & STALE != 0,
        token_sent: bits & TOKEN_SENT != 0,
        value_at,
    }
}

/// An item's bits and last-access time, read before an access changes them.
#[inline]
pub(crate) fn state_before(s: &Shard, f: &Found, now: u32) -> (u8, u32) {
    let buf = s.buf(f.seg, f.off);
    (buf[0], item::time(buf, &f.l, now))
}

/// `mg`: lookup plus the lease decision (W/Z/X), as memcached's process_mget_command. `T`/`N`
/// are applied before the view is taken, so `t` reports the new TTL. A hit comes with the
/// item's bits and last-access time from before (see `view`); `Ok(None)`: a miss without `N`.
pub(crate) fn meta_lookup(
    s: &mut Shard,
    g: &Global,
    h: u64,
    key: &[u8],
    now: u32,
    opts: &MetaGetOpts,
) -> Result<Option<(Found, MetaFlags, u8, u32)>, NeedMem> {
    let (it, created) = match s.find_live(g, h, key, now) {
        Some(it) => (it, false),
        None => {
            if opts.vivify.is_none() {
                return Ok(None);
            }
            // Placeholder: empty value, no flags, exptime from N (set again below).
            let mut hdr = Header {
                bits: 0,
                cas: s.peek_cas(),
                exptime: opts.vivify.unwrap_or(0),
                time: now,
                flags: 0,
                force_exptime: g.force_exptime(),
            };
            let seg = s.alloc(g, hdr.encoded_len(key.len(), 0), now, Queue::Small)?;
            hdr.cas = s.next_cas();
            let (off, _) = s.write(seg, &hdr, key, 0, |_| {});
            s.link(g, h, None, seg, off);
            (s.find(h, key).expect("just linked"), true)
        }
    };
    let (pre_bits, pre_time) = state_before(s, &it, now);
    let mut exp = item::exptime(s.buf(it.seg, it.off), &it.l);
    let mut mf = MetaFlags {
        created,
        ..MetaFlags::default()
    };
    if let Some(t) = opts.touch {
        exp = t;
        s.stats.touch_hits += 1;
    }
    if let (Some(v), true) = (opts.vivify, created) {
        exp = v;
        mf.win = true;
    }
    let Some(it) = s.set_exptime_widening(g, h, key, it, exp, now)? else {
        return Ok(None);
    };
    if let Some(r) = opts.recache {
        if pre_bits & TOKEN_SENT == 0 && !created && exp != 0 && exp < r {
            mf.win = true;
        }
    }
    mf.token_sent = pre_bits & TOKEN_SENT != 0;
    mf.stale = pre_bits & STALE != 0;
    if mf.stale && !mf.token_sent {
        mf.win = true;
    }
    if mf.win {
        s.set_bits(&it, TOKEN_SENT, 0);
    }
    if !opts.no_bump {
        s.bump(&it, now);
    }
    Ok(Some((it, mf, pre_bits, pre_time)))
}

/// `gat`/`gats`/`touch`: lookup, new exptime, bump. A hit comes with the item's bits and last-access
/// time from before (see `view`).
pub(crate) fn gat_lookup(
    s: &mut Shard,
    g: &Global,
    h: u64,
    key: &[u8],
    exptime: u32,
    now: u32,
) -> Result<Option<(Found, u8, u32)>, NeedMem> {
    let found = match s.find_live(g, h, key, now) {
        Some(it) => {
            let (pre_bits, pre_time) = state_before(s, &it, now);
            s.set_exptime_widening(g, h, key, it, exptime, now)?
                .map(|it| (it, pre_bits, pre_time))
        }
        None => None,
    };
    match found {
        Some((it, pre_bits, pre_time)) => {
            s.bump(&it, now);
            s.stats.touch_hits += 1;
            Ok(Some((it, pre_bits, pre_time)))
        }
        None => {
            s.stats.touch_misses += 1;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::*;
    use std::sync::Arc;

    #[test]
    fn touch_and_gat() {
        let s = store_mb(8);
        assert_eq!(s.touch(b"k", 0, T0), TouchResult::NotFound);
        s.store(
            StoreRequest::new(StoreMode::Set, b"k", b"v").exptime(s.exptime(5, T0)),
            T0,
        );
        assert_eq!(s.touch(b"k", s.exptime(100, T0), T0), TouchResult::Touched);
        assert_eq!(val(&s, "k", T0 + 50).as_deref(), Some("v"));
        let got = s.gat(b"k", s.exptime(10, T0 + 50), T0 + 50, |v| {
            v.map(|v| v.ttl_remaining)
        });
        assert_eq!(got, Some(10));
        assert_eq!(val(&s, "k", T0 + 60), None);
        assert!(!s.gat(b"k", 0, T0 + 60, |v| v.is_some()));
        let st = s.stats().counters;
        assert_eq!((st.touch_hits, st.touch_misses), (2, 2));
        assert_eq!(st.get_expired, 1);
    }

    #[test]
    fn meta_get_leases() {
        let s = store_mb(8);
        let viv = MetaGetOpts {
            vivify: Some(T0 + 30),
            ..MetaGetOpts::default()
        };
        let flags = |o: &MetaGetOpts, now| {
            s.meta_get(b"k", now, o, |r| {
                r.map(|(v, f)| (f, v.value.len(), v.ttl_remaining))
            })
        };
        let (f, len, ttl) = flags(&viv, T0).unwrap();
        assert!(f.win && f.created && !f.token_sent && !f.stale);
        assert_eq!((len, ttl), (0, 30));
        let (f, _, _) = flags(&viv, T0).unwrap();
        assert!(!f.win && f.token_sent && !f.created);
        // The winner's ms clears the token state.
        set(&s, "k", "fresh", T0);
        let (f, len, _) = flags(&viv, T0).unwrap();
        assert!(!f.win && !f.token_sent && len == 5);
        // Plain mg on a miss without N: nothing.
        assert!(s.meta_get(b"nope", T0, &MetaGetOpts::default(), |r| r.is_none()));

        // R: win once when TTL is below the threshold.
        s.store(
            StoreRequest::new(StoreMode::Set, b"r", b"v").exptime(T0 + 10),
            T0,
        );
        let rc = MetaGetOpts {
            recache: Some(T0 + 30),
            ..MetaGetOpts::default()
        };
        let mg = |k: &[u8], o: &MetaGetOpts| s.meta_get(k, T0, o, |r| r.map(|(_, f)| f)).unwrap();
        assert!(mg(b"r", &rc).win);
        let f = mg(b"r", &rc);
        assert!(!f.win && f.token_sent);
        // R does not fire for an item without TTL or with enough TTL.
        set(&s, "r2", "v", T0);
        assert!(!mg(b"r2", &rc).win);

        // Stale (md I): X and W once, then X Z.
        set(&s, "st", "v", T0);
        let inv = DeleteOpts {
            invalidate: true,
            ..DeleteOpts::default()
        };
        s.delete(b"st", T0, &inv);
        let f = mg(b"st", &MetaGetOpts::default());
        assert!(f.stale && f.win && !f.token_sent);
        let f = mg(b"st", &MetaGetOpts::default());
        assert!(f.stale && !f.win && f.token_sent);

        // h and l report state before this access; u doesn't bump.
        set(&s, "h", "v", T0);
        let hl = |now, nb| {
            s.meta_get(
                b"h",
                now,
                &MetaGetOpts {
                    no_bump: nb,
                    ..MetaGetOpts::default()
                },
                |r| r.map(|(v, _)| (v.fetched, now - v.last_access)),
            )
            .unwrap()
        };
        assert_eq!(hl(T0 + 3, true), (false, 3));
        assert_eq!(hl(T0 + 4, false), (false, 4));
        assert_eq!(hl(T0 + 6, false), (true, 2));
    }

    /// The lease sequence replayed against memcached 1.6.18 (replies noted beside each step).
    #[test]
    fn meta_lease_transcript_matches_memcached() {
        let s = store_mb(8);
        let mg = |o: MetaGetOpts| {
            s.meta_get(b"k", T0, &o, |r| {
                r.map(|(v, f)| {
                    (
                        v.value.to_vec(),
                        v.ttl_remaining,
                        f.win,
                        f.token_sent,
                        f.stale,
                    )
                })
            })
            .unwrap()
        };
        let viv = MetaGetOpts {
            vivify: Some(s.exptime(30, T0)),
            ..MetaGetOpts::default()
        };
        // mg k N30 t v c -> VA 0 t30 c1 W ; again -> VA 0 t30 Z
        assert_eq!(mg(viv), (vec![], 30, true, false, false));
        assert_eq!(mg(viv), (vec![], 30, false, true, false));
        // ms k 2 T100 -> HD ; mg k c v t -> VA 2 t100 (no flags)
        let c = s.store(
            StoreRequest::new(StoreMode::Set, b"k", b"hi").exptime(s.exptime(100, T0)),
            T0,
        );
        assert_eq!(c.result, StoreResult::Stored);
        assert_eq!(
            mg(MetaGetOpts::default()),
            (b"hi".to_vec(), 100, false, false, false)
        );
        // md k I T30 -> HD ; mg -> X W t30 ; mg -> Z X
        let md = DeleteOpts {
            invalidate: true,
            new_exptime: Some(s.exptime(30, T0)),
            ..DeleteOpts::default()
        };
        assert_eq!(s.delete(b"k", T0, &md), DeleteResult::Deleted);
        assert_eq!(
            mg(MetaGetOpts::default()),
            (b"hi".to_vec(), 30, true, false, true)
        );
        assert_eq!(
            mg(MetaGetOpts::default()),
            (b"hi".to_vec(), 30, false, true, true)
        );
        // ms k 2 I C1 (older cas) -> HD ; mg -> VA 2 t30 Z X yo
        let o = StoreOpts {
            invalidate: true,
            ..StoreOpts::default()
        };
        let r = s.store(
            StoreRequest::new(StoreMode::Cas(1), b"k", b"yo").opts(o),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        assert_eq!(
            mg(MetaGetOpts::default()),
            (b"yo".to_vec(), 30, false, true, true)
        );
        // plain ms clears it all.
        s.store(StoreRequest::new(StoreMode::Set, b"k", b"zz"), T0);
        assert_eq!(
            mg(MetaGetOpts::default()),
            (b"zz".to_vec(), -1, false, false, false)
        );
    }

    #[test]
    fn fifty_threads_one_winner() {
        for round in 0..5 {
            let s = Arc::new(store_mb(8));
            let key = format!("lease{round}");
            let handles: Vec<_> = (0..50)
                .map(|_| {
                    let s = s.clone();
                    let key = key.clone();
                    std::thread::spawn(move || {
                        let o = MetaGetOpts {
                            vivify: Some(T0 + 30),
                            ..MetaGetOpts::default()
                        };
                        s.meta_get(key.as_bytes(), T0, &o, |r| r.unwrap().1)
                    })
                })
                .collect();
            let flags: Vec<MetaFlags> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            assert_eq!(flags.iter().filter(|f| f.win).count(), 1);
            assert_eq!(flags.iter().filter(|f| f.token_sent).count(), 49);
        }
    }

    #[test]
    fn a_pinned_large_value_outlives_its_item() {
        let s = store_mb(8);
        let old = vec![b'a'; 50_000];
        s.store(StoreRequest::new(StoreMode::Set, b"big", &old), T0);
        let used = s.stats().mem_used;
        let pin = s
            .get(b"big", T0, |it| it.unwrap().pin())
            .expect("a large item pins");
        // Replaced, then deleted, while a reply is still writing the old value.
        s.store(
            StoreRequest::new(StoreMode::Set, b"big", &[b'b'; 50_000]),
            T0,
        );
        assert_eq!(get(&s, "big", T0).unwrap().0, vec![b'b'; 50_000]);
        s.delete(b"big", T0, &DeleteOpts::default());
        assert_eq!(pin.bytes(), &old[..]);
        // The limit counts stored items: the pinned buffer is no longer charged.
        assert!(s.stats().mem_used < used);
        assert_eq!(s.stats().large_items, 0);
        set(&s, "small", "x", T0);
        assert!(s.get(b"small", T0, |it| it.unwrap().pin()).is_none());
    }

    #[test]
    fn a_pinned_value_is_read_while_its_header_changes() {
        let s = Arc::new(store_mb(8));
        let v = vec![b'p'; 10_000];
        s.store(StoreRequest::new(StoreMode::Set, b"big", &v), T0);
        let pin = s.get(b"big", T0, |it| it.unwrap().pin()).unwrap();
        let reader =
            std::thread::spawn(move || (0..20).all(|_| pin.bytes().iter().all(|&b| b == b'p')));
        for i in 0..20 {
            // Each get rewrites the item's header (fetched bit, last access); gat its exptime.
            assert!(s.get(b"big", T0 + i, |it| it.is_some()));
            assert!(s.gat(b"big", T0 + 1000, T0 + i, |it| it.is_some()));
        }
        s.delete(b"big", T0, &DeleteOpts::default());
        assert!(reader.join().unwrap());
    }
}
