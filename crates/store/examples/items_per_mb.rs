//! Items retained with a 64 MiB limit after 1,000,000 sets of "key:NNNNNNN" keys and 100-byte
//! values (the headline memory target: memcached -m 64 keeps ~349,500).
//!
//! cargo run --release -p store --example items_per_mb [-- MiB COUNT VALUE_LEN]
//!
//! Instructions per set / get (machine-independent, unlike the ns figures printed):
//! valgrind --tool=callgrind --toggle-collect='items_per_mb::set_one' \
//!     target/release/examples/items_per_mb 64 200000   (then get_one; Ir / 200,000)

use std::time::Instant;
use store::{Config, Store, StoreMode, StoreRequest, StoreResult};

// Not inlined, so `valgrind --tool=callgrind --toggle-collect='items_per_mb::get_one'` (or
// `set_one`) counts the instructions of one get (set) alone.
#[inline(never)]
fn set_one(s: &Store, k: &[u8], v: &[u8], now: u32) -> StoreResult {
    s.store(StoreRequest::new(StoreMode::Set, k, v), now).result
}

#[inline(never)]
fn get_one(s: &Store, k: &[u8], now: u32) -> bool {
    s.get(k, now, |v| v.is_some())
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let mb = args.first().copied().unwrap_or(64);
    let count = args.get(1).copied().unwrap_or(1_000_000);
    let vlen = args.get(2).copied().unwrap_or(100) as usize;
    let now = 1_700_000_000;
    let s = Store::new(Config {
        mem_limit: mb << 20,
        item_size_max: 1 << 20,
        process_start: now - 100,
        evictions: true,
    });
    let v = vec![b'v'; vlen];
    let t = Instant::now();
    for i in 0..count {
        let k = format!("key:{:07}", i);
        assert_eq!(set_one(&s, k.as_bytes(), &v, now), StoreResult::Stored);
    }
    let el = t.elapsed();
    let st = s.stats();
    let n = s.len();
    println!(
        "limit {} MiB, {} sets of {}-byte values in {:.2?} ({:.0} ns/set)",
        mb,
        count,
        vlen,
        el,
        el.as_nanos() as f64 / count as f64
    );
    println!("items retained: {n}");
    println!(
        "bytes per item (limit / items): {:.1}",
        (mb << 20) as f64 / n as f64
    );
    println!("mem_used {} / limit {}", st.mem_used, st.limit_maxbytes);
    println!(
        "segments {} x {} B, index {} B ({} slots, load {:.2}), live {} dead {} free-in-segments {}",
        st.segments, st.segment_size, st.index_bytes, st.index_slots,
        n as f64 / st.index_slots as f64, st.live_bytes, st.dead_bytes, st.free_segment_bytes
    );
    let t = Instant::now();
    let mut hits = 0;
    for i in 0..count {
        let k = format!("key:{:07}", i);
        if get_one(&s, k.as_bytes(), now) {
            hits += 1;
        }
    }
    let el = t.elapsed();
    println!(
        "{hits} hits in {count} gets, {:.0} ns/get",
        el.as_nanos() as f64 / count as f64
    );
}
