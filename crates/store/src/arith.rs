//! Arithmetic (`incr`/`decr`/`ma`): memcached's do_add_delta over the item's decimal value,
//! rewritten in place when the digits fit and no reply is reading the value.

use crate::item::{self, Header, ACCESSED};
use crate::numeric;
use crate::segments::Queue;
use crate::shard::{Global, NeedMem, Shard};
use crate::types::{ArithOpts, ArithResult};

/// The change asked for: add (`incr`) or subtract (`decr`, stopping at 0) `by`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Delta {
    pub incr: bool,
    pub by: u64,
}

/// `incr`/`decr`/`ma` under the shard lock with memcached's do_add_delta rules.
pub(crate) fn arith_in_shard(
    s: &mut Shard,
    g: &Global,
    h: u64,
    key: &[u8],
    delta: Delta,
    now: u32,
    opts: &ArithOpts,
) -> Result<ArithResult, NeedMem> {
    let Delta { incr, by: delta } = delta;
    let Some(it) = s.find_live(g, h, key, now) else {
        let Some((initial, vexp)) = opts.vivify else {
            if incr {
                s.stats.incr_misses += 1;
            } else {
                s.stats.decr_misses += 1;
            }
            return Ok(ArithResult::NotFound);
        };
        let digits = initial.to_string();
        let cas = opts.new_cas.unwrap_or_else(|| s.peek_cas());
        let exptime = opts.new_exptime.unwrap_or(vexp);
        let mut hdr = Header {
            bits: 0,
            cas,
            exptime,
            time: now,
            flags: 0,
            force_exptime: g.force_exptime(),
        };
        let seg = s.alloc(
            g,
            hdr.encoded_len(key.len(), digits.len()),
            now,
            Queue::Small,
        )?;
        let cas = opts.new_cas.unwrap_or_else(|| s.next_cas());
        hdr.cas = cas;
        let (off, _) = s.write(seg, &hdr, key, digits.len(), |d| {
            d.copy_from_slice(digits.as_bytes())
        });
        s.link(g, h, None, seg, off);
        return Ok(ArithResult::Ok {
            value: initial,
            cas,
            exptime,
        });
    };
    let buf = s.buf(it.seg, it.off);
    let l = it.l;
    if l.value_len == 0 {
        return Ok(ArithResult::NonNumeric);
    }
    let cur_cas = item::cas(buf, &l);
    if opts.compare_cas != 0 && opts.compare_cas != cur_cas {
        return Ok(ArithResult::Exists);
    }
    let Some(cur) = numeric::parse_u64(&buf[l.value..l.value + l.value_len]) else {
        return Ok(ArithResult::NonNumeric);
    };
    let value = if incr {
        cur.wrapping_add(delta)
    } else {
        cur.saturating_sub(delta)
    };
    let digits = value.to_string();
    let flags = item::flags(buf, &l);
    let mut exptime = item::exptime(buf, &l);
    // memcached rewrites in place, padding with spaces to the old length, unless the item is
    // being sent.
    let in_place = digits.len() <= l.value_len
        && item::cas_fits(&l, opts.new_cas.unwrap_or(s.peek_cas()))
        && opts.new_exptime.is_none_or(|e| item::exptime_fits(&l, e));
    if let Some(v) = s.value_mut(&it).filter(|_| in_place) {
        v[..digits.len()].copy_from_slice(digits.as_bytes());
        v[digits.len()..].iter_mut().for_each(|b| *b = b' ');
        let cas = opts.new_cas.unwrap_or_else(|| s.next_cas());
        s.set_cas(&it, cas);
        if let Some(e) = opts.new_exptime {
            s.set_exptime(&it, e);
            exptime = e;
        }
        s.set_bits(&it, ACCESSED, 0);
        if incr {
            s.stats.incr_hits += 1;
        } else {
            s.stats.decr_hits += 1;
        }
        return Ok(ArithResult::Ok {
            value,
            cas,
            exptime,
        });
    }
    let cas = opts.new_cas.unwrap_or_else(|| s.peek_cas());
    if let Some(e) = opts.new_exptime {
        exptime = e;
    }
    let mut hdr = Header {
        bits: 0,
        cas,
        exptime,
        time: now,
        flags,
        force_exptime: g.force_exptime(),
    };
    let q = s.queue_for(Some(&it));
    let seg = s.alloc(g, hdr.encoded_len(key.len(), digits.len()), now, q)?;
    // The allocation evicted the item (to flash, say): the caller's retry finds it again.
    let Some(it) = s.find_live(g, h, key, now) else {
        s.unalloc(g, seg);
        return Err(NeedMem);
    };
    let cas = opts.new_cas.unwrap_or_else(|| s.next_cas());
    hdr.cas = cas;
    let (off, _) = s.write(seg, &hdr, key, digits.len(), |d| {
        d.copy_from_slice(digits.as_bytes())
    });
    s.link(g, h, Some(it), seg, off);
    if incr {
        s.stats.incr_hits += 1;
    } else {
        s.stats.decr_hits += 1;
    }
    Ok(ArithResult::Ok {
        value,
        cas,
        exptime,
    })
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::*;

    #[test]
    fn incr_decr_memcached_quirks() {
        let s = store_mb(8);
        let none = ArithOpts::default();
        assert_eq!(s.incr_decr(b"n", true, 1, T0, &none), ArithResult::NotFound);
        set(&s, "n", "10", T0);
        let r = s.incr_decr(b"n", false, 1, T0, &none);
        assert!(matches!(r, ArithResult::Ok { value: 9, .. }));
        // Shorter result is written in place, padded with spaces to the old length.
        assert_eq!(val(&s, "n", T0).unwrap(), "9 ");
        assert!(matches!(
            s.incr_decr(b"n", true, 91, T0, &none),
            ArithResult::Ok { value: 100, .. }
        ));
        assert_eq!(val(&s, "n", T0).unwrap(), "100");
        assert!(matches!(
            s.incr_decr(b"n", false, 1000, T0, &none),
            ArithResult::Ok { value: 0, .. }
        ));
        assert_eq!(val(&s, "n", T0).unwrap(), "0  ");
        set(&s, "w", "18446744073709551615", T0);
        assert!(matches!(
            s.incr_decr(b"w", true, 2, T0, &none),
            ArithResult::Ok { value: 1, .. }
        ));
        set(&s, "x", "12abc", T0);
        assert_eq!(
            s.incr_decr(b"x", true, 1, T0, &none),
            ArithResult::NonNumeric
        );
        set(&s, "e", "", T0);
        assert_eq!(
            s.incr_decr(b"e", true, 1, T0, &none),
            ArithResult::NonNumeric
        );
        set(&s, "sp", " 5 ", T0);
        assert!(matches!(
            s.incr_decr(b"sp", true, 1, T0, &none),
            ArithResult::Ok { value: 6, .. }
        ));
        // Flags and exptime survive a growing incr (new item).
        let exp = s.exptime(50, T0);
        s.store(
            StoreRequest::new(StoreMode::Set, b"g", b"9")
                .flags(3)
                .exptime(exp),
            T0,
        );
        let ArithResult::Ok { cas, exptime, .. } = s.incr_decr(b"g", true, 1, T0, &none) else {
            panic!()
        };
        assert_eq!(exptime, exp);
        s.peek(b"g", T0, |v| {
            let v = v.unwrap();
            assert_eq!((v.value, v.flags, v.cas), (&b"10"[..], 3, cas));
        });
        // ma: cas compare, vivify, TTL.
        let bad = ArithOpts {
            compare_cas: cas + 1,
            ..ArithOpts::default()
        };
        assert_eq!(s.incr_decr(b"g", true, 1, T0, &bad), ArithResult::Exists);
        let viv = ArithOpts {
            vivify: Some((42, s.exptime(10, T0))),
            ..ArithOpts::default()
        };
        assert!(matches!(
            s.incr_decr(b"v", true, 5, T0, &viv),
            ArithResult::Ok { value: 42, exptime, .. } if exptime == T0 + 10
        ));
        assert!(matches!(
            s.incr_decr(b"v", true, 5, T0, &viv),
            ArithResult::Ok { value: 47, .. }
        ));
        let st = s.stats().counters;
        assert_eq!(st.incr_misses, 1);
        assert!(st.incr_hits >= 4 && st.decr_hits == 2);
    }

    #[test]
    fn incr_replaces_a_large_value_that_is_being_read() {
        let s = store_mb(8);
        let none = ArithOpts::default();
        let mut padded = b"41".to_vec();
        padded.resize(20_000, b' ');
        s.store(StoreRequest::new(StoreMode::Set, b"n", &padded), T0);
        let pin = s.get(b"n", T0, |it| it.unwrap().pin()).unwrap();
        let r = s.incr_decr(b"n", true, 1, T0, &none);
        assert!(matches!(r, ArithResult::Ok { value: 42, .. }));
        assert_eq!(pin.bytes(), &padded[..]);
        assert_eq!(val(&s, "n", T0).as_deref(), Some("42"));
        drop(pin);
        // Nobody reading: memcached's rewrite in place, padded to the old length.
        s.store(StoreRequest::new(StoreMode::Set, b"n", &padded), T0);
        let r = s.incr_decr(b"n", true, 1, T0, &none);
        assert!(matches!(r, ArithResult::Ok { value: 42, .. }));
        let v = get(&s, "n", T0).unwrap().0;
        assert_eq!(v.len(), 20_000);
        assert!(v.starts_with(b"42 "));
    }
}
