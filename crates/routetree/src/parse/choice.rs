//! Handles that choose among their children without looking at the key: RandomRoute (per
//! request), and HostIdRoute and LatestRoute (once, by this router's host id).

use ring::PoolHash;

use super::builder::{Args, Builder, Object, Result};
use crate::model::*;

/// LatestRoute's children when `failover_count` is not given.
const DEFAULT_FAILOVER_COUNT: i64 = 5;

impl<'a> Builder<'a> {
    pub(super) fn random_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.optional_children(args)?;
        Ok(match children.len() {
            0 => self.add(Route::Null),
            1 => children,
            _ => self.add(Route::Random { children }),
        })
    }

    /// HostIdRoute: the child this host's id picks, chosen once, as mcrouter does.
    pub(super) fn host_id_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.optional_children(args)?;
        let salt = match args {
            Args::Object(map) => self.salt(map)?,
            _ => String::new(),
        };
        if children.is_empty() {
            return Ok(self.add(Route::Null));
        }
        let pick = host_pick(crate::plan::host_id(), &salt, children.len());
        Ok(vec![children[pick]])
    }

    pub(super) fn latest_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.optional_children(args)?;
        match args {
            Args::Object(map) => self.latest(children, map),
            _ => {
                let picks = latest_picks(
                    crate::plan::host_id(),
                    "",
                    &vec![1.0; children.len()],
                    DEFAULT_FAILOVER_COUNT as usize,
                );
                let children = picks.into_iter().map(|i| children[i]).collect();
                Ok(self.add(Route::Failover {
                    children,
                    errors: super::failover::default_errors(),
                    limit: None,
                    policy: FailoverPolicy::InOrder,
                }))
            }
        }
    }

    /// LatestRoute over `children` with the settings in `map` (also HashRoute's
    /// `hash_func: "Latest"`): `failover_count` children picked by the host id, then a
    /// FailoverRoute over them with the failover settings of `map`.
    pub(super) fn latest(&mut self, children: Vec<Target>, map: &'a Object) -> Result<Vec<Target>> {
        let count = self.int_field(
            map,
            "failover_count",
            DEFAULT_FAILOVER_COUNT,
            0,
            i64::from(u32::MAX),
        )? as usize;
        let salt = self.salt(map)?;
        if self.bool_field(map, "thread_local_failover", false)? {
            self.key("thread_local_failover", |b| {
                b.warn(
                    "thread_local_failover: memfleet's workers share one route tree, so \
                     every worker of this router picks the same children",
                );
                Ok(())
            })?;
        }
        let mut weights = match map.get("weights") {
            Some(v) => self.key("weights", |b| b.weights(v, children.len()))?,
            None => vec![1.0; children.len()],
        };
        weights.resize(children.len(), 0.5);
        let picks = latest_picks(crate::plan::host_id(), &salt, &weights, count);
        let children: Vec<Target> = picks.into_iter().map(|i| children[i]).collect();
        let (errors, limit, policy) = self.failover_settings(map, children.len())?;
        Ok(self.add(Route::Failover {
            children,
            errors,
            limit,
            policy,
        }))
    }

    /// Children as an object's `children` (none when absent, as mcrouter) or a list.
    fn optional_children(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        match args {
            Args::None => Ok(Vec::new()),
            Args::Str(s) => self.string_handle(s),
            Args::Object(map) => match map.get("children") {
                Some(children) => self.key("children", |b| b.list(children)),
                None => Ok(Vec::new()),
            },
        }
    }
}

/// HostIdRoute's child: the host id modulo the children (as mcrouter), or with a salt, a
/// hash of both (memfleet's own hash: the salted pick differs from mcrouter's).
pub(crate) fn host_pick(host_id: u32, salt: &str, n: usize) -> usize {
    let id = if salt.is_empty() {
        u64::from(host_id)
    } else {
        u64::from(ring::hash::Hash::Crc32.hash(format!("{host_id}:{salt}").as_bytes()))
    };
    (id % n.max(1) as u64) as usize
}

/// LatestRoute's children, in failover order: up to `count` distinct indexes, each picked
/// by WeightedCh3 (with `weights`) over the ones not picked yet, hashing the host id, the
/// salt and the pick's number. As in mcrouter, the picked child's place is taken by the last
/// one before the next pick.
pub(crate) fn latest_picks(host_id: u32, salt: &str, weights: &[f64], count: usize) -> Vec<usize> {
    let mut left: Vec<usize> = (0..weights.len()).collect();
    let mut weights = weights.to_vec();
    let mut picks = Vec::new();
    if left.len() <= 1 {
        return left;
    }
    for i in 0..count.min(left.len()) {
        let key = format!("{host_id}:{salt}:{i}");
        let at = PoolHash::WeightedCh3(weights.clone()).index(key.as_bytes(), left.len());
        picks.push(left.swap_remove(at));
        weights.swap_remove(at);
    }
    picks
}
