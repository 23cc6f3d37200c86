//! The flash tier end to end through the store's commands, on a device in memory.

use crate::flash::tests::MemDevice;
use crate::test_util::*;
use crate::*;

fn flash_store(mb: u64, dev: &MemDevice, page: u64) -> Store {
    flash_store_with(mb, dev, page, |_| {})
}

/// `flash_store` with its flash settings changed by `tune` (they start with no recaching).
fn flash_store_with(
    mb: u64,
    dev: &MemDevice,
    page: u64,
    tune: impl FnOnce(&mut FlashConfig),
) -> Store {
    let mut flash = FlashConfig {
        page_size: page,
        wbuf_size: 256 << 10,
        item_size: 512,
        low_ttl: 0,
        recache_rate: 0,
        ..FlashConfig::default()
    };
    tune(&mut flash);
    Store::with_flash(
        Config {
            mem_limit: mb << 20,
            item_size_max: 1 << 20,
            process_start: START,
            evictions: true,
        },
        Box::new(dev.clone()),
        flash,
    )
    .unwrap()
}

fn value(i: usize, version: u32) -> String {
    let head = format!("v{version}:{i}:");
    head.clone() + &"x".repeat(1000 - head.len())
}

fn key(i: usize) -> String {
    format!("key:{i:08}")
}

/// Writes `n` 1,000-byte values at 2 MiB of memory: most of them end up on flash.
fn filled(n: usize, dev: &MemDevice) -> Store {
    let s = flash_store(2, dev, 1 << 20);
    for i in 0..n {
        assert_eq!(
            set(&s, &key(i), &value(i, 1), T0).result,
            StoreResult::Stored
        );
    }
    s
}

#[test]
fn items_evicted_from_memory_read_back_from_flash() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(20_000, &dev);
    let st = s.stats();
    let fl = st.flash.unwrap();
    assert!(st.counters.flash_items > 15_000, "{st:?}");
    assert_eq!(st.counters.evictions, 0);
    assert_eq!(s.len(), 20_000);
    for i in 0..20_000 {
        assert_eq!(
            val(&s, &key(i), T0).as_deref(),
            Some(value(i, 1).as_str()),
            "{i}"
        );
    }
    let st = s.stats();
    assert!(st.counters.get_extstore > 15_000);
    assert!(fl.bytes_written > 15_000 * 1000);
    // Small values are evicted as without flash.
    let small = flash_store(2, &dev, 1 << 20);
    for i in 0..40_000 {
        set(&small, &key(i), "tiny value", T0);
    }
    assert_eq!(small.stats().counters.flash_items, 0);
}

#[test]
fn commands_see_flash_items_as_memory_ones() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(10_000, &dev);
    let on_flash = |s: &Store| s.stats().counters.flash_items;
    let before = on_flash(&s);
    // add fails on a key on flash, replace and append work on it, delete removes it.
    let add = s.store(
        StoreRequest::new(StoreMode::Add, key(1).as_bytes(), b"no"),
        T0,
    );
    assert_eq!(add.result, StoreResult::NotStored);
    let app = s.store(
        StoreRequest::new(StoreMode::Append, key(2).as_bytes(), b"!"),
        T0,
    );
    assert_eq!(app.result, StoreResult::Stored);
    assert_eq!(val(&s, &key(2), T0), Some(value(2, 1) + "!"));
    assert_eq!(
        s.delete(key(3).as_bytes(), T0, &DeleteOpts::default()),
        DeleteResult::Deleted
    );
    assert_eq!(val(&s, &key(3), T0), None);
    assert_eq!(s.touch(key(4).as_bytes(), T0 + 5, T0), TouchResult::Touched);
    assert_eq!(val(&s, &key(4), T0 + 6), None);
    // A plain set replaces the flash copy without reading it: once the new (small) value
    // is evicted, the old one does not come back.
    let written = |s: &Store| s.stats().flash.unwrap().objects_written;
    let (flashed, was_written) = (on_flash(&s), written(&s));
    set(&s, &key(5), "short", T0);
    // Less its old copy, plus what the set moved to flash as it made room.
    assert_eq!(on_flash(&s), flashed - 1 + (written(&s) - was_written));
    assert_eq!(val(&s, &key(5), T0).as_deref(), Some("short"));
    for i in 10_000..14_000 {
        set(&s, &key(i), &value(i, 1), T0);
    }
    assert_ne!(val(&s, &key(5), T0), Some(value(5, 1)));
    assert!(on_flash(&s) >= before - 10);
    // flush_all drops them all.
    s.flush_all(0, T0 + 1);
    assert_eq!(val(&s, &key(7_000), T0 + 2), None);
    assert_eq!(s.stats().counters.flash_items, 0);
}

#[test]
fn a_wrapped_log_makes_its_oldest_items_misses_never_wrong_values() {
    let dev = MemDevice::new(4 << 20);
    let s = filled(12_000, &dev);
    let mut hits = 0;
    for i in 0..12_000 {
        if let Some(v) = val(&s, &key(i), T0) {
            assert_eq!(v, value(i, 1));
            hits += 1;
        }
    }
    let st = s.stats();
    // Gets do not bring items back (recache rate 0), so reading adds no writes.
    assert!(hits < 12_000 && hits > 3_000, "{hits}");
    let written = st.flash.unwrap().objects_written;
    for i in 0..12_000 {
        val(&s, &key(i), T0);
    }
    assert_eq!(s.stats().flash.unwrap().objects_written, written);
    assert!(st.flash.unwrap().page_evictions > 0);
    assert!(st.counters.miss_from_extstore > 0);
    // Reclaim sweeps the entries of dropped pages.
    s.reclaim(T0, 100);
    assert_eq!(
        s.stats().counters.flash_items,
        s.stats().flash.unwrap().objects_used
    );
}

#[test]
fn corrupt_flash_bytes_are_misses_counted_as_bad() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(8_000, &dev);
    s.reclaim(T0, 1);
    {
        let mut b = dev.bytes.lock().unwrap();
        for off in (0..(4 << 20)).step_by(97) {
            b[off] ^= 0x5a;
        }
    }
    let mut hits = 0;
    for i in 0..8_000 {
        if let Some(v) = val(&s, &key(i), T0) {
            assert_eq!(v, value(i, 1), "{i}");
            hits += 1;
        }
    }
    assert!(hits < 8_000);
    assert!(s.stats().counters.badcrc_from_extstore > 100);
}

#[test]
fn a_failed_device_stops_writes_and_keeps_memory_serving() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(5_000, &dev);
    dev.fail_writes
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for i in 5_000..10_000 {
        set(&s, &key(i), &value(i, 1), T0);
    }
    assert!(s.flash_error().unwrap().contains("writing"));
    assert!(s.flash_error().is_none());
    assert!(s.stats().counters.evictions > 0);
    assert_eq!(val(&s, &key(9_999), T0), Some(value(9_999, 1)));
    for i in 0..5_000 {
        if let Some(v) = val(&s, &key(i), T0) {
            assert_eq!(v, value(i, 1));
        }
    }
}

/// 8,000 values at 2 MiB of memory, one flash get in 4 bringing its item back.
fn recaching_one_in_4(dev: &MemDevice) -> Store {
    let s = flash_store_with(2, dev, 1 << 20, |c| c.recache_rate = 4);
    for i in 0..8_000 {
        set(&s, &key(i), &value(i, 1), T0);
    }
    s
}

#[test]
fn one_get_in_the_recache_rate_brings_its_item_back() {
    let s = recaching_one_in_4(&MemDevice::new(64 << 20));
    for i in 0..400 {
        assert_eq!(val(&s, &key(i), T0), Some(value(i, 1)));
    }
    let c = s.stats().counters;
    assert!(c.get_extstore >= 300, "{c:?}");
    assert!((90..=110).contains(&c.recache_from_extstore), "{c:?}");
}

#[test]
fn a_warm_restart_keeps_the_flash_items_and_memory_wins() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(10_000, &dev);
    // Newer values in memory for a few keys whose old values are on flash.
    for i in 0..5 {
        set(&s, &key(i), "newer", T0);
    }
    let on_flash = s.stats().counters.flash_items;
    assert!(on_flash > 5_000);
    let mut mem = Vec::new();
    s.save_snapshot(&mut mem, "test", T0).unwrap();
    let mut idx = Vec::new();
    assert_eq!(s.save_flash_index(&mut idx).unwrap(), on_flash);
    drop(s);

    let again = flash_store(2, &dev, 1 << 20);
    let r = again.load_flash_index(&idx[..], T0).unwrap();
    assert_eq!(r.restored, on_flash);
    again.load_snapshot(&mem[..], T0).unwrap();
    for i in 0..5 {
        assert_eq!(val(&again, &key(i), T0).as_deref(), Some("newer"));
    }
    for i in 5..10_000 {
        assert_eq!(val(&again, &key(i), T0), Some(value(i, 1)), "{i}");
    }
    // New writes go after what was kept, not over it.
    for i in 10_000..14_000 {
        set(&again, &key(i), &value(i, 2), T0);
    }
    assert_eq!(val(&again, &key(7), T0), Some(value(7, 1)));

    // A damaged or foreign index is refused whole.
    let third = flash_store(2, &dev, 1 << 20);
    let mut bad = idx.clone();
    bad[60] ^= 1;
    assert!(third
        .load_flash_index(&bad[..], T0)
        .unwrap_err()
        .contains("checksum"));
    let other = flash_store(2, &MemDevice::new(32 << 20), 1 << 20);
    assert!(other.load_flash_index(&idx[..], T0).is_err());
}

/// A get split in two as the server's I/O threads run it: locate under the lock, read with
/// no lock, answer from the bytes read.
fn split_get(s: &Store, k: &str) -> Option<String> {
    let text = |v: Option<ItemView<'_>>| v.map(|v| String::from_utf8(v.value.to_vec()).unwrap());
    match s.get_or_locate(k.as_bytes(), T0, text) {
        Ok(v) => v,
        Err(loc) => {
            let p = s.read_located(loc, Vec::new());
            s.get_prefetched(k.as_bytes(), T0, &p, text)
        }
    }
}

#[test]
fn a_get_split_around_its_flash_read_answers_as_get_does() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(20_000, &dev);
    let reads = |s: &Store| s.stats().flash.unwrap().objects_read;
    let (mut located, mut in_memory) = (0, 0);
    for i in 0..20_000 {
        let before = reads(&s);
        match s.get_or_locate(key(i).as_bytes(), T0, |v| v.is_some()) {
            Ok(hit) => {
                assert!(hit);
                in_memory += 1;
            }
            Err(loc) => {
                assert!(loc.read_bytes() > 1000);
                assert_eq!(s.locate(key(i).as_bytes(), T0), Some(loc));
                located += 1;
            }
        }
        // Locating never reads.
        assert_eq!(reads(&s), before);
    }
    assert!(located > 15_000 && in_memory > 0, "{located} {in_memory}");
    let hits_before = s.stats().counters.get_extstore;
    for i in 0..20_000 {
        assert_eq!(split_get(&s, &key(i)), Some(value(i, 1)), "{i}");
    }
    assert_eq!(s.stats().counters.get_extstore - hits_before, located);
    assert_eq!(split_get(&s, "no such key"), None);
}

#[test]
fn a_key_changed_after_it_was_located_is_looked_up_again() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(20_000, &dev);
    let on_flash: Vec<usize> = (0..20_000)
        .filter(|&i| s.locate(key(i).as_bytes(), T0).is_some())
        .take(3)
        .collect();
    let text = |v: Option<ItemView<'_>>| v.map(|v| String::from_utf8(v.value.to_vec()).unwrap());
    let read = |i: usize| {
        let loc = s.locate(key(i).as_bytes(), T0).unwrap();
        s.read_located(loc, Vec::new())
    };
    let (a, b, c) = (read(on_flash[0]), read(on_flash[1]), read(on_flash[2]));
    set(&s, &key(on_flash[0]), &value(on_flash[0], 2), T0);
    s.delete(key(on_flash[1]).as_bytes(), T0, &Default::default());
    assert_eq!(
        s.get_prefetched(key(on_flash[0]).as_bytes(), T0, &a, text),
        Some(value(on_flash[0], 2))
    );
    assert_eq!(
        s.get_prefetched(key(on_flash[1]).as_bytes(), T0, &b, text),
        None
    );
    // Bytes read for another key answer nothing for this one.
    assert_eq!(
        s.get_prefetched(key(on_flash[2]).as_bytes(), T0, &a, text),
        Some(value(on_flash[2], 1))
    );
    assert_eq!(
        s.get_prefetched(key(on_flash[2]).as_bytes(), T0, &c, text),
        Some(value(on_flash[2], 1))
    );
}

#[test]
fn split_gets_bring_back_one_in_the_recache_rate_without_reading_again() {
    let s = recaching_one_in_4(&MemDevice::new(64 << 20));
    let read_before = s.stats().flash.unwrap().objects_read;
    let mut located = 0;
    for i in 0..400 {
        if s.locate(key(i).as_bytes(), T0).is_some() {
            located += 1;
        }
        assert_eq!(split_get(&s, &key(i)), Some(value(i, 1)));
    }
    let st = s.stats();
    assert!(located >= 300, "{located}");
    assert_eq!(st.flash.unwrap().objects_read - read_before, located);
    let c = st.counters;
    assert!(
        (located / 4 - 10..=located / 4 + 10).contains(&c.recache_from_extstore),
        "{c:?}"
    );
    for i in 0..400 {
        assert_eq!(split_get(&s, &key(i)), Some(value(i, 1)));
    }
}

#[test]
fn an_item_brought_back_from_a_read_made_apart_needs_no_second_read() {
    let dev = MemDevice::new(64 << 20);
    let s = filled(20_000, &dev);
    let reads = |s: &Store| s.stats().flash.unwrap().objects_read;
    let on_flash: Vec<usize> = (0..20_000)
        .filter(|&i| s.locate(key(i).as_bytes(), T0).is_some())
        .take(3)
        .collect();
    let read = |i: usize| {
        let loc = s.locate(key(i).as_bytes(), T0).unwrap();
        s.read_located(loc, Vec::new())
    };
    let (a, b, c) = (read(on_flash[0]), read(on_flash[1]), read(on_flash[2]));
    let before = reads(&s);
    s.bring_back_prefetched(key(on_flash[0]).as_bytes(), T0, &a);
    assert_eq!(s.locate(key(on_flash[0]).as_bytes(), T0), None);
    // The command that follows runs on memory: no read of its own.
    assert_eq!(
        s.touch(key(on_flash[0]).as_bytes(), T0 + 5, T0),
        TouchResult::Touched
    );
    assert_eq!(val(&s, &key(on_flash[0]), T0), Some(value(on_flash[0], 1)));
    assert_eq!(reads(&s), before);
    // Bytes read for another key do not bring this one back: it is read again.
    s.bring_back_prefetched(key(on_flash[1]).as_bytes(), T0, &c);
    assert_eq!(reads(&s), before + 1);
    assert_eq!(val(&s, &key(on_flash[1]), T0), Some(value(on_flash[1], 1)));
    // A key set or deleted since its read keeps what it has now.
    set(&s, &key(on_flash[2]), "new", T0);
    s.bring_back_prefetched(key(on_flash[2]).as_bytes(), T0, &c);
    assert_eq!(val(&s, &key(on_flash[2]), T0).as_deref(), Some("new"));
    s.delete(key(on_flash[2]).as_bytes(), T0, &DeleteOpts::default());
    s.bring_back_prefetched(key(on_flash[2]).as_bytes(), T0, &c);
    assert_eq!(val(&s, &key(on_flash[2]), T0), None);
    // A key already in memory is left as it is.
    s.bring_back_prefetched(key(on_flash[0]).as_bytes(), T0, &b);
    assert_eq!(val(&s, &key(on_flash[0]), T0), Some(value(on_flash[0], 1)));
    assert_eq!(reads(&s), before + 1);
}

/// Writes 6,000 values, deletes three in four of the first 4,000 (their flash pages become
/// mostly dead), then writes 4,000 more: more than the 8-page log holds without reusing the
/// dead space. `compact`: the background compaction runs between batches of sets.
fn fragmented_then_filled(dev: &MemDevice, compact: bool) -> Store {
    let s = flash_store(2, dev, 1 << 20);
    for i in 0..6_000 {
        set(&s, &key(i), &value(i, 1), T0);
    }
    for i in (0..4_000).filter(|i| i % 4 != 0) {
        s.delete(key(i).as_bytes(), T0, &DeleteOpts::default());
    }
    let mut buf = Vec::new();
    for batch in (6_000..10_000).step_by(250) {
        for i in batch..batch + 250 {
            set(&s, &key(i), &value(i, 1), T0);
        }
        while compact && s.compact_flash(&mut buf, T0) > 0 {}
        s.reclaim(T0, 100_000);
    }
    s
}

fn kept(i: usize) -> bool {
    i >= 4_000 || i.is_multiple_of(4)
}

#[test]
fn compaction_keeps_the_live_items_of_fragmented_pages() {
    let dev = MemDevice::new(8 << 20);
    let s = fragmented_then_filled(&dev, true);
    for i in 0..10_000 {
        let want = kept(i).then(|| value(i, 1));
        assert_eq!(val(&s, &key(i), T0), want, "{i}");
    }
    let fl = s.stats().flash.unwrap();
    assert!(fl.compacted_pages >= 2, "{fl:?}");
    assert!(fl.compact_rescues > 200, "{fl:?}");
    assert_eq!((fl.page_evictions, fl.compact_lost), (0, 0), "{fl:?}");

    // Without compaction the log wraps over the oldest pages and their live items are lost.
    let dev = MemDevice::new(8 << 20);
    let s = fragmented_then_filled(&dev, false);
    let lost = (0..10_000)
        .filter(|&i| kept(i) && val(&s, &key(i), T0).is_none())
        .count();
    assert!(lost > 100, "{lost}");
    assert!(s.stats().flash.unwrap().page_evictions > 0);
}

#[test]
fn compaction_drops_expired_items_and_leaves_full_pages_alone() {
    let dev = MemDevice::new(8 << 20);
    let s = flash_store(2, &dev, 1 << 20);
    for i in 0..6_000 {
        let exptime = if i % 2 == 0 { T0 + 100 } else { 0 };
        s.store(
            StoreRequest {
                exptime,
                ..StoreRequest::new(StoreMode::Set, key(i).as_bytes(), value(i, 1).as_bytes())
            },
            T0,
        );
    }
    let mut buf = Vec::new();
    // Filled until compaction is due (fewer than a quarter of the pages free): every page
    // is full of live items, half of them expired (found only by reading), so nothing is
    // compacted.
    let mut i = 6_000;
    while s.stats().flash.unwrap().pages_free >= 2 {
        set(&s, &key(i), &value(i, 1), T0 + 200);
        i += 1;
        assert!(i < 9_000);
    }
    while s.compact_flash(&mut buf, T0 + 200) > 0 {}
    let fl = s.stats().flash.unwrap();
    assert_eq!((fl.compacted_pages, fl.page_evictions), (0, 0), "{fl:?}");
    // A page made mostly dead by deletes is compacted; its expired items are dropped.
    for i in (0..3_000).filter(|i| i % 4 == 1) {
        s.delete(key(i).as_bytes(), T0 + 200, &DeleteOpts::default());
    }
    while s.compact_flash(&mut buf, T0 + 200) > 0 {}
    let fl = s.stats().flash.unwrap();
    assert!(fl.compacted_pages > 0, "{fl:?}");
    assert!(fl.compact_skipped > 0 && fl.compact_rescues > 0, "{fl:?}");
    for i in (0..3_000).filter(|i| i % 4 == 3) {
        assert_eq!(val(&s, &key(i), T0 + 200), Some(value(i, 1)), "{i}");
    }
}

/// Fills an 8-page log (1 MiB pages, compaction due under 2 free) with full pages, reads keys
/// 1 (split around its read, as the I/O threads do) and 2 from flash but not key 0, all three
/// in the oldest page, and compacts with `ext_drop_unread`/`ext_drop_under` as given: whether
/// keys 0, 1 and 2 are still there, and the flash counters.
fn compacted_after_reads(drop_unread: bool, drop_under: u64) -> ([bool; 3], FlashStats) {
    let dev = MemDevice::new(8 << 20);
    let s = Store::with_flash(
        Config {
            mem_limit: 2 << 20,
            item_size_max: 1 << 20,
            process_start: START,
            evictions: true,
        },
        Box::new(dev),
        FlashConfig {
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            recache_rate: 0,
            drop_unread,
            drop_under: Some(drop_under),
            ..FlashConfig::default()
        },
    )
    .unwrap();
    let mut i = 0;
    while s.stats().flash.unwrap().pages_free >= 2 {
        set(&s, &key(i), &value(i, 1), T0);
        i += 1;
        assert!(i < 9_000);
    }
    assert_eq!(split_get(&s, &key(1)), Some(value(1, 1)));
    assert_eq!(val(&s, &key(2), T0), Some(value(2, 1)));
    // Both read from flash, not memory.
    assert_eq!(s.stats().counters.get_extstore, 2);
    let mut buf = Vec::new();
    // Bounded: a compaction that wrote every item again would never be done.
    for _ in 0..64 {
        if s.compact_flash(&mut buf, T0) == 0 {
            break;
        }
    }
    let there = [0, 1, 2].map(|k| val(&s, &key(k), T0).is_some());
    (there, s.stats().flash.unwrap())
}

#[test]
fn drop_unread_drops_the_unread_items_of_a_full_page_under_drop_under() {
    let (there, fl) = compacted_after_reads(true, 2);
    assert_eq!(there, [false, true, true], "{fl:?}");
    assert_eq!((fl.compacted_pages, fl.compact_rescues), (1, 2), "{fl:?}");
    assert!(fl.compact_skipped > 500, "{fl:?}");
    assert_eq!((fl.page_evictions, fl.compact_lost), (0, 0), "{fl:?}");
}

#[test]
fn full_pages_keep_their_items_without_drop_unread_or_above_drop_under() {
    for (drop_unread, drop_under) in [(false, 2), (true, 1), (true, 0)] {
        let (there, fl) = compacted_after_reads(drop_unread, drop_under);
        assert_eq!(there, [true; 3], "{drop_unread} {drop_under} {fl:?}");
        assert_eq!(
            (fl.compacted_pages, fl.compact_skipped, fl.compact_rescues),
            (0, 0, 0),
            "{drop_unread} {drop_under} {fl:?}"
        );
    }
}

#[test]
fn items_written_again_by_compaction_count_as_unread() {
    let dev = MemDevice::new(8 << 20);
    let s = flash_store(2, &dev, 1 << 20);
    for i in 0..6_000 {
        set(&s, &key(i), &value(i, 1), T0);
    }
    let (h, si) = s.route(key(0).as_bytes());
    let loc = |s: &Store| s.lock(si).flash_loc(h).unwrap();
    assert!(!loc(&s).was_read());
    assert_eq!(val(&s, &key(0), T0), Some(value(0, 1)));
    let read = loc(&s);
    assert!(read.was_read());
    let fl = s.g.flash.as_ref().unwrap();
    let item = {
        let mut b = Vec::new();
        assert_eq!(fl.read(read, &mut b), flash::ReadOutcome::Item);
        b
    };
    let l = crate::item::parse_checked(&item).unwrap();
    s.lock(si).rescue(&s.g, h, read, (&item, &l), T0, true);
    let moved = loc(&s);
    assert!(moved != read && !moved.was_read());
    assert_eq!(fl.stats().compact_rescues, 1);
}

mod compaction_of_damaged_pages {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Whatever bytes of the pages being compacted are damaged (a frame's length, its
        /// checksum, its item), compaction never crashes, and every key afterwards reads its
        /// own value or misses.
        #[test]
        fn never_gives_a_wrong_value(
            damage in proptest::collection::vec((0usize..(3 << 20), any::<u8>()), 1..64),
        ) {
            let dev = MemDevice::new(8 << 20);
            let s = flash_store(2, &dev, 1 << 20);
            for i in 0..6_000 {
                set(&s, &key(i), &value(i, 1), T0);
            }
            for i in (0..4_000).filter(|i| i % 4 != 0) {
                s.delete(key(i).as_bytes(), T0, &DeleteOpts::default());
            }
            {
                let mut b = dev.bytes.lock().unwrap();
                for &(off, x) in &damage {
                    b[off] ^= x | 1;
                }
            }
            let mut buf = Vec::new();
            for batch in (6_000..10_000).step_by(500) {
                for i in batch..batch + 500 {
                    set(&s, &key(i), &value(i, 1), T0);
                }
                while s.compact_flash(&mut buf, T0) > 0 {}
                s.reclaim(T0, 100_000);
            }
            for i in 0..10_000 {
                if let Some(v) = val(&s, &key(i), T0) {
                    prop_assert_eq!(v, value(i, 1), "{}", i);
                }
            }
        }
    }
}

/// A command on an item in the oldest memory of its shard may have to evict that very memory
/// to find room for its new copy: the item moves to flash meanwhile and is found there again.
#[test]
fn a_command_whose_allocation_evicts_its_own_item_still_finds_it() {
    let dev = MemDevice::new(64 << 20);
    type Command = fn(&Store, &[u8]) -> bool;
    let commands: [(&str, Command); 3] = [
        ("gat", |s, k| {
            s.gat(k, s.exptime(1000, T0), T0, |v| v.is_some())
        }),
        ("touch", |s, k| {
            s.touch(k, s.exptime(1000, T0), T0) == TouchResult::Touched
        }),
        ("append", |s, k| {
            let app = StoreRequest::new(StoreMode::Append, k, b"!");
            s.store(app, T0).result == StoreResult::Stored
        }),
    ];
    for (name, command) in commands {
        let s = filled(20_000, &dev);
        // Oldest first: each is in, or brought back next to, the memory evicted next.
        for i in 0..20_000 {
            assert!(command(&s, key(i).as_bytes()), "{name} {}", key(i));
        }
        assert_eq!(s.stats().counters.evictions, 0);
    }
}

/// A store at `mb` MiB with 1 MiB flash pages and `ext_item_age` = `item_age` (None: not
/// given).
fn aging_store(mb: u64, dev: &MemDevice, item_age: Option<u32>) -> Store {
    flash_store_with(mb, dev, 1 << 20, |c| {
        if let Some(age) = item_age {
            c.item_age = age;
        }
    })
}

/// Whether memory (not flash) holds the key.
fn in_memory(s: &Store, k: &str) -> bool {
    let (h, si) = s.route(k.as_bytes());
    let found = s.lock(si).find(h, k.as_bytes()).is_some();
    found
}

/// 2,000 idle 1,000-byte values, one read and one rewritten lately, one small value, at -m 8
/// (far from full), after maintenance passes at T0 + 1 and every second up to `last_pass`,
/// then at each of `later`.
fn aged(item_age: Option<u32>, last_pass: u32, later: &[u32]) -> Store {
    let dev = MemDevice::new(64 << 20);
    let s = aging_store(8, &dev, item_age);
    for i in 0..2_003 {
        set(&s, &key(i), &value(i, 1), T0);
    }
    set(&s, "small", "tiny value", T0);
    assert_eq!(val(&s, &key(2_000), T0 + 30), Some(value(2_000, 1)));
    set(&s, &key(2_001), &value(2_001, 2), T0 + 30);
    for now in (T0 + 1..=last_pass).chain(later.iter().copied()) {
        s.reclaim(now, 1_000);
    }
    s
}

#[test]
fn items_idle_past_ext_item_age_go_to_flash_and_read_back() {
    let before = aged(Some(60), T0, &[]).mem_used();
    // Idle 60 s is not more than 60 s: nothing moves yet.
    let s = aged(Some(60), T0 + 60, &[]);
    assert_eq!(s.stats().counters.flash_items, 0);
    let s = aged(Some(60), T0 + 64, &[]);
    let st = s.stats();
    let fl = st.flash.unwrap();
    assert_eq!(st.counters.flash_items, 2_001, "{st:?}");
    assert_eq!((fl.objects_written, fl.objects_used), (2_001, 2_001));
    assert_eq!(st.counters.curr_items, 3, "read, rewritten, small");
    assert_eq!(st.counters.evictions, 0);
    for k in [key(2_000), key(2_001), "small".into()] {
        assert!(in_memory(&s, &k), "{k}");
    }
    assert!(!in_memory(&s, &key(0)));
    // Their memory is given back, less the flash index's.
    assert!(
        st.mem_used + (3 << 19) < before,
        "{} of {before}",
        st.mem_used
    );
    assert!(st.mem_used <= s.mem_limit());
    for i in (0..2_000).chain([2_002]) {
        assert_eq!(val(&s, &key(i), T0 + 65), Some(value(i, 1)), "{i}");
    }
    assert_eq!(s.stats().counters.get_extstore, 2_001);
    assert_eq!(val(&s, &key(2_001), T0 + 65), Some(value(2_001, 2)));
    assert_eq!(val(&s, "small", T0 + 65).as_deref(), Some("tiny value"));
}

#[test]
fn without_ext_item_age_idle_items_stay_in_memory() {
    // Idle past any age the walk can tell (12 hours).
    let s = aged(
        None,
        T0 + 70,
        &[T0 + 3_600, T0 + 13 * 3_600, T0 + 13 * 3_600 + 1],
    );
    let st = s.stats();
    assert_eq!(st.counters.flash_items, 0);
    assert_eq!(st.flash.unwrap().objects_written, 0);
    assert_eq!(st.counters.curr_items, 2_004);
}

#[test]
fn ext_item_age_0_takes_every_big_item_at_the_next_pass() {
    let dev = MemDevice::new(64 << 20);
    let s = aging_store(8, &dev, Some(0));
    set(&s, &key(0), &value(0, 1), T0);
    set(&s, "small", "tiny value", T0);
    s.reclaim(T0, 1_000);
    assert!(!in_memory(&s, &key(0)) && in_memory(&s, "small"));
    assert_eq!(val(&s, &key(0), T0), Some(value(0, 1)));
}

#[test]
fn ext_item_age_writes_a_bounded_share_per_pass_and_goes_on_from_there() {
    let dev = MemDevice::new(64 << 20);
    let s = aging_store(64, &dev, Some(60));
    let n = 40_000;
    for i in 0..n {
        set(&s, &key(i), &value(i, 1), T0);
    }
    s.reclaim(T0 + 61, 1_000);
    let first = s.stats().flash.unwrap().objects_written;
    // 1 MiB a shard, and the item that passes it: ~1,050 items of ~1,030 bytes each.
    assert!(first > 0 && first <= 16 * 1_050, "{first}");
    let mut passes = 1;
    while s.stats().counters.flash_items < n as u64 {
        s.reclaim(T0 + 61 + passes, 1_000);
        passes += 1;
        assert!(passes < 20, "{:?}", s.stats());
    }
    assert_eq!(s.stats().counters.curr_items, 0);
    for i in (0..n).step_by(7) {
        assert_eq!(val(&s, &key(i), T0 + 100), Some(value(i, 1)), "{i}");
    }
}
