//! Choosing where a request goes, apart from any I/O: the worker asks a pool's
//! [`Placement`] for the server(s) of each request and then does the sending.
//!
//! Today a pool places a key by hashing it over the pool's ring (nutcracker's `hash` and
//! `distribution`); a request without a key goes to every live server (`flush_all`) or to
//! any live one (Redis commands such as `PING`). Every routing decision of both protocols
//! goes through these three calls, so a per-request route tree (mcrouter route handles) can
//! replace the ring behind them without touching the connection code.

use std::sync::Arc;

use crate::shared::PoolRt;

/// One pool's placement as one worker sees it: the pool and its ring snapshot.
pub(crate) struct Placement {
    rt: Arc<PoolRt>,
    ring_gen: u64,
    ring: Arc<ring::Ring>,
    /// A Redis Cluster pool's slot map as last read, and its generation.
    slots_gen: u64,
    slots: Option<crate::cluster_slots::SlotOwners>,
    /// `redis_read_from: replicas`: read-only commands may go to replicas.
    pub(crate) replica_reads: bool,
    /// A Sentinel pool reading from replicas: its primary, which takes everything else.
    primary: Option<usize>,
    /// Per primary, its replicas (a cluster's as last read; a Sentinel pool's other servers).
    replicas: crate::cluster_slots::Replicas,
    /// Spreads reads over a primary's replicas.
    next_replica: usize,
}

impl Placement {
    /// The placement of pool `rt` under its configured ring.
    pub(crate) fn new(rt: Arc<PoolRt>) -> Placement {
        let ring = Arc::new(rt.cfg.ring());
        let replica_reads =
            rt.cfg.redis_read_from == nutconf::ReadFrom::Replicas && rt.learned.is_some();
        let primary = match &rt.learned {
            Some(l) if replica_reads && l.slots.is_none() => l.primary,
            _ => None,
        };
        let mut replicas = Vec::new();
        if let Some(p) = primary {
            replicas = vec![Vec::new(); rt.servers.len()];
            replicas[p] = (0..rt.servers.len() as u16)
                .filter(|&s| usize::from(s) != p)
                .collect();
        }
        Placement {
            rt,
            ring_gen: 0,
            ring,
            slots_gen: 0,
            slots: None,
            replica_reads,
            primary,
            replicas: Arc::new(replicas),
            next_replica: 0,
        }
    }

    /// Where a read-only command for `slot` (a cluster pool) or for any key (a Sentinel
    /// pool) goes: one of its primary's replicas that may take reads, in turn, else the
    /// primary. The flag says whether it is a replica.
    pub(crate) fn for_read(&mut self, slot: u16) -> Option<(usize, bool)> {
        let primary = match self.primary {
            Some(p) => p,
            None => self.for_slot(slot)?,
        };
        let Some(live) = self.rt.learned.as_ref() else {
            return Some((primary, false));
        };
        let Some(list) = self.replicas.get(primary).filter(|l| !l.is_empty()) else {
            return Some((primary, false));
        };
        let now = self.rt.uptime_ms();
        let start = self.next_replica;
        self.next_replica = self.next_replica.wrapping_add(1);
        let n = list.len();
        let found = (0..n)
            .map(|i| usize::from(list[(start + i) % n]))
            .find(|&s| live.may_read(s, now));
        Some(found.map_or((primary, false), |s| (s, true)))
    }

    /// The server serving Redis Cluster hash slot `slot`, None when no primary does (or
    /// the pool is not a cluster's). Picks up the pool's latest slot map first.
    #[inline]
    pub(crate) fn for_slot(&mut self, slot: u16) -> Option<usize> {
        let map = self.rt.learned.as_ref()?.slots.as_ref()?;
        if let Some((g, owners)) = map.if_newer(self.slots_gen) {
            self.slots_gen = g;
            self.slots = Some(owners);
            if self.replica_reads {
                self.replicas = map.replicas();
            }
        }
        let owner = *self.slots.as_ref()?.get(usize::from(slot))?;
        (owner != crate::cluster_slots::UNSERVED).then_some(usize::from(owner))
    }

    /// The server that owns `key`, None when no server is available. Picks up the pool's
    /// latest ring first (ejections and returns change it).
    #[inline]
    pub(crate) fn for_key(&mut self, key: &[u8]) -> Option<usize> {
        if let Some((g, r)) = self.rt.ring_if_newer(self.ring_gen) {
            self.ring_gen = g;
            self.ring = r;
        }
        self.ring.server_for(key)
    }

    /// The server a transaction's `key` goes to: [`Placement::for_key`], except in a
    /// Sentinel pool reading from replicas, whose primary takes every transaction.
    pub(crate) fn for_tx_key(&mut self, key: &[u8]) -> Option<usize> {
        match self.primary {
            Some(p) => Some(p),
            None => self.for_key(key),
        }
    }

    /// Every live server (for a request all of them must execute).
    pub(crate) fn for_all(&self) -> Vec<usize> {
        let servers = &self.rt.servers;
        (0..servers.len())
            .filter(|&s| !servers[s].is_ejected())
            .collect()
    }

    /// One live server, or the first when all are ejected (for a request any can answer).
    /// None when the pool has no servers.
    pub(crate) fn for_any(&self) -> Option<usize> {
        if self.primary.is_some() {
            return self.primary;
        }
        let servers = &self.rt.servers;
        if servers.is_empty() {
            return None;
        }
        Some(
            (0..servers.len())
                .find(|&s| !servers[s].is_ejected())
                .unwrap_or(0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nutconf::Config;
    use std::time::Instant;

    const YAML: &str = "p:\n  listen: 127.0.0.1:22121\n  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 60000\n  servers:\n   - 127.0.0.1:1:1 one\n   - 127.0.0.1:2:1 two\n";

    #[test]
    fn reads_take_replicas_in_turn_and_skip_resting_ones() {
        use crate::cluster_slots::ClusterSlots;
        use crate::learned::Live;
        let yaml = "p:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_cluster: true\n  redis_read_from: replicas\n  servers:\n   - 127.0.0.1:1:1\n   - 127.0.0.1:2:1\n   - 127.0.0.1:3:1\n";
        let cfg = Config::from_yaml_str(yaml).unwrap();
        let mut rt = PoolRt::new(cfg.pools[0].clone(), 1, Instant::now()).unwrap();
        let slots = ClusterSlots::new(vec![0; ring::redis_slot::REDIS_SLOTS], 0);
        slots.set_replicas(vec![vec![1, 2], vec![], vec![]]);
        rt.learned = Some(Box::new(Live::new(Vec::new(), Some(slots), None, 3)));
        let rt = Arc::new(rt);
        let mut placement = Placement::new(rt.clone());
        assert!(placement.replica_reads);
        assert_eq!(placement.for_slot(7), Some(0), "writes: the primary");
        let reads: Vec<_> = (0..4).filter_map(|_| placement.for_read(7)).collect();
        assert_eq!(reads, [(1, true), (2, true), (1, true), (2, true)]);
        let live = rt.learned.as_ref().unwrap();
        live.rest(1, rt.uptime_ms());
        assert!((0..3).all(|_| placement.for_read(7) == Some((2, true))));
        live.rest(2, rt.uptime_ms());
        assert_eq!(
            placement.for_read(7),
            Some((0, false)),
            "none left: the primary"
        );
    }

    #[test]
    fn follows_ejections() {
        let cfg = Config::from_yaml_str(YAML).unwrap();
        let rt = Arc::new(PoolRt::new(cfg.pools[0].clone(), 1, Instant::now()).unwrap());
        let mut placement = Placement::new(rt.clone());
        let key = (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| placement.for_key(k.as_bytes()) == Some(0))
            .unwrap();
        assert_eq!(placement.for_all(), vec![0, 1]);
        assert_eq!(placement.for_any(), Some(0));
        assert!(rt.record_failure(0), "one failure ejects");
        assert_eq!(placement.for_key(key.as_bytes()), Some(1), "the new ring");
        assert_eq!(placement.for_all(), vec![1]);
        assert_eq!(placement.for_any(), Some(1));
        assert!(rt.record_failure(1));
        assert_eq!(placement.for_key(key.as_bytes()), None);
        assert!(placement.for_all().is_empty());
        assert_eq!(placement.for_any(), Some(0), "all ejected: the first");
    }
}
