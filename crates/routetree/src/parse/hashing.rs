//! HashRoute and the hash functions (with WeightedCh3 weights) a pool or HashRoute names.

use ring::PoolHash;
use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use crate::error::Seg;
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn hash_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.children("HashRoute", args)?;
        let (hash, salt) = match args {
            // mcrouter: no children and `error_on_empty: false` is a NullRoute.
            Args::Object(map)
                if children.is_empty() && !self.bool_field(map, "error_on_empty", true)? =>
            {
                return Ok(self.add(Route::Null));
            }
            Args::Object(map) => {
                let salt = self.salt(map)?;
                let func = match map.get("hash_func") {
                    None => "Ch3",
                    Some(Value::String(f)) => f.as_str(),
                    Some(_) => {
                        return self.key("hash_func", |b| b.fail("hash_func must be a string"))
                    }
                };
                match func {
                    "Latest" if !children.is_empty() => return self.latest(children, map),
                    // No children: the error reply of an empty HashRoute, as in mcrouter.
                    "Latest" => (PoolHash::Ch3, salt),
                    "LoadBalancer" if children.len() >= 2 => {
                        return self.load_balancer(children, map, None, Vec::new())
                    }
                    // Fewer: what an empty or one-child HashRoute does, as in mcrouter.
                    "LoadBalancer" => (PoolHash::Ch3, salt),
                    _ => {
                        let hash = self.hash_function(func, Some(map), None, children.len())?;
                        (hash, salt)
                    }
                }
            }
            _ => (PoolHash::Ch3, String::new()),
        };
        self.check_hash(&hash, children.len())?;
        let wanted = match args {
            Args::Object(map) => self.bool_field(map, "bucketize", false)?,
            _ => false,
        };
        let by_bucket = super::bucketize::hashes_bucket(wanted, &hash, children.len());
        Ok(self.add(Route::Hash {
            children,
            hash,
            salt,
            by_bucket,
        }))
    }

    /// An empty pool or child list is allowed: requests through it get an error reply.
    pub(super) fn check_hash(&mut self, hash: &PoolHash, servers: usize) -> Result<()> {
        if servers == 0 {
            return Ok(());
        }
        match hash.check(servers) {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e.to_string()),
        }
    }

    /// The hash function called `func`, configured by `spec` (the HashRoute or pool `hash`
    /// object). WeightedCh3 weights come from its `weights` or else from the pool, padded with
    /// 0.5 or cut to `n` as mcrouter does.
    pub(super) fn hash_function(
        &mut self,
        func: &str,
        spec: Option<&Object>,
        pool_weights: Option<&[f64]>,
        n: usize,
    ) -> Result<PoolHash> {
        let weights = spec.and_then(|s| s.get("weights"));
        match func {
            "Ch3" => Ok(PoolHash::Ch3),
            "ConstShard" | "Rendezvous" | "WeightedRendezvous" | "WeightedCh3Rv" => {
                self.more_hash_function(func, spec, pool_weights, n)
            }
            "Crc32" => Ok(PoolHash::Crc32),
            "WeightedCh3" => {
                let mut list = match (weights, pool_weights) {
                    (Some(v), _) => self.key("weights", |b| b.weights(v, n))?,
                    (None, Some(w)) => w.to_vec(),
                    (None, None) => return self.fail("WeightedCh3 needs 'weights'"),
                };
                if list.len() < n {
                    self.warn(format!(
                        "{} weights for {n} servers: the missing ones are 0.5 (as mcrouter)",
                        list.len()
                    ));
                }
                list.resize(n, 0.5);
                Ok(PoolHash::WeightedCh3(list))
            }
            "LoadBalancer" => self.fail(
                "hash function 'LoadBalancer' is supported in a HashRoute's hash_func and a \
                 PoolRoute's hash only",
            ),
            "Latest" => self.fail(format!(
                "hash function '{func}' is supported in a HashRoute's hash_func only (for \
                 a pool: a LatestRoute over Pool|name)"
            )),
            f => self.fail(format!(
                "unknown hash function '{f}' (Ch3, Crc32, WeightedCh3, ConstShard, Rendezvous, \
                 WeightedRendezvous, WeightedCh3Rv)"
            )),
        }
    }

    /// The first `n` weights (mcrouter reads no further).
    pub(super) fn weights(&mut self, v: &Value, n: usize) -> Result<Vec<f64>> {
        let Value::Array(items) = v else {
            return self.fail("weights must be an array of numbers in [0, 1]");
        };
        let mut out = Vec::with_capacity(items.len().min(n));
        for (i, item) in items.iter().take(n).enumerate() {
            let w = self.at(Seg::Index(i), |b| {
                let w = b.number(item, "a weight")?;
                if !(0.0..=1.0).contains(&w) {
                    return b.fail(format!("weight {w} is outside [0, 1]"));
                }
                Ok(w)
            })?;
            out.push(w);
        }
        Ok(out)
    }
}
