//! Which keys to cache so that the busiest server's load comes down toward the mean.
//!
//! Caching the keys hottest overall is not enough when many moderately hot keys share one
//! server (a hash like fnv1a places keys named in sequence close together on a ring): the
//! server's load is the sum of its keys', and only keys of that server relieve it. So the
//! choice is greedy by server: while the busiest server (what it still serves once the
//! chosen keys are answered elsewhere) is above the mean by more than `SLACK`, the hottest
//! key of that server not yet chosen is chosen.
//!
//! `Demand` keeps the estimates the choice needs across judgements: each server's sampled
//! gets and each key's, both decayed, so a key sampled less than once per judgement still
//! builds up a rate.

use std::collections::HashMap;

use crate::topk::Entry;

/// The busiest server is left alone once within this fraction above the mean: chasing
/// the noise of sampled loads would only cache keys for nothing.
pub const SLACK: f64 = 0.1;
/// Each judgement keeps this fraction of the counts before: a count halves in about 6.6
/// judgements (1.6 s at the router's 250 ms).
pub const DECAY: f64 = 0.9;
/// A key whose decayed count is below this is forgotten: seen about once in a while is
/// noise, not a rate.
pub const FORGET: f64 = 0.5;

/// A key that may be chosen: its server and its rate, in the same unit as the loads.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub key: Box<[u8]>,
    pub server: usize,
    pub rate: f64,
}

/// The keys to cache: `first` (chosen whatever the balance, at most `max`), then keys of
/// `candidates` (any order), each the hottest not yet chosen of the server whose load less
/// its chosen keys' is highest, while that server is above the mean by more than `SLACK`,
/// up to `max` keys in all. `loads[s]`: server s's load with nothing cached.
pub fn balance(
    loads: &[f64],
    candidates: &[Candidate],
    first: Vec<Box<[u8]>>,
    max: usize,
) -> Vec<Box<[u8]>> {
    let mut chosen = first;
    chosen.truncate(max);
    let mut left = loads.to_vec();
    // Per server, its candidates hottest first; `next[s]`: the next one to look at.
    let mut by_server: Vec<Vec<&Candidate>> = vec![Vec::new(); loads.len()];
    for c in candidates {
        if c.server >= loads.len() {
            continue;
        }
        if chosen.contains(&c.key) {
            left[c.server] -= c.rate;
        } else {
            by_server[c.server].push(c);
        }
    }
    for v in &mut by_server {
        v.sort_by(|a, b| b.rate.total_cmp(&a.rate).then_with(|| a.key.cmp(&b.key)));
    }
    let mut next = vec![0; loads.len()];
    let n = loads.len() as f64;
    while chosen.len() < max {
        let Some((s, &busiest)) = left
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(&a.0)))
        else {
            break;
        };
        let mean = left.iter().sum::<f64>() / n;
        if busiest <= mean * (1.0 + SLACK) {
            break;
        }
        // Removing load elsewhere only lowers the mean: nothing more helps.
        let Some(c) = by_server[s].get(next[s]) else {
            break;
        };
        next[s] += 1;
        left[s] -= c.rate;
        chosen.push(c.key.clone());
    }
    chosen
}

/// Decayed sampled gets per server and per key, across judgements. Memory: at most
/// `keep` keys (each up to 250 bytes) and one count per server.
pub struct Demand {
    loads: Vec<f64>,
    keys: HashMap<Box<[u8]>, f64>,
    keep: usize,
}

impl Demand {
    pub fn new(keep: usize) -> Demand {
        Demand {
            loads: Vec::new(),
            keys: HashMap::new(),
            keep: keep.max(1),
        }
    }

    /// One judgement's samples: `servers[s]` of them were gets of server s's keys, and
    /// `entries` the sketch of their keys (a key counts what it surely had: its count less
    /// its possible overestimate).
    pub fn add(&mut self, servers: &[u64], entries: &[Entry]) {
        if self.loads.len() < servers.len() {
            self.loads.resize(servers.len(), 0.0);
        }
        for (i, l) in self.loads.iter_mut().enumerate() {
            *l = *l * DECAY + servers.get(i).copied().unwrap_or(0) as f64;
        }
        for r in self.keys.values_mut() {
            *r *= DECAY;
        }
        for e in entries {
            let n = (e.count - e.error) as f64;
            if n > 0.0 {
                *self.keys.entry(e.key.clone()).or_insert(0.0) += n;
            }
        }
        self.keys.retain(|_, r| *r >= FORGET);
        if self.keys.len() > self.keep {
            let mut v: Vec<(Box<[u8]>, f64)> = self.keys.drain().collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(self.keep);
            self.keys = v.into_iter().collect();
        }
    }

    /// The keys to cache (see `balance`), each key's server given by `server_of`.
    pub fn choose(
        &self,
        first: Vec<Box<[u8]>>,
        max: usize,
        mut server_of: impl FnMut(&[u8]) -> Option<usize>,
    ) -> Vec<Box<[u8]>> {
        let candidates: Vec<Candidate> = self
            .keys
            .iter()
            .filter_map(|(k, &rate)| {
                Some(Candidate {
                    key: k.clone(),
                    server: server_of(k)?,
                    rate,
                })
            })
            .collect();
        balance(&self.loads, &candidates, first, max)
    }

    /// Each server's decayed load.
    pub fn loads(&self) -> &[f64] {
        &self.loads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(key: &str, server: usize, rate: f64) -> Candidate {
        Candidate {
            key: key.as_bytes().into(),
            server,
            rate,
        }
    }

    fn keys(v: &[Box<[u8]>]) -> Vec<&str> {
        v.iter().map(|k| std::str::from_utf8(k).unwrap()).collect()
    }

    #[test]
    fn the_busiest_servers_keys_are_chosen_not_the_hottest_overall() {
        // Server 0 carries many warm keys; server 1 one hot key but less load in all.
        let loads = [100.0, 45.0, 40.0, 40.0];
        let cands = [
            c("hot", 1, 30.0),
            c("a", 0, 20.0),
            c("b", 0, 15.0),
            c("c", 0, 10.0),
            c("d", 0, 5.0),
        ];
        // Server 0 comes down as far as its keys take it; the hottest key is not needed.
        let got = balance(&loads, &cands, Vec::new(), 8);
        assert_eq!(keys(&got), ["a", "b", "c", "d"]);
        // The bound holds, and the hottest of the busiest goes first.
        assert_eq!(keys(&balance(&loads, &cands, Vec::new(), 2)), ["a", "b"]);
    }

    #[test]
    fn the_choice_follows_whichever_server_is_busiest_now() {
        let loads = [100.0, 90.0, 10.0, 0.0];
        let cands = [c("a0", 0, 30.0), c("a1", 0, 5.0), c("b0", 1, 30.0)];
        // 100 -> 70 (a0); server 1 is busiest at 90 -> 60 (b0); then server 0 at 70 >
        // 1.1 x 35: a1.
        let got = balance(&loads, &cands, Vec::new(), 8);
        assert_eq!(keys(&got), ["a0", "b0", "a1"]);
    }

    #[test]
    fn a_balanced_pool_caches_nothing_more() {
        let loads = [100.0, 95.0, 105.0, 100.0];
        let cands = [c("a", 2, 5.0), c("b", 0, 4.0)];
        assert!(balance(&loads, &cands, Vec::new(), 8).is_empty());
    }

    #[test]
    fn keys_chosen_first_count_against_max_and_their_servers_load() {
        let loads = [100.0, 55.0, 55.0, 55.0];
        let cands = [c("first", 0, 40.0), c("a", 0, 10.0), c("b", 1, 10.0)];
        // With "first" out, server 0 serves 60 of a mean 56.25: within the slack.
        let got = balance(&loads, &cands, vec![b"first"[..].into()], 8);
        assert_eq!(keys(&got), ["first"]);
        let got = balance(&loads, &cands, vec![b"x"[..].into(), b"y"[..].into()], 1);
        assert_eq!(keys(&got), ["x"]);
    }

    #[test]
    fn stops_when_the_busiest_has_no_key_left() {
        let loads = [100.0, 10.0];
        let cands = [c("a", 0, 10.0), c("b", 1, 5.0), c("far", 7, 50.0)];
        assert_eq!(keys(&balance(&loads, &cands, Vec::new(), 8)), ["a"]);
    }

    fn entry(key: &str, count: u64, error: u64) -> Entry {
        Entry {
            key: key.as_bytes().into(),
            count,
            error,
        }
    }

    #[test]
    fn demand_builds_up_keys_sampled_less_than_once_a_judgement() {
        let mut d = Demand::new(16);
        // "warm" is sampled every other judgement, "noise" once.
        for i in 0..40 {
            let mut e = vec![entry("big", 10, 0)];
            if i % 2 == 0 {
                e.push(entry("warm", 1, 0));
            }
            if i == 0 {
                e.push(entry("noise", 1, 0));
            }
            d.add(&[20, 1], &e);
        }
        assert!((d.loads()[0] - 200.0).abs() < 5.0, "{:?}", d.loads());
        let server = |k: &[u8]| Some(usize::from(k != b"big"));
        // Server 0 (big) is the busiest: big, then nothing else on it.
        assert_eq!(keys(&d.choose(Vec::new(), 8, server)), ["big"]);
        assert!(d.keys.contains_key(&b"warm"[..]) && !d.keys.contains_key(&b"noise"[..]));
        // The sure count is what adds up.
        let mut d = Demand::new(16);
        d.add(&[10], &[entry("k", 5, 5)]);
        assert!(d.keys.is_empty());
    }

    #[test]
    fn demand_keeps_the_hottest_keys_within_its_bound() {
        let mut d = Demand::new(2);
        d.add(
            &[6],
            &[entry("a", 3, 0), entry("b", 2, 0), entry("c", 1, 0)],
        );
        let mut held: Vec<_> = d.keys.keys().map(|k| k.to_vec()).collect();
        held.sort();
        assert_eq!(held, [b"a".to_vec(), b"b".to_vec()]);
    }
}
