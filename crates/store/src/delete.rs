//! Delete under the shard lock (`delete`, and `md` with its compare, invalidate and
//! remove-value variants).

use crate::item::{self, Header, STALE, TOKEN_SENT};
use crate::segments::Queue;
use crate::shard::{Global, NeedMem, Shard, Unlink};
use crate::types::{DeleteOpts, DeleteResult};

/// `delete` / `md`.
pub(crate) fn delete_in_shard(
    s: &mut Shard,
    g: &Global,
    h: u64,
    key: &[u8],
    now: u32,
    opts: &DeleteOpts,
) -> Result<DeleteResult, NeedMem> {
    let Some(it) = s.find_live(g, h, key, now) else {
        s.stats.delete_misses += 1;
        return Ok(DeleteResult::NotFound);
    };
    let buf = s.buf(it.seg, it.off);
    let cas = item::cas(buf, &it.l);
    if let Some(c) = opts.compare_cas {
        if c != cas {
            s.stats.delete_misses += 1;
            return Ok(DeleteResult::Exists);
        }
    }
    if opts.invalidate {
        let it = if item::cas_fits(&it.l, s.peek_cas()) {
            it
        } else {
            match s.widen_cas(g, h, key, now)? {
                Some(it) => it,
                None => {
                    s.stats.delete_misses += 1;
                    return Ok(DeleteResult::NotFound);
                }
            }
        };
        let it = match opts.new_exptime {
            Some(e) => match s.set_exptime_widening(g, h, key, it, e, now)? {
                Some(it) => it,
                None => {
                    s.stats.delete_misses += 1;
                    return Ok(DeleteResult::NotFound);
                }
            },
            None => it,
        };
        s.set_bits(&it, STALE, TOKEN_SENT);
        let c = s.next_cas();
        s.set_cas(&it, c);
        return Ok(DeleteResult::Deleted);
    }
    if opts.remove_value {
        let exptime = item::exptime(buf, &it.l);
        let bits = buf[0] & (STALE | TOKEN_SENT);
        let mut hdr = Header {
            bits,
            cas: s.peek_cas(),
            exptime,
            time: now,
            flags: 0,
            force_exptime: g.force_exptime(),
        };
        let seg = s.alloc(g, hdr.encoded_len(key.len(), 0), now, Queue::Small)?;
        // The allocation evicted the item (to flash, say): the caller's retry finds it.
        let Some(it) = s.find_live(g, h, key, now) else {
            s.unalloc(g, seg);
            return Err(NeedMem);
        };
        hdr.cas = s.next_cas();
        let (off, _) = s.write(seg, &hdr, key, 0, |_| {});
        s.link(g, h, Some(it), seg, off);
        s.stats.delete_hits += 1;
        return Ok(DeleteResult::Deleted);
    }
    s.stats.delete_hits += 1;
    s.unlink(it, Unlink::Deleted);
    Ok(DeleteResult::Deleted)
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::*;

    #[test]
    fn delete_variants() {
        let s = store_mb(8);
        let d = DeleteOpts::default();
        assert_eq!(s.delete(b"k", T0, &d), DeleteResult::NotFound);
        let c = set(&s, "k", "v", T0).cas;
        let wrong = DeleteOpts {
            compare_cas: Some(c + 1),
            ..d
        };
        assert_eq!(s.delete(b"k", T0, &wrong), DeleteResult::Exists);
        let right = DeleteOpts {
            compare_cas: Some(c),
            ..d
        };
        assert_eq!(s.delete(b"k", T0, &right), DeleteResult::Deleted);
        assert_eq!(val(&s, "k", T0), None);
        let st = s.stats().counters;
        assert_eq!((st.delete_hits, st.delete_misses), (1, 2));

        // x: keep the item, drop value and flags.
        s.store(
            StoreRequest::new(StoreMode::Set, b"x", b"value").flags(9),
            T0,
        );
        let x = DeleteOpts {
            remove_value: true,
            ..d
        };
        assert_eq!(s.delete(b"x", T0, &x), DeleteResult::Deleted);
        assert_eq!(get(&s, "x", T0).map(|g| (g.0, g.1)), Some((vec![], 0)));

        // I: mark stale with a new cas and TTL instead of removing.
        let c = set(&s, "i", "v", T0).cas;
        let inv = DeleteOpts {
            invalidate: true,
            new_exptime: Some(T0 + 30),
            ..d
        };
        assert_eq!(s.delete(b"i", T0, &inv), DeleteResult::Deleted);
        s.peek(b"i", T0, |v| {
            let v = v.unwrap();
            assert!(v.stale && !v.token_sent);
            assert_ne!(v.cas, c);
            assert_eq!(v.ttl_remaining, 30);
        });
    }
}
