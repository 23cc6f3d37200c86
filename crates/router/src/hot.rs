//! A pool's hot-key state, shared by the worker threads: the sketches that find hot keys
//! (one per thread, each locked only by its thread and by the periodic judgement, with the
//! thread's sampled gets per server), the decayed demand that picks keys by server load
//! (`hotkeys::balance`), the cache of the hot keys' get replies, and the write generations
//! (`hotkeys::cache` has the rules). Kept across reloads while the pool's hot-key settings
//! stay the same, so a write routed by a thread already on the new generation still hides
//! values a thread on the old one would serve.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use hotkeys::{Cache, Demand, Generations, Lookup, Stamp, TopK};
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
    sketches: Vec<Mutex<Window>>,
    capacity: usize,
    demand: Mutex<Demand>,
    /// Keys hot now per server (empty when keys' servers are not known: mcrouter configs).
    per_server: Mutex<Vec<usize>>,
    next_judge_ms: AtomicU64,
    started: Instant,
    /// Per worker thread: gets answered from the cache.
    pub hits: Vec<Counter>,
}

/// One thread's samples since the last judgement.
struct Window {
    keys: TopK,
    /// Sampled gets per server.
    servers: Vec<u64>,
}

/// The server a key goes to, when the pool places keys itself.
pub type ServerOf<'a> = &'a mut dyn FnMut(&[u8]) -> Option<usize>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HotShared {
    pub fn new(cfg: HotKeys, threads: usize) -> HotShared {
        // Space-saving holds every key above 1/capacity of the samples: room for twice the
        // keys that could pass the share, and for the warm keys balancing picks from (four
        // times `max`: the busiest server's hottest ones are among them).
        let capacity = ((2.0 / cfg.share).ceil() as usize)
            .max(4 * cfg.max as usize)
            .clamp(16, 4096);
        HotShared {
            gens: Generations::new(GENERATION_SLOTS),
            cache: RwLock::new(Cache::new()),
            hot: AtomicUsize::new(0),
            sketches: (0..threads)
                .map(|_| {
                    Mutex::new(Window {
                        keys: TopK::new(capacity),
                        servers: Vec::new(),
                    })
                })
                .collect(),
            capacity,
            demand: Mutex::new(Demand::new(capacity)),
            per_server: Mutex::new(Vec::new()),
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

    /// Keys hot now on server `s`, when the pool places keys itself.
    pub fn hot_on_server(&self, s: usize) -> Option<usize> {
        let v = lock(&self.per_server);
        (!v.is_empty()).then(|| v.get(s).copied().unwrap_or(0))
    }

    /// A sampled get of `key` on worker `worker`, bound for `server`; judges the samples
    /// when it is time.
    pub fn sample(
        &self,
        worker: usize,
        key: &[u8],
        server: Option<usize>,
        now_ms: u64,
        server_of: ServerOf<'_>,
    ) {
        if let Some(w) = self.sketches.get(worker) {
            let mut w = lock(w);
            w.keys.offer(key);
            if let Some(s) = server {
                if w.servers.len() <= s {
                    w.servers.resize(s + 1, 0);
                }
                w.servers[s] += 1;
            }
        }
        let due = self.next_judge_ms.load(Relaxed);
        if now_ms >= due
            && self
                .next_judge_ms
                .compare_exchange(due, now_ms + JUDGE_MS, Relaxed, Relaxed)
                .is_ok()
        {
            self.judge(server_of);
        }
    }

    /// The hot set: the keys over the share, then the keys that bring the busiest server
    /// down toward the mean, `max` in all.
    fn judge(&self, server_of: ServerOf<'_>) {
        let mut offered = 0;
        let mut servers: Vec<u64> = Vec::new();
        let parts: Vec<_> = self
            .sketches
            .iter()
            .map(|s| {
                let w = lock(s);
                offered += w.keys.offered();
                if servers.len() < w.servers.len() {
                    servers.resize(w.servers.len(), 0);
                }
                for (t, n) in servers.iter_mut().zip(&w.servers) {
                    *t += n;
                }
                w.keys.entries()
            })
            .collect();
        let merged = hotkeys::merge(parts, self.capacity);
        let max = self.cfg.max as usize;
        let Some(keys) = hotkeys::hot_keys(&merged, offered, self.cfg.share, max) else {
            return;
        };
        for s in &self.sketches {
            let mut w = lock(s);
            w.keys.clear();
            w.servers.iter_mut().for_each(|n| *n = 0);
        }
        let keys = {
            let mut d = lock(&self.demand);
            d.add(&servers, &merged);
            d.choose(keys, max, &mut *server_of)
        };
        if !servers.is_empty() {
            let mut per = vec![0; servers.len()];
            for s in keys.iter().filter_map(|k| server_of(k)) {
                if let Some(n) = per.get_mut(s) {
                    *n += 1;
                }
            }
            *lock(&self.per_server) = per;
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
