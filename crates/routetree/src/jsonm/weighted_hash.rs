//! The `weightedHash` built-in: picks one name of a `{name: weight}` dictionary for a key, by
//! the rendezvous hash of mcrouter's config preprocessor. This is not the Rendezvous hash
//! function of pools (`ring::rendezvous`): names hash with 64-bit FNV-1 (bytes widened as
//! signed chars, as folly's `fnv64_buf_BROKEN` does), a string key with SpookyHash64 (seed
//! 0), an int key is taken as is, and each score is `(twang_mix64(name + key) / u64::MAX)`
//! raised to `1 / normalised weight`. The highest score wins, so the pick does not depend on
//! the dictionary's order.

use serde_json::Value;

use super::value::{as_i64, type_name};
use super::{fail, Ctx, Pre, R};

const FNV64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// mcrouter tolerates weights down to this (rounding) and clamps them to 0.
const NEGATIVE_SLACK: f64 = -0.01;

pub(super) fn weighted_hash(_: &Pre, a: &Ctx) -> R<Value> {
    let dictionary = a.take("dictionary");
    let Value::Object(dictionary) = dictionary else {
        return fail(format!(
            "WeightedHash: dictionary is {}, expected object",
            type_name(&dictionary)
        ));
    };
    let mut weights = Vec::with_capacity(dictionary.len());
    for (name, weight) in &dictionary {
        let Some(w) = weight.as_f64() else {
            return fail(format!(
                "WeightedHash: {name} weight is {}, expected number",
                type_name(weight)
            ));
        };
        if w < NEGATIVE_SLACK {
            return fail(format!("WeightedHash: {name} weight {w} is negative"));
        }
        weights.push((name.as_str(), w.max(0.0)));
    }
    if weights.is_empty() {
        return fail("WeightedHash: dictionary is empty");
    }
    let key = a.take("key");
    let key_hash = match (&key, as_i64(&key)) {
        (_, Some(i)) => i as u64,
        (Value::String(s), _) => ring::spooky::hash64(s.as_bytes(), 0),
        _ => {
            return fail(format!(
                "WeightedHash: key is {}, expected string or int",
                type_name(&key)
            ))
        }
    };
    match pick(&weights, key_hash) {
        Some(i) => Ok(Value::String(weights[i].0.to_owned())),
        None => fail("WeightedHash: failed to compute hash: Sum of weights is 0"),
    }
}

/// Index of the winning name for `key`, or None when the weights sum to (about) zero.
pub(super) fn pick(weights: &[(&str, f64)], key: u64) -> Option<usize> {
    let sum: f64 = weights.iter().map(|(_, w)| w).sum();
    if sum < f64::EPSILON {
        return None;
    }
    let mut best = (0, -1.0);
    for (i, (name, weight)) in weights.iter().enumerate() {
        let weight = weight / sum;
        let scaled =
            twang_mix64(fnv64_signed(name.as_bytes()).wrapping_add(key)) as f64 / u64::MAX as f64;
        let score = if weight > f64::EPSILON {
            scaled.powf(1.0 / weight)
        } else {
            0.0
        };
        // Strictly greater: the first of equal scores keeps the pick.
        if score > best.1 {
            best = (i, score);
        }
    }
    Some(best.0)
}

/// 64-bit FNV-1 over bytes widened as signed chars (what folly's `fnv64_buf_BROKEN` does).
fn fnv64_signed(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV64_OFFSET, |h, &b| {
        h.wrapping_mul(FNV64_PRIME) ^ (b as i8 as i64 as u64)
    })
}

/// folly's twang_mix64, the integer mix of mcrouter's `@hash` and `weightedHash`.
pub(super) fn twang_mix64(mut key: u64) -> u64 {
    key = (!key).wrapping_add(key << 21);
    key ^= key >> 24;
    key = key.wrapping_add(key << 3).wrapping_add(key << 8);
    key ^= key >> 14;
    key = key.wrapping_add(key << 2).wrapping_add(key << 4);
    key ^= key >> 28;
    key.wrapping_add(key << 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected picks come from mcrouter's lib/config/RendezvousHash.{h,cpp} compiled with
    // folly's fnv64_buf_BROKEN and twang_mix64.
    fn name<'a>(weights: &[(&'a str, f64)], key: u64) -> &'a str {
        weights[pick(weights, key).expect("weights sum above zero")].0
    }

    #[test]
    fn picks_match_mcrouter() {
        let ewn = [("east", 1.0), ("west", 2.0), ("north", 1.0)];
        let got: Vec<_> = (0..8).map(|k| name(&ewn, k)).collect();
        assert_eq!(
            got,
            ["east", "east", "west", "west", "east", "west", "west", "west"]
        );
        let halves = [("a", 0.5), ("b", 0.5)];
        let got: Vec<_> = (0..8).map(|k| name(&halves, k)).collect();
        assert_eq!(got, ["a", "b", "a", "b", "b", "b", "a", "a"]);
        assert_eq!(name(&ewn, u64::MAX), "east");
        assert_eq!(
            name(&[("x", 1.0), ("y", 1.0), ("z", 1.0)], u64::MAX - 4),
            "x"
        );
    }

    #[test]
    fn weights_spread_keys_like_mcrouter() {
        let clusters = [
            ("cluster1", 100.0),
            ("cluster2", 400.0),
            ("cluster3", 500.0),
        ];
        let mut counts = [0; 3];
        for k in 0..1000 {
            counts[pick(&clusters, k).unwrap()] += 1;
        }
        assert_eq!(counts, [105, 422, 473]);
        let got: Vec<_> = (0..8).map(|k| name(&clusters, k)).collect();
        assert_eq!(
            got,
            [
                "cluster2", "cluster3", "cluster3", "cluster2", "cluster3", "cluster2", "cluster3",
                "cluster2"
            ]
        );
    }

    #[test]
    fn non_ascii_names_hash_as_signed_bytes() {
        let names = [("é", 1.0), ("è", 1.0), ("ü", 1.0), ("ß", 1.0)];
        let got: Vec<_> = (0..12).map(|k| name(&names, k)).collect();
        assert_eq!(
            got,
            ["é", "è", "ü", "ß", "ß", "ß", "ß", "é", "é", "è", "ü", "é"]
        );
    }

    #[test]
    fn zero_weight_never_wins_and_all_zero_is_refused() {
        let tiny = [("a", 0.0), ("b", 1.0), ("c", 0.000001)];
        assert!((0..8).all(|k| name(&tiny, k) == "b"));
        assert_eq!(pick(&[("a", 0.0), ("b", 0.0)], 5), None);
    }
}
