//! The small queue's ghost (S3-FIFO's ghost queue): 16-bit fingerprints of keys evicted from
//! the small queue without having been read there. A key stored again while its fingerprint
//! is remembered (a cache-aside client refilling a miss) starts in the main queue: it came
//! back, but not soon enough to be read during its short stay in the small queue.
//!
//! A fixed table of 4-fingerprint buckets, each a FIFO: a fingerprint is forgotten once four
//! later evicted keys have landed in its bucket, so the table remembers about its own size's
//! worth of the latest evictions and never grows. Its bytes are charged to the memory limit once,
//! up front, like the index's reservation.

/// Bytes of limit per ghost slot (4 bytes): 0.2% of the limit (128 KiB at `-m 64`, ~1,000
/// of workload 7's items). At `-m 16` with 200-byte values it remembers 8,192 keys, the
/// evictions of about a ninth of the cache; twice as many missed no less, half as many
/// ~0.1 point more on 10a (`examples/cache_aside`).
pub const LIMIT_BYTES_PER_SLOT: u64 = 2048;
/// At most this many slots in all (4 MiB, reached at `-m 2048`): a nearly empty cache's
/// `mem_used` stays small, and a million keys is already a large window.
pub const MAX_SLOTS: u64 = 1 << 20;

/// Fingerprints per bucket.
const LANES: usize = 4;

pub(crate) struct Ghost {
    /// Buckets of four 32-bit fingerprints, newest first; 0 = empty lane. 32 bits, because a
    /// false match sends a new key to the main queue: with 16 bits, 1,000,000 new keys
    /// (workload 7) sent ~60, which opened a main-queue head segment in every shard and
    /// left 0.5% of the memory in unfilled segment tails.
    buckets: Box<[[u32; LANES]]>,
}

impl Ghost {
    pub fn new(nslots: usize) -> Ghost {
        Ghost {
            buckets: vec![[0u32; LANES]; (nslots / LANES).max(1)].into_boxed_slice(),
        }
    }

    /// Bytes a table of `nslots` takes (charged to the limit).
    pub fn bytes_for(nslots: usize) -> usize {
        (nslots / LANES).max(1) * std::mem::size_of::<[u32; LANES]>()
    }

    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets)
    }

    /// The bucket and the fingerprint for key hash `h`. The bucket comes from bits 16..48
    /// (mostly their top: the shard takes bits 32..36), the fingerprint from the low 32.
    fn place(&self, h: u64) -> (usize, u32) {
        let b = ((((h >> 16) as u32) as u64 * self.buckets.len() as u64) >> 32) as usize;
        (b, (h as u32).max(1))
    }

    /// Remembers a key evicted from the small queue unread; its bucket forgets its oldest.
    pub fn remember(&mut self, h: u64) {
        let (b, fp) = self.place(h);
        let bucket = &mut self.buckets[b];
        bucket.copy_within(0..LANES - 1, 1);
        bucket[0] = fp;
    }

    /// Whether the key was remembered (then forgets it: it goes to the main queue once).
    pub fn take(&mut self, h: u64) -> bool {
        let (b, fp) = self.place(h);
        let bucket = &mut self.buckets[b];
        match bucket.iter().position(|&x| x == fp) {
            Some(lane) => {
                bucket[lane] = 0;
                true
            }
            None => false,
        }
    }

    pub fn clear(&mut self) {
        self.buckets.fill([0; LANES]);
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
        g.remember(0xffff_0000_0000);
        assert!(g.take(0xffff_0000_0000));
        assert_eq!(g.bytes(), 256);
    }
}
