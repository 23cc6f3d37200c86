//! Time to save and load a warm-restart snapshot of 1,000,000 items of mixed sizes at -m 1024
//! (in memory, without file I/O): `cargo run --release -p store --example warm_restart`.
//! Prints wall and CPU time, as other processes on the machine inflate wall time.

use std::time::Instant;

use store::{Config, Store, StoreMode, StoreRequest};

const NOW: u32 = 1_700_000_000;

fn value_of(i: u64) -> Vec<u8> {
    let mut size = 1 + (i * 7919) % 1000;
    if i.is_multiple_of(997) {
        size = 10_000 + (i * 31) % 90_000;
    }
    let unit = format!("{i:08}|");
    unit.bytes().cycle().take(size as usize).collect()
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        u
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let r = f();
    println!(
        "{what}: {:.3} s wall, {:.3} s CPU",
        wall.elapsed().as_secs_f64(),
        cpu_seconds() - cpu
    );
    r
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let cfg = Config {
        mem_limit: 1024 << 20,
        item_size_max: 1 << 20,
        process_start: NOW - 10,
        evictions: true,
    };
    let s = Store::new(cfg.clone());
    timed("fill", || {
        for i in 0..n {
            let key = format!("k{i}");
            let value = value_of(i);
            let req = StoreRequest::new(StoreMode::Set, key.as_bytes(), &value).flags(i as u32);
            s.store(req, NOW);
        }
    });
    let mut file = Vec::new();
    let saved = timed("save", || {
        s.save_snapshot(&mut file, "example", NOW).unwrap()
    });
    println!("{} items, {} bytes", saved.items, saved.bytes);
    let t = Store::new(cfg);
    let loaded = timed("load", || t.load_snapshot(&file[..], NOW).unwrap());
    println!("{} restored of {}", loaded.restored, s.len());
}
