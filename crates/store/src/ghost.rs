//! The small queue's ghost (S3-FIFO's ghost queue): 16-bit fingerprints of keys evicted from
//! the small queue without having been read there. A key stored again while its fingerprint
//! is remembered (a cache-aside client refilling a miss) starts in the main queue: it came
//! back, but not soon enough to be read during its short stay in the small queue.
//!
//! A fixed table of 4-fingerprint buckets, each a FIFO: a fingerprint is forgotten once four
//! later evicted keys have landed in its bucket, so the table remembers about its own size's
//! worth of the latest evictions and never grows. Its bytes are charged to the memory limit once,
//! up front, like the index's reservation.

/// Bytes of limit per ghost slot (2 bytes): 0.1% of the limit (64 KiB at `-m 64`, ~500 of
/// workload 7's items). At `-m 16` with 200-byte values it remembers 8,192 keys, the
/// evictions of about a ninth of the cache; one slot per KiB missed no less, one per 4 KiB
/// ~0.1 point more (`examples/cache_aside`).
pub const LIMIT_BYTES_PER_SLOT: u64 = 2048;

pub(crate) struct Ghost {
    /// Buckets of four fingerprints, newest in the low 16 bits; 0 = empty lane.
    buckets: Box<[u64]>,
}

const LANES: usize = 4;

impl Ghost {
    pub fn new(nslots: usize) -> Ghost {
        Ghost {
            buckets: vec![0u64; (nslots / LANES).max(1)].into_boxed_slice(),
        }
    }

    /// Bytes a table of `nslots` takes (charged to the limit).
    pub fn bytes_for(nslots: usize) -> usize {
        (nslots / LANES).max(1) * std::mem::size_of::<u64>()
    }

    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
    }

    /// The bucket and the fingerprint for key hash `h`. The shard and the index use the low
    /// 36 bits and the top bits; the bucket comes from bits 16..48, the fingerprint from the
    /// low 16.
    fn place(&self, h: u64) -> (usize, u64) {
        let b = ((((h >> 16) as u32) as u64 * self.buckets.len() as u64) >> 32) as usize;
        (b, u64::from((h as u16).max(1)))
    }

    /// Remembers a key evicted from the small queue unread; its bucket forgets its oldest.
    pub fn remember(&mut self, h: u64) {
        let (b, fp) = self.place(h);
        self.buckets[b] = (self.buckets[b] << 16) | fp;
    }

    /// Whether the key was remembered (then forgets it: it goes to the main queue once).
    pub fn take(&mut self, h: u64) -> bool {
        let (b, fp) = self.place(h);
        let bucket = self.buckets[b];
        for lane in 0..LANES {
            if (bucket >> (16 * lane)) & 0xffff == fp {
                self.buckets[b] = bucket & !(0xffff << (16 * lane));
                return true;
            }
        }
        false
    }

    pub fn clear(&mut self) {
        self.buckets.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_taken_or_overwritten() {
        let mut g = Ghost::new(64);
        let h = 0x1234_5678_9abc_def0u64;
        assert!(!g.take(h));
        g.remember(h);
        // Same bucket, another fingerprint: not a hit.
        assert!(!g.take(h ^ 1));
        assert!(g.take(h));
        assert!(!g.take(h), "taken once");
        g.remember(h);
        for i in 1..4 {
            g.remember(h ^ i);
        }
        assert!(g.take(h), "three later evictions in its bucket keep it");
        assert!(g.take(h ^ 2), "a lane in the middle");
        g.remember(h);
        for i in 1..5 {
            g.remember(h ^ i);
        }
        assert!(
            !g.take(h),
            "forgotten after four later evictions in its bucket"
        );
        g.remember(h);
        g.clear();
        assert!(!g.take(h));
        // A fingerprint of 0 still counts (stored as 1).
        g.remember(0xffff_0000);
        assert!(g.take(0xffff_0000));
        assert_eq!(g.bytes(), 128);
    }
}
