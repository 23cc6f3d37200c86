//! Miss ratio of cache-aside traffic against the store alone: bench/compare's workloads
//! 10a-c (multi-get 100 zipf-drawn keys, set the misses, 200-byte values, 250,000 keys,
//! optional one-off scans) without the network, for quick eviction-policy experiments.
//! Its own random draws, so figures are close to but not those of bench/compare.
//!
//! cargo run --release -p store --example cache_aside [-- MiB ALPHA SCAN_EVERY SCAN_LEN SEED]

use store::{Config, Store, StoreMode, StoreRequest};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (mb, alpha) = (arg(0, 16.0) as u64, arg(1, 0.9));
    let (scan_every, scan_len, seed) = (arg(2, 0.0) as u64, arg(3, 0.0) as u64, arg(4, 17.0));
    let (keys, batch, gets, warm) = (250_000usize, 100, 20_000u64, 5_000u64);
    let now = 1_700_000_000;
    let s = Store::new(Config {
        mem_limit: mb << 20,
        process_start: now - 100,
        evictions: true,
        ..Config::default()
    });
    let mut cum = Vec::with_capacity(keys);
    let mut acc = 0.0;
    for i in 1..=keys {
        acc += 1.0 / (i as f64).powf(alpha);
        cum.push(acc);
    }
    let mut rng = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let value = vec![b'v'; 200];
    let multi_get = |names: &[Vec<u8>]| {
        let missed: Vec<&Vec<u8>> = names
            .iter()
            .filter(|k| !s.get(k, now, |v| v.is_some()))
            .collect();
        for k in &missed {
            s.store(StoreRequest::new(StoreMode::Set, k, &value), now);
        }
        missed.len() as u64
    };
    let (mut looked, mut missed, mut scanned) = (0u64, 0u64, 0u64);
    for n in 0..gets {
        let mut names: Vec<Vec<u8>> = (0..batch)
            .map(|_| {
                let r = next() * acc;
                let i = cum.partition_point(|&c| c < r).min(keys - 1);
                format!("ca:{i}").into_bytes()
            })
            .collect();
        names.sort();
        names.dedup();
        let m = multi_get(&names);
        if n >= warm {
            looked += names.len() as u64;
            missed += m;
        }
        if scan_every > 0 && (n + 1) % scan_every == 0 {
            for i in 0..scan_len {
                multi_get(&[format!("scan:{}", scanned + i).into_bytes()]);
            }
            scanned += scan_len;
        }
    }
    let st = s.stats();
    println!(
        "miss {:.2}% items {} evictions {} (segments {}, live {} dead {} free {} bytes)",
        100.0 * missed as f64 / looked as f64,
        st.counters.curr_items,
        st.counters.evictions,
        st.segments,
        st.live_bytes,
        st.dead_bytes,
        st.free_segment_bytes
    );
}
