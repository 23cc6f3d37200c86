//! The hot-key cache: replies to plain gets of hot keys, kept for a TTL, never newer than
//! the last write of their key that went through the same `Generations`.
//!
//! The rule: every write of a key bumps its slot's generation twice, once when it is sent
//! and once when its reply arrives (before the client sees it). A get that misses records
//! its key's `Stamp` when it is sent; its reply is cached only if the stamp has not moved
//! since, and a cached reply is served only while the stamp it was filled under is still
//! current. So a reply that may predate a write (its get was in flight while the write
//! was) is never cached, and one cached before a write is never served after the write was
//! sent. Slots are shared by the keys that hash alike: a write of one only costs the others
//! a miss. `flush_all` bumps the epoch, which every stamp carries.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use crate::topk::Entry;

/// The generation of a key's slot and the flush epoch, read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    gen: u64,
    epoch: u64,
}

/// Write generations, one per slot of keys; shared by all threads that route writes.
pub struct Generations {
    slots: Box<[AtomicU64]>,
    epoch: AtomicU64,
    hasher: foldhash::fast::FixedState,
}

impl Generations {
    /// `slots` is rounded up to a power of two.
    pub fn new(slots: usize) -> Generations {
        let n = slots.max(1).next_power_of_two();
        Generations {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            epoch: AtomicU64::new(0),
            hasher: foldhash::fast::FixedState::with_seed(0x686f_746b_6579),
        }
    }

    /// The slot of `key`.
    #[inline]
    pub fn slot(&self, key: &[u8]) -> u32 {
        (self.hasher.hash_one(key) as usize & (self.slots.len() - 1)) as u32
    }

    /// A write of a key in `slot` was sent, or its reply arrived.
    #[inline]
    pub fn bump(&self, slot: u32) {
        self.slots[slot as usize].fetch_add(1, SeqCst);
    }

    /// A write of every key (flush_all) was sent, or its reply arrived.
    pub fn bump_all(&self) {
        self.epoch.fetch_add(1, SeqCst);
    }

    #[inline]
    pub fn stamp(&self, slot: u32) -> Stamp {
        Stamp {
            gen: self.slots[slot as usize].load(SeqCst),
            epoch: self.epoch.load(SeqCst),
        }
    }
}

struct Value {
    reply: Arc<[u8]>,
    stamp: Stamp,
    expires_ms: u64,
}

/// What a get of a key finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The key is not hot: route it as usual.
    Cold,
    /// The cached reply.
    Hit(Arc<[u8]>),
    /// Hot, nothing current cached: route it and offer its reply to `fill`.
    Miss,
}

/// The hot keys and their cached replies. At most `hot_keys` (see `set_hot`) entries.
#[derive(Default)]
pub struct Cache {
    hot: HashMap<Box<[u8]>, Option<Value>>,
}

impl Cache {
    pub fn new() -> Cache {
        Cache::default()
    }

    /// Keys hot now.
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    /// A get of `key` at `now_ms`; `current`: the key's stamp now.
    pub fn lookup(&self, key: &[u8], now_ms: u64, current: Stamp) -> Lookup {
        match self.hot.get(key) {
            None => Lookup::Cold,
            Some(Some(v)) if v.stamp == current && now_ms < v.expires_ms => {
                Lookup::Hit(v.reply.clone())
            }
            Some(_) => Lookup::Miss,
        }
    }

    /// The reply to a get of `key` sent under stamp `sent`, `current` the stamp now: kept
    /// until `expires_ms` when the key is still hot and no write of it was sent since the
    /// get was. Returns whether it was kept.
    pub fn fill(
        &mut self,
        key: &[u8],
        sent: Stamp,
        current: Stamp,
        reply: &[u8],
        expires_ms: u64,
    ) -> bool {
        if sent != current {
            return false;
        }
        let Some(slot) = self.hot.get_mut(key) else {
            return false;
        };
        *slot = Some(Value {
            reply: reply.into(),
            stamp: sent,
            expires_ms,
        });
        true
    }

    /// Makes `keys` the hot ones; keys that stay hot keep their cached replies.
    pub fn set_hot(&mut self, keys: Vec<Box<[u8]>>) {
        let mut old = std::mem::take(&mut self.hot);
        self.hot = keys
            .into_iter()
            .map(|k| {
                let v = old.remove(&k).flatten();
                (k, v)
            })
            .collect();
    }
}

/// Sampled requests a sketch must hold before its keys are judged.
pub const MIN_SAMPLES: u64 = 16;

/// The keys of a sketch (`entries`, most counted first, out of `offered` samples) whose
/// share of the samples is surely at least `share`: their count less its possible
/// overestimate. At most `max`. None when there are too few samples to tell.
pub fn hot_keys(entries: &[Entry], offered: u64, share: f64, max: usize) -> Option<Vec<Box<[u8]>>> {
    if offered < MIN_SAMPLES {
        return None;
    }
    let need = share * offered as f64;
    let mut hot: Vec<&Entry> = entries
        .iter()
        .filter(|e| (e.count - e.error) as f64 >= need)
        .collect();
    hot.sort_by_key(|e| std::cmp::Reverse(e.count - e.error));
    hot.truncate(max);
    Some(hot.into_iter().map(|e| e.key.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topk::TopK;

    fn hot(keys: &[&[u8]]) -> Cache {
        let mut c = Cache::new();
        c.set_hot(keys.iter().map(|&k| k.into()).collect());
        c
    }

    #[test]
    fn a_hot_key_is_served_until_its_ttl() {
        let g = Generations::new(64);
        let mut c = hot(&[b"k"]);
        let s = g.slot(b"k");
        assert_eq!(
            c.lookup(b"other", 0, g.stamp(g.slot(b"other"))),
            Lookup::Cold
        );
        assert_eq!(c.lookup(b"k", 0, g.stamp(s)), Lookup::Miss);
        let sent = g.stamp(s);
        assert!(c.fill(b"k", sent, g.stamp(s), b"VALUE k 0 1\r\nx\r\nEND\r\n", 100));
        assert!(matches!(c.lookup(b"k", 99, g.stamp(s)), Lookup::Hit(_)));
        assert_eq!(c.lookup(b"k", 100, g.stamp(s)), Lookup::Miss);
        // A key that is not hot is never cached.
        assert!(!c.fill(b"cold", sent, sent, b"END\r\n", 100));
    }

    #[test]
    fn a_write_sent_hides_the_cached_value_at_once() {
        let g = Generations::new(64);
        let mut c = hot(&[b"k"]);
        let s = g.slot(b"k");
        assert!(c.fill(b"k", g.stamp(s), g.stamp(s), b"old", 1000));
        g.bump(s);
        assert_eq!(c.lookup(b"k", 0, g.stamp(s)), Lookup::Miss);
    }

    #[test]
    fn a_get_that_raced_a_write_is_not_cached() {
        let g = Generations::new(64);
        let mut c = hot(&[b"k"]);
        let s = g.slot(b"k");
        // get sent, then write sent: the get's reply may hold either value.
        let sent = g.stamp(s);
        g.bump(s);
        assert!(!c.fill(b"k", sent, g.stamp(s), b"old?", 1000));
        // get sent after the write was, answered before it: may be old; the write's
        // reply bumps again, so what was cached is not served after the write is answered.
        let sent = g.stamp(s);
        assert!(c.fill(b"k", sent, g.stamp(s), b"old?", 1000));
        g.bump(s);
        assert_eq!(c.lookup(b"k", 0, g.stamp(s)), Lookup::Miss);
        // get sent after the write was answered: current.
        let sent = g.stamp(s);
        assert!(c.fill(b"k", sent, g.stamp(s), b"new", 1000));
        assert_eq!(
            c.lookup(b"k", 0, g.stamp(s)),
            Lookup::Hit(Arc::from(&b"new"[..]))
        );
    }

    #[test]
    fn flush_all_hides_every_key() {
        let g = Generations::new(64);
        let mut c = hot(&[b"a", b"b"]);
        for k in [&b"a"[..], b"b"] {
            let s = g.stamp(g.slot(k));
            assert!(c.fill(k, s, s, b"v", 1000));
        }
        g.bump_all();
        for k in [&b"a"[..], b"b"] {
            assert_eq!(c.lookup(k, 0, g.stamp(g.slot(k))), Lookup::Miss);
        }
    }

    #[test]
    fn keys_that_stay_hot_keep_their_values() {
        let g = Generations::new(64);
        let mut c = hot(&[b"a", b"b"]);
        let s = g.stamp(g.slot(b"a"));
        assert!(c.fill(b"a", s, s, b"v", 1000));
        c.set_hot(vec![b"a"[..].into(), b"c"[..].into()]);
        assert_eq!(c.len(), 2);
        assert!(matches!(c.lookup(b"a", 0, s), Lookup::Hit(_)));
        assert_eq!(c.lookup(b"b", 0, s), Lookup::Cold);
    }

    #[test]
    fn hot_keys_pass_the_share_surely() {
        let mut t = TopK::new(8);
        for i in 0..100u32 {
            let k = match i % 10 {
                0..=3 => b"a".to_vec(),
                4 | 5 => b"b".to_vec(),
                _ => i.to_le_bytes().to_vec(),
            };
            t.offer(&k);
        }
        let e = t.entries();
        let keys = |share, max| hot_keys(&e, t.offered(), share, max).unwrap();
        assert_eq!(
            keys(0.15, 8),
            vec![Box::from(&b"a"[..]), Box::from(&b"b"[..])]
        );
        assert_eq!(keys(0.15, 1), vec![Box::from(&b"a"[..])]);
        assert_eq!(keys(0.5, 8), Vec::<Box<[u8]>>::new());
        assert!(hot_keys(&e, MIN_SAMPLES - 1, 0.1, 8).is_none());
    }
}
