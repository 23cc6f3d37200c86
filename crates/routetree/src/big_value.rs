//! Where in a tree a BigValueRoute may be.
//!
//! The router splits a big value itself and sends each chunk as a request of its own,
//! planned along the base key down to the BigValueRoute and by the chunk below it (see
//! `plan::big_value`). That is what mcrouter does when the handles above it pick one child
//! for the client's request by its key, prefix or operation; a handle that sends to several
//! children, fails over, picks at random, spends tokens or rewrites the key would treat each
//! chunk as a request of its own where mcrouter passes the whole value once, so a
//! BigValueRoute below one is refused, naming why.

use std::collections::HashSet;

use crate::model::*;

/// `Err((id, why))` for the first BigValueRoute `id` below a handle that does not pick one
/// child by the request (prefix and operation selectors, HashRoute, and the handles that
/// only change timing or exptime pass).
pub(crate) fn check_placement(config: &Config) -> Result<(), (RouteId, String)> {
    let roots: Vec<RouteId> = match &config.entry {
        Entry::Default(id) => vec![*id],
        Entry::Aliases(table) => table.iter().map(|(_, id)| *id).collect(),
    };
    let mut seen = HashSet::new();
    // (route, the nearest handle above it that chunks cannot pass)
    let mut stack: Vec<(RouteId, Option<RouteId>)> =
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
                    "BigValueRoute under {} is not supported: {}",
                    type_name(&config.routes[parent]),
                    why_not_above(&config.routes[parent])
                ),
            ));
        }
        let below = match route {
            Route::PrefixSelector { .. }
            | Route::OperationSelector { .. }
            | Route::Hash { .. }
            | Route::ModifyExptime { .. }
            | Route::LatencyInjection { .. } => above,
            _ => Some(id),
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

/// Why chunks cannot pass `route` as mcrouter's would.
fn why_not_above(route: &Route) -> &'static str {
    match route {
        Route::Random { .. } | Route::LoadBalancer(_) => {
            "it picks a child at random for each request, and each chunk is a request of its \
             own, so the chunks would scatter where mcrouter sends them all down one child"
        }
        Route::RateLimit { .. } => {
            "each chunk would spend a token of its own, where mcrouter spends one for the value"
        }
        Route::KeySplit { .. } | Route::ShardSplit { .. } | Route::ModifyKey { .. } => {
            "it rewrites the key, and memfleet makes chunk keys from the client's key where \
             mcrouter makes them from the rewritten one"
        }
        Route::BigValue { .. } => "the outer one would split the inner one's chunks again",
        _ => {
            "it sends to several children or moves on to another one after a reply, and \
             memfleet would do that for each chunk on its own where mcrouter does it once \
             for the whole value"
        }
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
