//! `stats` and its subcommands, with memcached's field names so dashboards keep working.

use std::fmt::Display;
use std::sync::atomic::Ordering::Relaxed;

use proto::Tokens;

use crate::exec::env::ExecEnv;
use crate::rusage::cpu_times;
use crate::stats::merge;

fn stat(out: &mut Vec<u8>, name: &str, value: impl Display) {
    use std::io::Write;
    let _ = write!(out, "STAT {name} {value}\r\n");
}

pub fn stats(env: &ExecEnv<'_>, mut args: Tokens<'_>, out: &mut Vec<u8>) {
    match args.next() {
        None => general(env, out),
        Some(b"settings") => settings(env, out),
        Some(b"items") => items(env, out),
        Some(b"slabs") => slabs(env, out),
        Some(b"conns") => conns(env, out),
        Some(b"latency") => env.shared.telemetry.stats_latency(out),
        Some(b"hotkeys") => env.shared.telemetry.stats_hotkeys(out),
        Some(b"sizes") => {
            stat(out, "sizes_status", "disabled");
            out.extend_from_slice(b"END\r\n");
        }
        Some(b"detail") => {
            out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n");
        }
        Some(b"reset") => {
            for t in &env.shared.stats {
                t.reset();
            }
            env.shared.store.reset_stats();
            if let Some(auth) = &env.shared.auth {
                auth.reset_counts();
            }
            env.shared.telemetry.reset();
            out.extend_from_slice(b"RESET\r\n");
        }
        Some(_) => out.extend_from_slice(b"ERROR\r\n"),
    }
}

fn rusage() -> (String, String) {
    let fmt = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    let (user, system) = cpu_times();
    (fmt(user), fmt(system))
}

fn general(env: &ExecEnv<'_>, out: &mut Vec<u8>) {
    let shared = env.shared;
    let s = merge(&shared.stats);
    let store = shared.store.stats();
    let c = &store.counters;
    let (user, system) = rusage();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", env.now.saturating_sub(shared.process_start));
    stat(out, "time", env.now);
    stat(out, "version", crate::config::VERSION);
    stat(out, "pointer_size", 64);
    stat(out, "rusage_user", user);
    stat(out, "rusage_system", system);
    stat(out, "max_connections", shared.settings.conn_limit);
    stat(out, "curr_connections", shared.curr_conns.load(Relaxed));
    stat(out, "total_connections", s.total_connections);
    stat(out, "rejected_connections", s.rejected_connections);
    stat(
        out,
        "connection_structures",
        shared.curr_conns.load(Relaxed),
    );
    stat(out, "cmd_get", s.cmd_get);
    stat(out, "cmd_set", s.cmd_set);
    stat(out, "cmd_flush", s.cmd_flush);
    stat(out, "cmd_touch", s.cmd_touch);
    stat(out, "cmd_meta", s.cmd_meta);
    stat(out, "get_hits", s.get_hits);
    stat(out, "get_misses", s.get_misses);
    stat(out, "get_expired", c.get_expired);
    stat(out, "get_flushed", c.get_flushed);
    stat(out, "delete_misses", c.delete_misses);
    stat(out, "delete_hits", c.delete_hits);
    stat(out, "incr_misses", c.incr_misses);
    stat(out, "incr_hits", c.incr_hits);
    stat(out, "decr_misses", c.decr_misses);
    stat(out, "decr_hits", c.decr_hits);
    stat(out, "cas_misses", c.cas_misses);
    stat(out, "cas_hits", c.cas_hits);
    stat(out, "cas_badval", c.cas_badval);
    stat(out, "touch_hits", c.touch_hits);
    stat(out, "touch_misses", c.touch_misses);
    stat(out, "store_too_large", s.store_too_large);
    stat(out, "store_no_memory", s.store_no_memory);
    // Allocation failures abort the process in Rust; a refused store is store_no_memory.
    stat(out, "malloc_fails", 0);
    stat(out, "log_watchers", shared.watch.count());
    let t = &shared.tracking;
    stat(out, "track_listeners", t.listener_count());
    stat(out, "track_keys", t.key_count());
    stat(out, "track_notices", t.notices.load(Relaxed));
    stat(out, "track_flushes", t.flushes.load(Relaxed));
    let auth = env
        .shared
        .auth
        .as_ref()
        .map(|a| a.counts())
        .unwrap_or_default();
    stat(out, "auth_cmds", auth.auth_cmds);
    stat(out, "auth_errors", auth.auth_errors);
    // The lines memcached adds with `-Z`.
    if let Some(tls) = &shared.tls {
        stat(out, "ssl_handshake_errors", s.ssl_handshake_errors);
        stat(
            out,
            "time_since_server_cert_refresh",
            tls.seconds_since_refresh(env.now),
        );
    }
    stat(out, "bytes_read", s.bytes_read);
    stat(out, "bytes_written", s.bytes_written);
    stat(out, "limit_maxbytes", store.limit_maxbytes);
    stat(out, "accepting_conns", 1);
    // The acceptor never stops listening (over -c it answers and closes instead).
    stat(out, "listen_disabled_num", 0);
    stat(out, "threads", shared.settings.threads);
    stat(out, "conn_yields", s.conn_yields);
    stat(out, "conns_moved", s.conns_moved);
    // The key index (memcached's hash table) as allocated now.
    stat(out, "hash_bytes", store.index_bytes);
    stat(out, "udp_requests", s.udp_requests);
    stat(out, "bytes", c.bytes);
    // As memcached's: items on flash are items.
    stat(out, "curr_items", c.curr_items + c.flash_items);
    stat(out, "total_items", c.total_items);
    stat(out, "expired_unfetched", c.expired_unfetched);
    stat(out, "evicted_unfetched", c.evicted_unfetched);
    stat(out, "evictions", c.evictions);
    stat(out, "reclaimed", c.reclaimed);
    stat(out, "mem_used", mem_in_use(&store));
    if let Some(f) = &store.flash {
        flash(
            out,
            c,
            f,
            store.flash_index_bytes,
            env.shared.flash_io.as_ref(),
        );
    }
    out.extend_from_slice(b"END\r\n");
}

/// memcached's extstore lines, when the flash tier is on.
/// `io`: the I/O threads' reads, if there are I/O threads.
fn flash(
    out: &mut Vec<u8>,
    c: &store::Counters,
    f: &store::FlashStats,
    index_bytes: u64,
    io: Option<&crate::flash::reads::FlashIo>,
) {
    let (queued, aborted, made) = io.map_or((0, 0, 0), |io| (io.queued(), io.aborted(), io.made()));
    stat(out, "get_extstore", c.get_extstore);
    stat(out, "get_aborted_extstore", aborted);
    // Past the bounds on reads under way a get reads in line: none lacks a buffer.
    stat(out, "get_oom_extstore", 0);
    stat(out, "recache_from_extstore", c.recache_from_extstore);
    stat(out, "miss_from_extstore", c.miss_from_extstore);
    stat(out, "badcrc_from_extstore", c.badcrc_from_extstore);
    stat(out, "extstore_page_allocs", f.page_allocs);
    stat(out, "extstore_page_evictions", f.page_evictions);
    stat(out, "extstore_page_reclaims", f.page_evictions);
    stat(out, "extstore_pages_free", f.pages_free);
    stat(out, "extstore_pages_used", f.pages_used);
    stat(out, "extstore_objects_evicted", f.objects_evicted);
    stat(out, "extstore_objects_read", f.objects_read);
    stat(out, "extstore_objects_written", f.objects_written);
    stat(out, "extstore_objects_used", f.objects_used);
    stat(out, "extstore_bytes_evicted", f.bytes_evicted);
    stat(out, "extstore_bytes_written", f.bytes_written);
    stat(out, "extstore_bytes_read", f.bytes_read);
    stat(out, "extstore_bytes_used", f.bytes_used);
    stat(out, "extstore_bytes_fragmented", f.bytes_fragmented);
    stat(out, "extstore_limit_maxbytes", f.limit_maxbytes);
    stat(out, "extstore_io_queue", queued);
    stat(out, "extstore_compact_lost", f.compact_lost);
    stat(out, "extstore_compact_rescues", f.compact_rescues);
    stat(out, "extstore_compact_skipped", f.compact_skipped);
    // memfleet's own: items on flash by the memory index, and what that index takes.
    stat(out, "extstore_items", c.flash_items);
    stat(out, "extstore_index_bytes", index_bytes);
    stat(out, "extstore_wbuf_bytes", f.write_buffer_bytes);
    stat(out, "extstore_writes_stopped", u8::from(f.failed));
    stat(out, "extstore_io_reads", made);
    stat(out, "extstore_compacted_pages", f.compacted_pages);
}

fn settings(env: &ExecEnv<'_>, out: &mut Vec<u8>) {
    let s = &env.shared.settings;
    let tcp_port = s.tcp.first().map(|a| a.port()).unwrap_or(0);
    let udp_port = s.udp.first().map(|a| a.port()).unwrap_or(0);
    let iface = s
        .tcp
        .iter()
        .map(|a| a.ip().to_string())
        .collect::<Vec<_>>()
        .join(",");
    stat(out, "maxbytes", env.shared.store.mem_limit());
    stat(out, "maxconns", s.conn_limit);
    stat(out, "tcpport", tcp_port);
    stat(out, "udpport", udp_port);
    stat(
        out,
        "inter",
        if iface.is_empty() {
            "NULL".into()
        } else {
            iface
        },
    );
    stat(out, "verbosity", env.shared.verbose());
    stat(out, "evictions", if s.evictions { "on" } else { "off" });
    stat(
        out,
        "domain_socket",
        s.unix_socket.as_ref().map_or("NULL", |u| u.0.as_str()),
    );
    stat(
        out,
        "umask",
        s.unix_socket
            .as_ref()
            .map_or("700".to_string(), |u| format!("{:o}", u.1)),
    );
    stat(out, "num_threads", s.threads);
    stat(out, "reqs_per_event", s.max_reqs_per_event);
    stat(out, "cas_enabled", "yes");
    stat(out, "tcp_backlog", s.backlog);
    stat(out, "binding_protocol", s.binding_protocol);
    stat(out, "auth_enabled_sasl", if s.sasl { "yes" } else { "no" });
    stat(out, "item_size_max", s.item_size_max);
    stat(out, "maxconns_fast", "yes");
    stat(
        out,
        "flush_enabled",
        if s.disable_flush_all { "no" } else { "yes" },
    );
    stat(
        out,
        "shutdown_command",
        if s.enable_shutdown { "yes" } else { "no" },
    );
    stat(out, "idle_timeout", s.idle_timeout);
    stat(out, "storage_engine", "segments");
    stat(out, "io_engine", s.io_engine.name());
    if let Some(f) = &s.flash {
        stat(out, "ext_item_size", f.store.item_size);
        // Not given: memcached's UINT_MAX, as memcached prints it.
        stat(out, "ext_item_age", f.store.item_age);
        stat(out, "ext_low_ttl", f.store.low_ttl);
        stat(out, "ext_recache_rate", f.store.recache_rate);
        stat(out, "ext_wbuf_size", f.store.wbuf_size);
        stat(out, "ext_page_size", f.store.page_size);
        stat(out, "ext_threads", f.threads);
        stat(out, "ext_io_depth", f.io_depth);
        // The pages the files hold once each is cut to whole pages.
        let pages = env.shared.store.flash_pages();
        stat(out, "ext_compact_under", f.store.compact_under_of(pages));
        stat(out, "ext_drop_under", f.store.drop_under_of(pages));
        let unread = if f.store.drop_unread { "yes" } else { "no" };
        stat(out, "ext_drop_unread", unread);
        let frag = f.store.max_frag_permille;
        stat(
            out,
            "ext_max_frag",
            format!("{}.{:03}", frag / 1000, frag % 1000),
        );
        for p in &f.paths {
            stat(out, "ext_path", format!("{}:{}", p.path, p.size));
        }
    }
    s.tls.write_settings(out);
    if let Some(path) = &s.memory_file {
        stat(out, "memory_file", path);
    }
    out.extend_from_slice(b"END\r\n");
}

/// memfleet has one item class, so `stats items` reports everything under class 1.
fn items(env: &ExecEnv<'_>, out: &mut Vec<u8>) {
    let st = env.shared.store.stats();
    let c = &st.counters;
    if c.curr_items > 0 {
        stat(out, "items:1:number", c.curr_items);
        stat(out, "items:1:evicted", c.evictions);
        stat(out, "items:1:evicted_unfetched", c.evicted_unfetched);
        stat(out, "items:1:expired_unfetched", c.expired_unfetched);
        stat(out, "items:1:reclaimed", c.reclaimed);
        let age = match st.oldest_item_time {
            0 => 0,
            t => env.now.saturating_sub(t),
        };
        stat(out, "items:1:age", age);
        stat(out, "items:1:evicted_time", c.evicted_time);
        stat(
            out,
            "items:1:outofmemory",
            merge(&env.shared.stats).store_no_memory,
        );
    }
    out.extend_from_slice(b"END\r\n");
}

/// Segments stand where memcached has slab classes: one "class" of fixed-size segments.
fn slabs(env: &ExecEnv<'_>, out: &mut Vec<u8>) {
    let st = env.shared.store.stats();
    if st.segments > 0 || st.large_items > 0 {
        stat(out, "1:chunk_size", st.segment_size);
        stat(out, "1:total_pages", st.segments);
        stat(out, "1:used_chunks", st.counters.curr_items);
        stat(out, "1:live_bytes", st.live_bytes);
        stat(out, "1:dead_bytes", st.dead_bytes);
        stat(out, "1:free_bytes", st.free_segment_bytes);
        stat(out, "1:large_items", st.large_items);
        stat(out, "1:large_bytes", st.large_bytes);
    }
    stat(out, "active_slabs", u64::from(st.segments > 0));
    stat(out, "total_malloced", mem_in_use(&st));
    stat(out, "index_bytes", st.index_bytes);
    stat(out, "index_slots", st.index_slots);
    stat(out, "shards", st.shards);
    out.extend_from_slice(b"END\r\n");
}

/// Item memory in use: everything charged to the limit except the part of the index
/// reservation the index has not grown into yet (see docs/storage.md).
pub(crate) fn mem_in_use(st: &store::Stats) -> u64 {
    let unused_index = st.index_reserved_bytes.saturating_sub(st.index_bytes);
    st.mem_used.saturating_sub(unused_index)
}

/// The TCP peer of registered connection `fd`; None for a unix-socket client.
fn peer_of(fd: i32) -> Option<std::net::SocketAddr> {
    // SAFETY: called with the registry's lock held, and a worker takes a connection out of
    // its registry before its socket closes, so `fd` is that connection's open socket.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).peer_addr().ok()?.as_socket()
}

fn conns(env: &ExecEnv<'_>, out: &mut Vec<u8>) {
    for reg in &env.shared.registry {
        let Ok(reg) = reg.lock() else { continue };
        for c in reg.iter() {
            match peer_of(c.fd) {
                Some(peer) => stat(out, &format!("{}:addr", c.fd), format!("tcp:{peer}")),
                None => stat(out, &format!("{}:addr", c.fd), &c.listen),
            }
            stat(out, &format!("{}:listen_addr", c.fd), &c.listen);
            stat(out, &format!("{}:state", c.fd), "conn_parse_cmd");
            stat(
                out,
                &format!("{}:secs_since_last_cmd", c.fd),
                env.now.saturating_sub(c.last_cmd),
            );
        }
    }
    out.extend_from_slice(b"END\r\n");
}
