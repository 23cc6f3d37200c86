//! Key dumps (`lru_crawler metadump`/`mgdump`): a resumable walk over the live items, one
//! segment at a time, so a server can list millions of keys in bounded chunks.
//!
//! The cursor names the next (shard, segment id) to walk; segments are walked whole under
//! their shard's lock, so within one segment no item is listed twice and none is missed.
//! Between steps the store changes: items stored, moved (compaction, a read promoting
//! an item) or deleted during the walk may be listed once, twice or not at all, as with
//! memcached's crawler. Expired and flushed items are never listed. The walk always ends:
//! the cursor only moves forward over a finite range.

use crate::item::{self, Layout, DEAD, FETCHED};
use crate::shard::{loc_of, Global, Shard};
use crate::NSHARDS;

/// One live item as a key dump shows it.
#[derive(Clone, Copy, Debug)]
pub struct DumpItem<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Absolute unix expiry, 0 = never.
    pub exptime: u32,
    /// Unix time of the last access or update.
    pub last_access: u32,
    /// The cas unique.
    pub cas: u64,
    /// Read since it was stored.
    pub fetched: bool,
    /// Client flags.
    pub flags: u32,
    /// The value's length.
    pub value_len: usize,
}

/// Where a key dump goes on: the next shard and segment id to walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpCursor {
    shard: u32,
    seg: u32,
}

/// Segment ids a packed cursor can hold (a shard has far fewer segments).
const SEG_BITS: u32 = 27;

impl DumpCursor {
    /// The cursor as one number (0 = the start), for a connection to keep.
    pub fn pack(self) -> u32 {
        (self.shard << SEG_BITS) | self.seg.min((1 << SEG_BITS) - 1)
    }

    /// The cursor `pack` returned; any number is a cursor (past the end: the walk is done).
    pub fn unpack(v: u32) -> DumpCursor {
        DumpCursor {
            shard: v >> SEG_BITS,
            seg: v & ((1 << SEG_BITS) - 1),
        }
    }
}

impl Shard {
    /// Calls `f` with every live item of segment `seg` (key, item bytes and layout), in
    /// write order; a dead, expired, flushed or superseded item is left out.
    pub(crate) fn for_each_live_in(
        &self,
        g: &Global,
        seg: u32,
        now: u32,
        f: &mut impl FnMut(&[u8], &Layout),
    ) {
        let used = self.segs[seg].used;
        let mut off = 0;
        while off < used {
            let buf = self.segs.buf(seg, off);
            let l = item::parse(buf);
            let at = off;
            off += l.total();
            if l.bits & DEAD != 0 || g.gone(buf, &l, now).is_some() {
                continue;
            }
            let key = &buf[l.key..l.key + l.key_len];
            if self.index.find_loc(g.hash(key), loc_of(seg, at)).is_some() {
                f(buf, &l);
            }
        }
    }
}

impl crate::Store {
    /// Walks the next segment holding items from `cursor` on, calling `f` with each live
    /// item; returns the cursor after it, or None when every segment has been walked.
    pub fn dump_step(
        &self,
        cursor: DumpCursor,
        now: u32,
        f: &mut impl FnMut(&DumpItem<'_>),
    ) -> Option<DumpCursor> {
        let mut cur = cursor;
        while (cur.shard as usize) < NSHARDS {
            let s = self.lock(cur.shard as usize);
            let len = s.segs.table_len() as u32;
            while cur.seg < len {
                let seg = cur.seg;
                cur.seg += 1;
                if !s.segs[seg].active {
                    continue;
                }
                s.for_each_live_in(&self.g, seg, now, &mut |buf, l| {
                    f(&DumpItem {
                        key: &buf[l.key..l.key + l.key_len],
                        exptime: item::exptime(buf, l),
                        last_access: item::time(buf, l, now),
                        cas: item::cas(buf, l),
                        fetched: l.bits & FETCHED != 0,
                        flags: item::flags(buf, l),
                        value_len: l.value_len,
                    })
                });
                return Some(cur);
            }
            cur = DumpCursor {
                shard: cur.shard + 1,
                seg: 0,
            };
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::test_util::*;
    use crate::*;

    /// Every key of a whole dump with how often it was listed, resuming through `pack`.
    fn dump_all(s: &Store, now: u32) -> (HashMap<Vec<u8>, usize>, usize) {
        let mut seen = HashMap::new();
        let mut steps = 0;
        let mut cur = Some(DumpCursor::default());
        while let Some(c) = cur {
            cur = s
                .dump_step(DumpCursor::unpack(c.pack()), now, &mut |it| {
                    *seen.entry(it.key.to_vec()).or_insert(0) += 1
                })
                .map(|c| DumpCursor::unpack(c.pack()));
            steps += 1;
        }
        (seen, steps)
    }

    #[test]
    fn every_live_key_once_in_resumable_steps() {
        let s = store_mb(64);
        for i in 0..20_000 {
            set(&s, &format!("key:{i}"), "some value bytes", T0);
        }
        // Overwritten and deleted keys: only the live version, once.
        for i in 0..1000 {
            set(&s, &format!("key:{i}"), "v2", T0);
            s.delete(
                format!("key:{}", 10_000 + i).as_bytes(),
                T0,
                &DeleteOpts::default(),
            );
        }
        let (seen, steps) = dump_all(&s, T0);
        assert_eq!(seen.len(), 19_000);
        assert!(seen.values().all(|&n| n == 1));
        assert!(!seen.contains_key(&b"key:10000"[..]));
        assert!(
            steps > 16,
            "walked in more than one step per shard: {steps}"
        );
    }

    #[test]
    fn expired_and_flushed_items_are_left_out() {
        let s = store_mb(8);
        set(&s, "forever", "v", T0);
        let req = StoreRequest::new(StoreMode::Set, b"short", b"v").exptime(T0 + 10);
        s.store(req, T0);
        assert_eq!(dump_all(&s, T0).0.len(), 2);
        let (seen, _) = dump_all(&s, T0 + 11);
        assert_eq!(seen.keys().collect::<Vec<_>>(), vec![&b"forever".to_vec()]);
        s.flush_all(0, T0 + 12);
        assert!(dump_all(&s, T0 + 12).0.is_empty());
    }

    #[test]
    fn items_show_their_metadata() {
        let s = store_mb(8);
        let req = StoreRequest::new(StoreMode::Set, b"k\x01", b"abc")
            .flags(7)
            .exptime(T0 + 100);
        s.store(req, T0);
        s.get(b"k\x01", T0 + 5, |_| ());
        let mut got = Vec::new();
        let mut cur = Some(DumpCursor::default());
        while let Some(c) = cur {
            cur = s.dump_step(c, T0 + 6, &mut |it| {
                got.push((
                    it.key.to_vec(),
                    it.exptime,
                    it.last_access,
                    it.fetched,
                    it.flags,
                    it.value_len,
                ))
            });
        }
        assert_eq!(got, vec![(b"k\x01".to_vec(), T0 + 100, T0 + 5, true, 7, 3)]);
    }

    #[test]
    fn an_empty_store_and_any_cursor_end_at_once() {
        let s = store_mb(8);
        assert_eq!(
            s.dump_step(DumpCursor::default(), T0, &mut |_| panic!()),
            None
        );
        assert_eq!(
            s.dump_step(DumpCursor::unpack(u32::MAX), T0, &mut |_| panic!()),
            None
        );
    }
}
