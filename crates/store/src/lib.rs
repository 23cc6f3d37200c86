//! memfleet's storage engine: memcached 1.6 item semantics over a Segcache-style layout.
//!
//! Items are packed back to back in fixed-size segments owned by shards (one mutex each,
//! chosen by key hash); a compact two-choice bucketed index maps keys to item locations.
//! Pure: no I/O, no clock (every operation takes `now`, unix seconds).
//! Read closures run under the shard lock: they must be short and must not call the store.
//! See docs/storage.md for the design and the per-item byte budget.

mod index;
mod item;
mod numeric;
mod segbuf;
mod shard;
mod stats;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use item::{Header, ACCESSED, FETCHED, STALE, TOKEN_SENT};
pub use segbuf::PinnedValue;
use segbuf::ValueAt;
use shard::{Found, Global, NeedMem, Shard, Unlink};
pub use stats::{Counters, Stats};

/// Longest relative exptime; larger values are absolute unix times (memcached REALTIME_MAXDELTA).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// Internal exptime meaning "already expired" (a unix time long past).
pub const EXPIRED: u32 = 1;
const SHARD_BITS: u32 = 4;
const NSHARDS: usize = 1 << SHARD_BITS;

/// Store construction parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Hard limit on item memory (segments + large buffers + index), bytes (`-m` × 2^20).
    pub mem_limit: u64,
    /// Largest item accepted (`-I`), counted like memcached (see `item_too_large`).
    pub item_size_max: usize,
    /// Unix time the process started; absolute exptimes at or before it are already expired.
    pub process_start: u32,
    /// False (`-M`): when memory is full, stores fail instead of evicting items.
    pub evictions: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mem_limit: 64 << 20,
            item_size_max: 1 << 20,
            process_start: 0,
            evictions: true,
        }
    }
}

/// A read-only view of an item, valid while the shard lock is held (inside the closure).
/// Flag fields show the state *before* this access updated them.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    /// Absolute unix expiry, 0 = never.
    pub exptime: u32,
    /// Seconds left as memcached's `t` flag reports it: -1 when the item never expires.
    pub ttl_remaining: i64,
    /// Unix time of the last access or update (memcached's it->time).
    pub last_access: u32,
    pub fetched: bool,
    pub stale: bool,
    pub token_sent: bool,
    value_at: ValueAt<'a>,
}

impl ItemView<'_> {
    /// The value, kept readable once the read closure has returned and the shard is
    /// unlocked: for large items only (None otherwise), which a reply then writes without
    /// holding up other requests for the shard.
    pub fn pin(&self) -> Option<PinnedValue> {
        self.value_at.pin()
    }
}

/// Storage commands. `Cas` carries the client's cas unique.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreResult {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    NoMemory,
}

/// Outcome of a store: result and, when stored, the item's new cas (0 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOutcome {
    pub result: StoreResult,
    pub cas: u64,
}

/// Meta-protocol (`ms`) extras.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOpts {
    /// `C` with append/prepend/add modes: compare against this cas (0 = no compare).
    /// For set/replace use `StoreMode::Cas` (as memcached turns them into a cas command).
    pub compare_cas: u64,
    /// `I`: a `Cas` older than the item's stores the value as stale (keeping TTL/token).
    pub invalidate: bool,
    /// `E`: use this cas instead of a generated one.
    pub new_cas: Option<u64>,
    /// Meta semantics: a failed store (too large / no memory) removes the old item in every
    /// mode; the text protocol does so only for `set`.
    pub meta: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteResult {
    Deleted,
    NotFound,
    Exists,
    /// Only with `DeleteOpts::remove_value` when the empty replacement could not be stored.
    NoMemory,
}

/// Meta-protocol (`md`) extras.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeleteOpts {
    /// `C`: only delete when the item's cas equals this.
    pub compare_cas: Option<u64>,
    /// `I`: mark stale (new cas, token cleared) instead of removing.
    pub invalidate: bool,
    /// `T` with `I`: new internal exptime for the stale item.
    pub new_exptime: Option<u32>,
    /// `x`: keep the item but drop its value and client flags.
    pub remove_value: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchResult {
    Touched,
    NotFound,
}

/// Meta-protocol (`ma`) extras.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArithOpts {
    /// `C`: compare cas (0 = none).
    pub compare_cas: u64,
    /// `E`: explicit new cas.
    pub new_cas: Option<u64>,
    /// `N` + `J`: on miss create the item with (initial value, internal exptime).
    pub vivify: Option<(u64, u32)>,
    /// `T`: new internal exptime applied on success.
    pub new_exptime: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithResult {
    /// New numeric value (the reply), the item's cas and internal exptime (for `t`).
    Ok {
        value: u64,
        cas: u64,
        exptime: u32,
    },
    NotFound,
    NonNumeric,
    /// `C` did not match.
    Exists,
    NoMemory,
}

/// Meta get (`mg`) options affecting item state. Exptimes are internal (see `Store::exptime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaGetOpts {
    /// `u`: don't bump (fetched bit, last access).
    pub no_bump: bool,
    /// `T`: touch.
    pub touch: Option<u32>,
    /// `N`: vivify on miss with this exptime.
    pub vivify: Option<u32>,
    /// `R`: win a recache token when the remaining TTL is below this (internal exptime).
    pub recache: Option<u32>,
}

/// Lease outcome of a meta get hit, decided under the shard lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// `W`: this caller won the right to recache.
    pub win: bool,
    /// `Z`: a token was already sent for this item.
    pub token_sent: bool,
    /// `X`: the item is stale.
    pub stale: bool,
    /// The item was created by vivify in this call.
    pub created: bool,
}

/// A shard with its own cache line so neighbouring locks don't share one.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// The item store. `Send + Sync`; share it through `Arc<Store>`.
pub struct Store {
    shards: Box<[Padded]>,
    g: Global,
    item_size_max: AtomicU64,
    process_start: u32,
    steal_rotor: AtomicU32,
}

/// Too large by memcached's item_size_ok: 48-byte header + 8 cas + key + NUL + flags suffix
/// + value + CRLF must fit in item_size_max.
pub fn item_too_large(key_len: usize, value_len: usize, flags: u32, item_size_max: usize) -> bool {
    let suffix = if flags != 0 { 4 } else { 0 };
    48 + 8 + key_len + 1 + suffix + value_len + 2 > item_size_max
}

impl Store {
    pub fn new(cfg: Config) -> Store {
        let limit = cfg.mem_limit.max(1 << 20);
        // Fine enough that every shard has dozens of segments, coarse enough that per-segment
        // slack is negligible: 64 MiB -> 64 KiB segments.
        let seg_size = ((limit / 1024).next_power_of_two()).clamp(16 << 10, 1 << 20) as usize;
        // One index slot per ~128 bytes of limit: ~90% full when the cache is full of
        // ~140-byte items; it grows if items are smaller.
        let slots = (limit / 128) as usize;
        let buckets_per_shard = (slots / index::WAYS / NSHARDS).max(4);
        let shards: Vec<Padded> = (0..NSHARDS)
            .map(|i| {
                Padded(Mutex::new(Shard::new(
                    i as u64,
                    SHARD_BITS,
                    buckets_per_shard,
                )))
            })
            .collect();
        let index_bytes = (buckets_per_shard * index::WAYS * 8 * NSHARDS) as u64;
        let g = Global {
            used: AtomicU64::new(index_bytes),
            limit: AtomicU64::new(limit),
            seg_size,
            large_threshold: seg_size / 4,
            oldest_live: AtomicU32::new(0),
            hasher: foldhash::fast::RandomState::default(),
            spare: Mutex::new(Vec::new()),
            // A few segments' worth, and never a noticeable share of a small limit.
            spare_max: ((limit / seg_size as u64) / 32).min(8) as usize,
            evictions: cfg.evictions,
        };
        let store = Store {
            shards: shards.into_boxed_slice(),
            g,
            item_size_max: AtomicU64::new(cfg.item_size_max as u64),
            process_start: cfg.process_start,
            steal_rotor: AtomicU32::new(0),
        };
        for s in store.shards.iter() {
            let mut s = s.0.lock().unwrap();
            s.charged = (buckets_per_shard * index::WAYS * 8) as u64;
        }
        store
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
                if s.segment_count() > 0 && s.charged > best_charge {
                    best_charge = s.charged;
                    best = Some(i);
                }
            }
        }
        match best {
            Some(i) => self.lock(i).evict_oldest(&self.g),
            None => false,
        }
    }

    fn view<'a>(s: &'a Shard, f: &Found, now: u32, pre_bits: u8, pre_time: u32) -> ItemView<'a> {
        let buf = s.buf(f.seg, f.off);
        let l = &f.l;
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
            last_access: pre_time,
            fetched: pre_bits & FETCHED != 0,
            stale: pre_bits & STALE != 0,
            token_sent: pre_bits & TOKEN_SENT != 0,
            value_at: s.value_at(f),
        }
    }

    /// `get`/`gets`: calls `f` with the item (bumped: fetched bit, last access).
    pub fn get<R>(&self, key: &[u8], now: u32, f: impl FnOnce(Option<ItemView<'_>>) -> R) -> R {
        self.read(key, now, true, None, f)
    }

    /// Like `get` without updating fetched/last-access state (for `mg ... u`, debugging).
    pub fn peek<R>(&self, key: &[u8], now: u32, f: impl FnOnce(Option<ItemView<'_>>) -> R) -> R {
        self.read(key, now, false, None, f)
    }

    /// `gat`/`gats`: get and set a new internal exptime; counts touch hits/misses.
    pub fn gat<R>(
        &self,
        key: &[u8],
        exptime: u32,
        now: u32,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        self.read(key, now, true, Some(exptime), f)
    }

    fn read<R>(
        &self,
        key: &[u8],
        now: u32,
        bump: bool,
        touch: Option<u32>,
        f: impl FnOnce(Option<ItemView<'_>>) -> R,
    ) -> R {
        let (h, si) = self.route(key);
        let mut s = self.lock(si);
        let found = s.find_live(&self.g, h, key, now);
        let Some(it) = found else {
            if touch.is_some() {
                s.stats.touch_misses += 1;
            }
            s.settle(&self.g);
            return f(None);
        };
        let buf = s.buf(it.seg, it.off);
        let (pre_bits, pre_time) = (buf[0], item::time(buf, &it.l));
        if bump {
            s.bump(&it, now);
        }
        if let Some(e) = touch {
            s.set_exptime(&it, e);
            s.stats.touch_hits += 1;
        }
        s.settle(&self.g);
        f(Some(Self::view(&s, &it, now, pre_bits, pre_time)))
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
        let r = self.with_mem(si, |s, g| {
            let (it, created) = match s.find_live(g, h, key, now) {
                Some(it) => (it, false),
                None => {
                    if opts.vivify.is_none() {
                        return Ok(None);
                    }
                    // Placeholder: empty value, no flags, exptime from N below.
                    let size = item::encoded_len(key.len(), 0, 0);
                    let seg = s.alloc(g, size, now)?;
                    let hdr = Header {
                        bits: 0,
                        cas: s.next_cas(),
                        exptime: 0,
                        time: now,
                        flags: 0,
                    };
                    let (off, _) = s.write(seg, &hdr, key, 0, |_| {});
                    s.link(g, h, None, seg, off);
                    (s.find(h, key).expect("just linked"), true)
                }
            };
            let buf = s.buf(it.seg, it.off);
            let (pre_bits, pre_time) = (buf[0], item::time(buf, &it.l));
            let mut exp = item::exptime(buf, &it.l);
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
            s.set_exptime(&it, exp);
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
        });
        match r {
            Some((s, Some((it, mf, pre_bits, pre_time)))) => {
                f(Some((Self::view(&s, &it, now, pre_bits, pre_time), mf)))
            }
            Some((s, None)) => {
                drop(s);
                f(None)
            }
            // Vivify could not find memory: report a miss.
            None => f(None),
        }
    }

    /// Classic storage command with an internal exptime (see `exptime`).
    pub fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        value: &[u8],
        now: u32,
    ) -> StoreOutcome {
        self.store_ext(mode, key, flags, exptime, value, now, &StoreOpts::default())
    }

    /// Storage command with meta extras.
    #[allow(clippy::too_many_arguments)]
    pub fn store_ext(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        value: &[u8],
        now: u32,
        opts: &StoreOpts,
    ) -> StoreOutcome {
        let (h, si) = self.route(key);
        let max = self.item_size_max.load(Ordering::Relaxed) as usize;
        let fail = |res| {
            if mode == StoreMode::Set || opts.meta {
                self.unlink_after_failed_set(si, h, key);
            }
            StoreOutcome {
                result: res,
                cas: 0,
            }
        };
        if key.is_empty() || key.len() > 250 || item_too_large(key.len(), value.len(), flags, max) {
            return fail(StoreResult::TooLarge);
        }
        let r = self.with_mem(si, |s, g| {
            store_in_shard(s, g, h, mode, key, flags, exptime, value, now, opts)
        });
        match r {
            Some((_, o)) => o,
            None => fail(StoreResult::NoMemory),
        }
    }

    /// A text storage command whose value the caller received straight into `buf`, at
    /// `value_at..value_at + value_len`, with room in front for the item header (headroom
    /// of at least `item::encoded_len(key, value_len, flags) - value_len` bytes, and either
    /// none or `item::MIN_ITEM` more). The buffer becomes the item's own, as for a large
    /// item, so the value is never copied (memcached likewise reads values into the item).
    /// Appends, prepends and buffers without such room are stored by copying.
    #[allow(clippy::too_many_arguments)]
    pub fn store_owned(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        buf: Box<[u8]>,
        value_at: usize,
        value_len: usize,
        now: u32,
    ) -> StoreOutcome {
        let value_end = value_at + value_len;
        let head = item::encoded_len(key.len(), value_len, flags) - value_len;
        let room = value_at.checked_sub(head);
        let in_place = matches!(
            mode,
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas(_)
        ) && value_end <= buf.len()
            && room.is_some_and(|r| r == 0 || (item::MIN_ITEM..=16_000).contains(&r));
        let max = self.item_size_max.load(Ordering::Relaxed) as usize;
        if !in_place
            || key.is_empty()
            || key.len() > 250
            || item_too_large(key.len(), value_len, flags, max)
        {
            return self.store(
                mode,
                key,
                flags,
                exptime,
                &buf[value_at.min(buf.len())..value_end.min(buf.len())],
                now,
            );
        }
        let item_off = value_at - head;
        let (h, si) = self.route(key);
        let opts = StoreOpts::default();
        let mut owned = Some(buf);
        let r = self.with_mem(si, |s, g| {
            let req = StoreReq {
                h,
                mode,
                key,
                flags,
                exptime,
                vlen: value_len,
                now,
                opts: &opts,
            };
            let (plan, seg) =
                match plan_and_alloc(s, g, &req, |s, g, _| s.adopt_large(g, &mut owned))? {
                    Ok(p) => p,
                    Err(o) => return Ok(o),
                };
            let cas = s.next_cas();
            let hdr = plan.header(cas, now);
            s.write_in_place(seg, item_off, &hdr, key, value_len);
            s.link(g, h, plan.old, seg, item_off);
            Ok(StoreOutcome {
                result: StoreResult::Stored,
                cas,
            })
        });
        match r {
            Some((_, o)) => o,
            None => {
                if mode == StoreMode::Set {
                    self.unlink_after_failed_set(si, h, key);
                }
                StoreOutcome {
                    result: StoreResult::NoMemory,
                    cas: 0,
                }
            }
        }
    }

    /// memcached drops the old value when a set is refused (too large, out of memory).
    fn unlink_after_failed_set(&self, si: usize, h: u64, key: &[u8]) {
        let mut s = self.lock(si);
        if let Some(f) = s.find(h, key) {
            s.unlink(f, Unlink::Deleted);
        }
        s.settle(&self.g);
    }

    /// `delete` / `md`.
    pub fn delete(&self, key: &[u8], now: u32, opts: &DeleteOpts) -> DeleteResult {
        let (h, si) = self.route(key);
        let r = self.with_mem(si, |s, g| {
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
                if let Some(e) = opts.new_exptime {
                    s.set_exptime(&it, e);
                }
                s.set_bits(&it, STALE, TOKEN_SENT);
                let c = s.next_cas();
                s.set_cas(&it, c);
                return Ok(DeleteResult::Deleted);
            }
            if opts.remove_value {
                let exptime = item::exptime(buf, &it.l);
                let bits = buf[0] & (STALE | TOKEN_SENT);
                let size = item::encoded_len(key.len(), 0, 0);
                let seg = s.alloc(g, size, now)?;
                let Some(it) = s.find_live(g, h, key, now) else {
                    s.unalloc(g, seg);
                    s.stats.delete_misses += 1;
                    return Ok(DeleteResult::NotFound);
                };
                let hdr = Header {
                    bits,
                    cas: s.next_cas(),
                    exptime,
                    time: now,
                    flags: 0,
                };
                let (off, _) = s.write(seg, &hdr, key, 0, |_| {});
                s.link(g, h, Some(it), seg, off);
                s.stats.delete_hits += 1;
                return Ok(DeleteResult::Deleted);
            }
            s.stats.delete_hits += 1;
            s.unlink(it, Unlink::Deleted);
            Ok(DeleteResult::Deleted)
        });
        r.map(|(_, d)| d).unwrap_or(DeleteResult::NoMemory)
    }

    /// `touch`: bump and set a new internal exptime.
    pub fn touch(&self, key: &[u8], exptime: u32, now: u32) -> TouchResult {
        let (h, si) = self.route(key);
        let mut s = self.lock(si);
        let r = match s.find_live(&self.g, h, key, now) {
            Some(it) => {
                s.bump(&it, now);
                s.set_exptime(&it, exptime);
                s.stats.touch_hits += 1;
                TouchResult::Touched
            }
            None => {
                s.stats.touch_misses += 1;
                TouchResult::NotFound
            }
        };
        s.settle(&self.g);
        r
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
        self.with_mem(si, |s, g| {
            arith_in_shard(s, g, h, key, incr, delta, now, opts)
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
        }
    }

    /// Bounded maintenance, to be called about once a second: removes up to `budget` expired
    /// or flushed items' worth of scanning, frees dead segments, compacts mostly-dead ones,
    /// and evicts down to a lowered limit. Returns items reclaimed.
    pub fn reclaim(&self, now: u32, budget: usize) -> usize {
        let per = (budget / NSHARDS).max(1);
        (0..NSHARDS)
            .map(|i| self.lock(i).reclaim(&self.g, now, per))
            .sum()
    }

    /// Charges `bytes` to the memory limit for a value still being received (memcached
    /// receives values into item memory), evicting as a store would. False when no room can
    /// be made (evictions disabled, or everything left is itself reserved).
    pub fn reserve(&self, bytes: u64) -> bool {
        for attempt in 0..1024 {
            if self.g.try_reserve(bytes) {
                return true;
            }
            if self.g.drop_spare() {
                continue;
            }
            if !self.steal(NSHARDS) && (!self.g.evictions || attempt > NSHARDS) {
                return false;
            }
        }
        false
    }

    /// Gives back a `reserve` charge.
    pub fn unreserve(&self, bytes: u64) {
        self.g.release(bytes);
    }

    /// `cache_memlimit`: takes effect at once for new allocations; `reclaim` evicts down.
    pub fn set_mem_limit(&self, bytes: u64) {
        self.g.limit.store(bytes, Ordering::Relaxed);
    }

    pub fn set_item_size_max(&self, bytes: usize) {
        self.item_size_max.store(bytes as u64, Ordering::Relaxed);
    }

    pub fn mem_limit(&self) -> u64 {
        self.g.limit.load(Ordering::Relaxed)
    }

    /// Bytes currently charged against the limit.
    pub fn mem_used(&self) -> u64 {
        self.g.used.load(Ordering::Relaxed)
    }

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
        }
        st
    }

    pub fn reset_stats(&self) {
        for i in 0..NSHARDS {
            self.lock(i).stats.reset();
        }
    }

    /// Number of live items (curr_items).
    pub fn len(&self) -> u64 {
        (0..NSHARDS).map(|i| self.lock(i).stats.curr_items).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// memcached's realtime() over unix times: 0 never; negative already expired; up to 30 days
/// relative to `now`; larger is absolute, expired if at or before `process_start`.
pub fn exptime_from_client(client: i64, now: u32, process_start: u32) -> u32 {
    if client == 0 {
        return 0;
    }
    if client < 0 {
        return EXPIRED;
    }
    if client > REALTIME_MAXDELTA {
        if client <= process_start as i64 {
            return EXPIRED;
        }
        return client.min(u32::MAX as i64) as u32;
    }
    (now as i64 + client).min(u32::MAX as i64) as u32
}

#[allow(clippy::too_many_arguments)]
fn store_in_shard(
    s: &mut Shard,
    g: &Global,
    h: u64,
    mode: StoreMode,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
    now: u32,
    opts: &StoreOpts,
) -> Result<StoreOutcome, NeedMem> {
    let req = StoreReq {
        h,
        mode,
        key,
        flags,
        exptime,
        vlen: value.len(),
        now,
        opts,
    };
    let (plan, seg) = match plan_and_alloc(s, g, &req, |s, g, size| s.alloc(g, size, now))? {
        Ok(p) => p,
        Err(o) => return Ok(o),
    };
    let cas = opts.new_cas.unwrap_or_else(|| s.next_cas());
    let hdr = plan.header(cas, now);
    let total_len = plan.value_len;
    let (off, l) = s.write(seg, &hdr, key, total_len, |dst| match plan.kind {
        Kind::New => dst.copy_from_slice(value),
        Kind::Append => dst[total_len - value.len()..].copy_from_slice(value),
        Kind::Prepend => dst[..value.len()].copy_from_slice(value),
    });
    if let Some(old) = plan.old {
        let old_len = old.l.value_len;
        let src = (old.seg, old.off + old.l.value);
        match plan.kind {
            Kind::Append => s.copy_value(src, old_len, (seg, off + l.value)),
            Kind::Prepend => s.copy_value(src, old_len, (seg, off + l.value + value.len())),
            Kind::New => {}
        }
    }
    s.link(g, h, plan.old, seg, off);
    Ok(StoreOutcome {
        result: StoreResult::Stored,
        cas,
    })
}

#[derive(Clone, Copy)]
enum Kind {
    New,
    Append,
    Prepend,
}

struct Plan {
    old: Option<Found>,
    kind: Kind,
    flags: u32,
    exptime: u32,
    bits: u8,
    value_len: usize,
    size: usize,
}

impl Plan {
    fn header(&self, cas: u64, now: u32) -> Header {
        Header {
            bits: self.bits,
            cas,
            exptime: self.exptime,
            time: now,
            flags: self.flags,
        }
    }
}

/// One storage request as `plan_store` decides it: the key's hash, the command and the new
/// value's length (its bytes are written only after the decision).
#[derive(Clone, Copy)]
struct StoreReq<'a> {
    h: u64,
    mode: StoreMode,
    key: &'a [u8],
    flags: u32,
    exptime: u32,
    vlen: usize,
    now: u32,
    opts: &'a StoreOpts,
}

/// Decides once to learn the size (and to skip allocation for a refusal), allocates with
/// `alloc(size)`, then decides again: allocation may have evicted or moved the old item.
/// `Ok(Err(outcome))` is a final refusal (anything allocated has been given back).
fn plan_and_alloc(
    s: &mut Shard,
    g: &Global,
    req: &StoreReq<'_>,
    alloc: impl FnOnce(&mut Shard, &Global, usize) -> Result<u32, NeedMem>,
) -> Result<Result<(Plan, u32), StoreOutcome>, NeedMem> {
    let plan = match plan_store(s, g, req, false) {
        Ok(p) => p,
        Err(o) => return Ok(Err(o)),
    };
    let seg = alloc(s, g, plan.size)?;
    match plan_store(s, g, req, true) {
        Ok(p) => Ok(Ok((p, seg))),
        Err(o) => {
            s.unalloc(g, seg);
            Ok(Err(o))
        }
    }
}

/// memcached's do_store_item decision. `Err` is a final (non-stored) outcome, counted at
/// once; hits are counted on the final pass only.
fn plan_store(
    s: &mut Shard,
    g: &Global,
    req: &StoreReq<'_>,
    last: bool,
) -> Result<Plan, StoreOutcome> {
    let StoreReq {
        h,
        mode,
        key,
        flags,
        exptime,
        vlen,
        now,
        opts,
    } = *req;
    let reject = |result| StoreOutcome { result, cas: 0 };
    let old = s.find_live(g, h, key, now);
    let mut plan = Plan {
        old,
        kind: Kind::New,
        flags,
        exptime,
        bits: 0,
        value_len: vlen,
        size: 0,
    };
    match (old, mode) {
        (None, StoreMode::Cas(_)) => {
            s.stats.cas_misses += 1;
            return Err(reject(StoreResult::NotFound));
        }
        (None, StoreMode::Replace | StoreMode::Append | StoreMode::Prepend) => {
            return Err(reject(StoreResult::NotStored));
        }
        (None, StoreMode::Set | StoreMode::Add) => {}
        (Some(o), _) => {
            let buf = s.buf(o.seg, o.off);
            let old_cas = item::cas(buf, &o.l);
            let old_bits = buf[0];
            let old_exptime = item::exptime(buf, &o.l);
            let old_flags = item::flags(buf, &o.l);
            let req_cas = match mode {
                StoreMode::Cas(c) => c,
                _ => opts.compare_cas,
            };
            let stale_ok = opts.invalidate && req_cas != 0 && req_cas < old_cas;
            match mode {
                StoreMode::Add => {
                    // memcached promotes the existing item on a failed add.
                    s.set_bits(&o, ACCESSED, 0);
                    return Err(reject(StoreResult::NotStored));
                }
                StoreMode::Cas(c) => {
                    if c != 0 && c == old_cas {
                        if last {
                            s.stats.cas_hits += 1;
                        }
                    } else if stale_ok {
                        if last {
                            s.stats.cas_hits += 1;
                        }
                        plan.exptime = old_exptime;
                        plan.bits = STALE | (old_bits & TOKEN_SENT);
                    } else {
                        s.stats.cas_badval += 1;
                        return Err(reject(StoreResult::Exists));
                    }
                }
                StoreMode::Append | StoreMode::Prepend => {
                    if req_cas != 0 && req_cas != old_cas {
                        return Err(reject(StoreResult::Exists));
                    }
                    plan.flags = old_flags;
                    plan.exptime = old_exptime;
                    plan.value_len = vlen + o.l.value_len;
                    plan.kind = if mode == StoreMode::Append {
                        Kind::Append
                    } else {
                        Kind::Prepend
                    };
                }
                StoreMode::Set | StoreMode::Replace => {}
            }
        }
    }
    plan.size = item::encoded_len(key.len(), plan.value_len, plan.flags);
    Ok(plan)
}

#[allow(clippy::too_many_arguments)]
fn arith_in_shard(
    s: &mut Shard,
    g: &Global,
    h: u64,
    key: &[u8],
    incr: bool,
    delta: u64,
    now: u32,
    opts: &ArithOpts,
) -> Result<ArithResult, NeedMem> {
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
        let size = item::encoded_len(key.len(), digits.len(), 0);
        let seg = s.alloc(g, size, now)?;
        let exptime = opts.new_exptime.unwrap_or(vexp);
        let cas = opts.new_cas.unwrap_or_else(|| s.next_cas());
        let hdr = Header {
            bits: 0,
            cas,
            exptime,
            time: now,
            flags: 0,
        };
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
    let in_place = digits.len() <= l.value_len;
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
    let size = item::encoded_len(key.len(), digits.len(), flags);
    let seg = s.alloc(g, size, now)?;
    let Some(it) = s.find_live(g, h, key, now) else {
        s.unalloc(g, seg);
        return Ok(ArithResult::NotFound);
    };
    if let Some(e) = opts.new_exptime {
        exptime = e;
    }
    let cas = opts.new_cas.unwrap_or_else(|| s.next_cas());
    let hdr = Header {
        bits: 0,
        cas,
        exptime,
        time: now,
        flags,
    };
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
mod tests;
