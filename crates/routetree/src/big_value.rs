//! Which BigValueRoute settings apply to a key, and where in a tree a BigValueRoute may be.
//!
//! The router splits a big value itself: its chunk and index requests go back through the
//! route tree from the top, as any client's. That reaches the handle's target, as mcrouter's
//! BigValueRoute sends them, only when every handle above it chooses by the key's prefix
//! (routing-prefix aliases, PrefixSelectorRoute): a chunk key `<key>:<i>:<suffix>` keeps
//! both prefixes, and passes the BigValueRoute itself whole, being no longer than its
//! threshold. So a BigValueRoute is accepted only there, and finding one for a key is a
//! walk down prefix selection alone.

use std::collections::HashSet;

use ring::RoutingKey;

use crate::model::*;

impl Config {
    /// Whether any route handle is a BigValueRoute (else [`Config::big_value`] is always
    /// `None`). Checked once per config: the router asks per request only when true.
    pub fn has_big_value(&self) -> bool {
        self.routes
            .iter()
            .any(|r| matches!(r, Route::BigValue { .. }))
    }

    /// The settings of the BigValueRoute a request for `key` (with any routing prefix; keys
    /// without one use `default_prefix`) passes through, if any. A routing prefix that
    /// selects several routes (`/*/*/`) goes by the first, the one whose reply the client
    /// gets.
    pub fn big_value(&self, key: &[u8], default_prefix: &str) -> Option<BigValueSettings> {
        let rk = RoutingKey::parse(key);
        let id = *self.entry_routes(rk.prefix, default_prefix).ok()?.first()?;
        let mut at = Target::Route(id);
        // Bounded: placement allows only prefix selectors above, and each step goes down.
        for _ in 0..=self.routes.len() {
            let Target::Route(id) = at else {
                return None;
            };
            match &self.routes[id] {
                Route::BigValue { settings, .. } => return Some(*settings),
                Route::PrefixSelector { policies, wildcard } => {
                    at = policies
                        .iter()
                        .rev()
                        .find(|(prefix, _)| rk.key.starts_with(prefix.as_bytes()))
                        .map(|(_, t)| *t)
                        .or(*wildcard)?;
                }
                _ => return None,
            }
        }
        None
    }
}

/// `Err((id, why))` for the first BigValueRoute `id` some handle other than a prefix
/// selector leads to.
pub(crate) fn check_placement(config: &Config) -> Result<(), (RouteId, String)> {
    let roots: Vec<RouteId> = match &config.entry {
        Entry::Default(id) => vec![*id],
        Entry::Aliases(table) => table.iter().map(|(_, id)| *id).collect(),
    };
    let mut seen = HashSet::new();
    // (route, the nearest handle above it that does not choose by prefix)
    let mut stack: Vec<(RouteId, Option<&'static str>)> =
        roots.into_iter().map(|id| (id, None)).collect();
    while let Some((id, above)) = stack.pop() {
        if !seen.insert((id, above)) {
            continue;
        }
        let route = &config.routes[id];
        if let (Route::BigValue { .. }, Some(parent)) = (route, above) {
            return Err((
                id,
                format!(
                    "BigValueRoute under {parent} is not supported: its chunks would not \
                     reach its target (memfleet sends them through the route tree from the \
                     top, so only routing prefixes and PrefixSelectorRoutes may lead to a \
                     BigValueRoute)"
                ),
            ));
        }
        let below = match route {
            Route::PrefixSelector { .. } => above,
            other => Some(type_name(other)),
        };
        for t in children(route) {
            if let Target::Route(child) = t {
                stack.push((child, below));
            }
        }
    }
    Ok(())
}

/// Every handle `route` may send to.
fn children(route: &Route) -> Vec<Target> {
    match route {
        Route::Pool { shadows, .. } => shadows.iter().map(|s| s.target).collect(),
        Route::Hash { children, .. }
        | Route::All { children, .. }
        | Route::Failover { children, .. }
        | Route::MissFailover { children, .. }
        | Route::Random { children } => children.clone(),
        Route::LoadBalancer(lb) => lb
            .children
            .iter()
            .copied()
            .chain(lb.shadows.iter().map(|s| s.target))
            .collect(),
        Route::PrefixSelector { policies, wildcard }
        | Route::OperationSelector {
            policies,
            default: wildcard,
        } => policies.iter().map(|(_, t)| *t).chain(*wildcard).collect(),
        Route::WarmUp { cold, warm, .. } => vec![*cold, *warm],
        Route::L1L2Cache { l1, l2, .. } | Route::L1L2SizeSplit { l1, l2, .. } => vec![*l1, *l2],
        Route::Migrate { from, to, .. } => vec![*from, *to],
        Route::Staging { warm, staging } => vec![*warm, *staging],
        Route::SlowWarmUp {
            target, failover, ..
        } => vec![*target, *failover],
        Route::RateLimit {
            target, fallback, ..
        } => std::iter::once(*target).chain(*fallback).collect(),
        Route::ModifyExptime { target, .. }
        | Route::ModifyKey { target, .. }
        | Route::BigValue { target, .. }
        | Route::Bucketize { target, .. } => vec![*target],
        Route::KeySplit { destination, .. } | Route::ShardSplit { destination, .. } => {
            vec![*destination]
        }
        Route::LatencyInjection { child, .. } => vec![*child],
        Route::Shadow { child, shadows, .. } => std::iter::once(*child)
            .chain(shadows.iter().map(|s| s.target))
            .collect(),
        Route::Null | Route::Error { .. } => Vec::new(),
    }
}

/// The config type a handle comes from, for messages.
fn type_name(route: &Route) -> &'static str {
    match route {
        Route::Pool { .. } => "PoolRoute",
        Route::Hash { .. } => "HashRoute",
        Route::All { mode, .. } => match mode {
            AllMode::Sync => "AllSyncRoute",
            AllMode::Async => "AllAsyncRoute",
            AllMode::Initial => "AllInitialRoute",
            AllMode::Majority => "AllMajorityRoute",
            AllMode::Fastest => "AllFastestRoute",
            AllMode::InitialSync => "WarmUpRoute",
            AllMode::FirstHit => "KeySplitRoute",
        },
        Route::Failover { .. } => "FailoverRoute",
        Route::MissFailover { .. } => "MissFailoverRoute",
        Route::WarmUp { .. } => "WarmUpRoute",
        Route::PrefixSelector { .. } => "PrefixSelectorRoute",
        Route::OperationSelector { .. } => "OperationSelectorRoute",
        Route::ModifyExptime { .. } => "ModifyExptimeRoute",
        Route::KeySplit { .. } => "KeySplitRoute",
        Route::L1L2Cache { .. } => "L1L2CacheRoute",
        Route::L1L2SizeSplit { .. } => "L1L2SizeSplitRoute",
        Route::RateLimit { .. } => "RateLimitRoute",
        Route::Random { .. } => "RandomRoute",
        Route::LoadBalancer(_) => "LoadBalancerRoute",
        Route::ModifyKey { .. } => "ModifyKeyRoute",
        Route::LatencyInjection { .. } => "LatencyInjectionRoute",
        Route::Migrate { .. } => "MigrateRoute",
        Route::Staging { .. } => "StagingRoute",
        Route::ShardSplit { .. } => "PoolRoute (shard_splits)",
        Route::SlowWarmUp { .. } => "PoolRoute (slow_warmup)",
        Route::Bucketize { .. } => "PoolRoute (bucketize)",
        Route::Shadow { .. } => "ShadowRoute",
        Route::BigValue { .. } => "BigValueRoute",
        Route::Null => "NullRoute",
        Route::Error { .. } => "ErrorRoute",
    }
}

#[cfg(test)]
#[path = "big_value_tests.rs"]
mod tests;
