//! One server's line of the view, computed from its last two samples. Pure: no I/O.

use std::time::Instant;

use crate::stats::{General, HotKey};

/// What one poll of a server read.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: Instant,
    pub general: General,
    /// Worst p99 over commands in µs; `None` when the server offers no `stats latency`.
    pub p99_us: Option<f64>,
    /// Empty when the server offers no `stats hotkeys` or has sampling off.
    pub hot_keys: Vec<HotKey>,
}

/// Whether a server answered its last poll.
#[derive(Clone, Debug, PartialEq)]
pub enum Health {
    /// Not polled yet.
    Waiting,
    Up,
    /// The last poll failed (why); it is retried on the next tick.
    Down(String),
}

/// One server's figures as shown. Rates are `None` until two samples a restart apart exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub server: String,
    pub health: Health,
    pub ops_per_sec: Option<f64>,
    /// get hits / gets over the last interval, or since start when the interval had no gets.
    pub hit_ratio: Option<f64>,
    pub evictions_per_sec: Option<f64>,
    pub connections: Option<u64>,
    pub mem_used: Option<u64>,
    pub mem_limit: Option<u64>,
    pub p99_us: Option<f64>,
    pub hot_keys: Vec<HotKey>,
}

impl Row {
    /// A server with no figures (not polled yet, or down).
    pub fn empty(server: &str, health: Health) -> Row {
        Row {
            server: server.to_owned(),
            health,
            ops_per_sec: None,
            hit_ratio: None,
            evictions_per_sec: None,
            connections: None,
            mem_used: None,
            mem_limit: None,
            p99_us: None,
            hot_keys: Vec::new(),
        }
    }

    /// The row for a server that answered: `cur` now, `prev` the sample before (if any).
    pub fn up(server: &str, prev: Option<&Sample>, cur: &Sample) -> Row {
        let g = &cur.general;
        // A counter going backwards or a smaller uptime is a restart (or `stats reset`):
        // rates over such an interval would be nonsense, so they wait for the next one.
        let prev = prev.filter(|p| {
            let (a, b) = (&p.general, g);
            b.uptime >= a.uptime
                && b.ops >= a.ops
                && b.evictions >= a.evictions
                && b.get_hits >= a.get_hits
                && b.get_misses >= a.get_misses
                && cur.at > p.at
        });
        let rate = |f: fn(&General) -> u64| {
            prev.map(|p| {
                let secs = cur.at.duration_since(p.at).as_secs_f64();
                (f(g) - f(&p.general)) as f64 / secs
            })
        };
        let (hits, misses) = match prev {
            Some(p) if g.get_hits + g.get_misses > p.general.get_hits + p.general.get_misses => (
                g.get_hits - p.general.get_hits,
                g.get_misses - p.general.get_misses,
            ),
            _ => (g.get_hits, g.get_misses),
        };
        Row {
            server: server.to_owned(),
            health: Health::Up,
            ops_per_sec: rate(|g| g.ops),
            hit_ratio: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
            evictions_per_sec: rate(|g| g.evictions),
            connections: Some(g.curr_connections),
            mem_used: Some(g.bytes),
            mem_limit: Some(g.limit_maxbytes),
            p99_us: cur.p99_us,
            hot_keys: cur.hot_keys.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample(
        at: Instant,
        ops: u64,
        hits: u64,
        misses: u64,
        evictions: u64,
        uptime: u64,
    ) -> Sample {
        Sample {
            at,
            general: General {
                ops,
                get_hits: hits,
                get_misses: misses,
                evictions,
                curr_connections: 4,
                bytes: 100,
                limit_maxbytes: 1000,
                uptime,
            },
            p99_us: Some(250.0),
            hot_keys: Vec::new(),
        }
    }

    #[test]
    fn rates_are_deltas_over_elapsed_time() {
        let t0 = Instant::now();
        let a = sample(t0, 1000, 10, 10, 5, 10);
        let b = sample(t0 + Duration::from_secs(2), 3000, 100, 20, 9, 12);
        let row = Row::up("s", Some(&a), &b);
        assert_eq!(row.ops_per_sec, Some(1000.0));
        assert_eq!(row.evictions_per_sec, Some(2.0));
        assert_eq!(row.hit_ratio, Some(0.9));
        assert_eq!(
            (row.connections, row.mem_used, row.mem_limit),
            (Some(4), Some(100), Some(1000))
        );
        assert_eq!(row.p99_us, Some(250.0));
        assert_eq!(row.health, Health::Up);
    }

    #[test]
    fn first_sample_has_no_rates_but_a_lifetime_hit_ratio() {
        let row = Row::up("s", None, &sample(Instant::now(), 50, 3, 1, 0, 1));
        assert_eq!((row.ops_per_sec, row.evictions_per_sec), (None, None));
        assert_eq!(row.hit_ratio, Some(0.75));
    }

    #[test]
    fn an_interval_without_gets_falls_back_to_lifetime_ratio() {
        let t0 = Instant::now();
        let a = sample(t0, 10, 1, 1, 0, 5);
        let b = sample(t0 + Duration::from_secs(1), 20, 1, 1, 0, 6);
        assert_eq!(Row::up("s", Some(&a), &b).hit_ratio, Some(0.5));
        let none = sample(t0, 0, 0, 0, 0, 1);
        assert_eq!(Row::up("s", None, &none).hit_ratio, None);
    }

    #[test]
    fn a_restart_suppresses_rates_for_one_interval() {
        let t0 = Instant::now();
        let before = sample(t0, 5000, 10, 0, 3, 100);
        let restarted = sample(t0 + Duration::from_secs(1), 20, 1, 0, 0, 1);
        let row = Row::up("s", Some(&before), &restarted);
        assert_eq!((row.ops_per_sec, row.evictions_per_sec), (None, None));
        assert_eq!(row.hit_ratio, Some(1.0));
    }
}
