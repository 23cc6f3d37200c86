//! mcrouter's bucketization (`bucketize` on a PoolRoute or HashRoute: McBucketRoute): keys
//! hash first to one of `total_buckets` buckets and a weighted hash then places the bucket.
//! memfleet does not place keys that way yet, so a config that turns it on is refused rather
//! than routed to other servers than mcrouter would pick.

use super::builder::{Builder, Object, Result};

impl Builder<'_> {
    /// Refuses `"bucketize": true` in `map` (false, or absent, is what memfleet does).
    pub(super) fn refuse_bucketize(&mut self, map: &Object) -> Result<()> {
        if self.bool_field(map, "bucketize", false)? {
            return self.key("bucketize", |b| {
                b.fail(
                    "bucketize (mcrouter's McBucketRoute) is not supported yet: keys would \
                     land on other servers than mcrouter's",
                )
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::parse_config;

    #[test]
    fn bucketize_is_refused_by_name() {
        for route in [
            r#"{"type": "PoolRoute", "pool": "A", "bucketize": true, "total_buckets": 10}"#,
            r#"{"type": "HashRoute", "children": "Pool|A", "bucketize": true}"#,
        ] {
            let text =
                format!(r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2"]}}}}, "route": {route}}}"#);
            let e = parse_config("t.json", &text).unwrap_err().to_string();
            assert!(
                e.contains("bucketize (mcrouter's McBucketRoute) is not supported"),
                "{e}"
            );
            assert!(e.contains("route.bucketize"), "{e}");
            let off = text.replace("true", "false");
            assert!(parse_config("t.json", &off).is_ok(), "{off}");
        }
    }
}
