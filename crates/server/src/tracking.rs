//! Near-cache invalidation (`track`, docs/protocol.md): listeners, the keys each has read
//! through its tracked data connections, and the notices sent when one of them changes.
//!
//! A read registers its key while its shard lock in the store is held, before the value
//! is taken; a write tells the tracker after the store has the new value and before it
//! answers. So a reader that got the old value registered before the write looked, and is
//! told. Notices go through the listener's bounded queue (a `watch` feed): writers never
//! wait on a listener, and one whose queue overflows loses its registrations and gets
//! `IV_ALL` instead of a silent gap.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use mio::Waker;
use proto::reply;
use smallvec::SmallVec;

use crate::watch::{Hub, Watcher};

/// Defaults of `-o track_max_keys`, `-o track_total_keys`.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
pub const DEFAULT_TOTAL_KEYS: usize = 4_000_000;
/// Listeners at a time (each holds a connection).
const MAX_LISTENERS: usize = 1 << 16;
/// Enough that a shard's sweep holds its lock briefly (~16K registrations at the total
/// bound), and registrations from many workers rarely meet.
const SHARDS: usize = 256;

/// A connection that ran `track listen`.
pub struct Listener {
    pub id: u64,
    slot: u32,
    /// Registrations carry the epoch they were made in; `IV_ALL` starts a new one, which
    /// voids them all at once (the sweep removes them).
    epoch: AtomicU32,
    /// Registrations of the current epoch.
    count: AtomicUsize,
    pub feed: Arc<Watcher>,
}

#[derive(Clone, Copy, PartialEq)]
struct Reg {
    slot: u32,
    epoch: u32,
}

struct Entry {
    /// The item's expiry when last read (0: none): the sweep announces it when it passes.
    exptime: u32,
    regs: SmallVec<[Reg; 1]>,
}

/// Why `Tracker::listen` refused.
pub struct TooMany;

pub struct Tracker {
    listeners: AtomicUsize,
    slots: RwLock<Vec<Option<Arc<Listener>>>>,
    shards: Box<[Mutex<HashMap<Box<[u8]>, Entry>>]>,
    hasher: foldhash::fast::RandomState,
    /// Registrations in the maps, void ones included until the sweep removes them.
    total: AtomicUsize,
    max_per: usize,
    max_total: usize,
    next_id: AtomicU64,
    next_epoch: AtomicU32,
    pub notices: AtomicU64,
    pub flushes: AtomicU64,
    /// A delayed `flush_all`'s time (unix seconds), announced by the sweep when it comes.
    flush_at: AtomicU32,
}

impl Tracker {
    pub fn new(max_per: usize, max_total: usize) -> Tracker {
        Tracker {
            listeners: AtomicUsize::new(0),
            slots: RwLock::new(Vec::new()),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: foldhash::fast::RandomState::default(),
            total: AtomicUsize::new(0),
            max_per: max_per.max(1),
            max_total: max_total.max(1),
            next_id: AtomicU64::new(1),
            next_epoch: AtomicU32::new(1),
            notices: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            flush_at: AtomicU32::new(0),
        }
    }

    /// Whether any listener is connected: the one load a write makes otherwise.
    #[inline(always)]
    pub fn active(&self) -> bool {
        self.listeners.load(Relaxed) != 0
    }

    pub fn listener_count(&self) -> usize {
        self.listeners.load(Relaxed)
    }

    /// Registrations held (void ones until the next sweep).
    pub fn key_count(&self) -> usize {
        self.total.load(Relaxed)
    }

    /// Makes connection `token` of `worker` a listener.
    pub fn listen(&self, hub: &Hub, worker: usize, token: usize) -> Result<Arc<Listener>, TooMany> {
        let mut slots = self.slots.write().map_err(|_| TooMany)?;
        let slot = match slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if slots.len() < MAX_LISTENERS => {
                slots.push(None);
                slots.len() - 1
            }
            None => return Err(TooMany),
        };
        let l = Arc::new(Listener {
            id: self.next_id.fetch_add(1, Relaxed),
            slot: slot as u32,
            epoch: AtomicU32::new(self.next_epoch.fetch_add(1, Relaxed)),
            count: AtomicUsize::new(0),
            feed: hub.feed(worker, token),
        });
        slots[slot] = Some(l.clone());
        self.listeners.fetch_add(1, Relaxed);
        Ok(l)
    }

    /// The listener `id`, if still connected.
    pub fn find(&self, id: u64) -> Option<Arc<Listener>> {
        let slots = self.slots.read().ok()?;
        slots.iter().flatten().find(|l| l.id == id).cloned()
    }

    /// Forgets the listener whose connection (feed) closed; its registrations are void.
    pub fn closed(&self, feed: &Arc<Watcher>) {
        let Ok(mut slots) = self.slots.write() else {
            return;
        };
        if let Some(s) = slots
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|l| Arc::ptr_eq(&l.feed, feed)))
        {
            *s = None;
            self.listeners.fetch_sub(1, Relaxed);
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<HashMap<Box<[u8]>, Entry>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    fn live(&self, r: Reg) -> Option<Arc<Listener>> {
        let slots = self.slots.read().ok()?;
        slots
            .get(r.slot as usize)?
            .as_ref()
            .filter(|l| l.epoch.load(Relaxed) == r.epoch)
            .cloned()
    }

    /// A tracked read of `key` (an item expiring at `exptime`, 0: never) for `l`.
    pub fn register(&self, l: &Listener, key: &[u8], exptime: u32, hub: &Hub, wakers: &[Arc<Waker>]) {
        let reg = Reg {
            slot: l.slot,
            epoch: l.epoch.load(Relaxed),
        };
        let added = {
            let Ok(mut map) = self.shard(key).lock() else {
                return;
            };
            match map.get_mut(key) {
                Some(e) => {
                    e.exptime = exptime;
                    match e.regs.iter_mut().find(|r| r.slot == reg.slot) {
                        Some(r) if *r == reg => false,
                        Some(r) => {
                            // A void registration of the same slot, now current again.
                            *r = reg;
                            true
                        }
                        None => {
                            e.regs.push(reg);
                            self.total.fetch_add(1, Relaxed);
                            true
                        }
                    }
                }
                None => {
                    let mut regs = SmallVec::new();
                    regs.push(reg);
                    map.insert(key.into(), Entry { exptime, regs });
                    self.total.fetch_add(1, Relaxed);
                    true
                }
            }
        };
        if !added {
            return;
        }
        let n = l.count.fetch_add(1, Relaxed) + 1;
        if n > self.max_per || self.total.load(Relaxed) > self.max_total {
            self.flush(l, hub, wakers);
        }
    }

    /// `IV_ALL` to `l`: everything it registered is void from here on.
    pub fn flush(&self, l: &Listener, hub: &Hub, wakers: &[Arc<Waker>]) {
        l.epoch.store(self.next_epoch.fetch_add(1, Relaxed), Relaxed);
        l.count.store(0, Relaxed);
        self.flushes.fetch_add(1, Relaxed);
        hub.push(&l.feed, b"IV_ALL\r\n", wakers);
    }

    /// `key`'s item changed or left: tells every listener that registered it, once.
    #[inline]
    pub fn changed(&self, key: &[u8], hub: &Hub, wakers: &[Arc<Waker>]) {
        if self.active() {
            self.announce(key, hub, wakers);
        }
    }

    #[cold]
    fn announce(&self, key: &[u8], hub: &Hub, wakers: &[Arc<Waker>]) {
        let regs = {
            let Ok(mut map) = self.shard(key).lock() else {
                return;
            };
            match map.remove(key) {
                Some(e) => e.regs,
                None => return,
            }
        };
        self.total.fetch_sub(regs.len(), Relaxed);
        self.tell(key, &regs, hub, wakers);
    }

    fn tell(&self, key: &[u8], regs: &[Reg], hub: &Hub, wakers: &[Arc<Waker>]) {
        let mut line = Vec::new();
        for &r in regs {
            let Some(l) = self.live(r) else { continue };
            let _ = l.count.fetch_update(Relaxed, Relaxed, |c| c.checked_sub(1));
            if line.is_empty() {
                notice(&mut line, key);
            }
            self.notices.fetch_add(1, Relaxed);
            hub.push(&l.feed, &line, wakers);
        }
    }

    /// `flush_all`: every listener drops everything, now or at `at` (unix seconds).
    pub fn flush_all(&self, at: Option<u32>, hub: &Hub, wakers: &[Arc<Waker>]) {
        if let Some(at) = at {
            self.flush_at.store(at, Relaxed);
            return;
        }
        let ls: Vec<Arc<Listener>> = match self.slots.read() {
            Ok(s) => s.iter().flatten().cloned().collect(),
            Err(_) => return,
        };
        for l in &ls {
            self.flush(l, hub, wakers);
        }
        for s in self.shards.iter() {
            if let Ok(mut map) = s.lock() {
                let n: usize = map.values().map(|e| e.regs.len()).sum();
                map.clear();
                self.total.fetch_sub(n, Relaxed);
            }
        }
    }

    /// About once a second: a delayed flush that came, items that expired, void
    /// registrations removed, and the total bound kept by flushing the biggest listeners.
    pub fn sweep(&self, now: u32, hub: &Hub, wakers: &[Arc<Waker>]) {
        let at = self.flush_at.load(Relaxed);
        if at != 0 && at <= now {
            self.flush_at.store(0, Relaxed);
            self.flush_all(None, hub, wakers);
        }
        if self.total.load(Relaxed) == 0 {
            return;
        }
        self.keep_total(hub, wakers);
        let current: Vec<Option<u32>> = match self.slots.read() {
            Ok(s) => s
                .iter()
                .map(|l| l.as_ref().map(|l| l.epoch.load(Relaxed)))
                .collect(),
            Err(_) => return,
        };
        let valid = |r: &Reg| current.get(r.slot as usize).copied().flatten() == Some(r.epoch);
        let mut expired = Vec::new();
        for s in self.shards.iter() {
            let Ok(mut map) = s.lock() else { continue };
            let mut removed = 0;
            map.retain(|key, e| {
                let before = e.regs.len();
                e.regs.retain(|r| valid(r));
                removed += before - e.regs.len();
                if e.exptime != 0 && e.exptime <= now && !e.regs.is_empty() {
                    removed += e.regs.len();
                    expired.push((key.clone(), std::mem::take(&mut e.regs)));
                }
                !e.regs.is_empty()
            });
            self.total.fetch_sub(removed, Relaxed);
            drop(map);
            for (key, regs) in expired.drain(..) {
                self.tell(&key, &regs, hub, wakers);
            }
        }
    }

    /// Flushes the listeners holding the most registrations until the rest fit in 90% of
    /// the total bound.
    fn keep_total(&self, hub: &Hub, wakers: &[Arc<Waker>]) {
        let mut ls: Vec<Arc<Listener>> = match self.slots.read() {
            Ok(s) => s.iter().flatten().cloned().collect(),
            Err(_) => return,
        };
        let mut held: usize = ls.iter().map(|l| l.count.load(Relaxed)).sum();
        let room = self.max_total / 10 * 9;
        if held <= room {
            return;
        }
        ls.sort_by_key(|l| std::cmp::Reverse(l.count.load(Relaxed)));
        for l in &ls {
            if held <= room {
                break;
            }
            held -= l.count.load(Relaxed).min(held);
            self.flush(l, hub, wakers);
        }
    }
}

/// `IV <key>\r\n`, or `IV <base64> b\r\n` for a key the text protocol cannot carry.
fn notice(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"IV ");
    if key.iter().any(|&b| b <= b' ' || b >= 0x7f) {
        reply::write_base64(out, key);
        out.extend_from_slice(b" b\r\n");
    } else {
        out.extend_from_slice(key);
        out.extend_from_slice(b"\r\n");
    }
}
