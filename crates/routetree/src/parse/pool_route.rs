//! PoolRoute: a pool hashed by its hash function, with salt, shadows and asynclog name.

use ring::PoolHash;
use serde_json::Value;

use super::bucketize::hashes_bucket;
use super::builder::{Args, Builder, Object, Result};
use super::fields::kind;
use crate::error::Seg;
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn pool_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let (pool_json, map): (&'a Value, Option<&'a Object>) = match args {
            Args::None => return self.fail("PoolRoute needs a pool"),
            Args::Str(name) => {
                let pool = self.pool_by_name(name)?;
                return self.finish_pool_route(pool, None);
            }
            Args::Object(map) => match map.get("pool") {
                Some(p) => {
                    if self.bool_field(map, "bucketize", false)? {
                        self.refuse_client_fanout(p)?;
                    }
                    (p, Some(map))
                }
                None => return self.fail("PoolRoute has no 'pool'"),
            },
        };
        let pool = self.key("pool", |b| b.pool(pool_json))?;
        self.finish_pool_route(pool, map)
    }

    pub(super) fn finish_pool_route(
        &mut self,
        pool: PoolId,
        map: Option<&'a Object>,
    ) -> Result<Vec<Target>> {
        let n = self.pools[pool].servers.len();
        let pool_weights = self.pools[pool].weights.clone();
        let pool_name = self.pools[pool].name.clone();
        // As mcrouter, the pool's tags are the default the PoolRoute's `hash` can override.
        let mut spec = Object::new();
        if let Some(tags) = &self.pools[pool].tags {
            spec.insert("tags".into(), tags.clone().into());
        }
        let mut salt = String::new();
        let mut hash = match &pool_weights {
            Some(w) => PoolHash::WeightedCh3(w.clone()),
            None => PoolHash::Ch3,
        };
        let mut shadows = Vec::new();
        let mut asynclog = Some(pool_name);
        let bucketize = match map {
            Some(map) => self.bucketize_settings(map)?,
            None => None,
        };
        // `useBucketHashSelector`: hash by the bucket of a bucketized PoolRoute above.
        let by_bucket_wanted = bucketize.is_some()
            || map.map_or(Ok(false), |m| {
                self.bool_field(m, "useBucketHashSelector", false)
            })?;
        // `hash_func: "LoadBalancer"`: its settings (the pool's `hash`).
        let mut load_balancer: Option<Object> = None;
        if let Some(map) = map {
            match map.get("hash") {
                None => {}
                Some(Value::String(func)) if func == "LoadBalancer" => {
                    load_balancer = Some(spec.clone());
                }
                Some(Value::String(func)) => {
                    hash = self.key("hash", |b| {
                        b.hash_function(func, Some(&spec), pool_weights.as_deref(), n)
                    })?;
                }
                Some(Value::Object(h)) => {
                    hash = self.key("hash", |b| {
                        let func = match h.get("hash_func") {
                            None => hash.name(),
                            Some(Value::String(f)) => f.as_str(),
                            Some(_) => return b.fail("hash_func must be a string"),
                        };
                        salt = b.salt(h)?;
                        spec.extend(h.iter().map(|(k, v)| (k.clone(), v.clone())));
                        if func == "LoadBalancer" {
                            load_balancer = Some(spec.clone());
                            return Ok(hash.clone());
                        }
                        b.hash_function(func, Some(&spec), pool_weights.as_deref(), n)
                    })?;
                }
                Some(other) => {
                    let msg = format!("hash must be a string or an object, not {}", kind(other));
                    return self.key("hash", |b| b.fail(msg));
                }
            }
            if !self.bool_field(map, "asynclog", true)? {
                asynclog = None;
            } else if let Some(name) = map.get("asynclog_name").or(map.get("name")) {
                asynclog = name.as_str().map(str::to_owned).or(asynclog);
            }
            if let Some(v) = map.get("shadows") {
                let total = bucketize.as_ref().map(|b| b.total_buckets);
                shadows = self.key("shadows", |b| b.shadows(v, total))?;
            }
        }
        self.pool_max_outstanding(map, pool)?;
        let route = match load_balancer.filter(|_| n >= 2) {
            Some(settings) => {
                let servers = (0..n).map(|index| Target::Server { pool, index }).collect();
                self.key("hash", |b| {
                    b.load_balancer(servers, &settings, asynclog, shadows)
                })?
            }
            None => {
                self.check_hash(&hash, n)?;
                let by_bucket = hashes_bucket(by_bucket_wanted, &hash, n);
                self.add(Route::Pool {
                    pool,
                    hash,
                    salt,
                    shadows,
                    asynclog,
                    by_bucket,
                })
            }
        };
        let route = self.pool_slow_warmup(map, route)?;
        let route = self.pool_rates(map, route)?;
        let route = self.pool_shard_splits(map, route)?;
        // As mcrouter's McBucketRoute, outermost: the bucket comes from the client's key.
        match (bucketize, route.as_slice()) {
            (Some(settings), [target]) => Ok(self.add(Route::Bucketize {
                target: *target,
                settings,
            })),
            _ => Ok(route),
        }
    }

    /// A PoolRoute's or ShadowRoute's `shadows`; `total_buckets` of a bucketized PoolRoute
    /// turns each `key_fraction_range` into a range of bucket ids, as mcrouter does.
    pub(super) fn shadows(
        &mut self,
        v: &'a Value,
        total_buckets: Option<u32>,
    ) -> Result<Vec<Shadow>> {
        let Value::Array(items) = v else {
            return self.fail("shadows must be an array");
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let shadow = self.at(Seg::Index(i), |b| {
                let Value::Object(map) = item else {
                    return b.fail("a shadow must be an object with a 'target'");
                };
                let target = b.field_one("shadow", map, "target")?;
                let index_range = match map.get("index_range") {
                    None => {
                        b.warn("a shadow without index_range copies nothing (as in mcrouter)");
                        (0, 0)
                    }
                    Some(r) => b.key("index_range", |b| {
                        let pair = b.pair(r)?;
                        let ok = |x: f64| x >= 0.0 && x.fract() == 0.0;
                        if !(ok(pair.0) && ok(pair.1) && pair.0 <= pair.1) {
                            return b
                                .fail("index_range must be [start, end] with 0 <= start <= end");
                        }
                        Ok((pair.0 as usize, pair.1 as usize))
                    })?,
                };
                // mcrouter truncates fraction * (total - 1) to a bucket id.
                let buckets = |(a, b): (f64, f64)| {
                    total_buckets.map(|t| {
                        let last = f64::from(t - 1);
                        ((a * last) as u64, (b * last) as u64)
                    })
                };
                let (key_fraction_range, bucket_range) = match map.get("key_fraction_range") {
                    None => ((0.0, 1.0), None),
                    Some(r) => b.key("key_fraction_range", |b| {
                        let pair = b.pair(r)?;
                        if !(0.0 <= pair.0 && pair.0 <= pair.1 && pair.1 <= 1.0) {
                            return b
                                .fail("key_fraction_range must be [a, b] with 0 <= a <= b <= 1");
                        }
                        Ok((pair, buckets(pair)))
                    })?,
                };
                let requests_fraction = match map.get("requests_fraction") {
                    None => 1.0,
                    Some(r) => b.key("requests_fraction", |b| {
                        let f = b.number(r, "requests_fraction")?;
                        if !(0.0..=1.0).contains(&f) {
                            return b.fail("requests_fraction must be in [0, 1]");
                        }
                        Ok(f)
                    })?,
                };
                Ok(Shadow {
                    target,
                    index_range,
                    key_fraction_range,
                    requests_fraction,
                    bucket_range,
                })
            })?;
            out.push(shadow);
        }
        Ok(out)
    }
}
