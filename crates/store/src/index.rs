//! Compact hash index: 8-byte entries in 64-byte buckets of 8, two candidate buckets per key
//! (cuckoo-style with kicking), so it runs at ~90% load. An entry is a 16-bit tag taken from
//! the key hash plus a 48-bit item location; the key itself is compared in the item.

pub const WAYS: usize = 8;
const LOC_MASK: u64 = (1 << 48) - 1;
const MAX_KICKS: usize = 128;

pub struct Index {
    slots: Vec<u64>,
    nbuckets: usize,
    len: usize,
    rng: u64,
}

fn tag_of(h: u64) -> u64 {
    // Never zero, so an occupied slot is never 0.
    ((h >> 48) | 1) << 48
}

fn fastrange(x: u32, n: usize) -> usize {
    ((x as u64 * n as u64) >> 32) as usize
}

impl Index {
    pub fn new(nbuckets: usize) -> Index {
        let nbuckets = nbuckets.max(1);
        Index {
            slots: vec![0; nbuckets * WAYS],
            nbuckets,
            len: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    pub fn bytes(&self) -> usize {
        self.slots.len() * 8
    }
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn nbuckets(&self) -> usize {
        self.nbuckets
    }

    /// Whether one more entry keeps the load under 95%; past it the shard grows the index or
    /// evicts. Two choices of 8 ways fill to ~99%, but inserts kick more as they get there: at
    /// 97.5% a store at `-m 64` with 100 B values cost ~65 instructions more (callgrind) for
    /// 0.65% more items.
    pub fn has_room_for_one(&self) -> bool {
        (self.len + 1) * 20 < self.slots.len() * 19
    }

    fn buckets(&self, h: u64) -> (usize, usize) {
        let b1 = fastrange(h as u32, self.nbuckets);
        let m = (h ^ (h >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let b2 = fastrange((m >> 32) as u32, self.nbuckets);
        (b1, b2)
    }

    /// Slot of the entry for hash `h` whose location `is_key` accepts, with what it returned.
    #[inline]
    pub fn find<T>(&self, h: u64, mut is_key: impl FnMut(u64) -> Option<T>) -> Option<(usize, T)> {
        let tag = tag_of(h);
        let (b1, b2) = self.buckets(h);
        for b in [b1, b2] {
            let base = b * WAYS;
            for (i, &e) in self.slots[base..base + WAYS].iter().enumerate() {
                if e & !LOC_MASK == tag {
                    if let Some(t) = is_key(e & LOC_MASK) {
                        return Some((base + i, t));
                    }
                }
            }
            if b1 == b2 {
                break;
            }
        }
        None
    }

    pub fn find_loc(&self, h: u64, loc: u64) -> Option<usize> {
        self.find(h, |l| (l == loc).then_some(())).map(|(s, ())| s)
    }

    #[cfg(test)]
    pub fn loc(&self, slot: usize) -> u64 {
        self.slots[slot] & LOC_MASK
    }

    pub fn set_loc(&mut self, slot: usize, loc: u64) {
        self.slots[slot] = (self.slots[slot] & !LOC_MASK) | loc;
    }

    pub fn remove(&mut self, slot: usize) {
        debug_assert!(self.slots[slot] != 0);
        self.slots[slot] = 0;
        self.len -= 1;
    }

    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = 0);
        self.len = 0;
    }

    fn place(&mut self, b: usize, e: u64) -> bool {
        let base = b * WAYS;
        for s in &mut self.slots[base..base + WAYS] {
            if *s == 0 {
                *s = e;
                return true;
            }
        }
        false
    }

    fn next_rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Inserts a location for a key known to be absent. `hash_of` recomputes the key hash of
    /// an existing entry (needed to move it to its other bucket). On failure the table is
    /// full: the caller must `grow` and call again with the returned homeless (hash, loc).
    pub fn insert(
        &mut self,
        h: u64,
        loc: u64,
        hash_of: &impl Fn(u64) -> u64,
    ) -> Result<(), (u64, u64)> {
        let (b1, b2) = self.buckets(h);
        let mut e = tag_of(h) | loc;
        let mut eh = h;
        let count1 = self.occupancy(b1);
        let count2 = self.occupancy(b2);
        let first = if count2 < count1 { b2 } else { b1 };
        if self.place(first, e) || self.place(if first == b1 { b2 } else { b1 }, e) {
            self.len += 1;
            return Ok(());
        }
        let mut b = if self.next_rand() & 1 == 0 { b1 } else { b2 };
        for _ in 0..MAX_KICKS {
            let victim = b * WAYS + (self.next_rand() as usize % WAYS);
            std::mem::swap(&mut self.slots[victim], &mut e);
            eh = hash_of(e & LOC_MASK);
            let (v1, v2) = self.buckets(eh);
            let alt = if v1 == b { v2 } else { v1 };
            if self.place(alt, e) {
                self.len += 1;
                return Ok(());
            }
            b = alt;
        }
        Err((eh, e & LOC_MASK))
    }

    fn occupancy(&self, b: usize) -> usize {
        let base = b * WAYS;
        self.slots[base..base + WAYS]
            .iter()
            .filter(|&&s| s != 0)
            .count()
    }

    /// Rebuilds with `nbuckets` buckets. Returns false (table unchanged) only if some entry
    /// still did not fit, which the caller treats as a reason to grow more.
    pub fn rebuild(&mut self, nbuckets: usize, hash_of: &impl Fn(u64) -> u64) -> bool {
        let mut next = Index::new(nbuckets);
        next.rng = self.rng;
        for &e in &self.slots {
            if e != 0 {
                let loc = e & LOC_MASK;
                if next.insert(hash_of(loc), loc, hash_of).is_err() {
                    return false;
                }
            }
        }
        *self = next;
        true
    }

    /// Every occupied location.
    #[cfg(test)]
    pub fn locations(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .filter(|&&e| e != 0)
            .map(|&e| e & LOC_MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn fills_to_ninety_seven_percent_and_finds_everything() {
        let mut idx = Index::new(1000);
        let hash_of = |loc: u64| mix(loc);
        let n = (idx.capacity() as f64 * 0.975) as u64;
        let mut full_at = None;
        for loc in 1..=n {
            if full_at.is_none() && !idx.has_room_for_one() {
                full_at = Some(loc);
            }
            idx.insert(mix(loc), loc, &hash_of).expect("fits at 97.5%");
        }
        let full_at = full_at.expect("reports full past 95%") as f64;
        assert!((full_at / idx.capacity() as f64 - 0.95).abs() < 0.001);
        assert_eq!(idx.len(), n as usize);
        for loc in 1..=n {
            let s = idx.find_loc(mix(loc), loc).expect("present");
            assert_eq!(idx.loc(s), loc);
        }
        assert!(idx.find_loc(mix(n + 1), n + 1).is_none());
        let s = idx.find_loc(mix(5), 5).unwrap();
        idx.remove(s);
        assert!(idx.find_loc(mix(5), 5).is_none());
        assert!(idx.rebuild(2000, &hash_of));
        for loc in (1..=n).filter(|&l| l != 5) {
            assert!(idx.find_loc(mix(loc), loc).is_some());
        }
        let all: HashMap<u64, ()> = idx.locations().map(|l| (l, ())).collect();
        assert_eq!(all.len(), n as usize - 1);
    }
}
