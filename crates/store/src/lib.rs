//! memfleet's storage engine: memcached 1.6 item semantics over a Segcache-style layout.
//!
//! Items are packed back to back in fixed-size segments owned by shards (one mutex each,
//! chosen by key hash); a compact two-choice bucketed index maps keys to item locations.
//! Pure: no I/O, no clock (every operation takes `now`, unix seconds).
//! Read closures run under the shard lock: they must be short and must not call the store.
//! See docs/storage.md for the design and the per-item byte budget.
//!
//! Modules, lowest layer first (each uses only those before it):
//! - `segbuf`, `item`, `stats`, `numeric`, `exptime`, `types`: segment buffers (the one
//!   `unsafe` module), the item byte layout, counters, decimal parsing, expiry rules, the
//!   public vocabulary (commands, options, outcomes, `StoreRequest`);
//! - `index` (key → location hash index), `budget` (memory charged against the limit,
//!   spare buffers), `segments` (segment table, FIFO by age, write head);
//! - `shard`: one shard tying them together (lookup, link, unlink);
//! - `eviction` (finding memory for a write) and `reclaim` (background expiry, compaction);
//! - `write` (storage commands), `delete`, `arith` (incr/decr), `read` (get, meta get leases);
//! - `dump` (key dumps: a resumable walk over live items, a segment at a time, whose
//!   per-segment walk `warm` shares), `snapshot` (the warm-restart file format, pure) and
//!   `warm` (saving and loading a store through it);
//! - this file: `Store`, which routes keys to shards and retries when memory is short, with
//!   its flash reads in `flash_reads`.

#![warn(missing_docs)]

mod arith;
mod budget;
mod delete;
mod drain;
mod drain_cursor;
mod dump;
mod events;
mod eviction;
mod exptime;
mod flash;
mod flash_compact;
mod flash_reads;
mod flash_warm;
mod flashed;
mod ghost;
mod index;
mod item;
mod numeric;
mod read;
mod reclaim;
mod segbuf;
mod segments;
mod shard;
pub mod snapshot;
mod stats;
mod types;
mod warm;
mod write;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use arith::Delta;
use budget::Budget;
pub use dump::{DumpCursor, DumpItem};
pub use events::{Departure, EventsGate, KeyEvents};
pub use exptime::{exptime_from_client, EXPIRED, REALTIME_MAXDELTA};
use flash::Flash;
pub use flash::{Device, FlashConfig, FlashStats, NO_ITEM_AGE};
pub use flash_warm::FlashRestore;
pub use flashed::{FlashLoc, Prefetched};
use ghost::Ghost;
pub use segbuf::PinnedValue;
use shard::{Global, NeedMem, Shard};
pub use stats::{Counters, Stats};
pub use types::{
    item_too_large, ArithOpts, ArithResult, Config, DeleteOpts, DeleteResult, ItemView, MetaFlags,
    MetaGetOpts, StoreMode, StoreOpts, StoreOutcome, StoreRequest, StoreResult, TouchResult, Value,
};
pub use warm::{LoadReport, SaveReport};
use write::{Source, StoreReq};

use proto::KEY_MAX_LENGTH;

// An item's header holds the key length in one byte.
const _: () = assert!(KEY_MAX_LENGTH <= u8::MAX as usize);

const SHARD_BITS: u32 = 4;
const NSHARDS: usize = 1 << SHARD_BITS;

/// A shard with its own cache line so neighbouring locks don't share one.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// The item store. `Send + Sync`; share it through `Arc<Store>`.
pub struct Store {
    shards: Box<[Padded]>,
    g: Global,
    item_size_max: AtomicU64,
    /// Bytes `reserve`d for values still arriving, at most `in_flight_cap`.
    in_flight: AtomicU64,
    process_start: u32,
    steal_rotor: AtomicU32,
}

impl Store {
    /// An empty store sized for `cfg.mem_limit` (at least 1 MiB).
    pub fn new(cfg: Config) -> Store {
        Store::build(cfg, None)
    }

    /// A store whose evicted items go to a flash tier on `dev` (see docs/storage.md,
    /// "Flash"). Err when the device cannot hold the configured pages.
    pub fn with_flash(
        cfg: Config,
        dev: Box<dyn Device>,
        flash: FlashConfig,
    ) -> Result<Store, String> {
        Ok(Store::build(cfg, Some(Flash::new(dev, flash)?)))
    }

    fn build(cfg: Config, flash: Option<Flash>) -> Store {
        let limit = cfg.mem_limit.max(1 << 20);
        // Fine enough that every shard has dozens of segments, coarse enough that per-segment
        // slack is negligible: 64 MiB -> 64 KiB segments.
        let seg_size = ((limit / 1024).next_power_of_two()).clamp(16 << 10, 1 << 20) as usize;
        // One index slot (6.4 bytes) per 240 bytes of limit, 2.7% of it, charged up front;
        // past that the index grows by eighths at 95% load, taking memory from items. Charged
        // for ~128-byte items (one per 120 bytes), it was half empty with ~220-byte items:
        // 2.5% fewer of them at -m 16, and no more of the small ones held (workload 7).
        let slots = (limit / 240) as usize;
        let buckets_per_shard = (slots / index::WAYS / NSHARDS).max(4);
        let ghost_slots =
            (limit / ghost::LIMIT_BYTES_PER_SLOT).min(ghost::MAX_SLOTS) as usize / NSHARDS;
        let shards: Vec<Padded> = (0..NSHARDS)
            .map(|i| {
                Padded(Mutex::new(Shard::new(
                    i as u64,
                    SHARD_BITS,
                    buckets_per_shard,
                    ghost_slots,
                )))
            })
            .collect();
        let index_bytes = (index::bytes_for(buckets_per_shard) * NSHARDS) as u64;
        let ghost_bytes = (Ghost::bytes_for(ghost_slots) * NSHARDS) as u64;
        let g = Global {
            // Spares: a few segments' worth, and never a noticeable share of a small limit.
            mem: Budget::new(
                limit,
                // The flash write buffer is item memory on its way out: within -m too.
                index_bytes + ghost_bytes + flash.as_ref().map_or(0, |f| f.cfg.wbuf_size as u64),
                ((limit / seg_size as u64) / 32).min(8) as usize,
            ),
            seg_size,
            large_threshold: seg_size / 4,
            oldest_live: AtomicU32::new(0),
            hasher: foldhash::fast::RandomState::default(),
            evictions: cfg.evictions,
            flash,
        };
        Store {
            shards: shards.into_boxed_slice(),
            g,
            item_size_max: AtomicU64::new(cfg.item_size_max as u64),
            in_flight: AtomicU64::new(0),
            process_start: cfg.process_start,
            steal_rotor: AtomicU32::new(0),
        }
    }

    /// Whom to tell when an item leaves memory (see `KeyEvents`), while `gate` is open;
    /// replaces any before.
    pub fn set_events(&self, ev: std::sync::Arc<dyn KeyEvents>, gate: std::sync::Arc<EventsGate>) {
        for i in 0..NSHARDS {
            self.lock(i).events = Some(events::Events {
                gate: gate.clone(),
                to: ev.clone(),
            });
        }
    }

    /// memcached's realtime(): client exptime to internal absolute unix time (0 = never).
    pub fn exptime(&self, client: i64, now: u32) -> u32 {
        exptime_from_client(client, now, self.process_start)
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard lock leaves the shard consistent enough to read.
        self.shards[i].0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn route(&self, key: &[u8]) -> (u64, usize) {
        let h = self.g.hash(key);
        (h, ((h >> 32) as usize) & (NSHARDS - 1))
    }

    /// Runs `op` on the key's shard; when the shard cannot find memory by itself, evicts from
    /// the shard holding the most memory and retries. On success the shard stays locked.
    fn with_mem<T>(
        &self,
        si: usize,
        mut op: impl FnMut(&mut Shard, &Global) -> Result<T, NeedMem>,
    ) -> Option<(MutexGuard<'_, Shard>, T)> {
        for attempt in 0..1024 {
            {
                let mut s = self.lock(si);
                let r = op(&mut s, &self.g);
                s.settle(&self.g);
                if let Ok(v) = r {
                    return Some((s, v));
                }
            }
            if !self.steal(si) {
                if !self.g.evictions {
                    return None;
                }
                if attempt > NSHARDS {
                    std::thread::yield_now();
                }
            }
        }
        None
    }

    /// Evicts the oldest segment of the richest other shard. No lock is held by the caller.
    fn steal(&self, me: usize) -> bool {
        let start = self.steal_rotor.fetch_add(1, Ordering::Relaxed) as usize;
        let mut best = None;
        let mut best_charge = 0;
        for k in 0..NSHARDS {
            let i = (start + k) % NSHARDS;
            if i == me {
                continue;
            }
            if let Ok(s) = self.shards[i].0.try_lock() {
                if s.segment_count() > 0 && s.charged() > best_charge {
                    best_charge = s.charged();
                    best = Some(i);
                }
            }
        }
        match best {
            Some(i) => self.lock(i).evict_oldest(&self.g),
            None => false,
        }
    }

    /// `get`/`gets`: calls `f` with the item (bumped: fetched bit, last access).
    pub fn get<R>(&self, key: &[u8], now: u32, f: impl FnOnce(Option<ItemView<'_>>) -> R) -> R {
        self.read(key, now, true, f)
    }

    /// Like `get` without updating fetched/last-access state (for `mg ... u`, debugging).
    pub fn peek<R>(&self, key: &[u8], now: u32, f: impl FnOnce(Option<ItemView<'_>>) -> R) -> R {
        self.read(key, now, false, f)
    }

    /// `peek` of memory alone: `f` gets None for an item only on flash, which is not read.
    pub fn peek_resident<R>(
        &self,
        key: &[u8],
        now: u32,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> Option<R> {
        self.read_or_locate::<true, R>(key, now, false, f).ok()
    }

    /// `gat`/`gats`: get and set a new internal exptime; counts touch hits/misses.
    pub fn gat<R>(
        &self,
        key: &[u8],
        exptime: u32,
        now: u32,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        let (h, si) = self.route(key);
        match self.with_mem_key(si, h, key, now, |s, g| {
            read::gat_lookup(s, g, h, key, exptime, now)
        }) {
            Some((s, Some((it, pre_bits, pre_time)))) => {
                f(Some(read::view(&s, &it, now, pre_bits, pre_time)))
            }
            Some((s, None)) => {
                drop(s);
                f(None)
            }
            // Never under -M (`Global::force_exptime`); with evictions memory is always found.
            None => f(None),
        }
    }

    fn read<R>(
        &self,
        key: &[u8],
        now: u32,
        bump: bool,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        match self.read_or_locate::<false, R>(key, now, bump, f) {
            Ok(r) => r,
            Err(_) => unreachable!("flash is read in line"),
        }
    }

    fn read_or_locate<const LOCATE: bool, R>(
        &self,
        key: &[u8],
        now: u32,
        bump: bool,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> Result<R, FlashLoc> {
        let (h, si) = self.route(key);
        let mut s = self.lock(si);
        // Kept in this generic function rather than a helper in `read`: every get runs it,
        // and a helper returning the hit cost a get 15-30 instructions more (callgrind).
        let Some(it) = s.find_live(&self.g, h, key, now) else {
            s.settle(&self.g);
            if self.g.flash.is_some() {
                if LOCATE {
                    if let Some(loc) = s.flash_loc(h) {
                        return Err(FlashLoc(loc));
                    }
                } else {
                    return Ok(self.read_flash(s, si, h, key, now, bump, f));
                }
            }
            drop(s);
            return Ok(f(None));
        };
        let (pre_bits, pre_time) = read::state_before(&s, &it, now);
        if bump {
            s.bump(&it, now);
        }
        s.settle(&self.g);
        Ok(f(Some(read::view(&s, &it, now, pre_bits, pre_time))))
    }

    /// `with_mem` for a command on one key: its item is brought back from flash first.
    fn with_mem_key<T>(
        &self,
        si: usize,
        h: u64,
        key: &[u8],
        now: u32,
        mut op: impl FnMut(&mut Shard, &Global) -> Result<T, NeedMem>,
    ) -> Option<(MutexGuard<'_, Shard>, T)> {
        let pre = self.prefetch(si, h, key);
        self.with_mem(si, |s, g| {
            s.bring_back(g, h, key, now, pre.as_ref())?;
            op(s, g)
        })
    }

    /// `mg`: lookup plus the lease decision (W/Z/X), atomically under the shard lock, as
    /// memcached's process_mget_command. `T`/`N` are applied before the view is taken, so
    /// `t` reports the new TTL. On a miss without `N`, `f(None)`.
    pub fn meta_get<R>(
        &self,
        key: &[u8],
        now: u32,
        opts: &MetaGetOpts,
        f: impl FnOnce(Option<(ItemView<'_>, MetaFlags)>) -> R,
    ) -> R {
        let (h, si) = self.route(key);
        let r = self.with_mem_key(si, h, key, now, |s, g| {
            read::meta_lookup(s, g, h, key, now, opts)
        });
        match r {
            Some((s, Some((it, mf, pre_bits, pre_time)))) => {
                f(Some((read::view(&s, &it, now, pre_bits, pre_time), mf)))
            }
            Some((s, None)) => {
                drop(s);
                f(None)
            }
            // Vivify could not find memory: report a miss.
            None => f(None),
        }
    }

    /// Every storage command: `set`/`add`/`replace`/`append`/`prepend`/`cas` and `ms`.
    pub fn store(&self, req: StoreRequest<'_>, now: u32) -> StoreOutcome {
        let StoreRequest {
            mode,
            key,
            flags,
            exptime,
            value,
            opts,
        } = req;
        let (h, si) = self.route(key);
        let fail = |result| {
            if mode == StoreMode::Set || opts.meta {
                let mut s = self.lock(si);
                write::unlink_after_failed_set(&mut s, &self.g, h, key);
            }
            StoreOutcome { result, cas: 0 }
        };
        let mut hold = None;
        let mut src = Source::of(mode, key, flags, value, &mut hold);
        let vlen = src.len();
        let max = self.item_size_max.load(Ordering::Relaxed) as usize;
        if key.is_empty()
            || key.len() > KEY_MAX_LENGTH
            || item_too_large(key.len(), vlen, flags, max)
        {
            return fail(StoreResult::TooLarge);
        }
        let req = StoreReq {
            h,
            mode,
            key,
            flags,
            exptime,
            vlen,
            now,
            opts: &opts,
        };
        // A plain set replaces whatever is on flash without reading it (`Shard::link`).
        let plain_set = mode == StoreMode::Set && !opts.meta;
        let stored = if plain_set {
            self.with_mem(si, |s, g| write::store_in_shard(s, g, &req, &mut src))
        } else {
            self.with_mem_key(si, h, key, now, |s, g| {
                write::store_in_shard(s, g, &req, &mut src)
            })
        };
        match stored {
            Some((_, o)) => o,
            None => fail(StoreResult::NoMemory),
        }
    }

    /// `delete` / `md`.
    pub fn delete(&self, key: &[u8], now: u32, opts: &DeleteOpts) -> DeleteResult {
        let (h, si) = self.route(key);
        self.with_mem_key(si, h, key, now, |s, g| {
            delete::delete_in_shard(s, g, h, key, now, opts)
        })
        .map(|(_, d)| d)
        .unwrap_or(DeleteResult::NoMemory)
    }

    /// `touch`: bump and set a new internal exptime.
    pub fn touch(&self, key: &[u8], exptime: u32, now: u32) -> TouchResult {
        let (h, si) = self.route(key);
        // Only a TTL given to an item stored without one needs memory, and never under `-M`
        // (`Global::force_exptime`), where `with_mem` could give up.
        let hit = self
            .with_mem_key(si, h, key, now, |s, g| {
                read::gat_lookup(s, g, h, key, exptime, now)
            })
            .is_some_and(|(_, hit)| hit.is_some());
        if hit {
            TouchResult::Touched
        } else {
            TouchResult::NotFound
        }
    }

    /// `incr`/`decr`/`ma` with memcached's do_add_delta rules.
    pub fn incr_decr(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: u32,
        opts: &ArithOpts,
    ) -> ArithResult {
        let (h, si) = self.route(key);
        let delta = Delta { incr, by: delta };
        self.with_mem_key(si, h, key, now, |s, g| {
            arith::arith_in_shard(s, g, h, key, delta, now, opts)
        })
        .map(|(_, r)| r)
        .unwrap_or(ArithResult::NoMemory)
    }

    /// `flush_all [delay]` (client delay, as memcached parses it).
    pub fn flush_all(&self, delay: i64, now: u32) {
        let new_oldest = if delay > 0 {
            self.exptime(delay, now)
        } else {
            now
        };
        let oldest_live = new_oldest.saturating_sub(1);
        self.g.oldest_live.store(oldest_live, Ordering::Relaxed);
        if oldest_live != 0 && oldest_live <= now {
            // Everything present is invalid now: give the memory back at once.
            for i in 0..NSHARDS {
                self.lock(i).clear(&self.g);
            }
            if let Some(f) = &self.g.flash {
                f.clear();
            }
        }
    }

    /// Bounded maintenance, to be called about once a second: removes up to `budget` expired
    /// or flushed items' worth of scanning, frees dead segments, compacts mostly-dead ones,
    /// and evicts down to a lowered limit. Returns items reclaimed. Each shard scans at least
    /// one in 2,048 of its items per call, so that every item is seen within hours: items keep
    /// their last-access time in 16 bits, which needs it (`item::cap_idle`).
    pub fn reclaim(&self, now: u32, budget: usize) -> usize {
        let per = (budget / NSHARDS).max(1);
        (0..NSHARDS)
            .map(|i| self.lock(i).reclaim(&self.g, now, per))
            .sum()
    }

    /// Charges `bytes` to the memory limit for a value still being received (memcached
    /// receives values into item memory), evicting as a store would. False when no room can
    /// be made (evictions disabled, or everything left is itself reserved), or when values
    /// under way already hold `in_flight_cap` bytes: clients that send part of a value and
    /// stall can then take at most that share of the cache, not all of it.
    pub fn reserve(&self, bytes: u64) -> bool {
        let cap = self.in_flight_cap();
        let taken = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
                (cur + bytes <= cap).then_some(cur + bytes)
            });
        if taken.is_err() {
            return false;
        }
        for attempt in 0..1024 {
            if self.g.mem.try_reserve(bytes) {
                return true;
            }
            if self.g.mem.drop_spare() {
                continue;
            }
            if !self.steal(NSHARDS) && (!self.g.evictions || attempt > NSHARDS) {
                break;
            }
        }
        self.in_flight.fetch_sub(bytes, Ordering::Relaxed);
        false
    }

    /// Gives back a `reserve` charge.
    pub fn unreserve(&self, bytes: u64) {
        self.g.mem.release(bytes);
        self.in_flight.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The most that values still arriving may hold together: a quarter of the limit, and
    /// never less than two of the largest items.
    pub fn in_flight_cap(&self) -> u64 {
        (self.mem_limit() / 4).max(2 * self.item_size_max.load(Ordering::Relaxed))
    }

    /// Bytes reserved for values still arriving.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// `cache_memlimit`: takes effect at once for new allocations; `reclaim` evicts down.
    pub fn set_mem_limit(&self, bytes: u64) {
        self.g.mem.set_limit(bytes);
    }

    /// `-I` at runtime (memcached's `item_size_max` setting).
    pub fn set_item_size_max(&self, bytes: usize) {
        self.item_size_max.store(bytes as u64, Ordering::Relaxed);
    }

    /// The memory limit, bytes.
    pub fn mem_limit(&self) -> u64 {
        self.g.mem.limit()
    }

    /// Bytes currently charged against the limit.
    pub fn mem_used(&self) -> u64 {
        self.g.mem.used()
    }

    /// Counters and memory figures summed over the shards.
    pub fn stats(&self) -> Stats {
        let mut st = Stats {
            limit_maxbytes: self.mem_limit(),
            mem_used: self.mem_used(),
            segment_size: self.g.seg_size as u64,
            shards: NSHARDS as u64,
            ..Stats::default()
        };
        for i in 0..NSHARDS {
            let s = self.lock(i);
            st.counters.add(&s.stats);
            let f = s.segment_figures();
            st.segments += f.segments;
            st.large_items += f.large_items;
            st.large_bytes += f.large_bytes;
            st.written_bytes += f.written;
            st.live_bytes += f.live;
            st.dead_bytes += f.written - f.live;
            st.free_segment_bytes += f.free;
            st.index_bytes += s.index.bytes() as u64;
            st.index_reserved_bytes += s.index_reserved_bytes();
            if let Some(t) = s.oldest_item_time() {
                if st.oldest_item_time == 0 || t < st.oldest_item_time {
                    st.oldest_item_time = t;
                }
            }
            st.index_slots += s.index.capacity() as u64;
            st.flash_index_bytes += s.flash_index_charged;
        }
        st.flash = self.g.flash.as_ref().map(|f| f.stats());
        st
    }

    /// `stats reset`: zeroes the counters, keeping the gauges (items, bytes).
    pub fn reset_stats(&self) {
        for i in 0..NSHARDS {
            self.lock(i).stats.reset();
        }
    }

    /// Number of live items (curr_items), in memory or on flash.
    pub fn len(&self) -> u64 {
        (0..NSHARDS)
            .map(|i| {
                let s = self.lock(i);
                s.stats.curr_items + s.stats.flash_items
            })
            .sum()
    }

    /// Drops every item, in memory and on flash, without a flush_all cutoff (a warm restart
    /// that read part of a bad file).
    pub fn clear(&self) {
        for i in 0..NSHARDS {
            self.lock(i).clear(&self.g);
        }
        if let Some(f) = &self.g.flash {
            f.clear();
        }
    }

    /// Stops the flash tier (its file is gone): flash items are misses from now on.
    pub fn stop_flash(&self, why: String) {
        if let Some(f) = &self.g.flash {
            f.fail(why);
        }
    }

    /// Pages of the flash log; 0 without flash.
    pub fn flash_pages(&self) -> u64 {
        self.g.flash.as_ref().map_or(0, |f| f.page_count())
    }

    /// The device error that stopped flash writes, once (for the server to log).
    pub fn flash_error(&self) -> Option<String> {
        self.g.flash.as_ref().and_then(|f| f.take_error())
    }

    /// No live items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod flash_tests;
#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
