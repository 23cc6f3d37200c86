//! LatencyInjectionRoute: its child and the delays around it.

use super::builder::{Args, Builder, Result};
use crate::model::*;

/// mcrouter's fields that memfleet's requests have nothing for (no per-request latency in
/// the memcache protocols) or that it does not implement.
const UNSUPPORTED_FIELDS: &[&str] = &[
    "request_payload_latency",
    "max_request_latency_us",
    "total_latency_percentile_ms",
];

/// The longest delay accepted (one hour): anything longer is a typo.
const MAX_LATENCY_MS: i64 = 3_600_000;

impl<'a> Builder<'a> {
    pub(super) fn latency_injection_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "LatencyInjectionRoute";
        let map = self.object(ty, args)?;
        let child = self.field_one(ty, map, "child")?;
        for field in UNSUPPORTED_FIELDS {
            if map.contains_key(*field) {
                return self.key(field, |b| {
                    b.fail(format!("LatencyInjectionRoute's {field} is not supported"))
                });
            }
        }
        let fields = ["before_latency_ms", "after_latency_ms", "total_latency_ms"];
        if !fields.iter().any(|f| map.contains_key(*f)) {
            return self.fail(
                "LatencyInjectionRoute needs 'before_latency_ms', 'after_latency_ms' or \
                 'total_latency_ms'",
            );
        }
        let mut ms = [0u64; 3];
        for (slot, field) in ms.iter_mut().zip(fields) {
            *slot = self.int_field(map, field, 0, 0, MAX_LATENCY_MS)? as u64;
        }
        let [before_ms, after_ms, total_ms] = ms;
        if ms == [0, 0, 0] {
            // No delay at all: the child itself, as mcrouter does.
            return Ok(vec![child]);
        }
        Ok(self.add(Route::LatencyInjection {
            child,
            before_ms,
            after_ms,
            total_ms,
        }))
    }
}
