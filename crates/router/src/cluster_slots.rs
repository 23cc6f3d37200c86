//! A Redis Cluster pool's slot map as the workers read it: which of the pool's servers
//! serves each of the 16,384 hash slots, and the counts of what the map's upkeep did.
//!
//! The map changes when a slot moves (a worker saw `MOVED`, or the pool's watcher read a
//! new map); the workers keep their own `Arc` and take the read lock only when the
//! generation moved, as with the ring. A change of the cluster's node set is a new
//! configuration generation instead (see `topology`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, RwLock};

use ring::redis_slot::REDIS_SLOTS;

/// A slot no primary serves.
pub const UNSERVED: u16 = u16::MAX;

/// Slot → server index (into `PoolRt::servers`), [`UNSERVED`] where none.
pub type SlotOwners = Arc<Vec<u16>>;
/// Server index of a primary → server indexes of its replicas.
pub type Replicas = Arc<Vec<Vec<u16>>>;

pub struct ClusterSlots {
    owners: RwLock<SlotOwners>,
    /// Changes with the owners' generation too (a read of one after the other may see a
    /// newer replica list, which is harmless: a read is only ever a replica's or a primary's).
    replicas: RwLock<Replicas>,
    gen: AtomicU64,
    /// Set when something showed the map is old: the watcher reads a new one at once.
    stale: AtomicBool,
    /// Redirections followed (`MOVED`, `ASK`) and retries after `TRYAGAIN`/`CLUSTERDOWN`.
    pub moved: AtomicU64,
    pub ask: AtomicU64,
    pub retried: AtomicU64,
    /// Maps read by the watcher, and when the last one was (ms since the router started).
    pub refreshes: AtomicU64,
    pub refreshed_at_ms: AtomicU64,
}

impl ClusterSlots {
    /// A map from `owners` (slot → server index or [`UNSERVED`]), read at `now_ms`.
    pub fn new(owners: Vec<u16>, now_ms: u64) -> ClusterSlots {
        debug_assert_eq!(owners.len(), REDIS_SLOTS);
        ClusterSlots {
            owners: RwLock::new(Arc::new(owners)),
            replicas: RwLock::default(),
            gen: AtomicU64::new(1),
            stale: AtomicBool::new(false),
            moved: AtomicU64::new(0),
            ask: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            refreshes: AtomicU64::new(1),
            refreshed_at_ms: AtomicU64::new(now_ms),
        }
    }

    /// The map if it changed since generation `seen`.
    #[inline]
    pub fn if_newer(&self, seen: u64) -> Option<(u64, SlotOwners)> {
        let gen = self.gen.load(Acquire);
        if gen == seen {
            return None;
        }
        Some((gen, self.read()))
    }

    fn read(&self) -> SlotOwners {
        self.owners
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The replicas of each primary.
    pub fn replicas(&self) -> Replicas {
        self.replicas
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The watcher read the replicas of each primary: installed when they differ.
    pub fn set_replicas(&self, replicas: Vec<Vec<u16>>) {
        let mut guard = self.replicas.write().unwrap_or_else(|e| e.into_inner());
        if **guard != replicas {
            *guard = Arc::new(replicas);
            self.gen.fetch_add(1, Release);
        }
    }

    /// A `MOVED` said `slot` is served by server `s` now: the map takes it at once (the
    /// watcher's next read confirms the rest of the move).
    pub fn moved_to(&self, slot: u16, s: u16) {
        let mut guard = self.owners.write().unwrap_or_else(|e| e.into_inner());
        if guard.get(usize::from(slot)) == Some(&s) {
            return;
        }
        let mut owners = guard.as_ref().clone();
        owners[usize::from(slot)] = s;
        *guard = Arc::new(owners);
        self.gen.fetch_add(1, Release);
        self.stale.store(true, Relaxed);
    }

    /// The watcher read map `owners` at `now_ms`: installed when it differs.
    pub fn replace(&self, owners: Vec<u16>, now_ms: u64) {
        self.refreshes.fetch_add(1, Relaxed);
        self.refreshed_at_ms.store(now_ms, Relaxed);
        let mut guard = self.owners.write().unwrap_or_else(|e| e.into_inner());
        if **guard != owners {
            *guard = Arc::new(owners);
            self.gen.fetch_add(1, Release);
        }
    }

    /// Asks the watcher for a new map now.
    pub fn mark_stale(&self) {
        self.stale.store(true, Relaxed);
    }

    /// Whether a new map was asked for since the last call.
    pub fn take_stale(&self) -> bool {
        self.stale.swap(false, Relaxed)
    }

    /// Slots some server serves.
    pub fn covered(&self) -> usize {
        self.read().iter().filter(|&&s| s != UNSERVED).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_bump_the_generation_once() {
        let map = ClusterSlots::new(vec![0; REDIS_SLOTS], 0);
        let (g1, owners) = map.if_newer(0).unwrap();
        assert_eq!(owners[5], 0);
        assert!(map.if_newer(g1).is_none());
        map.moved_to(5, 1);
        let (g2, owners) = map.if_newer(g1).unwrap();
        assert_eq!(owners[5], 1);
        map.moved_to(5, 1);
        assert!(
            map.if_newer(g2).is_none(),
            "the same move twice changes nothing"
        );
        assert!(map.take_stale());
        assert!(!map.take_stale());
        let mut next = vec![1; REDIS_SLOTS];
        next[0] = UNSERVED;
        map.replace(next.clone(), 10);
        let (g3, owners) = map.if_newer(g2).unwrap();
        assert_eq!(*owners, next);
        map.replace(next, 20);
        assert!(
            map.if_newer(g3).is_none(),
            "an unchanged map is not a change"
        );
        assert_eq!(map.covered(), REDIS_SLOTS - 1);
        assert_eq!(map.refreshes.load(Relaxed), 3);
    }
}
