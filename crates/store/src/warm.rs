//! Warm restart: the store's items written to and read back from a `snapshot` file.
//!
//! Saving walks each shard's segments oldest first and writes every live item (expired and
//! flushed ones are left out); loading stores the items back in that order with their flags,
//! cas and absolute exptime, so if the new store holds less, the oldest go first. Afterwards
//! every shard's cas counter is raised above the largest restored cas, so new cas values never
//! repeat a restored one.

use std::io::{self, Read, Write};

use crate::exptime::expired;
use crate::item;
use crate::shard::Shard;
use crate::snapshot::{Header, Reader, Record, SnapshotError, Writer};
use crate::{Global, StoreMode, StoreOpts, StoreRequest, StoreResult, NSHARDS, SHARD_BITS};

/// What a save wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaveReport {
    /// Items written.
    pub items: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// What a load restored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    /// The file's header.
    pub header: Header,
    /// Items stored back.
    pub restored: u64,
    /// Items left out because they expired while the server was down.
    pub expired: u64,
    /// Items the store refused (no memory left, which the same `-m` should not produce).
    pub refused: u64,
}

/// Counter values above this are not followed (a client-chosen cas near 2^64 would
/// otherwise make the shard's next cas wrap around).
const CAS_COUNTER_CEILING: u64 = 1 << 56;

impl Shard {
    /// Calls `f` with every live item, oldest segment first.
    fn for_each_live(
        &self,
        g: &Global,
        now: u32,
        f: &mut impl FnMut(&Record<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        for seg in self.segs.by_age() {
            let mut failed = Ok(());
            self.for_each_live_in(g, seg, now, &mut |buf, l| {
                if failed.is_ok() {
                    failed = f(&Record {
                        key: &buf[l.key..l.key + l.key_len],
                        value: &buf[l.value..l.value + l.value_len],
                        flags: item::flags(buf, l),
                        cas: item::cas(buf, l),
                        exptime: item::exptime(buf, l),
                    });
                }
            });
            failed?;
        }
        Ok(())
    }
}

impl crate::Store {
    /// Writes every live item to `out` (see `snapshot` for the format). Each shard is locked
    /// while its items are written: meant for a server that has stopped serving.
    pub fn save_snapshot(
        &self,
        out: &mut impl Write,
        version: &str,
        now: u32,
    ) -> io::Result<SaveReport> {
        let header = Writer::header(&Header {
            mem_limit: self.mem_limit(),
            item_size_max: self
                .item_size_max
                .load(std::sync::atomic::Ordering::Relaxed),
            saved_at: now,
            items: self.len(),
            version: version.into(),
        });
        out.write_all(&header)?;
        let mut bytes = header.len() as u64;
        let mut w = Writer::new();
        for i in 0..NSHARDS {
            let s = self.lock(i);
            s.for_each_live(&self.g, now, &mut |r| {
                if w.push(r) {
                    let block = w.take_block();
                    bytes += block.len() as u64;
                    out.write_all(block)?;
                }
                Ok(())
            })?;
        }
        let items = w.items();
        let tail = w.finish();
        out.write_all(&tail)?;
        out.flush()?;
        Ok(SaveReport {
            items,
            bytes: bytes + tail.len() as u64,
        })
    }

    /// Stores back the items of a snapshot written with the same `-m` and `-I`. On an error
    /// the store may hold part of the file: the caller discards it (starts with a new store).
    pub fn load_snapshot(&self, src: impl Read, now: u32) -> Result<LoadReport, SnapshotError> {
        let mut r = Reader::open(src)?;
        r.expect(
            self.mem_limit(),
            self.item_size_max
                .load(std::sync::atomic::Ordering::Relaxed),
        )?;
        let per_shard = (r.header().items / NSHARDS as u64) as usize;
        for i in 0..NSHARDS {
            // Keys spread evenly over shards; a little slack covers the deviation.
            self.lock(i)
                .presize_index(&self.g, per_shard + per_shard / 16 + 64);
        }
        let (mut restored, mut expired_items, mut refused) = (0, 0, 0);
        while let Some(block) = r.next_block()? {
            for rec in block {
                if expired(rec.exptime, now) {
                    expired_items += 1;
                    continue;
                }
                let req = StoreRequest::new(StoreMode::Set, rec.key, rec.value)
                    .flags(rec.flags)
                    .exptime(rec.exptime)
                    .opts(StoreOpts {
                        new_cas: Some(rec.cas),
                        ..StoreOpts::default()
                    });
                if self.store(req, now).result == StoreResult::Stored {
                    restored += 1;
                } else {
                    refused += 1;
                }
            }
        }
        let floor = (r.totals().1 >> SHARD_BITS).min(CAS_COUNTER_CEILING);
        for i in 0..NSHARDS {
            self.lock(i).raise_cas_counter(floor);
        }
        Ok(LoadReport {
            header: r.header().clone(),
            restored,
            expired: expired_items,
            refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::*;

    fn snapshot_of(s: &Store, now: u32) -> Vec<u8> {
        let mut file = Vec::new();
        let rep = s.save_snapshot(&mut file, "test", now).unwrap();
        assert_eq!(rep.bytes, file.len() as u64);
        file
    }

    #[test]
    fn items_come_back_with_flags_cas_and_exptime() {
        let s = store_mb(8);
        let mut want = Vec::new();
        for i in 0..2000u32 {
            let key = format!("k{i}");
            let value = vec![b'x'; (i as usize * 13) % 3000];
            let exptime = if i % 3 == 0 { 0 } else { T0 + 1000 + i };
            let o = s.store(
                StoreRequest::new(StoreMode::Set, key.as_bytes(), &value)
                    .flags(i)
                    .exptime(exptime),
                T0,
            );
            want.push((key, value, i, o.cas, exptime));
        }
        // A large item (own buffer) and a deleted and an overwritten key.
        let big = vec![b'B'; 600_000];
        let big_cas = s
            .store(StoreRequest::new(StoreMode::Set, b"big", &big), T0)
            .cas;
        s.delete(b"k0", T0, &DeleteOpts::default());
        want.remove(0);
        let o = set(&s, "k1", "new", T0);
        want[0] = ("k1".into(), b"new".to_vec(), 0, o.cas, 0);

        let file = snapshot_of(&s, T0);
        let t = store_mb(8);
        let rep = t.load_snapshot(&file[..], T0 + 5).unwrap();
        assert_eq!(rep.restored, want.len() as u64 + 1);
        assert_eq!((rep.expired, rep.refused), (0, 0));
        for (key, value, flags, cas, exptime) in &want {
            let got = t.peek(key.as_bytes(), T0 + 5, |v| {
                v.map(|v| (v.value.to_vec(), v.flags, v.cas, v.exptime))
            });
            assert_eq!(got, Some((value.clone(), *flags, *cas, *exptime)), "{key}");
        }
        assert_eq!(get(&t, "big", T0 + 5), Some((big, 0, big_cas)));
        assert_eq!(get(&t, "k0", T0 + 5), None);
        assert_eq!(t.len(), s.len());
    }

    #[test]
    fn new_cas_values_are_above_every_restored_one() {
        let s = store_mb(8);
        let mut max = 0;
        for i in 0..500 {
            max = max.max(set(&s, &format!("k{i}"), "v", T0).cas);
        }
        let t = store_mb(8);
        t.load_snapshot(&snapshot_of(&s, T0)[..], T0).unwrap();
        for i in 0..100 {
            assert!(set(&t, &format!("n{i}"), "v", T0).cas > max);
        }
    }

    #[test]
    fn expired_and_flushed_items_are_left_out() {
        let s = store_mb(8);
        s.store(
            StoreRequest::new(StoreMode::Set, b"short", b"v").exptime(T0 + 10),
            T0,
        );
        set(&s, "keep", "v", T0);
        // Expired while the server was down: saved, then skipped on load.
        let t = store_mb(8);
        let rep = t.load_snapshot(&snapshot_of(&s, T0)[..], T0 + 20).unwrap();
        assert_eq!((rep.restored, rep.expired), (1, 1));
        // Already expired or flushed at save time: not saved.
        let file = snapshot_of(&s, T0 + 10);
        let t = store_mb(8);
        assert_eq!(t.load_snapshot(&file[..], T0 + 10).unwrap().restored, 1);
        s.flush_all(0, T0 + 11);
        let t = store_mb(8);
        assert_eq!(
            t.load_snapshot(&snapshot_of(&s, T0 + 11)[..], T0 + 11)
                .unwrap()
                .restored,
            0
        );
    }

    #[test]
    fn another_memory_limit_is_refused() {
        let s = store_mb(8);
        set(&s, "a", "v", T0);
        let file = snapshot_of(&s, T0);
        let t = store_mb(16);
        assert!(matches!(
            t.load_snapshot(&file[..], T0),
            Err(snapshot::SnapshotError::Mismatch { .. })
        ));
        assert!(t.is_empty());
    }
}
