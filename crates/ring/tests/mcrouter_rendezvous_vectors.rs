//! Checks every key of tests/vectors/mcrouter-rendezvous.json: the placements mcrouter's own
//! Rendezvous, WeightedRendezvous and ConstShard hash functions give, and the full
//! rendezvous order for one tag set of each kind.

use ring::{PoolHash, Rendezvous};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/mcrouter-rendezvous.json"
);

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|t| t.as_str().expect("string").to_owned())
        .collect()
}

fn indexes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|i| i.as_u64().expect("index") as usize)
        .collect()
}

#[test]
fn every_rendezvous_and_const_shard_vector_matches() {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    let doc: Value = serde_json::from_str(&text).expect("mcrouter-rendezvous.json is not JSON");
    let plain: Vec<PoolHash> = doc["rendezvous_tags"]
        .as_array()
        .expect("rendezvous_tags")
        .iter()
        .map(|tags| PoolHash::Rendezvous(Rendezvous::new(&strings(tags))))
        .collect();
    let weighted: Vec<PoolHash> = doc["weighted_rendezvous"]
        .as_array()
        .expect("weighted_rendezvous")
        .iter()
        .map(|c| {
            let weights = c["weights"].as_array().expect("weights");
            let weights = weights.iter().map(|w| w.as_f64().expect("weight"));
            PoolHash::Rendezvous(Rendezvous::weighted(
                &strings(&c["tags"]),
                weights.collect(),
            ))
        })
        .collect();
    let shard_sizes = indexes(&doc["const_shard_pool_sizes"]);
    let order_plain = doc["rendezvous_order_config"].as_u64().expect("config") as usize;
    let order_weighted = doc["weighted_rendezvous_order_config"]
        .as_u64()
        .expect("config") as usize;
    let vectors = doc["vectors"].as_array().expect("vectors");
    let (mut checked, mut failures) = (0usize, Vec::new());
    let mut check = |what: String, got: Vec<usize>, want: Vec<usize>| {
        checked += 1;
        if got != want {
            failures.push(format!("{what}: {got:?} want {want:?}"));
        }
    };
    for v in vectors {
        let key = v["key"].as_str().expect("key");
        let bytes = key.as_bytes();
        for (kind, hashes, field) in [
            ("rendezvous", &plain, "rendezvous"),
            ("weighted", &weighted, "weighted_rendezvous"),
        ] {
            for (i, (hash, want)) in hashes.iter().zip(indexes(&v[field])).enumerate() {
                let PoolHash::Rendezvous(r) = hash else {
                    unreachable!()
                };
                check(
                    format!("{kind} {i} {key:?}"),
                    vec![hash.index(bytes, r.len())],
                    vec![want],
                );
            }
        }
        for (kind, hash, field) in [
            ("rendezvous", &plain[order_plain], "rendezvous_order"),
            (
                "weighted",
                &weighted[order_weighted],
                "weighted_rendezvous_order",
            ),
        ] {
            let PoolHash::Rendezvous(r) = hash else {
                unreachable!()
            };
            check(
                format!("{kind} order {key:?}"),
                r.order(bytes),
                indexes(&v[field]),
            );
        }
        for (n, want) in shard_sizes.iter().zip(indexes(&v["const_shard"])) {
            check(
                format!("const_shard over {n} {key:?}"),
                vec![PoolHash::ConstShard.index(bytes, *n)],
                vec![want],
            );
        }
    }
    assert_eq!(vectors.len(), 10_925);
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}
