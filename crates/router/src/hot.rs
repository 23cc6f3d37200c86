//! A pool's hot-key state, shared by the worker threads: the sketches that find hot keys
//! (one per thread, each locked only by its thread and by the periodic judgement), the
//! cache of the hot keys' get replies, and the write generations (`hotkeys::cache` has the
//! rules). Kept across reloads while the pool's hot-key settings stay the same, so a write
//! routed by a thread already on the new generation still hides values a thread on the old
//! one would serve.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use hotkeys::{Cache, Generations, Lookup, Stamp, TopK};
use nutconf::HotKeys;

use crate::counters::Counter;

/// How often the sampled gets are judged for hot keys.
const JUDGE_MS: u64 = 250;
/// Write generation slots: keys that share one only cost each other a miss after a write.
const GENERATION_SLOTS: usize = 64 * 1024;
/// The largest get reply kept (the cache holds at most `max` of them).
pub const REPLY_MAX: usize = 256 * 1024;

pub struct HotShared {
    pub cfg: HotKeys,
    pub gens: Generations,
    cache: RwLock<Cache>,
    /// Keys hot now: gets look in the cache only when some are.
    hot: AtomicUsize,
    sketches: Vec<Mutex<TopK>>,
    capacity: usize,
    next_judge_ms: AtomicU64,
    started: Instant,
    /// Per worker thread: gets answered from the cache.
    pub hits: Vec<Counter>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HotShared {
    pub fn new(cfg: HotKeys, threads: usize) -> HotShared {
        // Space-saving holds every key above 1/capacity of the samples: room for twice the
        // keys that could pass the share, and for `max` of them.
        let capacity = ((2.0 / cfg.share).ceil() as usize)
            .max(2 * cfg.max as usize)
            .clamp(16, 4096);
        HotShared {
            gens: Generations::new(GENERATION_SLOTS),
            cache: RwLock::new(Cache::new()),
            hot: AtomicUsize::new(0),
            sketches: (0..threads)
                .map(|_| Mutex::new(TopK::new(capacity)))
                .collect(),
            capacity,
            next_judge_ms: AtomicU64::new(JUDGE_MS),
            started: Instant::now(),
            hits: (0..threads).map(|_| Counter::default()).collect(),
            cfg,
        }
    }

    pub fn now_ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_millis() as u64
    }

    /// Keys hot now.
    #[inline]
    pub fn hot_keys(&self) -> usize {
        self.hot.load(Relaxed)
    }

    /// A sampled get of `key` on worker `worker`; judges the samples when it is time.
    pub fn sample(&self, worker: usize, key: &[u8], now_ms: u64) {
        if let Some(s) = self.sketches.get(worker) {
            lock(s).offer(key);
        }
        let due = self.next_judge_ms.load(Relaxed);
        if now_ms >= due
            && self
                .next_judge_ms
                .compare_exchange(due, now_ms + JUDGE_MS, Relaxed, Relaxed)
                .is_ok()
        {
            self.judge();
        }
    }

    fn judge(&self) {
        let mut offered = 0;
        let parts: Vec<_> = self
            .sketches
            .iter()
            .map(|s| {
                let t = lock(s);
                offered += t.offered();
                t.entries()
            })
            .collect();
        let merged = hotkeys::merge(parts, self.capacity);
        let Some(keys) = hotkeys::hot_keys(&merged, offered, self.cfg.share, self.cfg.max as usize)
        else {
            return;
        };
        for s in &self.sketches {
            lock(s).clear();
        }
        let n = keys.len();
        self.cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .set_hot(keys);
        self.hot.store(n, Relaxed);
    }

    /// A get of `key` (generation slot `slot`) whose stamp is `current`.
    #[inline]
    pub fn lookup(&self, key: &[u8], now_ms: u64, current: Stamp) -> Lookup {
        self.cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .lookup(key, now_ms, current)
    }

    /// The reply of a get of hot `key` sent under stamp `sent`.
    pub fn fill(&self, key: &[u8], sent: Stamp, reply: &[u8], expires_ms: u64) {
        if reply.len() > REPLY_MAX || !reply.starts_with(b"VALUE ") || !reply.ends_with(b"END\r\n")
        {
            return;
        }
        let slot = self.gens.slot(key);
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        // The stamp is read under the lock: a write bumps before it looks, so either this
        // sees the bump or the value is stored before the write's bump makes it stale.
        cache.fill(key, sent, self.gens.stamp(slot), reply, expires_ms);
    }

    /// Whether `other` can take over this state on a reload.
    pub fn same_settings(&self, other: &HotKeys, threads: usize) -> bool {
        self.cfg == *other && self.sketches.len() == threads
    }
}

/// What a routed request owes the hot-key cache when its reply is complete.
pub enum HotTag {
    /// A get of a hot key that missed: its reply may fill the cache.
    Fill {
        hot: Arc<HotShared>,
        key: Box<[u8]>,
        sent: Stamp,
        expires_ms: u64,
    },
    /// A write: its keys' generations move again once its reply is in (or the request is
    /// dropped), so no get answered before it fills the cache with the value it replaced.
    Write { hot: Arc<HotShared>, slots: Slots },
}

/// The generation slots a write moves.
pub enum Slots {
    One(u32),
    Many(Box<[u32]>),
    /// flush_all.
    All,
}

impl Slots {
    pub fn bump(&self, gens: &Generations) {
        match self {
            Slots::One(s) => gens.bump(*s),
            Slots::Many(v) => v.iter().for_each(|&s| gens.bump(s)),
            Slots::All => gens.bump_all(),
        }
    }
}

impl HotTag {
    /// The request's reply is complete in `reply`.
    pub fn finish(self, reply: &[u8]) {
        if let HotTag::Fill {
            hot,
            key,
            sent,
            expires_ms,
        } = &self
        {
            hot.fill(key, *sent, reply, *expires_ms);
        }
    }
}

impl Drop for HotTag {
    fn drop(&mut self) {
        if let HotTag::Write { hot, slots } = self {
            slots.bump(&hot.gens);
        }
    }
}
