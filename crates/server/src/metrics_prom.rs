//! `/metrics` of `memfleet serve -o metrics=ADDR:PORT`: the server's figures in Prometheus'
//! text format under the names and labels of the Prometheus project's memcached_exporter
//! (so its dashboards and alerts work unchanged), plus memfleet's own figures as
//! `memfleet_*`: command latency histograms, hot keys, and counters memcached lacks.

use std::sync::atomic::Ordering::Relaxed;

use telemetry::{Exposition, Kind};

use crate::clock::unix_now;
use crate::exec::report;
use crate::latency::COMMANDS;
use crate::metrics::HOTKEYS_SHOWN;
use crate::shared::Shared;
use crate::stats::merge;

fn secs(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// Renders one scrape.
pub fn render(shared: &Shared) -> String {
    let s = merge(&shared.stats);
    let st = shared.store.stats();
    let c = &st.counters;
    let now = unix_now();
    let mut e = Exposition::new();
    use Kind::{Counter, Gauge};

    e.single(
        "memcached_up",
        Gauge,
        "1: the server answered this scrape.",
        1,
    );
    e.family(
        "memcached_version",
        Gauge,
        "The server's version, as a label.",
    );
    e.sample(
        "memcached_version",
        &[("version", crate::config::VERSION.as_bytes())],
        1,
    );
    // A gauge, not a counter as the exporter declares it: promtool wants counters to end
    // in _total, and the name is what dashboards use.
    e.single(
        "memcached_uptime_seconds",
        Gauge,
        "Seconds since the server started.",
        now.saturating_sub(shared.process_start),
    );
    e.single(
        "memcached_time_seconds",
        Gauge,
        "The server's clock, Unix seconds.",
        now,
    );
    let (user, system) = crate::rusage::cpu_times();
    e.single(
        "memcached_process_user_cpu_seconds_total",
        Counter,
        "CPU seconds spent in user mode.",
        secs(user),
    );
    e.single(
        "memcached_process_system_cpu_seconds_total",
        Counter,
        "CPU seconds spent in the kernel.",
        secs(system),
    );
    let conns = shared.curr_conns.load(Relaxed);
    e.single(
        "memcached_current_connections",
        Gauge,
        "Client connections open now.",
        conns,
    );
    e.single(
        "memcached_max_connections",
        Gauge,
        "Client connections allowed (-c).",
        shared.settings.conn_limit,
    );
    e.single(
        "memcached_connections_total",
        Counter,
        "Client connections accepted since start.",
        s.total_connections,
    );
    e.single(
        "memcached_connections_rejected_total",
        Counter,
        "Connections refused for being over -c.",
        s.rejected_connections,
    );
    e.single(
        "memcached_connections_yielded_total",
        Counter,
        "Times a busy connection gave way to others (-R).",
        s.conn_yields,
    );
    e.single(
        "memcached_connections_listener_disabled_total",
        Counter,
        "Times listening stopped at the connection limit (never: memfleet refuses instead).",
        0,
    );
    e.single(
        "memcached_accepting_connections",
        Gauge,
        "1 while new connections are accepted.",
        1,
    );
    e.single(
        "memcached_read_bytes_total",
        Counter,
        "Bytes read from clients.",
        s.bytes_read,
    );
    e.single(
        "memcached_written_bytes_total",
        Counter,
        "Bytes sent to clients.",
        s.bytes_written,
    );
    e.single(
        "memcached_current_bytes",
        Gauge,
        "Bytes of the items stored now.",
        c.bytes,
    );
    e.single(
        "memcached_limit_bytes",
        Gauge,
        "Item memory limit (-m).",
        st.limit_maxbytes,
    );
    e.single(
        "memcached_malloced_bytes",
        Gauge,
        "Item memory in use (segments, large items and index).",
        report::mem_in_use(&st),
    );
    e.single(
        "memcached_current_items",
        Gauge,
        "Items stored now (in memory and on flash).",
        c.curr_items + c.flash_items,
    );
    e.single(
        "memcached_items_total",
        Counter,
        "Items stored since start.",
        c.total_items,
    );
    e.single(
        "memcached_items_evicted_total",
        Counter,
        "Live items removed to make room.",
        c.evictions,
    );
    e.single(
        "memcached_items_reclaimed_total",
        Counter,
        "Expired items whose memory was reused.",
        c.reclaimed,
    );
    e.single(
        "memcached_item_too_large_total",
        Counter,
        "Stores refused for exceeding the item size limit (-I).",
        s.store_too_large,
    );
    e.single(
        "memcached_item_no_memory_total",
        Counter,
        "Stores refused for lack of memory.",
        s.store_no_memory,
    );

    e.family(
        "memcached_commands_total",
        Counter,
        "Requests by command and outcome.",
    );
    let cas = c.cas_hits + c.cas_misses + c.cas_badval;
    for (command, status, v) in [
        ("get", "hit", s.get_hits),
        ("get", "miss", s.get_misses),
        ("delete", "hit", c.delete_hits),
        ("delete", "miss", c.delete_misses),
        ("incr", "hit", c.incr_hits),
        ("incr", "miss", c.incr_misses),
        ("decr", "hit", c.decr_hits),
        ("decr", "miss", c.decr_misses),
        ("cas", "hit", c.cas_hits),
        ("cas", "miss", c.cas_misses),
        ("cas", "badval", c.cas_badval),
        ("touch", "hit", c.touch_hits),
        ("touch", "miss", c.touch_misses),
        ("flush", "hit", s.cmd_flush),
        // cmd_set counts cas requests too.
        ("set", "hit", s.cmd_set.saturating_sub(cas)),
    ] {
        e.sample(
            "memcached_commands_total",
            &[
                ("command", command.as_bytes()),
                ("status", status.as_bytes()),
            ],
            v,
        );
    }

    // memfleet has one item class: the exporter's per-slab families with slab="1", as
    // `stats items` and `stats slabs` report it.
    if c.curr_items > 0 {
        let slab: &[(&str, &[u8])] = &[("slab", b"1")];
        let age = match st.oldest_item_time {
            0 => 0,
            t => now.saturating_sub(t),
        };
        for (name, kind, help, v) in [
            (
                "memcached_slab_current_items",
                Gauge,
                "Items stored in the class.",
                c.curr_items,
            ),
            (
                "memcached_slab_items_age_seconds",
                Gauge,
                "Seconds since the oldest item of the class was last used.",
                u64::from(age),
            ),
            (
                "memcached_slab_items_evicted_total",
                Counter,
                "Items of the class evicted.",
                c.evictions,
            ),
            (
                "memcached_slab_items_evicted_unfetched_total",
                Counter,
                "Items evicted without ever being read.",
                c.evicted_unfetched,
            ),
            (
                "memcached_slab_items_expired_unfetched_total",
                Counter,
                "Items expired without ever being read.",
                c.expired_unfetched,
            ),
            (
                "memcached_slab_items_reclaimed_total",
                Counter,
                "Expired items of the class whose memory was reused.",
                c.reclaimed,
            ),
            (
                "memcached_slab_items_outofmemory_total",
                Counter,
                "Stores to the class refused for lack of memory.",
                s.store_no_memory,
            ),
            (
                "memcached_slab_chunk_size_bytes",
                Gauge,
                "Bytes per segment (memfleet's unit of item memory).",
                st.segment_size,
            ),
            (
                "memcached_slab_current_pages",
                Gauge,
                "Segments allocated.",
                st.segments,
            ),
            (
                "memcached_slab_chunks_used",
                Gauge,
                "Items held in segments and large buffers.",
                c.curr_items,
            ),
        ] {
            e.family(name, kind, help);
            e.sample(name, slab, v);
        }
    }

    if let Some(f) = &st.flash {
        let queued = shared.flash_io.as_ref().map_or(0, |io| io.queued());
        extstore(&mut e, f, queued as u64);
    }

    for (name, help, v) in [
        (
            "memfleet_get_expired_total",
            "Gets that found an expired item.",
            c.get_expired,
        ),
        (
            "memfleet_get_flushed_total",
            "Gets that found an item invalidated by flush_all.",
            c.get_flushed,
        ),
        (
            "memfleet_meta_commands_total",
            "Meta protocol requests (mg ms md ma).",
            s.cmd_meta,
        ),
        (
            "memfleet_touch_commands_total",
            "touch and gat requests.",
            s.cmd_touch,
        ),
        (
            "memfleet_connections_moved_total",
            "Idle connections handed to the worker their client's CPU maps to.",
            s.conns_moved,
        ),
        (
            "memfleet_udp_requests_total",
            "Requests received over UDP.",
            s.udp_requests,
        ),
    ] {
        e.single(name, Counter, help, v);
    }
    e.single(
        "memfleet_index_bytes",
        Gauge,
        "Bytes of the key index as allocated now.",
        st.index_bytes,
    );
    e.single(
        "memfleet_threads",
        Gauge,
        "Worker threads (-t).",
        shared.settings.threads,
    );

    let t = &shared.telemetry;
    if !t.latency.is_empty() {
        let name = "memfleet_command_duration_seconds";
        e.family(
            name,
            Kind::Histogram,
            "Time from the read that completed a request to the write of its reply, by command (since start).",
        );
        for (i, snap) in crate::latency::merged(&t.latency).iter().enumerate() {
            if snap.count() > 0 {
                e.histogram(name, &[("command", COMMANDS[i].as_bytes())], snap);
            }
        }
    }
    if !t.hotkeys.is_empty() {
        let (top, sampled) = t.hot_keys(HOTKEYS_SHOWN);
        e.single(
            "memfleet_hotkeys_sampled_total",
            Counter,
            "Keys fed to the hot-key sketches since start or stats reset.",
            sampled,
        );
        let name = "memfleet_hotkey_requests";
        e.family(
            name,
            Gauge,
            "Estimated requests for each of the hottest keys since start or stats reset (sampled count times the sample rate).",
        );
        for k in top {
            e.sample(name, &[("key", &k.key)], k.count);
        }
    }
    e.finish()
}

/// memcached_exporter's extstore families, when the flash tier is on.
fn extstore(e: &mut Exposition, f: &store::FlashStats, queued: u64) {
    use Kind::{Counter, Gauge};
    for (name, kind, help, v) in [
        (
            "memcached_extstore_pages_allocated_total",
            Counter,
            "Pages opened for writing.",
            f.page_allocs,
        ),
        (
            "memcached_extstore_pages_evicted_total",
            Counter,
            "Pages dropped with the items in them to make room.",
            f.page_evictions,
        ),
        (
            "memcached_extstore_pages_reclaimed_total",
            Counter,
            "Pages dropped to make room.",
            f.page_evictions,
        ),
        (
            "memcached_extstore_pages_free",
            Gauge,
            "Pages holding no items.",
            f.pages_free,
        ),
        (
            "memcached_extstore_pages_used",
            Gauge,
            "Pages holding items.",
            f.pages_used,
        ),
        (
            "memcached_extstore_objects_evicted_total",
            Counter,
            "Items dropped with their pages.",
            f.objects_evicted,
        ),
        (
            "memcached_extstore_objects_read_total",
            Counter,
            "Items read from flash.",
            f.objects_read,
        ),
        (
            "memcached_extstore_objects_written_total",
            Counter,
            "Items written to flash.",
            f.objects_written,
        ),
        (
            "memcached_extstore_objects_used",
            Gauge,
            "Items on flash.",
            f.objects_used,
        ),
        (
            "memcached_extstore_bytes_evicted_total",
            Counter,
            "Bytes dropped with their pages.",
            f.bytes_evicted,
        ),
        (
            "memcached_extstore_bytes_written_total",
            Counter,
            "Bytes written to flash.",
            f.bytes_written,
        ),
        (
            "memcached_extstore_bytes_read_total",
            Counter,
            "Bytes read from flash.",
            f.bytes_read,
        ),
        (
            "memcached_extstore_bytes_used",
            Gauge,
            "Bytes of the items on flash.",
            f.bytes_used,
        ),
        (
            "memcached_extstore_bytes_fragmented",
            Gauge,
            "Bytes of pages in use that hold no current item.",
            f.bytes_fragmented,
        ),
        (
            "memcached_extstore_bytes_limit",
            Gauge,
            "Bytes of flash space.",
            f.limit_maxbytes,
        ),
        (
            "memcached_extstore_io_queue_depth",
            Gauge,
            "Flash reads waiting for an I/O thread.",
            queued,
        ),
        (
            "memcached_extstore_compact_lost_total",
            Counter,
            "Items in compacted pages that could not be written again.",
            f.compact_lost,
        ),
        (
            "memcached_extstore_compact_rescued_total",
            Counter,
            "Items compaction wrote again.",
            f.compact_rescues,
        ),
        (
            "memcached_extstore_compact_skipped_total",
            Counter,
            "Expired, flushed or (ext_drop_unread) unread items compaction dropped.",
            f.compact_skipped,
        ),
    ] {
        e.single(name, kind, help, v);
    }
}
