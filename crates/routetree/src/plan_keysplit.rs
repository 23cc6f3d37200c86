//! KeySplitRoute's plans: which replica keys a request goes to, as mcrouter decides it.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use ring::RoutingKey;

use super::{Eval, Plan};
use crate::model::{AllMode, Target};

/// Between the key and the replica index (`key::3`), as in mcrouter.
pub const REPLICA_SEPARATOR: &[u8] = b"::";
/// mcrouter leaves keys alone when the longest replica key would pass this length.
const MAX_KEY_LENGTH: usize = 255;
/// The separator and the digits of the largest replica index (999).
const EXTRA_KEY_SPACE: usize = REPLICA_SEPARATOR.len() + 3;

/// This router's host id (mcrouter's `hostid`): the replica a request that must meet the
/// writes of this host goes to is the host id modulo the replica count.
static HOST_ID: AtomicU32 = AtomicU32::new(0);

/// Set once at start-up, from the host's name.
pub fn set_host_id(id: u32) {
    HOST_ID.store(id, Relaxed);
}

/// This router's host id (0 until [`set_host_id`]).
pub fn host_id() -> u32 {
    HOST_ID.load(Relaxed)
}

/// Replica `index`'s key: the routing key, `::index`, then anything after a `|#|` hash
/// stop, behind the client's routing prefix. Replica 0 is the key itself.
pub fn replica_key(rk: &RoutingKey<'_>, index: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(rk.prefix.len() + rk.key.len() + EXTRA_KEY_SPACE);
    key.extend_from_slice(rk.prefix);
    key.extend_from_slice(rk.hashed);
    if index > 0 {
        key.extend_from_slice(REPLICA_SEPARATOR);
        key.extend_from_slice(index.to_string().as_bytes());
    }
    key.extend_from_slice(&rk.key[rk.hashed.len()..]);
    key
}

/// Whether every replica key stays within mcrouter's key length.
fn fits(rk: &RoutingKey<'_>) -> bool {
    rk.prefix.len() + rk.key.len() + EXTRA_KEY_SPACE <= MAX_KEY_LENGTH
}

impl Eval<'_, '_> {
    /// mcrouter's KeySplitRoute: get, lease-get and lease-set read (write) one replica, or
    /// with `first_hit` all of them; deletes write all replicas, sets too with `all_sync`;
    /// the rest go to one replica. A key too long for the replica suffix is left alone
    /// (gets, sets, deletes), as mcrouter does.
    pub(super) fn key_split(
        &mut self,
        destination: Target,
        replicas: usize,
        all_sync: bool,
        first_hit: bool,
    ) -> Plan {
        enum How {
            One,
            All,
            FirstHit,
        }
        let checked = matches!(
            self.op,
            "get" | "lease-get" | "lease-set" | "set" | "delete"
        );
        if checked && !fits(&self.rk) {
            return self.target(destination);
        }
        let how = match self.op {
            "get" | "lease-get" | "lease-set" if first_hit => How::FirstHit,
            "set" if all_sync => How::All,
            "delete" => How::All,
            _ => How::One,
        };
        let plans: Vec<Plan> = (0..replicas)
            .map(|i| self.replica(destination, i))
            .collect();
        // mcrouter sends everything to this host's replica, so that what a host writes is
        // what it reads. A get may go to any replica when every set writes them all
        // (`all_sync`): that spreads a hot key from one router too.
        let host = HOST_ID.load(Relaxed) as usize % replicas.max(1);
        let read_any = all_sync && matches!(self.op, "get" | "lease-get");
        let pick = if read_any { None } else { Some(host) };
        match how {
            How::One => Plan::KeySplit {
                replicas: plans,
                fanout: false,
                pick,
            },
            How::All => Plan::KeySplit {
                replicas: plans,
                fanout: true,
                pick,
            },
            How::FirstHit => Plan::All {
                mode: AllMode::FirstHit,
                plans,
            },
        }
    }

    /// The plan of replica `index`'s key through `destination`.
    fn replica(&mut self, destination: Target, index: usize) -> Plan {
        if index == 0 {
            return self.target(destination);
        }
        let key = replica_key(&self.rk, index);
        self.rekeyed(destination, key)
    }
}

#[cfg(test)]
mod tests {
    use ring::{PoolHash, RoutingKey};

    use super::replica_key;
    use crate::model::AllMode;
    use crate::{parse_config, Config, Plan, Send};

    const DEFAULT: &str = "/r/c/";
    /// Without asynclog, so that deletes plan as gets do.
    const A: &str = r#"{"type": "PoolRoute", "pool": "A", "asynclog": false}"#;

    fn config(route: &str) -> Config {
        let text = format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"]}},
                           "B": {{"servers": ["h:6"]}}}},
                "route": {route}}}"#
        );
        parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn refused(route: &str) -> String {
        let text = format!(r#"{{"pools": {{"A": {{"servers": ["h:1"]}}}}, "route": {route}}}"#);
        parse_config("t.json", &text).unwrap_err().to_string()
    }

    fn send(pool: usize, key: &str) -> Plan {
        let n = if pool == 0 { 5 } else { 1 };
        Plan::Send(Send {
            pool,
            index: PoolHash::Ch3.index(RoutingKey::parse(key.as_bytes()).hashed, n),
            keep_prefix: false,
            exptime: Vec::new(),
            asynclog: None,
        })
    }

    /// Replica plans of `key` through PoolRoute|A.
    fn replicas(key: &str, n: usize) -> Vec<Plan> {
        (0..n)
            .map(|i| match i {
                0 => send(0, key),
                _ => Plan::Rekey {
                    key: format!("{key}::{i}").into_bytes(),
                    plan: Box::new(send(0, &format!("{key}::{i}"))),
                },
            })
            .collect()
    }

    fn split(all_sync: bool, first_hit: bool) -> Config {
        config(&format!(
            r#"{{"type": "KeySplitRoute", "destination": {A}, "replicas": 3,
                "all_sync": {all_sync}, "first_hit": {first_hit}}}"#
        ))
    }

    #[test]
    fn replica_keys_append_the_separator_and_index_to_the_routing_key() {
        let key = |k: &str, i| {
            String::from_utf8(replica_key(&RoutingKey::parse(k.as_bytes()), i)).unwrap()
        };
        assert_eq!(key("hot", 0), "hot");
        assert_eq!(key("hot", 7), "hot::7");
        assert_eq!(key("/a/b/hot", 2), "/a/b/hot::2");
        assert_eq!(key("hot|#|tail", 3), "hot::3|#|tail");
    }

    #[test]
    fn gets_read_one_replica_sets_and_deletes_write_as_mcrouter_does() {
        // This host's replica (host id 0 in tests), or any replica for a get when every
        // set writes them all.
        let one = Plan::KeySplit {
            replicas: replicas("hot", 3),
            fanout: false,
            pick: Some(0),
        };
        let any = Plan::KeySplit {
            replicas: replicas("hot", 3),
            fanout: false,
            pick: None,
        };
        let all = Plan::KeySplit {
            replicas: replicas("hot", 3),
            fanout: true,
            pick: Some(0),
        };
        let c = split(false, false);
        assert_eq!(c.plan("get", b"hot", DEFAULT), one);
        assert_eq!(c.plan("set", b"hot", DEFAULT), one, "without all_sync");
        assert_eq!(c.plan("incr", b"hot", DEFAULT), one);
        assert_eq!(
            c.plan("delete", b"hot", DEFAULT),
            all,
            "always every replica"
        );
        let c = split(true, false);
        assert_eq!(c.plan("set", b"hot", DEFAULT), all);
        assert_eq!(c.plan("add", b"hot", DEFAULT), one, "only sets fan out");
        assert_eq!(
            c.plan("incr", b"hot", DEFAULT),
            one,
            "a counter stays on one replica"
        );
        assert_eq!(c.plan("get", b"hot", DEFAULT), any);
        let c = split(true, true);
        let first_hit = Plan::All {
            mode: AllMode::FirstHit,
            plans: replicas("hot", 3),
        };
        assert_eq!(c.plan("get", b"hot", DEFAULT), first_hit);
        assert_eq!(c.plan("lease-get", b"hot", DEFAULT), first_hit);
        assert_eq!(c.plan("gets", b"hot", DEFAULT), one, "gets is not get");
    }

    #[test]
    fn keys_too_long_for_a_replica_suffix_are_left_alone() {
        let c = split(true, false);
        let long = "k".repeat(251);
        for op in ["get", "set", "delete"] {
            assert_eq!(c.plan(op, long.as_bytes(), DEFAULT), send(0, &long), "{op}");
        }
        let fits = "k".repeat(250);
        assert!(matches!(
            c.plan("get", fits.as_bytes(), DEFAULT),
            Plan::KeySplit { .. }
        ));
        // mcrouter checks only gets, sets and deletes.
        assert!(matches!(
            c.plan("incr", long.as_bytes(), DEFAULT),
            Plan::KeySplit { .. }
        ));
    }

    #[test]
    fn key_split_fields_are_checked_as_mcrouter_checks_them() {
        let with = |fields: &str| {
            format!(r#"{{"type": "KeySplitRoute", "destination": "PoolRoute|A"{fields}}}"#)
        };
        assert!(refused(&with(r#", "all_sync": true"#)).contains("no 'replicas'"));
        assert!(refused(&with(r#", "replicas": 2"#)).contains("no 'all_sync'"));
        for bad in ["1", "1001", "\"2\""] {
            let e = refused(&with(&format!(r#", "replicas": {bad}, "all_sync": true"#)));
            assert!(e.contains("replicas must be an integer in 2..=1000"), "{e}");
        }
        let e = refused(&with(r#", "replicas": 2, "all_sync": 1"#));
        assert!(e.contains("all_sync must be true or false"), "{e}");
        let e = refused(&with(
            r#", "replicas": 2, "all_sync": true, "first_hit": "x""#,
        ));
        assert!(e.contains("first_hit must be true or false"), "{e}");
        let e = refused(r#"{"type": "KeySplitRoute", "replicas": 2, "all_sync": true}"#);
        assert!(e.contains("no 'destination'"), "{e}");
    }

    #[test]
    fn l1l2_gets_go_through_both_levels_and_the_rest_to_l1() {
        let c = config(&format!(
            r#"{{"type": "L1L2CacheRoute", "l1": {A}, "l2": "PoolRoute|B",
                "upgradingL1Exptime": 10, "ncacheExptime": 60, "ncacheUpdatePeriod": 5}}"#
        ));
        let Plan::L1L2 {
            l1,
            l2,
            upgrading_l1_exptime: 10,
            ncache_exptime: 60,
            ncache_update_period: 5,
            ..
        } = c.plan("get", b"k", DEFAULT)
        else {
            panic!("not an L1L2 plan");
        };
        assert_eq!((*l1, *l2), (send(0, "k"), send(1, "k")));
        for op in ["gets", "gat", "lease-get"] {
            assert!(
                matches!(c.plan(op, b"k", DEFAULT), Plan::L1L2 { .. }),
                "{op}"
            );
        }
        for op in ["set", "delete", "incr", "lease-set"] {
            assert_eq!(c.plan(op, b"k", DEFAULT), send(0, "k"), "{op} to l1 only");
        }
    }

    #[test]
    fn l1l2_fields_are_checked_as_mcrouter_checks_them() {
        let base = r#""type": "L1L2CacheRoute", "l1": "PoolRoute|A", "l2": "PoolRoute|A""#;
        let e = refused(&format!("{{{base}}}"));
        assert!(e.contains("no 'upgradingL1Exptime'"), "{e}");
        let e = refused(&format!(r#"{{{base}, "upgradingL1Exptime": "5"}}"#));
        assert!(e.contains("upgradingL1Exptime must be an integer"), "{e}");
        let e = refused(&format!(
            r#"{{{base}, "upgradingL1Exptime": 5, "ncacheUpdatePeriod": -1}}"#
        ));
        assert!(e.contains("ncacheUpdatePeriod must be an integer"), "{e}");
        let e =
            refused(r#"{"type": "L1L2CacheRoute", "l1": "PoolRoute|A", "upgradingL1Exptime": 1}"#);
        assert!(e.contains("no 'l2'"), "{e}");
        let c = config(&format!(r#"{{{base}, "upgradingL1Exptime": 0}}"#));
        assert!(matches!(
            c.plan("get", b"k", DEFAULT),
            Plan::L1L2 {
                ncache_update_period: 0,
                ncache_exptime: 0,
                ..
            }
        ));
    }
}
