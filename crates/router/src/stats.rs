//! Counters with nutcracker's names, kept per worker thread and summed when read: the
//! stats port's JSON (same fields as nutcracker 0.5) and `stats` on the data port.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::shared::{Globals, Shared};

pub(crate) fn sum(
    parts: impl Iterator<Item = Vec<(&'static str, i64)>>,
) -> Vec<(&'static str, i64)> {
    let mut total: Vec<(&'static str, i64)> = Vec::new();
    for p in parts {
        if total.is_empty() {
            total = p;
        } else {
            for (t, (_, v)) in total.iter_mut().zip(p) {
                t.1 += v;
            }
        }
    }
    total
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// nutcracker's stats JSON: service, source, version, uptime, timestamp, connection totals,
/// then one object per pool with its counters and one object per server.
pub fn json(shared: &Shared, globals: &Globals, source: &str) -> String {
    let mut out = String::with_capacity(1024);
    let uptime = globals.started.elapsed().as_secs();
    let timestamp = crate::log::epoch_us() / 1_000_000;
    let g = sum(globals.per_worker.iter().map(|w| w.fields()));
    out.push_str("{\"service\":\"nutcracker\", \"source\":");
    json_str(&mut out, source);
    let _ = write!(
        out,
        ", \"version\":\"0.5.0\", \"memfleet\":\"{}\", \"uptime\":{uptime}, \"timestamp\":{timestamp}",
        env!("CARGO_PKG_VERSION")
    );
    for (k, v) in &g {
        let _ = write!(out, ", \"{k}\":{v}");
    }
    for pool in &shared.pools {
        out.push_str(", ");
        json_str(&mut out, &pool.cfg.name);
        out.push_str(": {");
        let mut fields = sum(pool.counters.iter().map(|c| c.pool.fields()));
        fields.insert(
            3,
            ("server_ejects", pool.server_ejects.load(Relaxed) as i64),
        );
        fields.extend(crate::topology::stats_fields(pool));
        fields.extend(crate::failovers::pool_fields(pool));
        let learned = crate::failovers::server_fields(pool);
        fields.extend(crate::topology::replica_fields(pool));
        let mut first = true;
        for (k, v) in fields {
            if !first {
                out.push_str(", ");
            }
            first = false;
            let _ = write!(out, "\"{k}\":{v}");
        }
        for (i, server) in pool.servers.iter().enumerate() {
            out.push_str(", ");
            json_str(&mut out, &server.stats_name);
            out.push_str(": {");
            let mut fields = sum(pool.counters.iter().map(|c| c.servers[i].fields()));
            fields.insert(4, ("server_ejected_at", server.ejected_at_us.load(Relaxed)));
            fields.extend(learned.get(i).into_iter().flatten().copied());
            let mut first = true;
            for (k, v) in fields {
                if !first {
                    out.push_str(", ");
                }
                first = false;
                let _ = write!(out, "\"{k}\":{v}");
            }
            out.push('}');
        }
        out.push('}');
    }
    out.push_str("}\n");
    out
}

/// `stats` on the data port: memcached-style `STAT` lines for the router and the pool.
pub fn text(shared: &Shared, globals: &Globals, pool: usize) -> Vec<u8> {
    let mut out = String::with_capacity(512);
    let g = sum(globals.per_worker.iter().map(|w| w.fields()));
    let _ = write!(out, "STAT pid {}\r\n", std::process::id());
    let _ = write!(
        out,
        "STAT uptime {}\r\n",
        globals.started.elapsed().as_secs()
    );
    let _ = write!(out, "STAT time {}\r\n", crate::log::epoch_us() / 1_000_000);
    // memcached's form, which client libraries parse (see proto::reply::VERSION).
    let _ = write!(out, "STAT version {}\r\n", proto::reply::VERSION);
    let _ = write!(out, "STAT threads {}\r\n", globals.threads);
    for (k, v) in &g {
        let _ = write!(out, "STAT {k} {v}\r\n");
    }
    for (i, w) in globals.per_worker.iter().enumerate() {
        let _ = write!(
            out,
            "STAT thread:{i}:curr_connections {}\r\n",
            w.curr_connections.get()
        );
    }
    if let Some(p) = shared.pools.get(pool) {
        let _ = write!(out, "STAT pool {}\r\n", p.cfg.name);
        for (k, v) in sum(p.counters.iter().map(|c| c.pool.fields())) {
            let _ = write!(out, "STAT {k} {v}\r\n");
        }
        let _ = write!(
            out,
            "STAT server_ejects {}\r\n",
            p.server_ejects.load(Relaxed)
        );
        if let Some(h) = &p.hot {
            let hits: i64 = h.hits.iter().map(|c| c.get()).sum();
            let _ = write!(out, "STAT hot_keys {}\r\n", h.hot_keys());
            let _ = write!(out, "STAT hot_key_hits {hits}\r\n");
        }
        for (k, v) in crate::failovers::pool_fields(p) {
            let _ = write!(out, "STAT {k} {v}\r\n");
        }
        let learned = crate::failovers::server_fields(p);
        for (i, server) in p.servers.iter().enumerate() {
            for (k, v) in learned.get(i).into_iter().flatten() {
                let _ = write!(out, "STAT server:{}:{k} {v}\r\n", server.stats_name);
            }
            let _ = write!(
                out,
                "STAT server:{}:ejected {}\r\n",
                server.stats_name,
                u8::from(server.is_ejected())
            );
            for (k, v) in sum(p.counters.iter().map(|c| c.servers[i].fields())) {
                let _ = write!(out, "STAT server:{}:{k} {v}\r\n", server.stats_name);
            }
            if let Some(n) = p.hot.as_ref().and_then(|h| h.hot_on_server(i)) {
                let _ = write!(out, "STAT server:{}:hot_keys {n}\r\n", server.stats_name);
            }
        }
    }
    out.push_str("END\r\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::WorkerCounters;
    use nutconf::Config;
    use std::time::Instant;

    #[test]
    fn json_has_nutcracker_fields_and_sums_threads() {
        let cfg = Config::from_yaml_str(
            "alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11212:1\n   - 127.0.0.1:11213:1 two\n",
        )
        .unwrap();
        let shared = Shared::new(cfg, 2, Instant::now()).unwrap();
        let globals = Globals {
            started: Instant::now(),
            threads: 2,
            per_worker: vec![WorkerCounters::default(), WorkerCounters::default()],
            handed_over: vec![Default::default(), Default::default()],
            active_req_limit: 0,
            max_client_outstanding: 0,
        };
        let two = shared.pools[0]
            .servers
            .iter()
            .position(|s| s.stats_name == "two")
            .unwrap();
        shared.pools[0].counters[0].servers[two].requests.add(3);
        shared.pools[0].counters[1].servers[two].requests.add(4);
        shared.pools[0].counters[1].pool.fragments.add(2);
        globals.per_worker[1].total_connections.add(5);
        let j = json(&shared, &globals, "host\"1");
        assert!(
            j.starts_with("{\"service\":\"nutcracker\", \"source\":\"host\\\"1\""),
            "{j}"
        );
        assert!(j.contains("\"total_connections\":5"));
        assert!(j.contains(
            "\"alpha\": {\"client_eof\":0, \"client_err\":0, \"client_connections\":0, \"server_ejects\":0, \"forward_error\":0, \"fragments\":2"
        ), "{j}");
        assert!(j.contains("\"two\": {\"server_eof\":0, \"server_err\":0, \"server_timedout\":0, \"server_connections\":0, \"server_ejected_at\":0, \"requests\":7,"), "{j}");
        assert!(j.contains("\"127.0.0.1:11212\": {"));
        let t = String::from_utf8(text(&shared, &globals, 0)).unwrap();
        assert!(t.contains("STAT server:two:requests 7\r\n") && t.ends_with("END\r\n"));
    }
}
