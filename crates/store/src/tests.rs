use super::*;
use std::sync::Arc;

const T0: u32 = 1_700_000_000;
const START: u32 = T0 - 100;

fn store_mb(mb: u64) -> Store {
    Store::new(Config {
        mem_limit: mb << 20,
        item_size_max: 1 << 20,
        process_start: START,
        evictions: true,
    })
}

fn get(s: &Store, k: &str, now: u32) -> Option<(Vec<u8>, u32, u64)> {
    s.get(k.as_bytes(), now, |v| {
        v.map(|v| (v.value.to_vec(), v.flags, v.cas))
    })
}

fn val(s: &Store, k: &str, now: u32) -> Option<String> {
    get(s, k, now).map(|(v, _, _)| String::from_utf8(v).unwrap())
}

fn set(s: &Store, k: &str, v: &str, now: u32) -> StoreOutcome {
    s.store(StoreMode::Set, k.as_bytes(), 0, 0, v.as_bytes(), now)
}

#[test]
fn set_get_flags_and_unique_cas() {
    let s = store_mb(8);
    let a = s.store(StoreMode::Set, b"k", 42, 0, b"hello", T0);
    assert_eq!(a.result, StoreResult::Stored);
    assert_eq!(get(&s, "k", T0), Some((b"hello".to_vec(), 42, a.cas)));
    let b = set(&s, "k", "world", T0);
    assert_ne!(a.cas, b.cas);
    assert_eq!(get(&s, "k", T0), Some((b"world".to_vec(), 0, b.cas)));
    assert_eq!(get(&s, "missing", T0), None);
    let mut seen = std::collections::HashSet::new();
    for i in 0..1000 {
        assert!(seen.insert(set(&s, &format!("key{i}"), "v", T0).cas));
    }
    let st = s.stats();
    assert_eq!(st.counters.curr_items, 1001);
    assert_eq!(st.counters.total_items, 1002);
    assert_eq!(s.len(), 1001);
}

#[test]
fn add_replace_append_prepend() {
    let s = store_mb(8);
    assert_eq!(
        s.store(StoreMode::Replace, b"k", 0, 0, b"x", T0).result,
        StoreResult::NotStored
    );
    assert_eq!(
        s.store(StoreMode::Append, b"k", 0, 0, b"x", T0).result,
        StoreResult::NotStored
    );
    assert_eq!(
        s.store(StoreMode::Prepend, b"k", 0, 0, b"x", T0).result,
        StoreResult::NotStored
    );
    let exp = s.exptime(100, T0);
    assert_eq!(
        s.store(StoreMode::Add, b"k", 7, exp, b"mid", T0).result,
        StoreResult::Stored
    );
    assert_eq!(
        s.store(StoreMode::Add, b"k", 0, 0, b"again", T0).result,
        StoreResult::NotStored
    );
    // append/prepend keep the original flags and exptime.
    let r = s.store(StoreMode::Append, b"k", 99, 0, b">>", T0);
    assert_eq!(r.result, StoreResult::Stored);
    assert_eq!(
        s.store(StoreMode::Prepend, b"k", 98, 0, b"<<", T0).result,
        StoreResult::Stored
    );
    s.peek(b"k", T0, |v| {
        let v = v.unwrap();
        assert_eq!(v.value, b"<<mid>>");
        assert_eq!(v.flags, 7);
        assert_eq!(v.exptime, exp);
        assert_eq!(v.ttl_remaining, 100);
    });
    assert_eq!(
        s.store(StoreMode::Replace, b"k", 1, 0, b"new", T0).result,
        StoreResult::Stored
    );
    assert_eq!(get(&s, "k", T0).unwrap().1, 1);
    // meta append with a compare cas.
    let cas = get(&s, "k", T0).unwrap().2;
    let o = StoreOpts {
        compare_cas: cas + 1,
        ..StoreOpts::default()
    };
    assert_eq!(
        s.store_ext(StoreMode::Append, b"k", 0, 0, b"!", T0, &o)
            .result,
        StoreResult::Exists
    );
    let o = StoreOpts {
        compare_cas: cas,
        ..StoreOpts::default()
    };
    assert_eq!(
        s.store_ext(StoreMode::Append, b"k", 0, 0, b"!", T0, &o)
            .result,
        StoreResult::Stored
    );
    assert_eq!(val(&s, "k", T0).unwrap(), "new!");
}

#[test]
fn cas_command() {
    let s = store_mb(8);
    assert_eq!(
        s.store(StoreMode::Cas(5), b"k", 0, 0, b"x", T0).result,
        StoreResult::NotFound
    );
    let c = set(&s, "k", "v1", T0).cas;
    assert_eq!(
        s.store(StoreMode::Cas(c + 1000), b"k", 0, 0, b"x", T0)
            .result,
        StoreResult::Exists
    );
    assert_eq!(
        s.store(StoreMode::Cas(0), b"k", 0, 0, b"x", T0).result,
        StoreResult::Exists
    );
    let o = s.store(StoreMode::Cas(c), b"k", 0, 0, b"v2", T0);
    assert_eq!(o.result, StoreResult::Stored);
    assert_ne!(o.cas, c);
    assert_eq!(
        s.store(StoreMode::Cas(c), b"k", 0, 0, b"v3", T0).result,
        StoreResult::Exists
    );
    let st = s.stats().counters;
    assert_eq!((st.cas_misses, st.cas_hits, st.cas_badval), (1, 1, 3));
    // E: explicit new cas.
    let o = s.store_ext(
        StoreMode::Set,
        b"k",
        0,
        0,
        b"e",
        T0,
        &StoreOpts {
            new_cas: Some(777),
            ..StoreOpts::default()
        },
    );
    assert_eq!(o.cas, 777);
    assert_eq!(get(&s, "k", T0).unwrap().2, 777);
}

#[test]
fn incr_decr_memcached_quirks() {
    let s = store_mb(8);
    let none = ArithOpts::default();
    assert_eq!(s.incr_decr(b"n", true, 1, T0, &none), ArithResult::NotFound);
    set(&s, "n", "10", T0);
    let r = s.incr_decr(b"n", false, 1, T0, &none);
    assert!(matches!(r, ArithResult::Ok { value: 9, .. }));
    // Shorter result is written in place, padded with spaces to the old length.
    assert_eq!(val(&s, "n", T0).unwrap(), "9 ");
    assert!(matches!(
        s.incr_decr(b"n", true, 91, T0, &none),
        ArithResult::Ok { value: 100, .. }
    ));
    assert_eq!(val(&s, "n", T0).unwrap(), "100");
    assert!(matches!(
        s.incr_decr(b"n", false, 1000, T0, &none),
        ArithResult::Ok { value: 0, .. }
    ));
    assert_eq!(val(&s, "n", T0).unwrap(), "0  ");
    set(&s, "w", "18446744073709551615", T0);
    assert!(matches!(
        s.incr_decr(b"w", true, 2, T0, &none),
        ArithResult::Ok { value: 1, .. }
    ));
    set(&s, "x", "12abc", T0);
    assert_eq!(
        s.incr_decr(b"x", true, 1, T0, &none),
        ArithResult::NonNumeric
    );
    set(&s, "e", "", T0);
    assert_eq!(
        s.incr_decr(b"e", true, 1, T0, &none),
        ArithResult::NonNumeric
    );
    set(&s, "sp", " 5 ", T0);
    assert!(matches!(
        s.incr_decr(b"sp", true, 1, T0, &none),
        ArithResult::Ok { value: 6, .. }
    ));
    // Flags and exptime survive a growing incr (new item).
    let exp = s.exptime(50, T0);
    s.store(StoreMode::Set, b"g", 3, exp, b"9", T0);
    let ArithResult::Ok { cas, exptime, .. } = s.incr_decr(b"g", true, 1, T0, &none) else {
        panic!()
    };
    assert_eq!(exptime, exp);
    s.peek(b"g", T0, |v| {
        let v = v.unwrap();
        assert_eq!((v.value, v.flags, v.cas), (&b"10"[..], 3, cas));
    });
    // ma: cas compare, vivify, TTL.
    let bad = ArithOpts {
        compare_cas: cas + 1,
        ..ArithOpts::default()
    };
    assert_eq!(s.incr_decr(b"g", true, 1, T0, &bad), ArithResult::Exists);
    let viv = ArithOpts {
        vivify: Some((42, s.exptime(10, T0))),
        ..ArithOpts::default()
    };
    assert!(matches!(
        s.incr_decr(b"v", true, 5, T0, &viv),
        ArithResult::Ok { value: 42, exptime, .. } if exptime == T0 + 10
    ));
    assert!(matches!(
        s.incr_decr(b"v", true, 5, T0, &viv),
        ArithResult::Ok { value: 47, .. }
    ));
    let st = s.stats().counters;
    assert_eq!(st.incr_misses, 1);
    assert!(st.incr_hits >= 4 && st.decr_hits == 2);
}

#[test]
fn touch_and_gat() {
    let s = store_mb(8);
    assert_eq!(s.touch(b"k", 0, T0), TouchResult::NotFound);
    s.store(StoreMode::Set, b"k", 0, s.exptime(5, T0), b"v", T0);
    assert_eq!(s.touch(b"k", s.exptime(100, T0), T0), TouchResult::Touched);
    assert_eq!(val(&s, "k", T0 + 50).as_deref(), Some("v"));
    let got = s.gat(b"k", s.exptime(10, T0 + 50), T0 + 50, |v| {
        v.map(|v| v.ttl_remaining)
    });
    assert_eq!(got, Some(10));
    assert_eq!(val(&s, "k", T0 + 60), None);
    assert!(!s.gat(b"k", 0, T0 + 60, |v| v.is_some()));
    let st = s.stats().counters;
    assert_eq!((st.touch_hits, st.touch_misses), (2, 2));
    assert_eq!(st.get_expired, 1);
}

#[test]
fn exptime_edges() {
    let s = store_mb(8);
    assert_eq!(s.exptime(0, T0), 0);
    assert_eq!(s.exptime(-1, T0), EXPIRED);
    assert_eq!(s.exptime(2_592_000, T0), T0 + 2_592_000);
    // 30 days + 1 is an absolute unix time: long before process start, so expired.
    assert_eq!(s.exptime(2_592_001, T0), EXPIRED);
    assert_eq!(s.exptime(START as i64, T0), EXPIRED);
    assert_eq!(s.exptime(START as i64 + 1, T0), START + 1);
    assert_eq!(s.exptime(T0 as i64 + 7, T0), T0 + 7);
    // set with a negative exptime stores, replacing the old value, which is then gone.
    set(&s, "k", "old", T0);
    let r = s.store(StoreMode::Set, b"k", 0, s.exptime(-1, T0), b"v", T0);
    assert_eq!(r.result, StoreResult::Stored);
    assert_eq!(val(&s, "k", T0), None);
    s.store(
        StoreMode::Set,
        b"a",
        0,
        s.exptime(T0 as i64 + 2, T0),
        b"v",
        T0,
    );
    assert!(val(&s, "a", T0 + 1).is_some());
    assert!(val(&s, "a", T0 + 2).is_none());
    s.store(StoreMode::Set, b"b", 0, 0, b"v", T0);
    assert!(val(&s, "b", u32::MAX - 1).is_some());
}

#[test]
fn flush_immediate_and_delayed() {
    let s = store_mb(8);
    for i in 0..100 {
        set(&s, &format!("k{i}"), "v", T0);
    }
    s.flush_all(0, T0);
    assert_eq!(s.len(), 0);
    assert_eq!(val(&s, "k1", T0), None);
    set(&s, "after", "v", T0);
    assert_eq!(val(&s, "after", T0).as_deref(), Some("v"));

    // Observed on memcached 1.6.18: `flush_all 2` at T, then at T+1 both old items and items
    // set at T+1 are gone; an item set at T+2 survives.
    let s = store_mb(8);
    set(&s, "a", "x", T0);
    s.flush_all(2, T0);
    set(&s, "b", "y", T0);
    assert!(val(&s, "a", T0).is_some() && val(&s, "b", T0).is_some());
    set(&s, "c", "z", T0 + 1);
    assert!(val(&s, "a", T0 + 1).is_none());
    assert!(val(&s, "b", T0 + 1).is_none());
    assert!(val(&s, "c", T0 + 1).is_none());
    set(&s, "d", "w", T0 + 2);
    assert!(val(&s, "d", T0 + 3).is_some());
    assert_eq!(s.stats().counters.get_flushed, 3);

    // An absolute time in the past makes oldest_live 0: memcached then flushes nothing.
    let s = store_mb(8);
    set(&s, "a", "x", T0);
    s.flush_all(START as i64 - 5, T0);
    assert!(val(&s, "a", T0 + 5).is_some());
}

#[test]
fn delayed_flush_is_reclaimed_in_background() {
    let s = store_mb(8);
    for i in 0..500 {
        set(&s, &format!("k{i}"), "v", T0);
    }
    s.flush_all(10, T0);
    assert_eq!(s.reclaim(T0 + 5, 10_000), 0);
    assert_eq!(s.reclaim(T0 + 10, 10_000), 500);
    assert_eq!(s.len(), 0);
}

#[test]
fn delete_variants() {
    let s = store_mb(8);
    let d = DeleteOpts::default();
    assert_eq!(s.delete(b"k", T0, &d), DeleteResult::NotFound);
    let c = set(&s, "k", "v", T0).cas;
    let wrong = DeleteOpts {
        compare_cas: Some(c + 1),
        ..d
    };
    assert_eq!(s.delete(b"k", T0, &wrong), DeleteResult::Exists);
    let right = DeleteOpts {
        compare_cas: Some(c),
        ..d
    };
    assert_eq!(s.delete(b"k", T0, &right), DeleteResult::Deleted);
    assert_eq!(val(&s, "k", T0), None);
    let st = s.stats().counters;
    assert_eq!((st.delete_hits, st.delete_misses), (1, 2));

    // x: keep the item, drop value and flags.
    s.store(StoreMode::Set, b"x", 9, 0, b"value", T0);
    let x = DeleteOpts {
        remove_value: true,
        ..d
    };
    assert_eq!(s.delete(b"x", T0, &x), DeleteResult::Deleted);
    assert_eq!(get(&s, "x", T0).map(|g| (g.0, g.1)), Some((vec![], 0)));

    // I: mark stale with a new cas and TTL instead of removing.
    let c = set(&s, "i", "v", T0).cas;
    let inv = DeleteOpts {
        invalidate: true,
        new_exptime: Some(T0 + 30),
        ..d
    };
    assert_eq!(s.delete(b"i", T0, &inv), DeleteResult::Deleted);
    s.peek(b"i", T0, |v| {
        let v = v.unwrap();
        assert!(v.stale && !v.token_sent);
        assert_ne!(v.cas, c);
        assert_eq!(v.ttl_remaining, 30);
    });
}

#[test]
fn meta_get_leases() {
    let s = store_mb(8);
    let viv = MetaGetOpts {
        vivify: Some(T0 + 30),
        ..MetaGetOpts::default()
    };
    let flags = |o: &MetaGetOpts, now| {
        s.meta_get(b"k", now, o, |r| {
            r.map(|(v, f)| (f, v.value.len(), v.ttl_remaining))
        })
    };
    let (f, len, ttl) = flags(&viv, T0).unwrap();
    assert!(f.win && f.created && !f.token_sent && !f.stale);
    assert_eq!((len, ttl), (0, 30));
    let (f, _, _) = flags(&viv, T0).unwrap();
    assert!(!f.win && f.token_sent && !f.created);
    // The winner's ms clears the token state.
    set(&s, "k", "fresh", T0);
    let (f, len, _) = flags(&viv, T0).unwrap();
    assert!(!f.win && !f.token_sent && len == 5);
    // Plain mg on a miss without N: nothing.
    assert!(s.meta_get(b"nope", T0, &MetaGetOpts::default(), |r| r.is_none()));

    // R: win once when TTL is below the threshold.
    s.store(StoreMode::Set, b"r", 0, T0 + 10, b"v", T0);
    let rc = MetaGetOpts {
        recache: Some(T0 + 30),
        ..MetaGetOpts::default()
    };
    let mg = |k: &[u8], o: &MetaGetOpts| s.meta_get(k, T0, o, |r| r.map(|(_, f)| f)).unwrap();
    assert!(mg(b"r", &rc).win);
    let f = mg(b"r", &rc);
    assert!(!f.win && f.token_sent);
    // R does not fire for an item without TTL or with enough TTL.
    set(&s, "r2", "v", T0);
    assert!(!mg(b"r2", &rc).win);

    // Stale (md I): X and W once, then X Z.
    set(&s, "st", "v", T0);
    let inv = DeleteOpts {
        invalidate: true,
        ..DeleteOpts::default()
    };
    s.delete(b"st", T0, &inv);
    let f = mg(b"st", &MetaGetOpts::default());
    assert!(f.stale && f.win && !f.token_sent);
    let f = mg(b"st", &MetaGetOpts::default());
    assert!(f.stale && !f.win && f.token_sent);

    // h and l report state before this access; u doesn't bump.
    set(&s, "h", "v", T0);
    let hl = |now, nb| {
        s.meta_get(
            b"h",
            now,
            &MetaGetOpts {
                no_bump: nb,
                ..MetaGetOpts::default()
            },
            |r| r.map(|(v, _)| (v.fetched, now - v.last_access)),
        )
        .unwrap()
    };
    assert_eq!(hl(T0 + 3, true), (false, 3));
    assert_eq!(hl(T0 + 4, false), (false, 4));
    assert_eq!(hl(T0 + 6, false), (true, 2));
}

#[test]
fn ms_invalidate_stores_stale_when_cas_is_older() {
    let s = store_mb(8);
    let c1 = s.store(StoreMode::Set, b"k", 0, T0 + 100, b"v1", T0).cas;
    let inv = DeleteOpts {
        invalidate: true,
        ..DeleteOpts::default()
    };
    s.delete(b"k", T0, &inv);
    // A winner with the older cas writes back: stored, but stays stale and keeps the TTL.
    let o = StoreOpts {
        invalidate: true,
        ..StoreOpts::default()
    };
    let r = s.store_ext(StoreMode::Cas(c1), b"k", 0, 0, b"v2", T0, &o);
    assert_eq!(r.result, StoreResult::Stored);
    s.peek(b"k", T0, |v| {
        let v = v.unwrap();
        assert!(v.stale);
        assert_eq!(v.value, b"v2");
        assert_eq!(v.exptime, T0 + 100);
    });
    // Without I the same cas is just a mismatch.
    let c = get(&s, "k", T0).unwrap().2;
    let r = s.store(StoreMode::Cas(c - 1), b"k", 0, 0, b"v3", T0);
    assert_eq!(r.result, StoreResult::Exists);
}

#[test]
fn fifty_threads_one_winner() {
    for round in 0..5 {
        let s = Arc::new(store_mb(8));
        let key = format!("lease{round}");
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let s = s.clone();
                let key = key.clone();
                std::thread::spawn(move || {
                    let o = MetaGetOpts {
                        vivify: Some(T0 + 30),
                        ..MetaGetOpts::default()
                    };
                    s.meta_get(key.as_bytes(), T0, &o, |r| r.unwrap().1)
                })
            })
            .collect();
        let flags: Vec<MetaFlags> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(flags.iter().filter(|f| f.win).count(), 1);
        assert_eq!(flags.iter().filter(|f| f.token_sent).count(), 49);
    }
}

#[test]
fn too_large_and_large_items() {
    let s = store_mb(8);
    let big = vec![b'x'; (1 << 20) - 48 - 8 - 2 - 2 - 1];
    assert_eq!(
        s.store(StoreMode::Set, b"k", 0, 0, &big, T0).result,
        StoreResult::Stored
    );
    s.peek(b"k", T0, |v| assert_eq!(v.unwrap().value.len(), big.len()));
    assert_eq!(s.stats().large_items, 1);
    let bigger = vec![b'x'; 1 << 20];
    assert_eq!(
        s.store(StoreMode::Set, b"k", 0, 0, &bigger, T0).result,
        StoreResult::TooLarge
    );
    // A failed set removes the old value (memcached avoids serving stale data).
    assert_eq!(val(&s, "k", T0), None);
    assert_eq!(s.stats().large_items, 0);
    // Appending to a large item.
    s.store(StoreMode::Set, b"l", 0, 0, &vec![b'a'; 100_000], T0);
    s.store(StoreMode::Append, b"l", 0, 0, b"tail", T0);
    s.peek(b"l", T0, |v| {
        let v = v.unwrap().value;
        assert_eq!(v.len(), 100_004);
        assert_eq!(&v[99_998..], b"aatail");
    });
}

#[test]
fn eviction_never_exceeds_limit_nor_fails() {
    let s = store_mb(2);
    let limit = s.mem_limit();
    let mut rng = 12345u64;
    for i in 0..200_000u64 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = if i % 1000 == 0 {
            60_000
        } else {
            (rng >> 33) as usize % 400
        };
        let v = vec![b'v'; len];
        let r = s.store(StoreMode::Set, format!("key:{i}").as_bytes(), 0, 0, &v, T0);
        assert_eq!(r.result, StoreResult::Stored, "set {i} failed");
        assert!(s.mem_used() <= limit, "used {} > {}", s.mem_used(), limit);
        if i % 10_000 == 0 {
            assert_eq!(val(&s, &format!("key:{i}"), T0).map(|v| v.len()), Some(len));
        }
    }
    let st = s.stats();
    assert!(st.counters.evictions > 100_000);
    assert_eq!(st.counters.curr_items, s.len());
}

#[test]
fn hot_keys_survive_a_scan() {
    let s = store_mb(4);
    let hot: Vec<String> = (0..100).map(|i| format!("hot:{i}")).collect();
    let v = vec![b'h'; 100];
    for k in &hot {
        s.store(StoreMode::Set, k.as_bytes(), 0, 0, &v, T0);
    }
    // Scan 10x the cache size of cold keys, reading the hot set now and then (as LRU would
    // need to keep them).
    for i in 0..300_000u64 {
        s.store(StoreMode::Set, format!("cold:{i}").as_bytes(), 0, 0, &v, T0);
        if i % 2_000 == 0 {
            for k in &hot {
                assert!(
                    get(&s, k, T0).is_some(),
                    "hot key {k} evicted after {i} cold sets"
                );
            }
        }
    }
    assert!(s.stats().counters.evictions > 200_000);
    assert!(val(&s, "cold:0", T0).is_none());
}

#[test]
fn expired_items_reclaimed_without_reads() {
    let s = store_mb(8);
    let v = vec![b'v'; 500];
    for i in 0..5_000 {
        s.store(
            StoreMode::Set,
            format!("t{i}").as_bytes(),
            0,
            T0 + 10,
            &v,
            T0,
        );
    }
    let before = s.stats();
    assert_eq!(s.reclaim(T0 + 5, 100_000), 0);
    let mut total = 0;
    for _ in 0..10 {
        total += s.reclaim(T0 + 10, 1_000);
    }
    assert!(total > 0);
    while !s.is_empty() {
        s.reclaim(T0 + 11, 1_000);
    }
    let after = s.stats();
    assert_eq!(after.counters.curr_items, 0);
    assert_eq!(after.counters.expired_unfetched, 5_000);
    assert!(after.mem_used < before.mem_used, "segments freed");
}

#[test]
fn overwrites_leave_dead_bytes_that_get_compacted() {
    let s = store_mb(8);
    let v = vec![b'x'; 200];
    for round in 0..5 {
        for i in 0..20_000 {
            s.store(
                StoreMode::Set,
                format!("k{i}").as_bytes(),
                0,
                0,
                &v,
                T0 + round,
            );
        }
    }
    let st = s.stats();
    assert_eq!(st.counters.curr_items, 20_000);
    assert!(st.live_bytes <= st.written_bytes);
    for i in (0..20_000).step_by(997) {
        assert!(val(&s, &format!("k{i}"), T0 + 5).is_some());
    }
    // Delete most keys: reclaim compacts or frees the mostly dead segments.
    for i in 0..20_000 {
        if i % 10 != 0 {
            s.delete(format!("k{i}").as_bytes(), T0 + 5, &DeleteOpts::default());
        }
    }
    let used = s.mem_used();
    for _ in 0..50 {
        s.reclaim(T0 + 5, 100_000);
    }
    assert!(s.mem_used() < used);
    for i in (0..20_000).step_by(10) {
        assert!(val(&s, &format!("k{i}"), T0 + 5).is_some(), "k{i}");
    }
}

#[test]
fn set_mem_limit_shrinks_via_reclaim() {
    let s = store_mb(8);
    let v = vec![b'x'; 1000];
    for i in 0..20_000 {
        s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, T0);
    }
    s.set_mem_limit(4 << 20);
    for _ in 0..10 {
        s.reclaim(T0, 10);
    }
    assert!(s.mem_used() <= 4 << 20);
    assert_eq!(
        s.store(StoreMode::Set, b"more", 0, 0, &v, T0).result,
        StoreResult::Stored
    );
}

#[test]
fn store_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
}

#[test]
fn large_item_churn_keeps_bookkeeping_bounded() {
    let s = store_mb(8);
    let v = vec![b'L'; 50_000];
    for i in 0..5_000 {
        s.store(StoreMode::Set, b"big", 0, 0, &v, T0);
        if i % 2 == 0 {
            s.delete(b"big", T0, &DeleteOpts::default());
        }
    }
    let st = s.stats();
    assert!(st.large_items <= 1);
    assert!(
        st.mem_used < 1 << 20,
        "large buffers given back: {}",
        st.mem_used
    );
}

#[test]
fn reset_stats_keeps_gauges() {
    let s = store_mb(8);
    set(&s, "a", "1", T0);
    s.delete(b"zz", T0, &DeleteOpts::default());
    s.reset_stats();
    let c = s.stats().counters;
    assert_eq!((c.curr_items, c.delete_misses, c.total_items), (1, 0, 0));
}

#[test]
fn zipf_hot_keys_many_threads() {
    let s = Arc::new(store_mb(16));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut rng = t + 1;
                let v = vec![b'z'; 64];
                let mut hits = 0;
                for _ in 0..50_000 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // Roughly zipfian over 100 keys: square a uniform draw.
                    let u = (rng % 1000) as f64 / 1000.0;
                    let k = format!("z{}", (u * u * 100.0) as u32);
                    if rng & 1 == 0 {
                        s.store(StoreMode::Set, k.as_bytes(), 0, 0, &v, T0);
                    } else if s.get(k.as_bytes(), T0, |v| v.map(|v| v.value.len())) == Some(64) {
                        hits += 1;
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u32 = threads.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(hits > 90_000);
    assert!(s.len() <= 100);
}

/// Items kept at -m 64 after 1,000,000 sets of ~11-byte keys and 100-byte values.
pub fn items_retained_at_64mib() -> u64 {
    let s = store_mb(64);
    let v = [b'v'; 100];
    for i in 0..1_000_000u64 {
        let k = format!("key:{:07}", i);
        let r = s.store(StoreMode::Set, k.as_bytes(), 0, 0, &v, T0);
        assert_eq!(r.result, StoreResult::Stored);
    }
    assert!(s.mem_used() <= 64 << 20);
    s.len()
}

#[test]
#[ignore = "slow in debug builds; run with --release -- --ignored"]
fn items_per_64mib() {
    let n = items_retained_at_64mib();
    println!("items retained at 64 MiB: {n}");
    assert!(n >= 454_000, "{n}");
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Store(u8, u8, u32, Vec<u8>, i8),
        Get(u8),
        Delete(u8),
        Incr(u8, bool, u64),
        Touch(u8, i8),
        Advance(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0u8..6,
                0u8..8,
                0u32..3,
                prop::collection::vec(prop_oneof![Just(b'1'), Just(b'a'), Just(b' ')], 0..6),
                -1i8..4
            )
                .prop_map(|(m, k, f, v, e)| Op::Store(m, k, f, v, e)),
            (0u8..8).prop_map(Op::Get),
            (0u8..8).prop_map(Op::Delete),
            (0u8..8, any::<bool>(), 0u64..20).prop_map(|(k, i, d)| Op::Incr(k, i, d)),
            (0u8..8, -1i8..4).prop_map(|(k, e)| Op::Touch(k, e)),
            (0u8..3).prop_map(Op::Advance),
        ]
    }

    #[derive(Clone, Debug, PartialEq)]
    struct M {
        value: Vec<u8>,
        flags: u32,
        exp: u32,
        cas: u64,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn matches_hashmap_model(ops in prop::collection::vec(op(), 1..120)) {
            let s = store_mb(16);
            let mut m: HashMap<Vec<u8>, M> = HashMap::new();
            let mut now = T0;
            for op in ops {
                let live = |m: &mut HashMap<Vec<u8>, M>, k: &Vec<u8>, now: u32| {
                    if let Some(it) = m.get(k) {
                        if it.exp != 0 && it.exp <= now { m.remove(k); }
                    }
                };
                match op {
                    Op::Advance(d) => now += d as u32,
                    Op::Store(mode, k, flags, v, e) => {
                        let key = vec![b'k', k];
                        live(&mut m, &key, now);
                        let exp = s.exptime(e as i64, now);
                        let old = m.get(&key).cloned();
                        let mode = match mode {
                            0 => StoreMode::Set, 1 => StoreMode::Add, 2 => StoreMode::Replace,
                            3 => StoreMode::Append, 4 => StoreMode::Prepend,
                            _ => StoreMode::Cas(old.as_ref().map(|o| o.cas).unwrap_or(1)),
                        };
                        let r = s.store(mode, &key, flags, exp, &v, now);
                        let expect = match (&old, mode) {
                            (None, StoreMode::Set | StoreMode::Add) => StoreResult::Stored,
                            (None, StoreMode::Cas(_)) => StoreResult::NotFound,
                            (None, _) => StoreResult::NotStored,
                            (Some(_), StoreMode::Add) => StoreResult::NotStored,
                            (Some(_), _) => StoreResult::Stored,
                        };
                        prop_assert_eq!(r.result, expect);
                        if expect == StoreResult::Stored {
                            let nv = match (&old, mode) {
                                (Some(o), StoreMode::Append) => M { value: [o.value.clone(), v.clone()].concat(), flags: o.flags, exp: o.exp, cas: r.cas },
                                (Some(o), StoreMode::Prepend) => M { value: [v.clone(), o.value.clone()].concat(), flags: o.flags, exp: o.exp, cas: r.cas },
                                _ => M { value: v.clone(), flags, exp, cas: r.cas },
                            };
                            m.insert(key, nv);
                        }
                    }
                    Op::Get(k) => {
                        let key = vec![b'k', k];
                        live(&mut m, &key, now);
                        let got = s.get(&key, now, |v| v.map(|v| M { value: v.value.to_vec(), flags: v.flags, exp: v.exptime, cas: v.cas }));
                        prop_assert_eq!(got, m.get(&key).cloned());
                    }
                    Op::Delete(k) => {
                        let key = vec![b'k', k];
                        live(&mut m, &key, now);
                        let r = s.delete(&key, now, &DeleteOpts::default());
                        let expect = if m.remove(&key).is_some() { DeleteResult::Deleted } else { DeleteResult::NotFound };
                        prop_assert_eq!(r, expect);
                    }
                    Op::Touch(k, e) => {
                        let key = vec![b'k', k];
                        live(&mut m, &key, now);
                        let exp = s.exptime(e as i64, now);
                        let r = s.touch(&key, exp, now);
                        match m.get_mut(&key) {
                            Some(it) => { it.exp = exp; prop_assert_eq!(r, TouchResult::Touched); }
                            None => prop_assert_eq!(r, TouchResult::NotFound),
                        }
                    }
                    Op::Incr(k, incr, d) => {
                        let key = vec![b'k', k];
                        live(&mut m, &key, now);
                        let r = s.incr_decr(&key, incr, d, now, &ArithOpts::default());
                        match m.get_mut(&key) {
                            None => prop_assert_eq!(r, ArithResult::NotFound),
                            Some(it) => match crate::numeric::parse_u64(&it.value) {
                                None => prop_assert_eq!(r, ArithResult::NonNumeric),
                                Some(cur) => {
                                    let nv = if incr { cur.wrapping_add(d) } else { cur.saturating_sub(d) };
                                    let ArithResult::Ok { value, cas, .. } = r else { panic!("{r:?}") };
                                    prop_assert_eq!(value, nv);
                                    let digits = nv.to_string().into_bytes();
                                    if digits.len() <= it.value.len() {
                                        let mut padded = digits.clone();
                                        padded.resize(it.value.len(), b' ');
                                        it.value = padded;
                                    } else {
                                        it.value = digits;
                                    }
                                    it.cas = cas;
                                }
                            },
                        }
                    }
                }
            }
        }
    }
}

/// Under heavy eviction the cache may forget keys but must never return a wrong value, and
/// its counters must agree with what it serves.
#[test]
fn eviction_stress_never_corrupts() {
    use std::collections::HashMap;
    let s = store_mb(1);
    let limit = s.mem_limit();
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut now = T0;
    for step in 0..60_000u64 {
        let r = next();
        let key = format!("k{}", r % 3000);
        let op = (r >> 20) % 10;
        let len = match (r >> 30) % 50 {
            0 => 20_000 + (r >> 40) as usize % 40_000,
            _ => (r >> 40) as usize % 300,
        };
        let byte = b'a' + (step % 26) as u8;
        match op {
            0..=3 => {
                let v = vec![byte; len];
                let o = s.store(StoreMode::Set, key.as_bytes(), 0, 0, &v, now);
                assert_eq!(o.result, StoreResult::Stored);
                model.insert(key, v);
            }
            4 => {
                let v = vec![byte; len % 50];
                let o = s.store(StoreMode::Append, key.as_bytes(), 0, 0, &v, now);
                if o.result == StoreResult::Stored {
                    model.get_mut(&key).unwrap().extend_from_slice(&v);
                }
            }
            5 => {
                let v = vec![byte; len % 50];
                let o = s.store(StoreMode::Prepend, key.as_bytes(), 0, 0, &v, now);
                if o.result == StoreResult::Stored {
                    let m = model.get_mut(&key).unwrap();
                    *m = [v, m.clone()].concat();
                }
            }
            6 => {
                s.delete(key.as_bytes(), now, &DeleteOpts::default());
                model.remove(&key);
            }
            7 => {
                let v = (r % 1000).to_string().into_bytes();
                s.store(StoreMode::Set, key.as_bytes(), 0, 0, &v, now);
                model.insert(key.clone(), v);
                if let ArithResult::Ok { value, .. } =
                    s.incr_decr(key.as_bytes(), true, 12345, now, &ArithOpts::default())
                {
                    assert_eq!(value, r % 1000 + 12345);
                    model.insert(key, value.to_string().into_bytes());
                }
            }
            _ => {
                let got = s.get(key.as_bytes(), now, |v| v.map(|v| v.value.to_vec()));
                if let Some(g) = got {
                    assert_eq!(Some(&g), model.get(&key), "step {step} key {key}");
                }
            }
        }
        assert!(s.mem_used() <= limit);
        if step % 5_000 == 0 {
            now += 1;
            s.reclaim(now, 2_000);
        }
    }
    let mut present = 0;
    for (k, v) in &model {
        if let Some(g) = s.peek(k.as_bytes(), now, |x| x.map(|x| x.value.to_vec())) {
            assert_eq!(&g, v);
            present += 1;
        }
    }
    assert!(present > 0);
    assert_eq!(s.len(), present);
    let st = s.stats();
    assert_eq!(st.live_bytes, st.counters.bytes);
}

/// Several writers, readers and a maintenance thread on a tiny cache: values always belong to
/// their key, the limit holds, no set of an allowed size fails.
#[test]
fn concurrent_eviction_with_reclaim() {
    let s = Arc::new(store_mb(2));
    let limit = s.mem_limit();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let maint = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut now = T0;
            while !stop.load(Ordering::Relaxed) {
                s.reclaim(now, 1_000);
                now += 1;
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9u64 * (t + 1);
                for i in 0..40_000u64 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let k = format!("c{}", rng % 20_000);
                    let len = if i % 500 == 0 {
                        30_000
                    } else {
                        (rng >> 32) as usize % 500
                    };
                    let exp = if rng % 7 < 1 { T0 + 2 } else { 0 };
                    if rng % 3 < 1 {
                        let tag = k.as_bytes()[1];
                        let ok = s.get(k.as_bytes(), T0, |v| match v {
                            None => true,
                            Some(v) => v.value.iter().all(|&b| b == tag),
                        });
                        assert!(ok, "value of {k} does not belong to it");
                    } else {
                        let v = vec![k.as_bytes()[1]; len];
                        let r = s.store(StoreMode::Set, k.as_bytes(), 0, exp, &v, T0);
                        assert_eq!(r.result, StoreResult::Stored);
                    }
                    assert!(s.mem_used() <= limit);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    maint.join().unwrap();
    assert!(s.mem_used() <= limit);
    assert_eq!(s.stats().counters.curr_items, s.len());
}

/// Hot/cold read-through workload: the segment second-chance policy's hit ratio is at least an
/// exact LRU's holding the same number of items.
#[test]
fn hit_ratio_at_least_lru() {
    use std::collections::{HashMap, VecDeque};
    let s = store_mb(2);
    let v = vec![b'x'; 100];
    let mut rng = 42u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Fill to learn the capacity in items.
    for i in 0..40_000 {
        s.store(StoreMode::Set, format!("fill{i}").as_bytes(), 0, 0, &v, T0);
    }
    let cap = s.len() as usize;
    let keyspace = cap * 4;
    let hot = cap / 4;
    let mut keys = Vec::with_capacity(200_000);
    for _ in 0..200_000 {
        let r = next();
        let k = if r % 100 < 80 {
            (r >> 8) as usize % hot
        } else {
            hot + (r >> 8) as usize % (keyspace - hot)
        };
        keys.push(k);
    }
    let mut store_hits = 0;
    for &k in &keys {
        let key = format!("w{k}");
        if s.get(key.as_bytes(), T0, |x| x.is_some()) {
            store_hits += 1;
        } else {
            s.store(StoreMode::Set, key.as_bytes(), 0, 0, &v, T0);
        }
    }
    // Exact LRU with `cap` items: recency stamps plus a queue with lazy deletion.
    let mut stamp: HashMap<usize, u64> = HashMap::new();
    let mut queue: VecDeque<(usize, u64)> = VecDeque::new();
    let mut lru_hits = 0;
    for (t, &k) in keys.iter().enumerate() {
        let t = t as u64;
        if stamp.contains_key(&k) {
            lru_hits += 1;
        } else if stamp.len() == cap {
            while let Some((old, st)) = queue.pop_front() {
                if stamp.get(&old) == Some(&st) {
                    stamp.remove(&old);
                    break;
                }
            }
        }
        stamp.insert(k, t);
        queue.push_back((k, t));
    }
    let (a, b) = (store_hits as f64 / 2e5, lru_hits as f64 / 2e5);
    println!("hit ratio: store {a:.3}, exact LRU {b:.3} ({cap} items)");
    assert!(a >= b * 0.98, "store hit ratio {a:.3} vs LRU {b:.3}");
}

/// The lease sequence replayed against memcached 1.6.18 (replies noted beside each step).
#[test]
fn meta_lease_transcript_matches_memcached() {
    let s = store_mb(8);
    let mg = |o: MetaGetOpts| {
        s.meta_get(b"k", T0, &o, |r| {
            r.map(|(v, f)| {
                (
                    v.value.to_vec(),
                    v.ttl_remaining,
                    f.win,
                    f.token_sent,
                    f.stale,
                )
            })
        })
        .unwrap()
    };
    let viv = MetaGetOpts {
        vivify: Some(s.exptime(30, T0)),
        ..MetaGetOpts::default()
    };
    // mg k N30 t v c -> VA 0 t30 c1 W ; again -> VA 0 t30 Z
    assert_eq!(mg(viv), (vec![], 30, true, false, false));
    assert_eq!(mg(viv), (vec![], 30, false, true, false));
    // ms k 2 T100 -> HD ; mg k c v t -> VA 2 t100 (no flags)
    let c = s.store(StoreMode::Set, b"k", 0, s.exptime(100, T0), b"hi", T0);
    assert_eq!(c.result, StoreResult::Stored);
    assert_eq!(
        mg(MetaGetOpts::default()),
        (b"hi".to_vec(), 100, false, false, false)
    );
    // md k I T30 -> HD ; mg -> X W t30 ; mg -> Z X
    let md = DeleteOpts {
        invalidate: true,
        new_exptime: Some(s.exptime(30, T0)),
        ..DeleteOpts::default()
    };
    assert_eq!(s.delete(b"k", T0, &md), DeleteResult::Deleted);
    assert_eq!(
        mg(MetaGetOpts::default()),
        (b"hi".to_vec(), 30, true, false, true)
    );
    assert_eq!(
        mg(MetaGetOpts::default()),
        (b"hi".to_vec(), 30, false, true, true)
    );
    // ms k 2 I C1 (older cas) -> HD ; mg -> VA 2 t30 Z X yo
    let o = StoreOpts {
        invalidate: true,
        ..StoreOpts::default()
    };
    let r = s.store_ext(StoreMode::Cas(1), b"k", 0, 0, b"yo", T0, &o);
    assert_eq!(r.result, StoreResult::Stored);
    assert_eq!(
        mg(MetaGetOpts::default()),
        (b"yo".to_vec(), 30, false, true, true)
    );
    // plain ms clears it all.
    s.store(StoreMode::Set, b"k", 0, 0, b"zz", T0);
    assert_eq!(
        mg(MetaGetOpts::default()),
        (b"zz".to_vec(), -1, false, false, false)
    );
}

#[test]
fn overwrites_under_the_limit_reuse_dead_space() {
    // 2000 keys x 2 KB = ~4 MB live, overwritten at random 40 times (~160 MB written) at
    // -m 64: mostly dead segments are rewritten in place instead of filling the budget.
    let s = store_mb(64);
    let mut rng = 12345u64;
    for round in 0..40u32 {
        for i in 0..2000u32 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (rng >> 33) % 2000;
            let v = vec![b'a' + (round % 26) as u8; 2_000 + (i as usize % 7)];
            let r = s.store(StoreMode::Set, format!("k{k}").as_bytes(), 0, 0, &v, T0);
            assert_eq!(r.result, StoreResult::Stored);
        }
    }
    let st = s.stats();
    assert_eq!(st.counters.evictions, 0);
    // ~4 MiB of index plus under 2x the live bytes (growing instead reaches ~21 MiB).
    assert!(
        st.mem_used < 15 << 20,
        "memory grew with dead bytes: {}",
        st.mem_used
    );
    let live = (0..2000)
        .filter(|k| val(&s, &format!("k{k}"), T0).is_some())
        .count();
    assert_eq!(live as u64, st.counters.curr_items);
}

#[test]
fn emptied_segments_are_reused_and_given_back_when_the_limit_drops() {
    let s = store_mb(16);
    // A hot set of keys: whole segments die and their (dirty) buffers are reused; every
    // value read back must be the last one written, never stale bytes of a reused buffer.
    for round in 0..400u32 {
        let v = vec![b'a' + (round % 26) as u8; 1000 + (round as usize % 13)];
        for i in 0..50 {
            s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, T0);
        }
    }
    let last = vec![b'a' + (399 % 26) as u8; 1000 + 399 % 13];
    for i in 0..50 {
        assert_eq!(
            get(&s, &format!("k{i}"), T0).map(|g| g.0),
            Some(last.clone())
        );
    }
    let st = s.stats();
    assert_eq!(st.counters.curr_items, 50);
    assert_eq!(st.counters.evictions, 0);
    // Kept buffers stay charged; a lower limit makes reclaim hand them back.
    let used = s.mem_used();
    s.set_mem_limit(used - 1);
    s.reclaim(T0, 1000);
    assert!(s.mem_used() < used);
    assert_eq!(
        s.stats().counters.curr_items,
        50,
        "spare buffers go before items"
    );
}

#[test]
fn index_starts_small_and_grows_into_its_charge() {
    // At -m 64 the index is charged for 512K slots up front but allocated small, so a store
    // with few items looks keys up in a few cache-resident buckets.
    let s = store_mb(64);
    let charged = s.mem_used();
    let start = s.stats();
    assert!(
        start.index_bytes <= charged / 8,
        "{} of {charged}",
        start.index_bytes
    );
    let n = 300_000u32;
    for i in 0..n {
        set(&s, &format!("key:{i}"), "v", T0);
    }
    let st = s.stats();
    assert_eq!(st.counters.curr_items, n as u64);
    assert!(st.index_slots > n as u64);
    assert!(st.index_bytes > start.index_bytes);
    // Growing within the reservation charged nothing beyond the segments' memory.
    assert_eq!(st.mem_used, charged + st.segments * (64 << 10));
    assert!((0..n)
        .step_by(97)
        .all(|i| val(&s, &format!("key:{i}"), T0).is_some()));
}

/// A buffer as the server receives a large set: junk where the command line was, then the value.
fn received(value: &[u8], in_front: usize) -> (Box<[u8]>, usize) {
    let mut buf = vec![b'#'; in_front];
    buf.extend_from_slice(value);
    (buf.into_boxed_slice(), in_front)
}

#[test]
fn a_value_received_in_place_is_stored_without_a_copy() {
    let s = store_mb(64);
    let value: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (buf, at) = received(&value, 64);
    let where_received = buf[at..].as_ptr();
    let r = s.store_owned(StoreMode::Set, b"big", 7, 0, buf, at, value.len(), T0);
    assert_eq!(r.result, StoreResult::Stored);
    let (ptr, got) = s
        .get(b"big", T0, |v| {
            v.map(|v| (v.value.as_ptr(), v.value.to_vec()))
        })
        .unwrap();
    assert_eq!(ptr, where_received);
    assert_eq!(got, value);
    assert_eq!(get(&s, "big", T0).map(|(_, f, c)| (f, c)), Some((7, r.cas)));
    // Modes keep their rules: add refuses an existing key, cas compares.
    let (buf, at) = received(&value, 64);
    let add = s.store_owned(StoreMode::Add, b"big", 0, 0, buf, at, value.len(), T0);
    assert_eq!(add.result, StoreResult::NotStored);
    let (buf, at) = received(b"new", 40);
    let cas = s.store_owned(StoreMode::Cas(r.cas + 1), b"big", 0, 0, buf, at, 3, T0);
    assert_eq!(cas.result, StoreResult::Exists);
    let (buf, at) = received(b"new", 40);
    let cas = s.store_owned(StoreMode::Cas(r.cas), b"big", 0, 0, buf, at, 3, T0);
    assert_eq!(cas.result, StoreResult::Stored);
    assert_eq!(val(&s, "big", T0).as_deref(), Some("new"));
    // No room for a header in front: stored by copying.
    let (buf, at) = received(b"tight", 3);
    let r = s.store_owned(StoreMode::Set, b"tight", 0, 0, buf, at, 5, T0);
    assert_eq!(r.result, StoreResult::Stored);
    assert_eq!(val(&s, "tight", T0).as_deref(), Some("tight"));
    // Append copies (it needs the old value too).
    let (buf, at) = received(b"!", 64);
    let r = s.store_owned(StoreMode::Append, b"tight", 0, 0, buf, at, 1, T0);
    assert_eq!(r.result, StoreResult::Stored);
    assert_eq!(val(&s, "tight", T0).as_deref(), Some("tight!"));
}

#[test]
fn values_received_in_place_survive_eviction_expiry_and_reclaim() {
    // 4 MiB: 100 KB values evict each other; the filler in front of every value must keep
    // segment walks (eviction, reclaim, flush) on item boundaries.
    let s = store_mb(4);
    for i in 0..200u32 {
        let value = vec![b'a' + (i % 26) as u8; 100_000 + i as usize];
        let in_front = 19 + (i as usize * 7) % 200;
        let (buf, at) = received(&value, in_front + 30);
        let exptime = if i % 3 == 0 { T0 + 5 } else { 0 };
        let key = format!("v{i}");
        let r = s.store_owned(
            StoreMode::Set,
            key.as_bytes(),
            0,
            exptime,
            buf,
            at,
            value.len(),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
    }
    assert!(s.stats().counters.evictions > 0);
    s.reclaim(T0 + 10, 100_000);
    for i in 0..200u32 {
        if let Some(v) = val(&s, &format!("v{i}"), T0 + 10) {
            assert_eq!(v.len(), 100_000 + i as usize);
            assert!(v.bytes().all(|b| b == b'a' + (i % 26) as u8));
            assert_ne!(i % 3, 0, "v{i} expired");
        }
    }
    s.flush_all(0, T0 + 10);
    assert!((0..200).all(|i| val(&s, &format!("v{i}"), T0 + 11).is_none()));
    assert!(s.mem_used() <= s.mem_limit());
}

#[test]
fn fillers_cover_every_gap_size() {
    for n in [0, item::MIN_ITEM, 100, 146, 147, 148, 300, 2100, 16_403] {
        let mut buf = vec![0xAAu8; n];
        item::write_filler(&mut buf);
        if n > 0 {
            let l = item::parse(&buf);
            assert_eq!(l.total(), n);
            assert_ne!(l.bits & item::DEAD, 0);
        }
    }
}

#[test]
fn a_pinned_large_value_outlives_its_item() {
    let s = store_mb(8);
    let old = vec![b'a'; 50_000];
    s.store(StoreMode::Set, b"big", 0, 0, &old, T0);
    let used = s.stats().mem_used;
    let pin = s
        .get(b"big", T0, |it| it.unwrap().pin())
        .expect("a large item pins");
    // Replaced, then deleted, while a reply is still writing the old value.
    s.store(StoreMode::Set, b"big", 0, 0, &[b'b'; 50_000], T0);
    assert_eq!(get(&s, "big", T0).unwrap().0, vec![b'b'; 50_000]);
    s.delete(b"big", T0, &DeleteOpts::default());
    assert_eq!(pin.bytes(), &old[..]);
    // The limit counts stored items: the pinned buffer is no longer charged.
    assert!(s.stats().mem_used < used);
    assert_eq!(s.stats().large_items, 0);
    set(&s, "small", "x", T0);
    assert!(s.get(b"small", T0, |it| it.unwrap().pin()).is_none());
}

#[test]
fn incr_replaces_a_large_value_that_is_being_read() {
    let s = store_mb(8);
    let none = ArithOpts::default();
    let mut padded = b"41".to_vec();
    padded.resize(20_000, b' ');
    s.store(StoreMode::Set, b"n", 0, 0, &padded, T0);
    let pin = s.get(b"n", T0, |it| it.unwrap().pin()).unwrap();
    let r = s.incr_decr(b"n", true, 1, T0, &none);
    assert!(matches!(r, ArithResult::Ok { value: 42, .. }));
    assert_eq!(pin.bytes(), &padded[..]);
    assert_eq!(val(&s, "n", T0).as_deref(), Some("42"));
    drop(pin);
    // Nobody reading: memcached's rewrite in place, padded to the old length.
    s.store(StoreMode::Set, b"n", 0, 0, &padded, T0);
    let r = s.incr_decr(b"n", true, 1, T0, &none);
    assert!(matches!(r, ArithResult::Ok { value: 42, .. }));
    let v = get(&s, "n", T0).unwrap().0;
    assert_eq!(v.len(), 20_000);
    assert!(v.starts_with(b"42 "));
}

#[test]
fn a_pinned_value_is_read_while_its_header_changes() {
    let s = Arc::new(store_mb(8));
    let v = vec![b'p'; 10_000];
    s.store(StoreMode::Set, b"big", 0, 0, &v, T0);
    let pin = s.get(b"big", T0, |it| it.unwrap().pin()).unwrap();
    let reader =
        std::thread::spawn(move || (0..20).all(|_| pin.bytes().iter().all(|&b| b == b'p')));
    for i in 0..20 {
        // Each get rewrites the item's header (fetched bit, last access); gat its exptime.
        assert!(s.get(b"big", T0 + i, |it| it.is_some()));
        assert!(s.gat(b"big", T0 + 1000, T0 + i, |it| it.is_some()));
    }
    s.delete(b"big", T0, &DeleteOpts::default());
    assert!(reader.join().unwrap());
}

#[test]
fn reserving_for_a_value_under_way_evicts_and_counts_against_the_limit() {
    let s = store_mb(8);
    let v = "r".repeat(100_000);
    for i in 0..70 {
        set(&s, &format!("r{i}"), &v, T0);
    }
    let before = s.mem_used();
    assert!(s.reserve(4 << 20), "evicts to make room");
    let kept = (0..70)
        .filter(|i| val(&s, &format!("r{i}"), T0).is_some())
        .count();
    assert!(kept < 70, "items evicted for the reservation");
    assert!(s.mem_used() <= 8 << 20);
    assert!(!s.reserve(16 << 20), "more than the limit");
    s.unreserve(4 << 20);
    assert!(s.mem_used() < before);
}

#[test]
fn without_evictions_a_full_store_refuses_stores_and_reservations() {
    let s = Store::new(Config {
        mem_limit: 8 << 20,
        item_size_max: 1 << 20,
        process_start: START,
        evictions: false,
    });
    let v = "n".repeat(100_000);
    let refused = (0..200)
        .map(|i| set(&s, &format!("n{i}"), &v, T0).result)
        .filter(|r| *r == StoreResult::NoMemory)
        .count();
    assert!(refused > 50, "{refused}");
    assert_eq!(val(&s, "n0", T0).as_deref(), Some(v.as_str()));
    assert_eq!(s.stats().counters.evictions, 0);
    assert!(!s.reserve(1 << 20));
}
