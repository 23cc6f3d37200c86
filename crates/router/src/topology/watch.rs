//! One thread per learned pool of a generation, keeping it current until the generation is
//! gone: a cluster's map is read again every second (at once when a worker saw it is old),
//! a Sentinel asked for the primary four times a second and at once when a Sentinel
//! announces `+switch-master`.

use std::collections::BTreeSet;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nutconf::RedisTopology;

use proto::resp::cluster::{parse_switch_master, NodeAddr};

use super::query::Conn;
use super::{discover, node_of, owners_by_server, replicas_by_server, wait_of, Found};
use crate::shared::PoolRt;

/// A learned pool whose node set or primary changed: the control thread installs it.
pub struct Change {
    pub pool: String,
    pub found: Found,
    /// The pool the watcher watched (a change for an older generation is ignored).
    pub from: *const PoolRt,
}

// The pointer is only compared, never followed.
unsafe impl Send for Change {}

/// How often the watcher looks whether something is due.
const TICK: Duration = Duration::from_millis(25);
const CLUSTER_EVERY: Duration = Duration::from_secs(1);
const CLUSTER_SOONEST: Duration = Duration::from_millis(100);
const SENTINEL_EVERY: Duration = Duration::from_millis(250);
/// After a change is sent, how long before the same watcher may send again (the new
/// generation's own watcher normally takes over first).
const RESEND_AFTER: Duration = Duration::from_secs(5);

/// Starts the watchers of `rt` when it is a learned pool.
pub fn spawn(rt: &Arc<PoolRt>, started: Instant, tx: Sender<Change>) {
    if rt.learned.is_none() {
        return;
    }
    let weak = Arc::downgrade(rt);
    let name = format!("route-watch-{}", rt.cfg.name);
    let spawned = std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || run(weak, started, tx));
    if let Err(e) = spawned {
        crate::log::warn(&format!("cannot start a topology watcher: {e}"));
    }
}

/// A subscription to a Sentinel's `+switch-master` messages: a failover is seen the moment
/// the Sentinels announce it, between the regular questions.
struct SwitchWatch {
    conn: Option<Conn>,
    tried: Option<Instant>,
}

impl SwitchWatch {
    /// Waits up to `wait` for an announcement that master `name` has a new primary.
    fn announced(&mut self, rt: &PoolRt, name: &str, wait: Duration) -> bool {
        if self.conn.is_none() && self.tried.is_none_or(|t| t.elapsed() >= CLUSTER_EVERY) {
            self.tried = Some(Instant::now());
            self.conn = rt
                .learned
                .as_ref()
                .and_then(|l| subscribe(&l.seeds, wait_of(&rt.cfg), rt.cfg.sentinel_auth()));
        }
        let Some(conn) = self.conn.as_mut() else {
            std::thread::sleep(wait);
            return false;
        };
        match conn.next_reply(wait) {
            Ok(Some(frame)) => parse_switch_master(&frame, name).is_some(),
            Ok(None) => false,
            Err(_) => {
                self.conn = None;
                false
            }
        }
    }
}

/// A connection to the first Sentinel that takes `SUBSCRIBE +switch-master`.
fn subscribe(
    sentinels: &[NodeAddr],
    wait: Duration,
    auth: Option<(Option<&str>, &str)>,
) -> Option<Conn> {
    sentinels.iter().find_map(|addr| {
        let mut conn = Conn::open(addr, auth, wait).ok()?;
        let ok = conn.ask(&[b"SUBSCRIBE", b"+switch-master"]).ok()?;
        ok.starts_with(b"*").then_some(conn)
    })
}

fn run(weak: Weak<PoolRt>, started: Instant, tx: Sender<Change>) {
    let mut last = Instant::now();
    let mut sent_at: Option<Instant> = None;
    let mut failing = false;
    let mut switches = SwitchWatch {
        conn: None,
        tried: None,
    };
    loop {
        let sentinel = weak.upgrade().and_then(|rt| match &rt.cfg.redis_topology {
            RedisTopology::Sentinel(name) => Some((rt.clone(), name.clone())),
            _ => None,
        });
        let mut announced = false;
        match sentinel {
            Some((rt, name)) => announced = switches.announced(&rt, &name, TICK),
            None => std::thread::sleep(TICK),
        }
        let Some(rt) = weak.upgrade() else {
            return;
        };
        // Only while this generation serves: a retired one keeps its pool alive only
        // until its last backend connection closes.
        if Arc::strong_count(&rt) <= 1 {
            return;
        }
        let Some(live) = rt.learned.as_ref() else {
            return;
        };
        let every = match rt.cfg.redis_topology {
            RedisTopology::Sentinel(_) => SENTINEL_EVERY,
            _ => CLUSTER_EVERY,
        };
        let asked = live.slots.as_ref().is_some_and(|s| s.take_stale());
        let due =
            announced || last.elapsed() >= every || (asked && last.elapsed() >= CLUSTER_SOONEST);
        if !due {
            if asked {
                if let Some(s) = &live.slots {
                    s.mark_stale();
                }
            }
            continue;
        }
        last = Instant::now();
        // Ask the nodes known now first, the written seeds after them.
        let mut from: Vec<_> = match &rt.cfg.redis_topology {
            RedisTopology::Sentinel(_) => Vec::new(),
            _ => (0..rt.servers.len())
                .filter_map(|s| node_of(&rt, s))
                .collect(),
        };
        from.extend(live.seeds.iter().cloned());
        from.dedup();
        let found = match discover(&rt.cfg, &from) {
            Ok(f) => f,
            Err(e) => {
                if !failing {
                    crate::log::warn(&format!("pool '{}': {e}", rt.cfg.name));
                }
                failing = true;
                continue;
            }
        };
        if failing {
            crate::log::notice(&format!("pool '{}': topology read again", rt.cfg.name));
            failing = false;
        }
        let now: BTreeSet<String> = rt.servers.iter().map(|s| s.stats_name.clone()).collect();
        let primary = live.primary.map(|p| rt.servers[p].stats_name.clone());
        if (now, primary) == found.identity() {
            if let (
                Found::Cluster {
                    nodes,
                    owners,
                    replicas,
                },
                Some(slots),
            ) = (&found, &live.slots)
            {
                slots.set_replicas(replicas_by_server(&rt, nodes, replicas));
                slots.replace(
                    owners_by_server(&rt, nodes, owners),
                    started.elapsed().as_millis() as u64,
                );
            }
            continue;
        }
        if sent_at.is_some_and(|t| t.elapsed() < RESEND_AFTER) {
            continue;
        }
        sent_at = Some(Instant::now());
        let change = Change {
            pool: rt.cfg.name.clone(),
            found,
            from: Arc::as_ptr(&rt),
        };
        if tx.send(change).is_err() {
            return;
        }
    }
}
