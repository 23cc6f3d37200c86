//! Which server timeout a pool's servers get, as mcrouter decides it when it builds a pool:
//! the pool's `server_timeout` else `--server-timeout`; then, for a pool with both `region`
//! and `cluster`, compared with the router's default routing prefix (`--route-prefix
//! /region/cluster/`), `--within-cluster-timeout-ms` (same region and cluster),
//! `--cross-cluster-timeout-ms` (same region, another cluster) or
//! `--cross-region-timeout-ms` (another region) when that one is set (non-zero), over
//! every other timeout.

use crate::model::Pool;

/// The timeout settings of the router, ms (0 for the three region ones: not set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// `--server-timeout`.
    pub server_ms: u64,
    /// `--cross-region-timeout-ms`.
    pub cross_region_ms: u64,
    /// `--cross-cluster-timeout-ms`.
    pub cross_cluster_ms: u64,
    /// `--within-cluster-timeout-ms`.
    pub within_cluster_ms: u64,
}

/// Where a pool is, seen from the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// No `region` or no `cluster` (either empty counts as none, as in mcrouter).
    Unknown,
    /// The router's region and cluster.
    WithinCluster,
    /// The router's region, another cluster.
    CrossCluster,
    /// Another region.
    CrossRegion,
}

/// The region and cluster of a routing prefix `/region/cluster/`.
pub fn route_region_cluster(prefix: &str) -> (&str, &str) {
    let mut parts = prefix.strip_prefix('/').unwrap_or(prefix).split('/');
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

/// Where `pool` is relative to the default routing prefix `default_route`.
pub fn place(pool: &Pool, default_route: &str) -> Place {
    let region = pool.region.as_deref().unwrap_or_default();
    let cluster = pool.cluster.as_deref().unwrap_or_default();
    if region.is_empty() || cluster.is_empty() {
        return Place::Unknown;
    }
    let (r, c) = route_region_cluster(default_route);
    if region == r && cluster == c {
        Place::WithinCluster
    } else if region == r {
        Place::CrossCluster
    } else {
        Place::CrossRegion
    }
}

impl Timeouts {
    /// The server timeout of `pool`'s servers, ms.
    pub fn for_pool(&self, pool: &Pool, default_route: &str) -> u64 {
        let base = pool.server_timeout_ms.unwrap_or(self.server_ms);
        let by_place = match place(pool, default_route) {
            Place::Unknown => 0,
            Place::WithinCluster => self.within_cluster_ms,
            Place::CrossCluster => self.cross_cluster_ms,
            Place::CrossRegion => self.cross_region_ms,
        };
        if by_place != 0 {
            by_place
        } else {
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_config;

    fn pools() -> crate::Config {
        parse_config(
            "t.json",
            r#"{"pools": {
                  "here":     {"servers": ["h:1"], "region": "east", "cluster": "web"},
                  "sibling":  {"servers": ["h:2"], "region": "east", "cluster": "batch"},
                  "far":      {"servers": ["h:3"], "region": "west", "cluster": "web"},
                  "nowhere":  {"servers": ["h:4"]},
                  "halfway":  {"servers": ["h:5"], "region": "west"},
                  "own":      {"servers": ["h:6"], "region": "west", "cluster": "web",
                               "server_timeout": 700},
                  "own_here": {"servers": ["h:7"], "server_timeout": 700}
                },
                "route": {"type": "AllSyncRoute", "children": [
                  "PoolRoute|here", "PoolRoute|sibling", "PoolRoute|far", "PoolRoute|nowhere",
                  "PoolRoute|halfway", "PoolRoute|own", "PoolRoute|own_here"]}}"#,
        )
        .unwrap()
    }

    fn pick(t: &Timeouts, route: &str) -> Vec<(String, u64)> {
        let c = pools();
        c.pools
            .iter()
            .map(|p| (p.name.clone(), t.for_pool(p, route)))
            .collect()
    }

    fn named(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(n, t)| (n.to_string(), *t)).collect()
    }

    #[test]
    fn each_pool_gets_the_timeout_of_its_place() {
        let t = Timeouts {
            server_ms: 1000,
            cross_region_ms: 300,
            cross_cluster_ms: 200,
            within_cluster_ms: 100,
        };
        assert_eq!(
            pick(&t, "/east/web/"),
            named(&[
                ("here", 100),
                ("sibling", 200),
                ("far", 300),
                ("nowhere", 1000),
                ("halfway", 1000),
                // The place wins over the pool's own server_timeout.
                ("own", 300),
                ("own_here", 700),
            ])
        );
        // From the other region the same config picks the other way round.
        assert_eq!(
            pick(&t, "/west/web/"),
            named(&[
                ("here", 300),
                ("sibling", 300),
                ("far", 100),
                ("nowhere", 1000),
                ("halfway", 1000),
                ("own", 100),
                ("own_here", 700),
            ])
        );
    }

    #[test]
    fn an_unset_place_timeout_leaves_the_server_timeout() {
        let t = Timeouts {
            server_ms: 1000,
            cross_region_ms: 300,
            ..Default::default()
        };
        assert_eq!(
            pick(&t, "/east/web/"),
            named(&[
                ("here", 1000),
                ("sibling", 1000),
                ("far", 300),
                ("nowhere", 1000),
                ("halfway", 1000),
                ("own", 300),
                ("own_here", 700),
            ])
        );
        let none = Timeouts {
            server_ms: 50,
            ..Default::default()
        };
        assert!(pick(&none, "/east/web/")
            .iter()
            .all(|(n, t)| *t == if n.starts_with("own") { 700 } else { 50 }));
    }

    #[test]
    fn places() {
        let c = pools();
        let at = |i: usize, route: &str| place(&c.pools[i], route);
        assert_eq!(at(0, "/east/web/"), Place::WithinCluster);
        assert_eq!(at(1, "/east/web/"), Place::CrossCluster);
        assert_eq!(at(2, "/east/web/"), Place::CrossRegion);
        assert_eq!(at(3, "/east/web/"), Place::Unknown);
        assert_eq!(at(4, "/west/web/"), Place::Unknown);
        // mcrouter's default route /././ is region "." and cluster ".".
        assert_eq!(at(0, crate::DEFAULT_ROUTE_PREFIX), Place::CrossRegion);
        assert_eq!(route_region_cluster("/a/b/"), ("a", "b"));
        assert_eq!(route_region_cluster("/././"), (".", "."));
    }
}
