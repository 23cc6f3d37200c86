//! `/metrics` of `memfleet route --metrics ADDR:PORT`: nutcracker's counters (the stats
//! port's JSON keeps them unchanged) in Prometheus' text format, per pool and per server,
//! with request latency histograms. Names start `memfleet_router_`; a nutcracker field
//! becomes `memfleet_router_pool_<field>` or `memfleet_router_server_<field>` (its own
//! `server_` prefix dropped), with `_total` on counters.

use std::sync::atomic::Ordering::Relaxed;

use telemetry::{Exposition, Kind, Snapshot};

use crate::shared::{Globals, Shared};
use crate::stats::sum;

/// Gauges among nutcracker's fields: they go up and down; the rest only count up.
fn is_gauge(field: &str) -> bool {
    field.ends_with("connections")
        || field.contains("queue")
        || field == "ejected"
        || field == "server_tko"
}

fn help(field: &str) -> &'static str {
    match field {
        "client_eof" => "Client connections closed by the client.",
        "client_err" => "Client connections closed on an error.",
        "client_connections" => "Client connections open now.",
        "server_ejects" => "Times a server of the pool was ejected.",
        "forward_error" => "Requests answered with an error because they could not be forwarded.",
        "rate_limited" => "Requests answered at once past the pool's rate limits (gets_rate, sets_rate, deletes_rate).",
        "replica_reads" => "Read-only commands sent to a replica (redis_read_from: replicas).",
        "fragments" => "Sub-requests made by splitting multi-key requests over servers.",
        "server_eof" => "Server connections closed by the server.",
        "server_err" => "Server connections closed on an error.",
        "server_timedout" => "Requests that timed out on the server.",
        "server_connections" => "Server connections open now.",
        "ejected" => "1 while the server is ejected from the pool.",
        "server_tko" => "mcrouter pools: 0 while the server is up, 1 soft TKO, 2 hard TKO.",
        "tko_failed" => "mcrouter pools: sends failed at once because the server was TKO.",
        "overloaded" => "Requests failed at once: the server connection held server_max_inflight (target-max-inflight-requests) already, the pool its active_req_limit, or the router --active-req-limit.",
        "requests" => "Requests forwarded to the server.",
        "request_bytes" => "Request bytes forwarded to the server.",
        "responses" => "Replies read from the server.",
        "response_bytes" => "Reply bytes read from the server.",
        "in_queue" => "Requests waiting to be sent to the server.",
        "in_queue_bytes" => "Bytes of requests waiting to be sent to the server.",
        "out_queue" => "Requests sent and waiting for the server's reply.",
        "out_queue_bytes" => "Bytes of requests sent and waiting for the server's reply.",
        _ => "A nutcracker stats field.",
    }
}

/// The Prometheus name of nutcracker field `field` in `scope` ("pool" or "server").
fn metric_name(scope: &str, field: &str) -> (String, Kind) {
    let base = match scope {
        "server" => field.strip_prefix("server_").unwrap_or(field),
        _ => field,
    };
    if is_gauge(field) {
        (format!("memfleet_router_{scope}_{base}"), Kind::Gauge)
    } else {
        (
            format!("memfleet_router_{scope}_{base}_total"),
            Kind::Counter,
        )
    }
}

/// One scope's rows: labels and field values, all rows with the same fields in order.
type Rows<'a> = Vec<(Vec<(&'static str, &'a [u8])>, Vec<(&'static str, i64)>)>;

fn families(e: &mut Exposition, scope: &str, rows: &Rows<'_>) {
    let Some((_, first)) = rows.first() else {
        return;
    };
    for (i, (field, _)) in first.iter().enumerate() {
        let (name, kind) = metric_name(scope, field);
        e.family(&name, kind, help(field));
        for (labels, fields) in rows {
            e.sample(&name, labels, fields[i].1);
        }
    }
}

/// Renders one scrape of the current configuration generation.
pub fn render(shared: &Shared, globals: &Globals) -> String {
    let mut e = Exposition::new();
    e.single(
        "memfleet_router_uptime_seconds",
        Kind::Gauge,
        "Seconds since the router started.",
        globals.started.elapsed().as_secs(),
    );
    e.single(
        "memfleet_router_threads",
        Kind::Gauge,
        "Worker threads.",
        globals.threads,
    );
    for (field, v) in sum(globals.per_worker.iter().map(|w| w.fields())) {
        let (name, kind) = if field == "curr_connections" {
            (
                "memfleet_router_current_connections".to_string(),
                Kind::Gauge,
            )
        } else {
            // total_connections
            (
                "memfleet_router_connections_total".to_string(),
                Kind::Counter,
            )
        };
        let help = if kind == Kind::Gauge {
            "Client connections open now, all pools."
        } else {
            "Client connections accepted since start, all pools."
        };
        e.single(&name, kind, help, v);
    }

    let mut pools: Rows<'_> = Vec::new();
    let mut servers: Rows<'_> = Vec::new();
    let mut pool_latency = Vec::new();
    let mut server_latency = Vec::new();
    for pool in &shared.pools {
        let name = pool.cfg.name.as_bytes();
        let mut fields = sum(pool.counters.iter().map(|c| c.pool.fields()));
        fields.push(("server_ejects", pool.server_ejects.load(Relaxed) as i64));
        let limited = pool.counters.iter().map(|c| c.rate_limited.get()).sum();
        fields.push(("rate_limited", limited));
        let replica_reads = pool.counters.iter().map(|c| c.replica_reads.get()).sum();
        fields.push(("replica_reads", replica_reads));
        let mut requests = 0;
        let mut latency = Snapshot::default();
        for (i, server) in pool.servers.iter().enumerate() {
            let mut sf = sum(pool.counters.iter().map(|c| c.servers[i].fields()));
            requests += sf
                .iter()
                .find(|(k, _)| *k == "requests")
                .map_or(0, |(_, v)| *v);
            sf.push(("ejected", i64::from(server.is_ejected())));
            let overloaded = pool.counters.iter().map(|c| c.overloaded[i].get()).sum();
            sf.push(("overloaded", overloaded));
            // mcrouter pools (the only ones with servers in an mcrouter generation).
            if let Some(tko) = pool.tko.get(i) {
                sf.push(("server_tko", i64::from(tko.level())));
                let failed = pool.counters.iter().map(|c| c.tko_failed[i].get()).sum();
                sf.push(("tko_failed", failed));
            }
            let labels = vec![("pool", name), ("server", server.stats_name.as_bytes())];
            let mut snap = Snapshot::default();
            for c in &pool.counters {
                snap.add(&c.latency[i]);
            }
            latency.merge(&snap);
            server_latency.push((labels.clone(), snap));
            servers.push((labels, sf));
        }
        fields.push(("requests", requests));
        pool_latency.push((vec![("pool", name)], latency));
        pools.push((vec![("pool", name)], fields));
    }
    families(&mut e, "pool", &pools);
    hot_key_families(&mut e, shared);
    cluster_families(&mut e, shared);
    learned_families(&mut e, shared);
    families(&mut e, "server", &servers);
    for (name, help, rows) in [
        (
            "memfleet_router_pool_request_duration_seconds",
            "Time from a request queued for a server of the pool to its reply read.",
            &pool_latency,
        ),
        (
            "memfleet_router_server_request_duration_seconds",
            "Time from a request queued for the server to its reply read.",
            &server_latency,
        ),
    ] {
        e.family(name, Kind::Histogram, help);
        for (labels, snap) in rows {
            e.histogram(name, labels, snap);
        }
    }
    e.finish()
}

/// Pools with hot-key handling on: keys hot now and gets answered from the cache.
fn hot_key_families(e: &mut Exposition, shared: &Shared) {
    let hot: Vec<_> = shared
        .pools
        .iter()
        .filter_map(|p| Some((p.cfg.name.as_bytes(), p.hot.as_ref()?)))
        .collect();
    if hot.is_empty() {
        return;
    }
    let name = "memfleet_router_pool_hot_keys";
    e.family(
        name,
        Kind::Gauge,
        "Keys the pool's hot-key cache holds now.",
    );
    for (pool, h) in &hot {
        e.sample(name, &[("pool", *pool)], h.hot_keys());
    }
    let name = "memfleet_router_pool_hot_key_hits_total";
    e.family(
        name,
        Kind::Counter,
        "Gets answered from the pool's hot-key cache.",
    );
    for (pool, h) in &hot {
        let hits: i64 = h.hits.iter().map(|c| c.get()).sum();
        e.sample(name, &[("pool", *pool)], hits);
    }
}

/// Redis Cluster pools' slot map figures (the stats port's names, as Prometheus families).
fn cluster_families(e: &mut Exposition, shared: &Shared) {
    let rows: Vec<_> = shared
        .pools
        .iter()
        .map(|p| (p.cfg.name.as_bytes(), crate::topology::stats_fields(p)))
        .filter(|(_, f)| !f.is_empty())
        .collect();
    let Some((_, first)) = rows.first() else {
        return;
    };
    for (i, (field, _)) in first.iter().enumerate() {
        let (name, kind, help) = match *field {
            "cluster_slots_served" => (
                "memfleet_router_pool_cluster_slots_served".to_owned(),
                Kind::Gauge,
                "Redis Cluster hash slots a known primary serves.",
            ),
            "slot_map_age_ms" => (
                "memfleet_router_pool_slot_map_age_milliseconds".to_owned(),
                Kind::Gauge,
                "Time since the cluster's slot map was last read.",
            ),
            "slot_map_reads" => (
                "memfleet_router_pool_slot_map_reads_total".to_owned(),
                Kind::Counter,
                "Slot maps read from the cluster.",
            ),
            "redirect_moved" => (
                "memfleet_router_pool_redirect_moved_total".to_owned(),
                Kind::Counter,
                "MOVED redirections followed.",
            ),
            "redirect_ask" => (
                "memfleet_router_pool_redirect_ask_total".to_owned(),
                Kind::Counter,
                "ASK redirections followed.",
            ),
            other => (
                format!("memfleet_router_pool_{other}_total"),
                Kind::Counter,
                "Commands sent again after TRYAGAIN, CLUSTERDOWN or an unknown node.",
            ),
        };
        e.family(&name, kind, help);
        for (pool, fields) in &rows {
            e.sample(&name, &[("pool", *pool)], fields[i].1);
        }
    }
}

/// Learned Redis pools' failovers, and their nodes' slots, redirections and promotions (the
/// stats port's names, as Prometheus families labelled by pool and server).
fn learned_families(e: &mut Exposition, shared: &Shared) {
    let mut pools = Vec::new();
    let mut servers: Rows<'_> = Vec::new();
    for p in &shared.pools {
        let name = p.cfg.name.as_bytes();
        pools.extend(
            crate::failovers::pool_fields(p)
                .into_iter()
                .map(|(_, v)| (name, v)),
        );
        for (server, fields) in p.servers.iter().zip(crate::failovers::server_fields(p)) {
            servers.push((
                vec![("pool", name), ("server", server.stats_name.as_bytes())],
                fields,
            ));
        }
    }
    if !pools.is_empty() {
        let name = "memfleet_router_pool_failovers_total";
        e.family(
            name,
            Kind::Counter,
            "Failovers since the router started: a cluster shard's slots taken over by a replica of their primary, or a Sentinel pool's primary switched.",
        );
        for (pool, v) in &pools {
            e.sample(name, &[("pool", *pool)], v);
        }
    }
    for (field, name, kind, help) in [
        (
            "cluster_slots",
            "memfleet_router_server_cluster_slots",
            Kind::Gauge,
            "Redis Cluster hash slots the node serves as a primary in the router's slot map.",
        ),
        (
            "redirect_moved",
            "memfleet_router_server_redirect_moved_total",
            Kind::Counter,
            "MOVED replies the cluster node answered with since the router started.",
        ),
        (
            "redirect_ask",
            "memfleet_router_server_redirect_ask_total",
            Kind::Counter,
            "ASK replies the cluster node answered with since the router started.",
        ),
        (
            "promotions",
            "memfleet_router_server_promotions_total",
            Kind::Counter,
            "Failovers that made the node a primary since the router started.",
        ),
    ] {
        let rows: Vec<_> = servers
            .iter()
            .filter_map(|(labels, fields)| {
                let v = fields.iter().find(|(k, _)| *k == field)?.1;
                Some((labels, v))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        e.family(name, kind, help);
        for (labels, v) in rows {
            e.sample(name, labels, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::WorkerCounters;
    use nutconf::Config;
    use std::time::Instant;

    fn globals(threads: usize, started: Instant) -> Globals {
        Globals {
            started,
            threads,
            per_worker: (0..threads).map(|_| WorkerCounters::default()).collect(),
            handed_over: (0..threads).map(|_| Default::default()).collect(),
            active_req_limit: 0,
            max_client_outstanding: 0,
        }
    }

    /// A router's state with `threads` workers and no traffic yet.
    fn fresh(yaml: &str, threads: usize) -> (Shared, Globals) {
        let started = Instant::now();
        let shared = Shared::new(Config::from_yaml_str(yaml).unwrap(), threads, started);
        (shared.unwrap(), globals(threads, started))
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        route: crate::RouteArgs,
    }

    #[test]
    fn mcrouter_pools_by_their_names_with_tko_state() {
        use clap::Parser;
        let json = r#"{"pools": {"A": {"servers": ["127.0.0.1:1", "127.0.0.1:2"]}},
                       "route": "PoolRoute|A"}"#;
        let cli = Cli::parse_from(["route", "--config", json, "-p", "5000"]);
        let started = Instant::now();
        let mut dns = crate::dns::Dns::new(None);
        let (shared, _) = crate::mcrouter::load(&cli.route, 2, started, &mut dns, false).unwrap();
        let a = shared.pools.iter().find(|p| p.cfg.name == "A").unwrap();
        a.counters[1].servers[1].requests.add(2);
        a.counters[0].servers[1].server_timedout.add(1);
        a.counters[0].tko_failed[1].add(4);
        a.record_tko_failure(1, true);
        let m = render(&shared, &globals(2, started));
        for line in [
            "memfleet_router_pool_requests_total{pool=\"A\"} 2\n",
            "memfleet_router_server_requests_total{pool=\"A\",server=\"127.0.0.1:2\"} 2\n",
            "memfleet_router_server_timedout_total{pool=\"A\",server=\"127.0.0.1:2\"} 1\n",
            "# TYPE memfleet_router_server_tko gauge\n",
            "memfleet_router_server_tko{pool=\"A\",server=\"127.0.0.1:1\"} 0\n",
            "memfleet_router_server_tko{pool=\"A\",server=\"127.0.0.1:2\"} 2\n",
            "memfleet_router_server_tko_failed_total{pool=\"A\",server=\"127.0.0.1:2\"} 4\n",
        ] {
            assert!(m.contains(line), "{line} missing from\n{m}");
        }
    }

    #[test]
    fn learned_pools_with_failovers_and_per_node_counts() {
        use crate::topology::{attach, expand, Found, Topologies};
        use proto::resp::cluster::{ClusterShard, ClusterTopology, NodeAddr, Redirect};
        let node = |port| NodeAddr {
            host: "127.0.0.1".into(),
            port,
        };
        let map = |primary: u16, replica: u16| ClusterTopology {
            shards: vec![ClusterShard {
                slots: vec![(0, 16383)],
                primary: Some(node(primary)),
                replicas: vec![node(replica)],
            }],
        };
        // A name no other test uses: the counts are kept by pool name for the process.
        let yaml = "mcl:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_cluster: true\n  servers:\n   - 127.0.0.1:7000:1\n";
        let config = Config::from_yaml_str(yaml).unwrap();
        crate::failovers::saw_cluster("mcl", &map(7000, 7001));
        let after = map(7001, 7000);
        crate::failovers::saw_cluster("mcl", &after);
        let found = Topologies::from([(
            "mcl".to_owned(),
            Found::Cluster {
                nodes: after.nodes(),
                owners: after.slot_owners(),
                replicas: Vec::new(),
            },
        )]);
        let started = Instant::now();
        let mut shared = Shared::new(expand(&config, &found), 2, started).unwrap();
        attach(&mut shared, &config, &found, started);
        let pool = &shared.pools[0];
        let old = pool
            .servers
            .iter()
            .position(|s| s.stats_name == "127.0.0.1:7000")
            .unwrap();
        let ask = Redirect::Ask {
            slot: 1,
            addr: node(7001),
        };
        crate::failovers::redirected(pool, old, &ask);
        let m = render(&shared, &globals(2, started));
        for line in [
            "# TYPE memfleet_router_pool_failovers_total counter\n",
            "memfleet_router_pool_failovers_total{pool=\"mcl\"} 1\n",
            "# TYPE memfleet_router_server_cluster_slots gauge\n",
            "memfleet_router_server_cluster_slots{pool=\"mcl\",server=\"127.0.0.1:7001\"} 16384\n",
            "memfleet_router_server_cluster_slots{pool=\"mcl\",server=\"127.0.0.1:7000\"} 0\n",
            "memfleet_router_server_promotions_total{pool=\"mcl\",server=\"127.0.0.1:7001\"} 1\n",
            "memfleet_router_server_redirect_ask_total{pool=\"mcl\",server=\"127.0.0.1:7000\"} 1\n",
            "memfleet_router_server_redirect_moved_total{pool=\"mcl\",server=\"127.0.0.1:7000\"} 0\n",
        ] {
            assert!(m.contains(line), "{line} missing from\n{m}");
        }
        let j = crate::stats::json(&shared, &globals(2, started), "h");
        assert!(j.contains("\"failovers\":1"), "{j}");
        assert!(
            j.contains("\"cluster_slots\":16384, \"redirect_moved\":0, \"redirect_ask\":0, \"promotions\":1}"),
            "{j}"
        );
    }

    #[test]
    fn pools_and_servers_with_their_labels() {
        let (shared, globals) = fresh(
            "alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11212:1\n   - 127.0.0.1:11213:1 t\"wo\n",
            2,
        );
        let p = &shared.pools[0];
        let two = p
            .servers
            .iter()
            .position(|s| s.stats_name == "t\"wo")
            .unwrap();
        p.counters[0].servers[two].requests.add(3);
        p.counters[1].servers[two].requests.add(4);
        p.counters[1].servers[two].server_err.add(1);
        p.counters[0].latency[two].record(30_000);
        p.counters[1].pool.forward_error.add(2);
        globals.per_worker[0].curr_connections.add(5);
        let m = render(&shared, &globals);
        for line in [
            "memfleet_router_current_connections 5\n",
            "memfleet_router_connections_total 0\n",
            "# TYPE memfleet_router_pool_forward_error_total counter\n",
            "memfleet_router_pool_forward_error_total{pool=\"alpha\"} 2\n",
            "memfleet_router_pool_requests_total{pool=\"alpha\"} 7\n",
            "memfleet_router_server_requests_total{pool=\"alpha\",server=\"t\\\"wo\"} 7\n",
            "memfleet_router_server_err_total{pool=\"alpha\",server=\"t\\\"wo\"} 1\n",
            "# TYPE memfleet_router_server_connections gauge\n",
            "memfleet_router_server_ejected{pool=\"alpha\",server=\"t\\\"wo\"} 0\n",
            "memfleet_router_pool_request_duration_seconds_count{pool=\"alpha\"} 1\n",
            "memfleet_router_server_request_duration_seconds_bucket{pool=\"alpha\",server=\"t\\\"wo\",le=\"0.00005\"} 1\n",
        ] {
            assert!(m.contains(line), "{line} missing from\n{m}");
        }
    }
}
