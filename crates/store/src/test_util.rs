//! Helpers shared by the store's unit tests.

use crate::*;

pub const T0: u32 = 1_700_000_000;
pub const START: u32 = T0 - 100;

pub fn store_mb(mb: u64) -> Store {
    Store::new(Config {
        mem_limit: mb << 20,
        item_size_max: 1 << 20,
        process_start: START,
        evictions: true,
    })
}

pub fn get(s: &Store, k: &str, now: u32) -> Option<(Vec<u8>, u32, u64)> {
    s.get(k.as_bytes(), now, |v| {
        v.map(|v| (v.value.to_vec(), v.flags, v.cas))
    })
}

pub fn val(s: &Store, k: &str, now: u32) -> Option<String> {
    get(s, k, now).map(|(v, _, _)| String::from_utf8(v).unwrap())
}

pub fn set(s: &Store, k: &str, v: &str, now: u32) -> StoreOutcome {
    s.store(
        StoreRequest::new(StoreMode::Set, k.as_bytes(), v.as_bytes()),
        now,
    )
}

/// A buffer as the server receives a large set: junk where the command line was, then the value.
pub fn received(value: &[u8], in_front: usize) -> (Box<[u8]>, usize) {
    let mut buf = vec![b'#'; in_front];
    buf.extend_from_slice(value);
    (buf.into_boxed_slice(), in_front)
}
