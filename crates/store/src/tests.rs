//! Whole-store properties: a model check against a map, threads, stats.

use crate::test_util::*;
use crate::*;
use std::sync::Arc;

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
    let r = s.store(
        StoreRequest::new(StoreMode::Set, b"k", b"v").exptime(s.exptime(-1, T0)),
        T0,
    );
    assert_eq!(r.result, StoreResult::Stored);
    assert_eq!(val(&s, "k", T0), None);
    s.store(
        StoreRequest::new(StoreMode::Set, b"a", b"v").exptime(s.exptime(T0 as i64 + 2, T0)),
        T0,
    );
    assert!(val(&s, "a", T0 + 1).is_some());
    assert!(val(&s, "a", T0 + 2).is_none());
    s.store(StoreRequest::new(StoreMode::Set, b"b", b"v"), T0);
    assert!(val(&s, "b", u32::MAX - 1).is_some());
}

#[test]
fn store_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
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
                        s.store(StoreRequest::new(StoreMode::Set, k.as_bytes(), &v), T0);
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
                        let r = s.store(StoreRequest::new(mode, &key, &v).flags(flags).exptime(exp), now);
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

#[test]
fn reserving_for_a_value_under_way_evicts_and_counts_against_the_limit() {
    let s = store_mb(8);
    let v = "r".repeat(100_000);
    for i in 0..70 {
        set(&s, &format!("r{i}"), &v, T0);
    }
    let before = s.mem_used();
    assert!(s.reserve(2 << 20), "evicts to make room");
    let kept = (0..70)
        .filter(|i| val(&s, &format!("r{i}"), T0).is_some())
        .count();
    assert!(kept < 70, "items evicted for the reservation");
    assert!(s.mem_used() <= 8 << 20);
    assert!(!s.reserve(16 << 20), "more than the limit");
    s.unreserve(2 << 20);
    assert!(s.mem_used() < before);
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn values_under_way_hold_at_most_their_cap_together() {
    let s = store_mb(64);
    let cap = s.in_flight_cap();
    assert_eq!(cap, 16 << 20, "a quarter of -m 64");
    let v = "c".repeat(1000);
    for i in 0..40_000 {
        set(&s, &format!("c{i}"), &v, T0);
    }
    let step = 64 << 10;
    let mut held = 0;
    while s.reserve(step) {
        held += step;
        assert!(held <= cap, "reservations past the cap");
    }
    assert_eq!(held, cap, "refused only at the cap");
    assert_eq!(s.in_flight(), cap);
    // The cap bounds what stalled values can evict: most of the items are still there.
    let kept = (0..40_000)
        .filter(|i| val(&s, &format!("c{i}"), T0).is_some())
        .count();
    assert!(kept > 30_000, "only the cap's worth evicted, kept {kept}");
    s.unreserve(step);
    assert!(s.reserve(step), "room again once one is given back");
    s.unreserve(cap);
    assert_eq!(s.in_flight(), 0);
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
    assert_eq!(s.in_flight(), 0, "a refused reservation holds nothing");
}

/// The item encoding's variable-width fields at their edges, through the whole store: cas
/// values around 2^32 (4 or 8 bytes), flags 0 (no field) / 1 / max, exptime never / past /
/// far future, 1- and 250-byte keys, empty and 1 MiB values.
#[test]
fn variable_width_fields_round_trip_at_their_edges() {
    let s = Store::new(Config {
        mem_limit: 64 << 20,
        item_size_max: 2 << 20,
        process_start: START,
        evictions: true,
    });
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let k250 = vec![b'k'; 250];
    let mut n = 0u32;
    for cas in [
        None,
        Some(1),
        Some(u32::MAX as u64),
        Some(1 << 32),
        Some(u64::MAX),
    ] {
        for flags in [0, 1, u32::MAX] {
            for exptime in [0, EXPIRED, T0 + 10 * 365 * 86_400] {
                for key in [&b"q"[..], &k250[..]] {
                    for value in [&b""[..], &big[..]] {
                        n += 1;
                        // Distinct keys of both lengths: a counter in the first bytes.
                        let mut key = key.to_vec();
                        let tag = format!("{n}");
                        if key.len() > tag.len() {
                            key[..tag.len()].copy_from_slice(tag.as_bytes());
                        } else {
                            key = tag.into_bytes();
                        }
                        let opts = StoreOpts {
                            new_cas: cas,
                            ..StoreOpts::default()
                        };
                        let mut req = StoreRequest::new(StoreMode::Set, &key, value)
                            .flags(flags)
                            .exptime(exptime);
                        req.opts = opts;
                        let r = s.store(req, T0);
                        assert_eq!(r.result, StoreResult::Stored);
                        if let Some(c) = cas {
                            assert_eq!(r.cas, c);
                        }
                        let got = s.peek(&key, T0, |v| {
                            v.map(|v| (v.value.to_vec(), v.flags, v.cas, v.exptime, v.last_access))
                        });
                        if exptime == EXPIRED {
                            assert_eq!(got, None);
                            continue;
                        }
                        let (v, f, c, e, _) = got.expect("stored");
                        assert_eq!((&v[..], f, c, e), (value, flags, r.cas, exptime));
                    }
                }
            }
        }
    }
}

/// An item written with a 4-byte cas whose cas must change in place to one that needs 8:
/// incr/decr and `md I` store a wide copy instead of overwriting the neighbours.
#[test]
fn in_place_cas_updates_past_two_to_the_32() {
    let s = store_mb(8);
    let r = s.store(
        StoreRequest::new(StoreMode::Set, b"n", b"10")
            .flags(u32::MAX)
            .exptime(T0 + 50),
        T0,
    );
    assert!(r.cas <= u32::MAX as u64);
    let wide = (1u64 << 40) + 3;
    let opts = ArithOpts {
        new_cas: Some(wide),
        ..ArithOpts::default()
    };
    assert_eq!(
        s.incr_decr(b"n", true, 5, T0, &opts),
        ArithResult::Ok {
            value: 15,
            cas: wide,
            exptime: T0 + 50
        }
    );
    let view = |k: &[u8]| {
        s.peek(k, T0, |v| {
            v.map(|v| {
                (
                    String::from_utf8(v.value.to_vec()).unwrap(),
                    v.flags,
                    v.cas,
                    v.exptime,
                )
            })
        })
    };
    assert_eq!(view(b"n"), Some(("15".into(), u32::MAX, wide, T0 + 50)));
    // A fitting cas on the (now wide) item stays in place.
    let opts = ArithOpts {
        new_cas: Some(7),
        ..ArithOpts::default()
    };
    assert!(matches!(
        s.incr_decr(b"n", false, 1, T0, &opts),
        ArithResult::Ok {
            value: 14,
            cas: 7,
            ..
        }
    ));
    assert_eq!(view(b"n"), Some(("14".into(), u32::MAX, 7, T0 + 50)));

    // md I: the shard's next cas is past 2^32 while the item's field is 4 bytes.
    let r = s.store(
        StoreRequest::new(StoreMode::Set, b"i", b"value").flags(3),
        T0,
    );
    assert!(r.cas <= u32::MAX as u64);
    let (_, si) = s.route(b"i");
    s.lock(si).set_cas_counter(1 << 32);
    let inv = DeleteOpts {
        invalidate: true,
        new_exptime: Some(T0 + 30),
        ..DeleteOpts::default()
    };
    assert_eq!(s.delete(b"i", T0, &inv), DeleteResult::Deleted);
    let (v, f, c, e) = view(b"i").expect("kept, stale");
    assert_eq!((v.as_str(), f, e), ("value", 3, T0 + 30));
    assert!(c > u32::MAX as u64, "new cas {c}");
    s.peek(b"i", T0, |v| assert!(v.unwrap().stale));
    // New items from that shard now carry 8-byte cas values.
    let r = s.store(StoreRequest::new(StoreMode::Set, b"i", b"again"), T0);
    assert!(r.cas > u32::MAX as u64);
    assert_eq!(view(b"i"), Some(("again".into(), 0, r.cas, 0)));
}

/// Values received in place with exactly the room for a wide-cas header with an exptime (kept
/// so), or with room for a filler in front (narrowed and without exptime when the filler can
/// take 4 or 8 more bytes).
#[test]
fn values_received_in_place_with_any_room_read_back() {
    let s = store_mb(16);
    let value: Vec<u8> = (0..100_000u32).map(|i| (i % 249) as u8).collect();
    // key 3 + 2 + varint 3 + wide cas/exptime/time 16.
    let head = 24;
    for room in [0, 3, 4, 7, 8, 11, 12, 15, 40, 16_000] {
        let key = format!("r{room:02}");
        let (buf, at) = received(&value, head + room);
        let r = s.store(
            StoreRequest::received(StoreMode::Set, key.as_bytes(), buf, at, value.len()),
            T0,
        );
        assert_eq!(r.result, StoreResult::Stored);
        assert_eq!(
            get(&s, &key, T0),
            Some((value.clone(), 0, r.cas)),
            "room {room}"
        );
    }
    // Segment walks (reclaim, flush) still land on item boundaries.
    s.reclaim(T0 + 1, 1_000);
    s.flush_all(0, T0 + 2);
    assert!(s.is_empty());
}

/// Items stored without a TTL carry no exptime field; every way of giving them one later
/// (touch, gat, mg T, md I T, ma N) copies them to an item that has it, keeping value, flags
/// and cas; a TTL of 0 is written in place.
#[test]
fn a_ttl_given_later_to_an_item_stored_without_one_is_kept() {
    let s = store_mb(8);
    let view = |k: &[u8], now| {
        s.peek(k, now, |v| {
            v.map(|v| (v.value.to_vec(), v.flags, v.cas, v.exptime))
        })
    };
    let put = |k: &[u8], flags| {
        s.store(
            StoreRequest::new(StoreMode::Set, k, b"value").flags(flags),
            T0,
        )
        .cas
    };
    let before = s.stats().counters.bytes;
    let c = put(b"t", 5);
    // 5-byte value + 1-byte key + bits, key length, value length, time, flags, cas.
    assert_eq!(s.stats().counters.bytes - before, 6 + 3 + 2 + 4 + 4);
    assert_eq!(s.touch(b"t", T0 + 10, T0), TouchResult::Touched);
    assert_eq!(view(b"t", T0), Some((b"value".to_vec(), 5, c, T0 + 10)));
    assert_eq!(view(b"t", T0 + 10), None, "expired at its new TTL");

    let c = put(b"g", 0);
    let e = s.gat(b"g", T0 + 20, T0, |v| v.map(|v| (v.cas, v.exptime)));
    assert_eq!(e, Some((c, T0 + 20)));
    assert_eq!(view(b"g", T0 + 19).map(|v| v.3), Some(T0 + 20));
    // Back to 0 in place, then a TTL again.
    assert_eq!(s.touch(b"g", 0, T0), TouchResult::Touched);
    assert_eq!(view(b"g", T0 + 30), Some((b"value".to_vec(), 0, c, 0)));
    assert_eq!(s.touch(b"g", T0 + 40, T0), TouchResult::Touched);
    assert_eq!(view(b"g", T0 + 39).map(|v| v.3), Some(T0 + 40));

    let c = put(b"m", 7);
    let opts = MetaGetOpts {
        touch: Some(T0 + 30),
        ..MetaGetOpts::default()
    };
    let e = s.meta_get(b"m", T0, &opts, |v| v.map(|(v, _)| v.exptime));
    assert_eq!(e, Some(T0 + 30));
    assert_eq!(view(b"m", T0), Some((b"value".to_vec(), 7, c, T0 + 30)));
    // mg N: the placeholder is written with its TTL.
    let opts = MetaGetOpts {
        vivify: Some(T0 + 60),
        ..MetaGetOpts::default()
    };
    s.meta_get(b"new", T0, &opts, |v| {
        assert!(v.is_none_or(|(_, mf)| mf.win))
    });
    assert_eq!(view(b"new", T0).map(|v| v.3), Some(T0 + 60));

    put(b"d", 9);
    let inv = DeleteOpts {
        invalidate: true,
        new_exptime: Some(T0 + 40),
        ..DeleteOpts::default()
    };
    assert_eq!(s.delete(b"d", T0, &inv), DeleteResult::Deleted);
    let (v, f, _, e) = view(b"d", T0).expect("kept, stale");
    assert_eq!((&v[..], f, e), (&b"value"[..], 9, T0 + 40));

    s.store(StoreRequest::new(StoreMode::Set, b"n", b"41"), T0);
    let opts = ArithOpts {
        new_exptime: Some(T0 + 50),
        ..ArithOpts::default()
    };
    assert!(matches!(
        s.incr_decr(b"n", true, 1, T0, &opts),
        ArithResult::Ok { value: 42, exptime, .. } if exptime == T0 + 50
    ));
    assert_eq!(view(b"n", T0).map(|v| v.3), Some(T0 + 50));
    // Segment walks still land on item boundaries after all these copies.
    s.reclaim(T0 + 45, 1_000);
    assert_eq!(view(b"n", T0 + 45).map(|v| v.3), Some(T0 + 50));
    assert_eq!(view(b"t", T0 + 45), None);
}

/// Under -M (no evictions) giving a TTL later must never need memory that could be refused
/// (memcached's touch never fails): items keep an exptime field from the start.
#[test]
fn without_evictions_items_keep_an_exptime_field() {
    let s = Store::new(Config {
        mem_limit: 1 << 20,
        item_size_max: 1 << 20,
        process_start: START,
        evictions: false,
    });
    let v = vec![b'x'; 1000];
    let mut n = 0;
    while s
        .store(
            StoreRequest::new(StoreMode::Set, format!("k{n}").as_bytes(), &v),
            T0,
        )
        .result
        == StoreResult::Stored
    {
        n += 1;
    }
    assert!(n > 100);
    for i in 0..n {
        let k = format!("k{i}");
        assert_eq!(
            s.touch(k.as_bytes(), T0 + 100, T0),
            TouchResult::Touched,
            "{k}"
        );
    }
    assert_eq!(s.len(), n);
}

/// An item's access time is kept in 16 bits (see item.rs). With `reclaim` walking the store
/// as the server has it do, an idle time reads exactly up to 12 hours and as 12 hours beyond,
/// and a delayed flush_all still takes an item last touched ~36 hours before it, which a bare
/// 16-bit stamp would read as touched after the cutoff.
#[test]
fn idle_times_past_the_16_bit_stamp_stay_readable_and_flushable() {
    let s = store_mb(8);
    set(&s, "idle", "v", T0);
    let idle = |k: &str, now: u32| s.peek(k.as_bytes(), now, |v| v.map(|v| now - v.last_access));
    // Flushed at `flush`, checked 1,000 s later: the item was last touched exactly two
    // 16-bit spans before the check minus 500 s.
    let flush = T0 + 2 * 65_536 - 500;
    let mut now = T0;
    while now + 60 < flush {
        now += 60;
        s.reclaim(now, 1_000);
        assert_eq!(
            idle("idle", now),
            Some((now - T0).min(crate::item::IDLE_CAP))
        );
    }
    set(&s, "read", "v", now);
    assert_eq!(val(&s, "read", now + 5).as_deref(), Some("v"));
    assert_eq!(
        idle("read", now + 7),
        Some(2),
        "a read stamps the exact time"
    );
    s.flush_all(10, flush);
    set(&s, "new", "v", flush + 20);
    assert_eq!(val(&s, "idle", flush + 1_000), None);
    assert_eq!(val(&s, "read", flush + 1_000), None);
    assert_eq!(val(&s, "new", flush + 1_000).as_deref(), Some("v"));
}

/// An index doubling moved every entry of the shard in the one write that needed
/// room, under the shard lock (4 ms at a 1 GB cache's fourth doubling). Now the doubled table
/// takes writes at once and the old entries move over a few buckets per write: a growth
/// leaves the shard mid-resize, every item stays readable meanwhile, and the resize ends.
#[test]
fn index_doublings_move_entries_over_later_writes() {
    let s = store_mb(64);
    let resizing = |s: &Store| (0..NSHARDS).filter(|&i| s.lock(i).index.resizing()).count();
    let buckets = |s: &Store| {
        (0..NSHARDS)
            .map(|i| s.lock(i).index.nbuckets())
            .sum::<usize>()
    };
    let start = buckets(&s);
    let (mut seen_resizing, mut written) = (0, 0u64);
    for i in 0..80_000 {
        set(&s, &format!("k:{i}"), "v", T0);
        written += 1;
        seen_resizing = seen_resizing.max(resizing(&s));
        if i % 4_000 == 3_999 {
            for j in (0..written).step_by(7) {
                assert_eq!(
                    val(&s, &format!("k:{j}"), T0).as_deref(),
                    Some("v"),
                    "k:{j}"
                );
            }
        }
    }
    assert!(buckets(&s) >= 2 * start, "the index grew");
    assert!(
        seen_resizing >= 8,
        "growth left shards mid-resize ({seen_resizing} at most)"
    );
    // Background passes finish a resize that writes left off.
    for _ in 0..1_000 {
        if resizing(&s) == 0 {
            break;
        }
        s.reclaim(T0, 16);
    }
    assert_eq!(resizing(&s), 0);
    for j in 0..written {
        assert_eq!(
            val(&s, &format!("k:{j}"), T0).as_deref(),
            Some("v"),
            "k:{j}"
        );
    }
    assert_eq!(s.stats().counters.curr_items, written);
}

#[test]
fn the_last_index_doubling_charges_the_old_table_until_it_is_moved() {
    let s = store_mb(64);
    let in_last_doubling = |s: &Store| {
        (0..NSHARDS).find(|&i| {
            let sh = s.lock(i);
            sh.index.resizing() && sh.index.nbuckets() == sh.index_reserved
        })
    };
    let mut i = 0;
    let shard = loop {
        set(&s, &format!("k:{i}"), "v", T0);
        i += 1;
        if let Some(shard) = in_last_doubling(&s) {
            break shard;
        }
        assert!(i < 1_000_000, "no shard reached its last doubling");
    };
    {
        let sh = s.lock(shard);
        let held = (sh.index.bytes() + sh.index.old_bytes()) as u64;
        assert_eq!(sh.index_charged, held, "both tables charged mid-move");
        assert_eq!(sh.index_move_charged, sh.index.old_bytes() as u64);
    }
    let used_mid_move = s.mem_used();
    for _ in 0..1_000 {
        if !s.lock(shard).index.resizing() {
            break;
        }
        s.reclaim(T0, 16);
    }
    let sh = s.lock(shard);
    assert!(!sh.index.resizing());
    assert_eq!(sh.index_move_charged, 0);
    assert_eq!(
        sh.index_charged,
        sh.index.bytes() as u64,
        "back to the reservation"
    );
    drop(sh);
    assert!(
        s.mem_used() < used_mid_move,
        "the old table's charge was given back"
    );
}
