//! ShadowRoute: its children, each with the `shadows` whose `index_range` covers its
//! position (the same shadows PoolRoute has, applied to a list of route handles).

use super::builder::{Args, Builder, Result};
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn shadow_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let map = self.object("ShadowRoute", args)?;
        let children = self.children("ShadowRoute", args)?;
        let Some(v) = map.get("shadows") else {
            return Ok(children);
        };
        // Its own `bucketize` settings only size the bucket ranges (mcrouter's ShadowRoute
        // makes no McBucketRoute).
        let total = self.bucketize_settings(map)?.map(|b| b.total_buckets);
        let shadows = self.key("shadows", |b| b.shadows(v, total))?;
        let mut out = Vec::with_capacity(children.len());
        for (index, child) in children.into_iter().enumerate() {
            let mine: Vec<Shadow> = shadows
                .iter()
                .filter(|s| (s.index_range.0..s.index_range.1).contains(&index))
                .cloned()
                .collect();
            if mine.is_empty() {
                out.push(child);
            } else {
                out.extend(self.add(Route::Shadow {
                    child,
                    index,
                    shadows: mine,
                }));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::to;
    use crate::{parse_config, Plan};

    #[test]
    fn shadow_route_wraps_the_children_its_shadows_cover() {
        // A HashRoute over ShadowRoute's children: child 0 (pool A) is shadowed to S,
        // child 1 (pool B) is not.
        let c = parse_config(
            "t.json",
            r#"{"pools": {"A": {"servers": ["h:1"]}, "B": {"servers": ["h:2"]},
                          "S": {"servers": ["h:3"]}},
                "route": {"type": "HashRoute", "children": {
                    "type": "ShadowRoute", "children": ["Pool|A", "Pool|B"],
                    "shadows": [{"target": "Pool|S", "index_range": [0, 1]}]}}}"#,
        )
        .unwrap();
        let (mut shadowed, mut plain) = (0, 0);
        for i in 0..100 {
            match c.plan("set", format!("k{i}").as_bytes(), "/a/b/") {
                Plan::Shadowed { main, shadows } => {
                    assert_eq!(*main, to(0, 0));
                    assert_eq!(shadows, vec![(1.0, to(2, 0))]);
                    shadowed += 1;
                }
                other => {
                    assert_eq!(other, to(1, 0));
                    plain += 1;
                }
            }
        }
        assert!(shadowed > 0 && plain > 0, "{shadowed} {plain}");
    }
}
