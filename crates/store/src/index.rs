//! Compact hash index: 6-byte entries, 10 to a 64-byte bucket (one cache line), two
//! candidate buckets per key (cuckoo-style with kicking), so it runs at ~95% load. An entry
//! is 48 bits: a tag taken from the top of the key hash above an item location of
//! `loc_bits` bits; the key itself is compared in the item. A bucket keeps its entries as a
//! row of 16-bit high parts and a row of 32-bit low parts, so a lookup filters on the first
//! 20 bytes and reads a low part only on a match.
//!
//! Growing is incremental: `start_resize` puts an empty bigger table in front, new entries go
//! there, and `migrate` moves the old table's buckets over a few at a time (the shard does a
//! couple per write), so no single write rehashes a whole shard; lookups check both tables
//! until the old one is empty. `rebuild` is the all-at-once form.
//!
//! `loc_bits` grows when a location that does not fit is stored (more segments in the shard):
//! every tag then loses its lowest bits, in place, without rehashing. At `-m 64` locations
//! take ~27 bits, leaving ~21-bit tags; a shard of 2^16 one-MiB segments would leave 12.

pub const WAYS: usize = 10;
/// Bytes per bucket: one cache line.
pub const BUCKET_BYTES: usize = 64;
const MAX_KICKS: usize = 128;
/// Locations never take more, so a tag keeps at least 8 bits.
const MAX_LOC_BITS: u32 = 40;
/// Location bits an index starts with: 16 segments' worth of 20-bit offsets. Widening walks
/// the whole index, so starting narrower would only add walks while the first segment fills.
const START_LOC_BITS: u32 = 24;

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket {
    /// Bits 32..48 of each entry; 0 = empty slot (a tag's top bit is always set).
    hi: [u16; WAYS],
    /// Bits 0..32 of each entry.
    lo: [u32; WAYS],
    _pad: u32,
}

const _: () = assert!(std::mem::size_of::<Bucket>() == BUCKET_BYTES);

impl Bucket {
    fn get(&self, i: usize) -> u64 {
        (u64::from(self.hi[i]) << 32) | u64::from(self.lo[i])
    }
    fn put(&mut self, i: usize, e: u64) {
        self.hi[i] = (e >> 32) as u16;
        self.lo[i] = e as u32;
    }
    fn occupancy(&self) -> usize {
        self.hi.iter().filter(|&&h| h != 0).count()
    }
    fn free_way(&self) -> Option<usize> {
        self.hi.iter().position(|&h| h == 0)
    }
}

/// Bytes of an index of `nbuckets` buckets.
pub fn bytes_for(nbuckets: usize) -> usize {
    nbuckets * BUCKET_BYTES
}

pub struct Index {
    buckets: Vec<Bucket>,
    /// The table before `start_resize`, emptied into `buckets` by `migrate`; empty when no
    /// resize is under way. Its slots number on after those of `buckets`.
    old: Vec<Bucket>,
    /// Buckets of `old` below this one are moved (empty).
    moved: usize,
    /// Entries in both tables.
    len: usize,
    rng: u64,
    loc_bits: u32,
    /// The bits of an entry's high part that belong to the tag.
    hi_tag_mask: u16,
}

fn fastrange(x: u32, n: usize) -> usize {
    ((x as u64 * n as u64) >> 32) as usize
}

fn hi_tag_mask(loc_bits: u32) -> u16 {
    (((!0u64 << loc_bits) >> 32) & 0xffff) as u16
}

impl Index {
    pub fn new(nbuckets: usize) -> Index {
        Index::with_loc_bits(nbuckets, START_LOC_BITS)
    }

    fn with_loc_bits(nbuckets: usize, loc_bits: u32) -> Index {
        Index {
            buckets: vec![Bucket::default(); nbuckets.max(1)],
            old: Vec::new(),
            moved: 0,
            len: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            loc_bits,
            hi_tag_mask: hi_tag_mask(loc_bits),
        }
    }

    /// Bytes of the current table (an old one being moved from is freed once empty).
    pub fn bytes(&self) -> usize {
        bytes_for(self.buckets.len())
    }
    /// The old table's bytes while a resize moves it over (0 otherwise).
    pub fn old_bytes(&self) -> usize {
        bytes_for(self.old.len())
    }
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn nbuckets(&self) -> usize {
        self.buckets.len()
    }

    /// Whether one more entry keeps the load under 95%; past it the shard grows the index or
    /// evicts. Inserts kick more as the table fills: at 97.5% a store at `-m 64` with 100 B
    /// values cost ~65 instructions more (callgrind, 8-way buckets) for 0.65% more items.
    pub fn has_room_for_one(&self) -> bool {
        (self.len + 1) * 20 < self.capacity() * 19
    }

    /// The tag of hash `h`, placed above the location bits: its top `48 - loc_bits` bits,
    /// the highest forced to 1 so an occupied entry is never 0.
    fn tag_of(&self, h: u64) -> u64 {
        let tag_bits = 48 - self.loc_bits;
        ((h >> (64 - tag_bits)) | (1 << (tag_bits - 1))) << self.loc_bits
    }

    fn loc_mask(&self) -> u64 {
        (1 << self.loc_bits) - 1
    }

    fn buckets_of(h: u64, n: usize) -> (usize, usize) {
        let b1 = fastrange(h as u32, n);
        let m = (h ^ (h >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let b2 = fastrange((m >> 32) as u32, n);
        (b1, b2)
    }

    /// Slot of the entry for hash `h` whose location `is_key` accepts, with what it returned.
    #[inline]
    pub fn find<T>(&self, h: u64, mut is_key: impl FnMut(u64) -> Option<T>) -> Option<(usize, T)> {
        self.find_current(h, &mut is_key)
            .or_else(|| self.find_old(h, &mut is_key))
    }

    /// `find` in the current table alone: the whole lookup unless `resizing`.
    #[inline]
    pub fn find_current<T>(
        &self,
        h: u64,
        mut is_key: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        self.scan(&self.buckets, 0, h, self.tag_of(h), &mut is_key)
    }

    /// `find` in the table a resize is moving from (its moved buckets are empty), whose
    /// slots number on after the current table's.
    pub fn find_old<T>(
        &self,
        h: u64,
        mut is_key: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        if self.old.is_empty() {
            return None;
        }
        let base = self.buckets.len() * WAYS;
        self.scan(&self.old, base, h, self.tag_of(h), &mut is_key)
    }

    /// The slot (numbered from `base`) in `table`'s two buckets for `h` holding `tag` with a
    /// location `is_key` accepts.
    #[inline(always)]
    fn scan<T>(
        &self,
        table: &[Bucket],
        base: usize,
        h: u64,
        tag: u64,
        is_key: &mut impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        let want_hi = (tag >> 32) as u16 & self.hi_tag_mask;
        let loc_mask = self.loc_mask();
        let (b1, b2) = Index::buckets_of(h, table.len());
        for b in [b1, b2] {
            let bucket = &table[b];
            // The high parts compared all at once (branch-free, so vectorized), then only the
            // matches looked at.
            let hit = |i: usize| bucket.hi[i] & self.hi_tag_mask == want_hi;
            // Eight lanes make a byte mask, which compiles to one SIMD compare.
            let mut first8 = 0u8;
            for i in 0..8 {
                first8 |= u8::from(hit(i)) << i;
            }
            let mut matches = u32::from(first8);
            for i in 8..WAYS {
                matches |= u32::from(hit(i)) << i;
            }
            while matches != 0 {
                let i = matches.trailing_zeros() as usize;
                matches &= matches - 1;
                let e = bucket.get(i);
                if e & !loc_mask == tag {
                    if let Some(t) = is_key(e & loc_mask) {
                        return Some((base + b * WAYS + i, t));
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

    /// The bucket and way of `slot`, in whichever table it numbers.
    fn slot_mut(&mut self, slot: usize) -> (&mut Bucket, usize) {
        let base = self.buckets.len() * WAYS;
        if slot < base {
            (&mut self.buckets[slot / WAYS], slot % WAYS)
        } else {
            let s = slot - base;
            (&mut self.old[s / WAYS], s % WAYS)
        }
    }

    #[cfg(test)]
    pub fn loc(&mut self, slot: usize) -> u64 {
        let mask = self.loc_mask();
        let (b, i) = self.slot_mut(slot);
        b.get(i) & mask
    }

    pub fn set_loc(&mut self, slot: usize, loc: u64) {
        self.fit(loc);
        let mask = self.loc_mask();
        let (b, i) = self.slot_mut(slot);
        let e = b.get(i);
        b.put(i, (e & !mask) | loc);
    }

    pub fn remove(&mut self, slot: usize) {
        let (b, i) = self.slot_mut(slot);
        debug_assert!(b.hi[i] != 0);
        b.put(i, 0);
        self.len -= 1;
    }

    pub fn clear(&mut self) {
        self.buckets.iter_mut().for_each(|b| *b = Bucket::default());
        self.old = Vec::new();
        self.moved = 0;
        self.len = 0;
    }

    /// Widens the location field (narrowing every tag in place) until `loc` fits.
    fn fit(&mut self, loc: u64) {
        if loc >> self.loc_bits == 0 {
            return;
        }
        let bits = 64 - loc.leading_zeros();
        assert!(bits <= MAX_LOC_BITS, "index location {loc:#x} too wide");
        let (old, shift) = (self.loc_bits, bits - self.loc_bits);
        let old_mask = self.loc_mask();
        for b in self.buckets.iter_mut().chain(self.old.iter_mut()) {
            for i in 0..WAYS {
                let e = b.get(i);
                if e != 0 {
                    let tag = (e >> old) >> shift;
                    b.put(i, (tag << bits) | (e & old_mask));
                }
            }
        }
        self.loc_bits = bits;
        self.hi_tag_mask = hi_tag_mask(bits);
    }

    fn place(&mut self, b: usize, e: u64) -> bool {
        let bucket = &mut self.buckets[b];
        match bucket.free_way() {
            Some(i) => {
                bucket.put(i, e);
                true
            }
            None => false,
        }
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
        self.fit(loc);
        let r = self.insert_entry::<false>(h, loc, hash_of);
        if r.is_ok() {
            self.len += 1;
        }
        r
    }

    /// Cuckoo insertion into the current table (`len` untouched). With `UNDO`, a failure
    /// puts every kicked entry back, so the table is as before and the one homeless entry
    /// is the one given.
    #[inline(always)]
    fn insert_entry<const UNDO: bool>(
        &mut self,
        h: u64,
        loc: u64,
        hash_of: &impl Fn(u64) -> u64,
    ) -> Result<(), (u64, u64)> {
        let loc_mask = self.loc_mask();
        let (b1, b2) = Index::buckets_of(h, self.buckets.len());
        let mut e = self.tag_of(h) | loc;
        let mut eh = h;
        let count1 = self.buckets[b1].occupancy();
        let count2 = self.buckets[b2].occupancy();
        let first = if count2 < count1 { b2 } else { b1 };
        if self.place(first, e) || self.place(if first == b1 { b2 } else { b1 }, e) {
            return Ok(());
        }
        let mut kicked = [(0usize, 0usize, 0u64); MAX_KICKS];
        let mut b = if self.next_rand() & 1 == 0 { b1 } else { b2 };
        for kick in kicked.iter_mut() {
            let way = self.next_rand() as usize % WAYS;
            let victim = self.buckets[b].get(way);
            if UNDO {
                *kick = (b, way, victim);
            }
            self.buckets[b].put(way, e);
            e = victim;
            eh = hash_of(e & loc_mask);
            let (v1, v2) = Index::buckets_of(eh, self.buckets.len());
            let alt = if v1 == b { v2 } else { v1 };
            if self.place(alt, e) {
                return Ok(());
            }
            b = alt;
        }
        if UNDO {
            for &(b, way, victim) in kicked.iter().rev() {
                self.buckets[b].put(way, victim);
            }
            return Err((h, loc));
        }
        Err((eh, e & loc_mask))
    }

    /// Whether an old table is still being moved from (see `start_resize`).
    pub fn resizing(&self) -> bool {
        !self.old.is_empty()
    }

    /// Puts an empty table of `nbuckets` in front: inserts go there from now on, and
    /// `migrate` moves the current entries over. A resize under way must have finished.
    pub fn start_resize(&mut self, nbuckets: usize) {
        assert!(!self.resizing(), "a resize is already under way");
        let next = vec![Bucket::default(); nbuckets.max(1)];
        self.old = std::mem::replace(&mut self.buckets, next);
        self.moved = 0;
    }

    /// Moves up to `nbuckets` buckets of the old table into the current one. False when an
    /// entry found no place there: it stays in the old table (still found), and only a
    /// `rebuild` can finish the resize.
    pub fn migrate(&mut self, nbuckets: usize, hash_of: &impl Fn(u64) -> u64) -> bool {
        let loc_mask = self.loc_mask();
        let end = self.moved.saturating_add(nbuckets).min(self.old.len());
        while self.moved < end {
            let b = self.moved;
            for i in 0..WAYS {
                let e = self.old[b].get(i);
                if e == 0 {
                    continue;
                }
                let loc = e & loc_mask;
                if self
                    .insert_entry::<true>(hash_of(loc), loc, hash_of)
                    .is_err()
                {
                    return false;
                }
                self.old[b].put(i, 0);
            }
            self.moved += 1;
        }
        if self.moved == self.old.len() {
            self.old = Vec::new();
            self.moved = 0;
        }
        true
    }

    /// Rebuilds with `nbuckets` buckets at once (finishing any resize under way). Returns
    /// false (table unchanged) only if some entry still did not fit, which the caller treats
    /// as a reason to grow more.
    pub fn rebuild(&mut self, nbuckets: usize, hash_of: &impl Fn(u64) -> u64) -> bool {
        let mut next = Index::with_loc_bits(nbuckets, self.loc_bits);
        next.rng = self.rng;
        let loc_mask = self.loc_mask();
        for b in self.buckets.iter().chain(&self.old) {
            for i in 0..WAYS {
                let e = b.get(i);
                if e != 0 {
                    let loc = e & loc_mask;
                    if next.insert(hash_of(loc), loc, hash_of).is_err() {
                        return false;
                    }
                }
            }
        }
        *self = next;
        true
    }

    /// Every occupied location.
    #[cfg(test)]
    pub fn locations(&self) -> impl Iterator<Item = u64> + '_ {
        let loc_mask = self.loc_mask();
        self.buckets.iter().chain(&self.old).flat_map(move |b| {
            (0..WAYS)
                .map(move |i| b.get(i))
                .filter(|&e| e != 0)
                .map(move |e| e & loc_mask)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
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

    #[test]
    fn a_resize_moves_entries_in_steps_and_finds_them_in_either_table() {
        let mut idx = Index::new(100);
        let hash_of = |loc: u64| mix(loc);
        for loc in 1..=900 {
            idx.insert(mix(loc), loc, &hash_of).unwrap();
        }
        idx.start_resize(200);
        assert!(idx.resizing());
        assert_eq!((idx.nbuckets(), idx.len()), (200, 900));
        // New entries go to the new table at once, old ones are still found.
        for loc in 901..=1000 {
            idx.insert(mix(loc), loc, &hash_of).unwrap();
        }
        let mut steps = 0;
        while idx.resizing() {
            assert!(idx.migrate(3, &hash_of));
            steps += 1;
            // Mid-move: every entry found once, whichever table holds it; moves and removes
            // reach the old table through its slots too.
            if steps == 10 {
                let s = idx.find_loc(mix(2), 2).unwrap();
                idx.set_loc(s, 2_000_002);
                let s = idx.find_loc(mix(3), 3).unwrap();
                idx.remove(s);
            }
            if steps % 7 == 0 {
                for loc in (1..=1000).filter(|&l| l != 2 && l != 3) {
                    let s = idx.find_loc(mix(loc), loc);
                    assert_eq!(
                        s.map(|s| idx.loc(s)),
                        Some(loc),
                        "loc {loc} at step {steps}"
                    );
                }
            }
        }
        assert_eq!(steps, 34, "100 old buckets, 3 a step");
        assert_eq!(idx.len(), 999);
        assert_eq!(
            idx.find_loc(mix(2), 2_000_002).map(|s| idx.loc(s)),
            Some(2_000_002)
        );
        assert!(idx.find_loc(mix(3), 3).is_none());
        let mut all: Vec<u64> = idx.locations().collect();
        all.sort();
        assert_eq!(all.len(), 999);
        assert!(idx.old.is_empty(), "the old table is freed");
    }

    #[test]
    fn a_move_that_finds_no_place_leaves_both_tables_as_they_were() {
        let mut idx = Index::new(10);
        let hash_of = |loc: u64| mix(loc);
        for loc in 1..=90 {
            idx.insert(mix(loc), loc, &hash_of).unwrap();
        }
        // One bucket of ten ways cannot take 90 entries.
        idx.start_resize(1);
        assert!(!idx.migrate(usize::MAX, &hash_of));
        assert!(idx.resizing());
        assert_eq!(idx.len(), 90);
        let mut all: Vec<u64> = idx.locations().collect();
        all.sort();
        assert_eq!(all, (1..=90).collect::<Vec<_>>(), "nothing lost or doubled");
        for loc in 1..=90 {
            assert!(idx.find_loc(mix(loc), loc).is_some(), "loc {loc}");
        }
        // A rebuild finishes it.
        assert!(idx.rebuild(20, &hash_of));
        assert!(!idx.resizing());
        for loc in 1..=90 {
            assert!(idx.find_loc(mix(loc), loc).is_some(), "loc {loc}");
        }
    }

    #[test]
    fn a_bucket_is_one_cache_line_of_ten_entries() {
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
        let idx = Index::new(100);
        assert_eq!((idx.bytes(), idx.capacity()), (6400, 1000));
        assert_eq!(bytes_for(3), 192);
    }

    #[test]
    fn wider_locations_narrow_the_tags_in_place() {
        let mut idx = Index::new(64);
        let hash_of = |loc: u64| mix(loc);
        // Small locations first, then ever wider ones up to 40 bits (tags of 8 bits).
        let locs: Vec<u64> = (0..500u64)
            .map(|i| {
                if i < 100 {
                    i
                } else {
                    (i * 7919) << (i % 25 + 8) & ((1 << 40) - 1)
                }
            })
            .collect();
        let mut seen = HashMap::new();
        for &loc in &locs {
            if seen.insert(loc, ()).is_none() {
                idx.insert(mix(loc), loc, &hash_of).unwrap();
            }
            // Every location stored so far is found again after each widening.
            if loc % 37 == 0 {
                for &l in seen.keys() {
                    let s = idx.find_loc(mix(l), l).expect("still found");
                    assert_eq!(idx.loc(s), l);
                }
            }
        }
        assert_eq!(idx.loc_bits, 40);
        assert_eq!(idx.hi_tag_mask, 0xff00);
        for &l in seen.keys() {
            assert!(idx.find_loc(mix(l), l).is_some());
        }
        // set_loc widens too.
        let mut idx = Index::new(8);
        idx.insert(mix(1), 1, &hash_of).unwrap();
        let s = idx.find_loc(mix(1), 1).unwrap();
        idx.set_loc(s, 1 << 35);
        assert_eq!(idx.loc_bits, 36);
        assert_eq!(idx.find_loc(mix(1), 1 << 35), Some(s));
        assert_eq!(idx.find_loc(mix(1), 1), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(usize),
        Move(usize, u64),
        Grow,
        Resize,
        Migrate(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..(1 << 40)).prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Remove),
            2 => (any::<usize>(), 0u64..(1 << 40)).prop_map(|(i, l)| Op::Move(i, l)),
            1 => Just(Op::Grow),
            1 => Just(Op::Resize),
            2 => (0usize..4).prop_map(Op::Migrate),
        ]
    }

    proptest! {
        /// Against a map from location to key hash: every live entry is found at its
        /// location, removed ones are not, through inserts, moves, widening and growth.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..400), width in 1u32..40) {
            // Locations are unique ids here; a location's key hash is a function of a key id.
            let mut key_of: HashMap<u64, u64> = HashMap::new();
            let mut idx = Index::new(4);
            let mut next_key = 0u64;
            for op in ops {
                let keys: Vec<u64> = {
                    let mut v: Vec<u64> = key_of.keys().copied().collect();
                    v.sort();
                    v
                };
                match op {
                    Op::Insert(l) => {
                        let l = l & ((1 << width) - 1);
                        if key_of.contains_key(&l) {
                            continue;
                        }
                        next_key += 1;
                        key_of.insert(l, next_key);
                        let km = key_of.clone();
                        let hash_of = |loc: u64| mix(km[&loc]);
                        let mut pending = (mix(next_key), l);
                        while let Err(homeless) = idx.insert(pending.0, pending.1, &hash_of) {
                            let n = idx.nbuckets() * 2;
                            prop_assert!(idx.rebuild(n, &hash_of));
                            pending = homeless;
                        }
                    }
                    Op::Remove(i) if !keys.is_empty() => {
                        let l = keys[i % keys.len()];
                        let s = idx.find_loc(mix(key_of[&l]), l).expect("present");
                        idx.remove(s);
                        key_of.remove(&l);
                    }
                    Op::Move(i, to) if !keys.is_empty() => {
                        let l = keys[i % keys.len()];
                        if key_of.contains_key(&to) {
                            continue;
                        }
                        let k = key_of[&l];
                        let s = idx.find_loc(mix(k), l).expect("present");
                        idx.set_loc(s, to);
                        key_of.remove(&l);
                        key_of.insert(to, k);
                    }
                    Op::Grow => {
                        let km = key_of.clone();
                        let n = idx.nbuckets() + idx.nbuckets() / 8 + 1;
                        prop_assert!(idx.rebuild(n, &|loc: u64| mix(km[&loc])));
                    }
                    Op::Resize if idx.nbuckets() < 1024 => {
                        let km = key_of.clone();
                        prop_assert!(idx.migrate(usize::MAX, &|loc: u64| mix(km[&loc])));
                        prop_assert!(!idx.resizing());
                        idx.start_resize(idx.nbuckets() * 2);
                    }
                    Op::Migrate(n) => {
                        let km = key_of.clone();
                        prop_assert!(idx.migrate(n, &|loc: u64| mix(km[&loc])));
                    }
                    _ => {}
                }
                prop_assert_eq!(idx.len(), key_of.len());
            }
            for (&l, &k) in &key_of {
                let s = idx.find_loc(mix(k), l);
                prop_assert!(s.is_some(), "location {} lost", l);
                prop_assert_eq!(idx.loc(s.unwrap()), l);
                // The lookup by key (what the store does) finds it too.
                let found = idx.find(mix(k), |loc| key_of.get(&loc).filter(|&&kk| kk == k).map(|_| loc));
                prop_assert_eq!(found.map(|(_, loc)| loc), Some(l));
            }
            let mut all: Vec<u64> = idx.locations().collect();
            all.sort();
            let mut want: Vec<u64> = key_of.keys().copied().collect();
            want.sort();
            prop_assert_eq!(all, want);
        }
    }
}
