//! `@shuffle(list, seed)` in the order mcrouter gives it: `std::shuffle` driven by
//! `std::minstd_rand(seed)`, as GCC's C++ library (libstdc++) implements both. The C++
//! standard fixes the engine but not the shuffle, so this is the order of an mcrouter built
//! with GCC, the usual Linux build.

/// `std::minstd_rand`: x <- 48271 x mod (2^31 - 1), from 1 to 2^31 - 2.
struct MinStd(u64);

const MODULUS: u64 = 2_147_483_647;
/// max() - min() of the engine.
const RANGE: u64 = (MODULUS - 1) - 1;

impl MinStd {
    fn new(seed: u32) -> MinStd {
        match u64::from(seed) % MODULUS {
            0 => MinStd(1),
            x => MinStd(x),
        }
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0 * 48_271 % MODULUS;
        self.0
    }

    /// libstdc++'s `uniform_int_distribution{0, hi}` over this engine (its downscaling by
    /// rejection: the engine's range is never a full 32 or 64 bits).
    fn below_or_eq(&mut self, hi: u64) -> u64 {
        let span = hi + 1;
        let scaling = RANGE / span;
        let past = span * scaling;
        loop {
            let r = self.next() - 1;
            if r < past {
                return r / scaling;
            }
        }
    }
}

/// Shuffles `items` as libstdc++'s `std::shuffle(first, last, minstd_rand(seed))`.
pub(super) fn libstdcxx_shuffle<T>(items: &mut [T], seed: u32) {
    let n = items.len() as u64;
    if n == 0 {
        return;
    }
    let mut g = MinStd::new(seed);
    if RANGE / n >= n {
        // Two swap positions from one draw.
        let mut i = 1u64;
        if n.is_multiple_of(2) {
            items.swap(i as usize, g.below_or_eq(1) as usize);
            i += 1;
        }
        while i != n {
            let (b0, b1) = (i + 1, i + 2);
            let x = g.below_or_eq(b0 * b1 - 1);
            items.swap(i as usize, (x / b1) as usize);
            items.swap(i as usize + 1, (x % b1) as usize);
            i += 2;
        }
        return;
    }
    for i in 1..n {
        items.swap(i as usize, g.below_or_eq(i) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn cases() -> Vec<Value> {
        let text = include_str!("../../../../tests/vectors/jsonm-shuffle.json");
        let doc: Value = serde_json::from_str(text).expect("valid JSON");
        doc["cases"].as_array().expect("cases").clone()
    }

    #[test]
    fn orders_match_what_libstdcxx_gave_for_each_seed_and_length() {
        let cases = cases();
        assert!(cases.len() >= 70);
        for case in cases {
            let seed = case["seed"].as_u64().unwrap() as u32;
            let n = case["n"].as_u64().unwrap() as usize;
            let mut items: Vec<u64> = (0..n as u64).collect();
            libstdcxx_shuffle(&mut items, seed);
            let want = |key: &str| -> Vec<u64> {
                let list = case[key].as_array().unwrap();
                list.iter().map(|v| v.as_u64().unwrap()).collect()
            };
            if case.get("order").is_some() {
                assert_eq!(items, want("order"), "seed {seed}, {n} items");
            } else {
                // Long lists (one draw per swap) are recorded by their ends.
                assert_eq!(items[..16], want("head")[..], "seed {seed}, {n} items");
                assert_eq!(items[n - 16..], want("tail")[..], "seed {seed}, {n} items");
            }
        }
    }

    #[test]
    fn an_empty_list_stays_empty() {
        let mut none: [u8; 0] = [];
        libstdcxx_shuffle(&mut none, 5);
    }
}
