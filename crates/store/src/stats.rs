//! Counters kept per shard (under the shard lock) and summed on read.

use crate::flash::FlashStats;

/// Item-level counters under memcached's names. `curr_items` and `bytes` are gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Live items (gauge).
    pub curr_items: u64,
    /// Items ever stored.
    pub total_items: u64,
    /// Bytes of live items as stored here (header + key + value), see docs/storage.md.
    pub bytes: u64,
    /// Live items removed to make room.
    pub evictions: u64,
    /// Evicted items that were never read.
    pub evicted_unfetched: u64,
    /// Expired items that were never read.
    pub expired_unfetched: u64,
    /// Expired or flushed items whose memory was taken back by eviction or `reclaim`.
    pub reclaimed: u64,
    /// Seconds between the last access and the eviction of the latest evicted item (a
    /// gauge; summed shards report the largest).
    pub evicted_time: u64,
    /// Lookups that found an expired item.
    pub get_expired: u64,
    /// Lookups that found an item invalidated by `flush_all`.
    pub get_flushed: u64,
    /// Deletes of a present key.
    pub delete_hits: u64,
    /// Deletes of an absent key (or with a cas mismatch).
    pub delete_misses: u64,
    /// Increments applied.
    pub incr_hits: u64,
    /// Increments of an absent key.
    pub incr_misses: u64,
    /// Decrements applied.
    pub decr_hits: u64,
    /// Decrements of an absent key.
    pub decr_misses: u64,
    /// Cas commands that stored.
    pub cas_hits: u64,
    /// Cas commands on an absent key.
    pub cas_misses: u64,
    /// Cas commands whose cas did not match.
    pub cas_badval: u64,
    /// Touches (and gats) of a present key.
    pub touch_hits: u64,
    /// Touches (and gats) of an absent key.
    pub touch_misses: u64,
    /// Items on flash (gauge; `curr_items` counts those in memory).
    pub flash_items: u64,
    /// Lookups served from flash.
    pub get_extstore: u64,
    /// Flash items found gone (their page dropped, or writes failed).
    pub miss_from_extstore: u64,
    /// Flash reads that failed or did not check out.
    pub badcrc_from_extstore: u64,
    /// Flash items brought back into memory.
    pub recache_from_extstore: u64,
}

impl Counters {
    /// Adds another shard's counters.
    pub fn add(&mut self, o: &Counters) {
        self.curr_items += o.curr_items;
        self.total_items += o.total_items;
        self.bytes += o.bytes;
        self.evictions += o.evictions;
        self.evicted_unfetched += o.evicted_unfetched;
        self.expired_unfetched += o.expired_unfetched;
        self.reclaimed += o.reclaimed;
        self.evicted_time = self.evicted_time.max(o.evicted_time);
        self.get_expired += o.get_expired;
        self.get_flushed += o.get_flushed;
        self.delete_hits += o.delete_hits;
        self.delete_misses += o.delete_misses;
        self.incr_hits += o.incr_hits;
        self.incr_misses += o.incr_misses;
        self.decr_hits += o.decr_hits;
        self.decr_misses += o.decr_misses;
        self.cas_hits += o.cas_hits;
        self.cas_misses += o.cas_misses;
        self.cas_badval += o.cas_badval;
        self.touch_hits += o.touch_hits;
        self.touch_misses += o.touch_misses;
        self.flash_items += o.flash_items;
        self.get_extstore += o.get_extstore;
        self.miss_from_extstore += o.miss_from_extstore;
        self.badcrc_from_extstore += o.badcrc_from_extstore;
        self.recache_from_extstore += o.recache_from_extstore;
    }

    /// `stats reset` clears counters but not the gauges.
    pub fn reset(&mut self) {
        *self = Counters {
            curr_items: self.curr_items,
            bytes: self.bytes,
            flash_items: self.flash_items,
            ..Counters::default()
        };
    }
}

/// Store-wide figures: counters plus memory and segment shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Item counters summed over the shards.
    pub counters: Counters,
    /// The memory limit, bytes.
    pub limit_maxbytes: u64,
    /// Bytes charged against the limit: segments + large buffers + index.
    pub mem_used: u64,
    /// Bytes per regular segment.
    pub segment_size: u64,
    /// Regular segments allocated (each `segment_size` bytes).
    pub segments: u64,
    /// Dedicated buffers for items larger than a quarter segment.
    pub large_items: u64,
    /// Bytes of the dedicated large-item buffers.
    pub large_bytes: u64,
    /// Bytes written into segments (live + dead).
    pub written_bytes: u64,
    /// Bytes of live items in segments and large buffers.
    pub live_bytes: u64,
    /// Overwritten, deleted or expired-and-removed bytes not yet compacted away.
    pub dead_bytes: u64,
    /// Unwritten room at the end of regular segments.
    pub free_segment_bytes: u64,
    /// Bytes allocated for the index.
    pub index_bytes: u64,
    /// Index bytes charged to the limit up front (the index grows into them).
    pub index_reserved_bytes: u64,
    /// Index entries allocated.
    pub index_slots: u64,
    /// Last access time of about the oldest item (0: no items), see `Shard::oldest_item_time`.
    pub oldest_item_time: u32,
    /// Number of shards.
    pub shards: u64,
    /// The flash tier's figures, when there is one.
    pub flash: Option<FlashStats>,
    /// Bytes charged for the shards' flash indexes.
    pub flash_index_bytes: u64,
}
