//! PoolRoute's `max_outstanding`: mcrouter's OutstandingLimitRoute around each of the
//! pool's servers. memfleet keeps the limit on the pool (the router holds the waiting
//! requests per server connection), so PoolRoutes over one pool share the smallest.

use super::builder::{Builder, Object, Result};
use crate::model::PoolId;

/// mcrouter's bounds for the option.
const MAX: i64 = 1_000_000;

impl<'a> Builder<'a> {
    /// Reads `max_outstanding` (0: no limit) into the pool.
    pub(super) fn pool_max_outstanding(
        &mut self,
        map: Option<&'a Object>,
        pool: PoolId,
    ) -> Result<()> {
        let Some(map) = map else {
            return Ok(());
        };
        let n = self.int_field(map, "max_outstanding", 0, 0, MAX)? as u32;
        if n == 0 {
            return Ok(());
        }
        let was = self.pools[pool].max_outstanding;
        if was != 0 && was != n {
            let name = self.pools[pool].name.clone();
            let least = was.min(n);
            self.key("max_outstanding", |b| {
                b.warn(format!(
                    "PoolRoutes over pool '{name}' give different max_outstanding \
                     ({was} and {n}): memfleet limits the pool's servers to the smallest, {least}"
                ));
                Ok(())
            })?;
        }
        self.pools[pool].max_outstanding = if was == 0 { n } else { was.min(n) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    fn config(routes: &str) -> Result<crate::Config, String> {
        let text = format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2"]}}, "B": {{"servers": ["h:3"]}}}},
                "route": {routes}}}"#
        );
        crate::parse_config("t.json", &text).map_err(|e| e.to_string())
    }

    fn limits(routes: &str) -> Vec<u32> {
        let c = config(routes).unwrap();
        c.pools.iter().map(|p| p.max_outstanding).collect()
    }

    #[test]
    fn read_from_a_pool_route() {
        let one = |v: &str| {
            limits(&format!(
                r#"{{"type": "PoolRoute", "pool": "A", "max_outstanding": {v}}}"#
            ))
        };
        assert_eq!(one("1"), vec![1]);
        assert_eq!(one("1000000"), vec![1_000_000]);
        assert_eq!(one("0"), vec![0], "0 is off");
        assert_eq!(limits(r#"{"type": "PoolRoute", "pool": "A"}"#), vec![0]);
        assert_eq!(limits(r#""PoolRoute|A""#), vec![0]);
    }

    #[test]
    fn out_of_range_or_not_an_integer_is_refused() {
        for v in ["-1", "1000001", "1.5", "1.0", r#""3""#, "true", "null"] {
            let e = config(&format!(
                r#"{{"type": "PoolRoute", "pool": "A", "max_outstanding": {v}}}"#
            ))
            .unwrap_err();
            assert!(
                e.contains("max_outstanding must be an integer in 0..=1000000"),
                "{v}: {e}"
            );
        }
    }

    #[test]
    fn pool_routes_over_one_pool_share_the_smallest() {
        let routes = r#"{"type": "AllSyncRoute", "children": [
            {"type": "PoolRoute", "pool": "A", "max_outstanding": 5},
            {"type": "PoolRoute", "pool": "A", "max_outstanding": 2},
            {"type": "PoolRoute", "pool": "A"},
            {"type": "PoolRoute", "pool": "B", "max_outstanding": 7}]}"#;
        let c = config(routes).unwrap();
        let got: Vec<u32> = c.pools.iter().map(|p| p.max_outstanding).collect();
        assert_eq!(got, vec![2, 7]);
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("different max_outstanding (5 and 2)")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn outstanding_limit_route_is_refused_with_the_option_named() {
        let e =
            config(r#"{"type": "OutstandingLimitRoute", "target": "PoolRoute|A"}"#).unwrap_err();
        assert!(e.contains("\"max_outstanding\" makes it"), "{e}");
    }
}
