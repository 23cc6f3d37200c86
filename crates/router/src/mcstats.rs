//! mcrouter's `stats servers` and `stats suspect_servers` for a router with an mcrouter
//! config. Each worker keeps its own figures per destination ([`DestCounters`], written by
//! that worker only: one counter bump per reply); the replies sum them over the workers,
//! as `stats` and `/metrics` do, and read the TKO state every worker shares.

use std::sync::atomic::Ordering::Relaxed;

use routetree::server_stats::{
    destination_name, host_port, stats_reply, suspect_value, ServerStat,
};

use crate::shared::{McRoutes, Shared};

/// The reply to `stats <group>` when `group` is one of mcrouter's that memfleet answers
/// (`servers`, `suspect_servers`) and the config is mcrouter's.
pub fn answer(shared: &Shared, group: &[u8]) -> Option<Vec<u8>> {
    let routes = shared.mcrouter.as_ref()?;
    let text = match group {
        b"servers" => servers(shared, routes),
        b"suspect_servers" => suspect_servers(shared, routes),
        _ => return None,
    };
    Some(text.into_bytes())
}

/// Every server of the config's pools, once per name (a server in two pools is one
/// destination to mcrouter), in the config's order.
fn each_server(shared: &Shared, routes: &McRoutes, mut f: impl FnMut(usize, usize, usize)) {
    for (id, pool) in routes.config.pools.iter().enumerate() {
        let Some(&p) = routes.pools.get(id) else {
            continue;
        };
        if shared.pools.get(p).is_none() {
            continue;
        }
        for s in 0..pool.servers.len() {
            f(id, p, s);
        }
    }
}

/// Finds `name` in `lines`, adding it when new.
fn entry<T: Default>(lines: &mut Vec<(String, T)>, name: String) -> &mut T {
    let i = match lines.iter().position(|(n, _)| *n == name) {
        Some(i) => i,
        None => {
            lines.push((name, T::default()));
            lines.len() - 1
        }
    };
    &mut lines[i].1
}

fn servers(shared: &Shared, routes: &McRoutes) -> String {
    let mut lines: Vec<(String, ServerStat)> = Vec::new();
    each_server(shared, routes, |id, p, s| {
        let rt = &shared.pools[p];
        let timeout = routes
            .timeouts
            .for_pool(&routes.config.pools[id], &routes.prefix);
        let name = destination_name(&routes.config, id, s, timeout);
        let stat = entry(&mut lines, name);
        let level = rt.tko.get(s).map_or(0, |t| t.level());
        stat.hard_tko |= level == 2;
        stat.soft_tko |= level == 1;
        for pc in &rt.counters {
            let Some(d) = pc.mc.get(s) else {
                continue;
            };
            let mut answered = 0;
            for (total, c) in stat.results.iter_mut().zip(&d.results) {
                let n = c.get().max(0) as u64;
                *total += n;
                answered += n;
            }
            answered = answered.saturating_sub(d.unqueued.get().max(0) as u64);
            if let Some(n) = stat.states.get_mut(usize::from(d.state.load(Relaxed))) {
                *n += 1;
            }
            let latency = pc.latency[s].snapshot();
            if latency.count() > 0 {
                stat.sum_latency_us += latency.sum() as f64 / latency.count() as f64 / 1000.0;
                stat.latencies += 1;
            }
            // Each worker writes its own counters, so a read may land between two of its
            // updates: never below zero.
            let requests = pc.servers[s].requests.get().max(0) as u64;
            let pending = d.pending.get().max(0) as u64;
            stat.pending += pending;
            stat.inflight += requests.saturating_sub(answered).saturating_sub(pending);
        }
    });
    let values: Vec<(String, String)> = lines
        .into_iter()
        .map(|(name, stat)| (name, stat.value()))
        .collect();
    stats_reply(values.iter().map(|(n, v)| (n.as_str(), v.as_str())))
}

fn suspect_servers(shared: &Shared, routes: &McRoutes) -> String {
    let mut lines: Vec<(String, (bool, u64))> = Vec::new();
    each_server(shared, routes, |id, p, s| {
        let Some(tko) = shared.pools[p].tko.get(s) else {
            return;
        };
        let failures = u64::from(tko.failures());
        if failures == 0 {
            return;
        }
        let (is_tko, n) = entry(&mut lines, host_port(&routes.config, id, s));
        *is_tko |= tko.is_tko();
        *n = (*n).max(failures);
    });
    let values: Vec<(String, String)> = lines
        .into_iter()
        .map(|(name, (tko, n))| (name, suspect_value(tko, n)))
        .collect();
    stats_reply(values.iter().map(|(n, v)| (n.as_str(), v.as_str())))
}
