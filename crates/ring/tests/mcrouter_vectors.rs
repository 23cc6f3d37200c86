//! Checks every key of tests/vectors/mcrouter-ch3.json: the placements mcrouter's own
//! furc_hash (Ch3) and crc32_hash give, for 13 pool sizes up to furc's maximum.

use ring::{crc32_hash, furc_hash, PoolHash, FURC_MAX_POOL_SIZE};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/mcrouter-ch3.json"
);

#[test]
fn every_ch3_and_crc32_vector_matches() {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    let doc: Value = serde_json::from_str(&text).expect("mcrouter-ch3.json is not valid JSON");
    let sizes: Vec<u32> = doc["pool_sizes"]
        .as_array()
        .expect("pool_sizes")
        .iter()
        .map(|v| v.as_u64().expect("size") as u32)
        .collect();
    assert_eq!(sizes.last(), Some(&FURC_MAX_POOL_SIZE));
    let vectors = doc["vectors"].as_array().expect("vectors");
    let (mut checked, mut failures) = (0usize, Vec::new());
    for v in vectors {
        let key = v["key"].as_str().expect("key").as_bytes();
        let crc = v["crc32"].as_u64().expect("crc32") as u32;
        checked += 1;
        if crc32_hash(key) != crc {
            failures.push(format!("crc32 {key:?}: {} want {crc}", crc32_hash(key)));
        }
        for (n, want) in sizes.iter().zip(v["ch3"].as_array().expect("ch3")) {
            let want = want.as_u64().expect("index") as usize;
            let got = PoolHash::Ch3.index(key, *n as usize);
            checked += 1;
            if got != want || furc_hash(key, *n) as usize != want {
                failures.push(format!("ch3 {key:?} over {n}: {got} want {want}"));
            }
            let crc_index = PoolHash::Crc32.index(key, *n as usize);
            if crc_index != (crc & 0x7fff_ffff) as usize % *n as usize {
                failures.push(format!("crc32 index {key:?} over {n}: {crc_index}"));
            }
        }
    }
    assert_eq!(vectors.len(), 10_886);
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

/// mcrouter's Ch3 test counts: keys "0".."9999" over 10 servers.
#[test]
fn ch3_distribution_over_ten() {
    let mut counts = [0u32; 10];
    for i in 0..10_000 {
        counts[furc_hash(i.to_string().as_bytes(), 10) as usize] += 1;
    }
    assert_eq!(
        counts,
        [995, 955, 1046, 968, 1032, 972, 1016, 1038, 1010, 968]
    );
}
