#![no_main]
//! Arbitrary bytes as an mcrouter config: parsing must return a config or an error, never
//! panic, and an accepted config must plan requests (with and without routing prefixes).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = routetree::parse_config("fuzz.json", &text) {
        for key in [&b"k"[..], b"/r/c/k|#|x", b"/*/*/k", b"/r/*/k", b""] {
            for op in ["get", "set", "delete"] {
                let _ = config.plan(op, key, "/r/c/");
            }
        }
    }
});
