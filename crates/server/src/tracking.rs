//! Near-cache invalidation (`track`, docs/protocol.md): listeners, the keys each has read
//! through its tracked data connections, and the notices sent when one of them changes.
//!
//! A read registers its key while its shard lock in the store is held, before the value
//! is taken; a write tells the tracker after the store has the new value and before it
//! answers. So a reader that got the old value registered before the write looked, and is
//! told. Notices go through the listener's bounded queue (a `watch` feed): writers never
//! wait on a listener, and one whose queue overflows loses its registrations and gets
//! `IV_ALL` instead of a silent gap.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use mio::Waker;
use proto::reply;

use crate::watch::{Hub, Watcher};

/// Defaults of `-o track_max_keys`, `-o track_total_keys`.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
pub const DEFAULT_TOTAL_KEYS: usize = 2_000_000;
/// Listeners a change's writer sends the notice to itself (`Tracker::tell`).
const DIRECT_SENDS_PER_CHANGE: usize = 8;
/// Listeners at a time (each holds a connection).
const MAX_LISTENERS: usize = 1 << 16;
/// Enough that a shard's sweep holds its lock briefly (~16K registrations at the total
/// bound), and registrations from many workers rarely meet.
const SHARDS: usize = 256;

/// A connection that ran `track listen`.
pub struct Listener {
    pub id: u64,
    /// Its slot (low 16 bits) and that slot's use count (high 16, never 0): what a tracked
    /// connection keeps, 4 bytes where a pointer would grow every connection.
    pub handle: u32,
    /// Registrations carry the epoch they were made in; `IV_ALL` starts a new one, which
    /// voids them all at once (the sweep removes them).
    epoch: AtomicU32,
    /// Registrations of the current epoch.
    count: AtomicUsize,
    pub feed: Arc<Watcher>,
}

impl Listener {
    fn slot(&self) -> u32 {
        slot_of(self.handle)
    }
}

/// The slot a listener's handle names.
fn slot_of(handle: u32) -> u32 {
    handle & 0xffff
}

#[derive(Clone, Copy, PartialEq)]
struct Reg {
    slot: u32,
    epoch: u32,
}

/// A tracked key in one allocation, `[exptime u32][count u16][count × (slot, epoch)][key]`,
/// so a registration costs its table slot (16 bytes) and this (~15 bytes + key, rounded up
/// by malloc): a map of key to expiry and a listener list would take 2-3 times that.
/// `exptime` is the item's expiry when last read (0: none), which the sweep announces.
struct Rec(Box<[u8]>);

const REC_HEAD: usize = 6;
const REG_LEN: usize = 8;

impl Rec {
    fn new(key: &[u8], exptime: u32, regs: &[Reg]) -> Rec {
        let n = regs.len().min(u16::MAX as usize);
        let mut b = Vec::with_capacity(REC_HEAD + n * REG_LEN + key.len());
        b.extend_from_slice(&exptime.to_le_bytes());
        b.extend_from_slice(&(n as u16).to_le_bytes());
        for r in &regs[..n] {
            b.extend_from_slice(&r.slot.to_le_bytes());
            b.extend_from_slice(&r.epoch.to_le_bytes());
        }
        b.extend_from_slice(key);
        Rec(b.into_boxed_slice())
    }

    fn exptime(&self) -> u32 {
        u32::from_le_bytes(self.0[..4].try_into().unwrap_or_default())
    }

    fn count(&self) -> usize {
        usize::from(u16::from_le_bytes([self.0[4], self.0[5]]))
    }

    fn key(&self) -> &[u8] {
        &self.0[REC_HEAD + self.count() * REG_LEN..]
    }

    fn regs(&self) -> impl Iterator<Item = Reg> + '_ {
        self.0[REC_HEAD..REC_HEAD + self.count() * REG_LEN]
            .chunks_exact(REG_LEN)
            .map(|c| Reg {
                slot: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                epoch: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
    }
}

impl Hash for Rec {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key().hash(h)
    }
}

impl PartialEq for Rec {
    fn eq(&self, o: &Rec) -> bool {
        self.key() == o.key()
    }
}

impl Eq for Rec {}

impl Borrow<[u8]> for Rec {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

type Table = HashSet<Rec, foldhash::fast::RandomState>;

/// Why `Tracker::listen` refused.
pub struct TooMany;

pub struct Tracker {
    listeners: AtomicUsize,
    slots: RwLock<Vec<Option<Arc<Listener>>>>,
    /// Per slot, how many listeners have had it (wrapping, skipping 0).
    uses: Mutex<Vec<u16>>,
    shards: Box<[Mutex<Table>]>,
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
    /// Open while any listener is: evictions and expiries are told only then.
    gate: Arc<store::EventsGate>,
}

impl Tracker {
    pub fn new(max_per: usize, max_total: usize) -> Tracker {
        Tracker {
            listeners: AtomicUsize::new(0),
            slots: RwLock::new(Vec::new()),
            uses: Mutex::new(Vec::new()),
            shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect(),
            hasher: foldhash::fast::RandomState::default(),
            total: AtomicUsize::new(0),
            max_per: max_per.max(1),
            max_total: max_total.max(1),
            next_id: AtomicU64::new(1),
            next_epoch: AtomicU32::new(1),
            notices: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            flush_at: AtomicU32::new(0),
            gate: Arc::default(),
        }
    }

    /// The store's departures gate (`store::EventsGate`), open while a listener is.
    pub fn with_gate(mut self, gate: Arc<store::EventsGate>) -> Tracker {
        self.gate = gate;
        self
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
        let uses = {
            let mut u = self.uses.lock().map_err(|_| TooMany)?;
            if u.len() <= slot {
                u.resize(slot + 1, 0);
            }
            u[slot] = u[slot].wrapping_add(1).max(1);
            u[slot]
        };
        let l = Arc::new(Listener {
            id: self.next_id.fetch_add(1, Relaxed),
            handle: u32::from(uses) << 16 | slot as u32,
            epoch: AtomicU32::new(self.next_epoch.fetch_add(1, Relaxed)),
            count: AtomicUsize::new(0),
            feed: hub.feed(worker, token),
        });
        slots[slot] = Some(l.clone());
        self.gate.open();
        self.listeners.fetch_add(1, Relaxed);
        Ok(l)
    }

    /// The listener `id`, if still connected.
    pub fn find(&self, id: u64) -> Option<Arc<Listener>> {
        let slots = self.slots.read().ok()?;
        slots.iter().flatten().find(|l| l.id == id).cloned()
    }

    /// The listener of `handle` (`Listener::handle`), if still connected.
    pub fn by_handle(&self, handle: u32) -> Option<Arc<Listener>> {
        let slots = self.slots.read().ok()?;
        slots
            .get(slot_of(handle) as usize)?
            .as_ref()
            .filter(|l| l.handle == handle)
            .cloned()
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
            self.gate.close();
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Table> {
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
    pub fn register(
        &self,
        l: &Listener,
        key: &[u8],
        exptime: u32,
        hub: &Hub,
        wakers: &[Arc<Waker>],
    ) {
        // Past a bound nothing is added: the listener drops everything instead (the reply
        // this read is about to send arrives before or with the IV_ALL, never after it, as
        // far as the client's caching is concerned: see docs/protocol.md).
        if l.count.load(Relaxed) >= self.max_per || self.total.load(Relaxed) >= self.max_total {
            self.flush(l, hub, wakers);
            return;
        }
        let reg = Reg {
            slot: l.slot(),
            epoch: l.epoch.load(Relaxed),
        };
        let added = {
            let Ok(mut map) = self.shard(key).lock() else {
                return;
            };
            match map.get(key) {
                None => {
                    map.insert(Rec::new(key, exptime, &[reg]));
                    self.total.fetch_add(1, Relaxed);
                    true
                }
                Some(rec) if rec.exptime() == exptime && rec.regs().any(|r| r == reg) => false,
                Some(_) => {
                    let Some(old) = map.take(key) else { return };
                    let mut regs: Vec<Reg> = old.regs().filter(|r| r.slot != reg.slot).collect();
                    let known = regs.len() < old.count();
                    let added = !old.regs().any(|r| r == reg);
                    regs.push(reg);
                    map.insert(Rec::new(key, exptime, &regs));
                    if !known {
                        self.total.fetch_add(1, Relaxed);
                    }
                    added
                }
            }
        };
        if added {
            l.count.fetch_add(1, Relaxed);
        }
    }

    /// `IV_ALL` to `l`: everything it registered is void from here on.
    pub fn flush(&self, l: &Listener, hub: &Hub, wakers: &[Arc<Waker>]) {
        l.epoch
            .store(self.next_epoch.fetch_add(1, Relaxed), Relaxed);
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
            match map.take(key) {
                Some(rec) => rec,
                None => return,
            }
        };
        self.total.fetch_sub(regs.count(), Relaxed);
        self.tell(key, regs.regs(), hub, wakers);
    }

    fn tell(&self, key: &[u8], regs: impl Iterator<Item = Reg>, hub: &Hub, wakers: &[Arc<Waker>]) {
        let mut line = Vec::new();
        // The first few listeners are sent the notice by the writer itself (a non-blocking
        // send each), the rest through their workers: a key many connections track must not
        // make its writer's latency grow with them.
        let mut sends = DIRECT_SENDS_PER_CHANGE;
        for r in regs {
            let Some(l) = self.live(r) else { continue };
            let _ = l.count.fetch_update(Relaxed, Relaxed, |c| c.checked_sub(1));
            if line.is_empty() {
                notice(&mut line, key);
            }
            self.notices.fetch_add(1, Relaxed);
            hub.push_or_send(&l.feed, &line, wakers, sends > 0);
            sends = sends.saturating_sub(1);
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
                let n: usize = map.iter().map(Rec::count).sum();
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
        let mut rebuilt = Vec::new();
        for s in self.shards.iter() {
            let Ok(mut map) = s.lock() else { continue };
            let mut removed = 0;
            map.retain(|rec| {
                let live = rec.regs().filter(valid).count();
                if live > 0 && rec.exptime() != 0 && rec.exptime() <= now {
                    removed += rec.count();
                    expired.push(Rec::new(
                        rec.key(),
                        0,
                        &rec.regs().filter(valid).collect::<Vec<_>>(),
                    ));
                    return false;
                }
                if live == rec.count() {
                    return true;
                }
                removed += rec.count() - live;
                if live > 0 {
                    let regs: Vec<Reg> = rec.regs().filter(valid).collect();
                    rebuilt.push(Rec::new(rec.key(), rec.exptime(), &regs));
                }
                false
            });
            map.extend(rebuilt.drain(..));
            self.total.fetch_sub(removed, Relaxed);
            drop(map);
            for rec in expired.drain(..) {
                self.tell(rec.key(), rec.regs(), hub, wakers);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(l: &Listener) -> Vec<u8> {
        let mut out = Vec::new();
        l.feed.take(&mut out);
        out
    }

    fn setup(max_per: usize, max_total: usize) -> (Tracker, Hub) {
        (Tracker::new(max_per, max_total), Hub::new(1, 4096))
    }

    #[test]
    fn a_change_is_told_once_to_each_listener_that_read_it() {
        let (t, hub) = setup(100, 1000);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        let b = t.listen(&hub, 0, 2).ok().unwrap();
        assert!(a.id != b.id);
        t.register(&a, b"k", 0, &hub, &[]);
        t.register(&a, b"k", 0, &hub, &[]);
        t.register(&b, b"k", 0, &hub, &[]);
        assert_eq!(t.key_count(), 2);
        t.changed(b"k", &hub, &[]);
        t.changed(b"k", &hub, &[]);
        t.changed(b"other", &hub, &[]);
        assert_eq!(taken(&a), b"IV k\r\n");
        assert_eq!(taken(&b), b"IV k\r\n");
        assert_eq!(t.key_count(), 0);
        t.register(&a, b"a b\x01", 0, &hub, &[]);
        t.changed(b"a b\x01", &hub, &[]);
        assert_eq!(taken(&a), b"IV YSBiAQ== b\r\n");
    }

    #[test]
    fn expiry_is_told_by_the_sweep_and_void_registrations_go() {
        let (t, hub) = setup(100, 1000);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        t.register(&a, b"short", 100, &hub, &[]);
        t.register(&a, b"long", 0, &hub, &[]);
        t.sweep(99, &hub, &[]);
        assert_eq!(taken(&a), b"");
        t.sweep(100, &hub, &[]);
        assert_eq!(taken(&a), b"IV short\r\n");
        assert_eq!(t.key_count(), 1);
        t.closed(&a.feed);
        assert!(!t.active());
        t.sweep(101, &hub, &[]);
        assert_eq!(
            t.key_count(),
            0,
            "a closed listener's registrations are swept"
        );
        assert!(t.find(a.id).is_none());
    }

    #[test]
    fn past_its_bound_a_listener_is_flushed_and_its_registrations_void() {
        let (t, hub) = setup(2, 1000);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        t.register(&a, b"1", 0, &hub, &[]);
        t.register(&a, b"2", 0, &hub, &[]);
        assert_eq!(taken(&a), b"");
        t.register(&a, b"3", 0, &hub, &[]);
        assert_eq!(taken(&a), b"IV_ALL\r\n");
        t.changed(b"1", &hub, &[]);
        assert_eq!(taken(&a), b"", "void after IV_ALL");
        t.register(&a, b"2", 0, &hub, &[]);
        t.changed(b"2", &hub, &[]);
        assert_eq!(
            taken(&a),
            b"IV 2\r\n",
            "read again after IV_ALL: tracked again"
        );
    }

    #[test]
    fn the_sweep_flushes_the_biggest_listener_past_the_total() {
        let (t, hub) = setup(1000, 10);
        let small = t.listen(&hub, 0, 1).ok().unwrap();
        let big = t.listen(&hub, 0, 2).ok().unwrap();
        t.register(&small, b"s", 0, &hub, &[]);
        for i in 0..9 {
            t.register(&big, format!("b{i}").as_bytes(), 0, &hub, &[]);
        }
        t.sweep(1, &hub, &[]);
        assert_eq!(taken(&big), b"IV_ALL\r\n");
        assert_eq!(taken(&small), b"");
        assert_eq!(t.key_count(), 1);
    }

    #[test]
    fn a_handle_names_one_listener_even_when_its_slot_is_reused() {
        let (t, hub) = setup(100, 1000);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        assert_ne!(a.handle, 0);
        assert!(t.by_handle(a.handle).is_some_and(|x| x.id == a.id));
        t.closed(&a.feed);
        assert!(t.by_handle(a.handle).is_none());
        let b = t.listen(&hub, 0, 2).ok().unwrap();
        assert_eq!(a.slot(), b.slot(), "the slot is reused");
        assert!(t.by_handle(a.handle).is_none());
        assert!(t.by_handle(b.handle).is_some());
    }

    #[test]
    fn the_stores_gate_is_open_while_a_listener_is() {
        let gate = Arc::new(store::EventsGate::default());
        let (t, hub) = setup(100, 1000);
        let t = t.with_gate(gate.clone());
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        let b = t.listen(&hub, 0, 2).ok().unwrap();
        assert!(gate.is_open());
        t.closed(&a.feed);
        assert!(gate.is_open(), "one listener is left");
        t.closed(&b.feed);
        assert!(!gate.is_open());
        t.closed(&b.feed);
        assert!(!gate.is_open());
    }

    #[test]
    fn nothing_is_added_past_the_total() {
        let (t, hub) = setup(1000, 3);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        let b = t.listen(&hub, 0, 2).ok().unwrap();
        for k in [&b"1"[..], b"2", b"3"] {
            t.register(&a, k, 0, &hub, &[]);
        }
        t.register(&b, b"4", 0, &hub, &[]);
        assert_eq!(t.key_count(), 3);
        assert_eq!(taken(&b), b"IV_ALL\r\n");
        assert_eq!(taken(&a), b"");
    }

    #[test]
    fn flush_all_now_or_when_its_time_comes() {
        let (t, hub) = setup(100, 1000);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        t.register(&a, b"k", 0, &hub, &[]);
        t.flush_all(Some(50), &hub, &[]);
        t.sweep(49, &hub, &[]);
        assert_eq!(taken(&a), b"");
        t.sweep(50, &hub, &[]);
        assert_eq!(taken(&a), b"IV_ALL\r\n");
        assert_eq!(t.key_count(), 0);
    }

    #[test]
    fn a_full_queue_ends_in_iv_all() {
        let (t, hub) = setup(100_000, 1_000_000);
        let a = t.listen(&hub, 0, 1).ok().unwrap();
        for i in 0..1000 {
            t.register(&a, format!("key{i}").as_bytes(), 0, &hub, &[]);
        }
        for i in 0..1000 {
            t.changed(format!("key{i}").as_bytes(), &hub, &[]);
        }
        let out = taken(&a);
        assert!(out.len() <= 4096, "{}", out.len());
        assert!(out.ends_with(b"IV_ALL\r\n"));
    }
}
