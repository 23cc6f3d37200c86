#![no_main]
//! Arbitrary bytes as a JSONM config, with an import loader that serves the input again:
//! expansion must return a value or an error within its limits, never panic or overflow.

use libfuzzer_sys::fuzz_target;
use routetree::jsonm::{expand_text, Env};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let again = text.clone();
    let import = move |_: &str| Ok(again.clone());
    let env = Env {
        import: &import,
        // Small, so that each run stays fast; the limit's logic is the same.
        size_limit: 1 << 20,
        ..Env::default()
    };
    let _ = expand_text("fuzz.json", &text, &env);
});
