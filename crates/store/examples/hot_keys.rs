//! Contention check: threads hammering ~100 zipf-distributed keys with 50% sets.
//!
//! cargo run --release -p store --example hot_keys [-- THREADS OPS_PER_THREAD]

use std::sync::Arc;
use std::time::Instant;
use store::{Config, Store, StoreMode, StoreRequest};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let threads = args.first().copied().unwrap_or(4);
    let ops = args.get(1).copied().unwrap_or(1_000_000);
    let now = 1_700_000_000;
    let s = Arc::new(Store::new(Config {
        process_start: now - 100,
        evictions: true,
        ..Config::default()
    }));
    let keys: Vec<Vec<u8>> = (0..100).map(|i| format!("hot:{i}").into_bytes()).collect();
    let keys = Arc::new(keys);
    // Zipf(1) CDF over 100 keys.
    let weights: Vec<f64> = (1..=100).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::new();
    let mut acc = 0.0;
    for w in weights {
        acc += w / total;
        cdf.push(acc);
    }
    let cdf = Arc::new(cdf);
    let t = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|id| {
            let (s, keys, cdf) = (s.clone(), keys.clone(), cdf.clone());
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (id + 1);
                let v = [b'v'; 100];
                let mut hits = 0u64;
                for _ in 0..ops {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
                    let k = &keys[cdf.partition_point(|&c| c < u).min(99)];
                    if rng & 1 == 0 {
                        s.store(StoreRequest::new(StoreMode::Set, k, &v), now);
                    } else if s.get(k, now, |x| x.is_some()) {
                        hits += 1;
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    let el = t.elapsed();
    let n = threads * ops;
    println!(
        "{threads} threads, {n} ops in {el:.2?}: {:.2} Mops/s, {hits} get hits",
        n as f64 / el.as_secs_f64() / 1e6
    );
}
