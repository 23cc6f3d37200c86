//! RateLimitRoute, and PoolRoute's `rates` (a RateLimitRoute around the PoolRoute).

use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn rate_limit_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let map = self.object("RateLimitRoute", args)?;
        let target = self.field_one("RateLimitRoute", map, "target")?;
        let rates = match map.get("rates") {
            Some(v) => self.key("rates", |b| b.rates(v))?,
            None => return self.fail("RateLimitRoute has no 'rates'"),
        };
        let fallback = match map.get("fallback") {
            Some(v) => Some(self.key("fallback", |b| b.one(v))?),
            None => None,
        };
        Ok(self.add(Route::RateLimit {
            target,
            rates,
            fallback,
        }))
    }

    /// A PoolRoute's `rates`, if any: the route becomes a RateLimitRoute around it.
    pub(super) fn pool_rates(
        &mut self,
        map: Option<&'a Object>,
        pool_route: Vec<Target>,
    ) -> Result<Vec<Target>> {
        let (Some(v), [target]) = (map.and_then(|m| m.get("rates")), pool_route.as_slice()) else {
            return Ok(pool_route);
        };
        let target = *target;
        let rates = self.key("rates", |b| b.rates(v))?;
        Ok(self.add(Route::RateLimit {
            target,
            rates,
            fallback: None,
        }))
    }

    /// `{"gets_rate": R, "gets_burst": B, "sets_rate": ..., "deletes_rate": ...}`: a class
    /// without its `*_rate` is not limited; a missing `*_burst` is the rate, as in mcrouter.
    fn rates(&mut self, v: &'a Value) -> Result<Rates> {
        let Value::Object(map) = v else {
            return self.fail("rates must be an object (gets_rate, sets_burst, ...)");
        };
        Ok(Rates {
            gets: self.token_rate(map, "gets")?,
            sets: self.token_rate(map, "sets")?,
            deletes: self.token_rate(map, "deletes")?,
        })
    }

    fn token_rate(&mut self, map: &'a Object, class: &str) -> Result<Option<TokenRate>> {
        let (rate_key, burst_key) = (format!("{class}_rate"), format!("{class}_burst"));
        let field = |b: &mut Self, key: &str| -> Result<Option<f64>> {
            match map.get(key) {
                None => Ok(None),
                Some(v) => b.key(key, |b| {
                    let x = b.number(v, key)?;
                    if !(x.is_finite() && x >= 0.0) {
                        return b.fail(format!("{key} must be a number >= 0"));
                    }
                    Ok(Some(x))
                }),
            }
        };
        let rate = field(self, &rate_key)?;
        let burst = field(self, &burst_key)?;
        match (rate, burst) {
            (Some(rate), burst) => Ok(Some(TokenRate {
                rate,
                burst: burst.unwrap_or(rate),
            })),
            (None, Some(_)) => self.key(&burst_key, |b| {
                b.fail(format!("{burst_key} without {rate_key}"))
            }),
            (None, None) => Ok(None),
        }
    }
}
