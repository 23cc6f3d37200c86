//! mcrouter JSON config -> [`Config`], with every refusal located in the file.
//!
//! Route handles are read the way mcrouter's factory reads them: an array is a list whose
//! inner lists are flattened; an object with a string `name` is a named handle (built once,
//! then shared); an object with `type` is a handle; a string is a named handle, `Type|arg`
//! (`PoolRoute|A`, `Pool|A`, `ErrorRoute|msg`) or a bare type (`NullRoute`); `""` is an
//! empty list. `Pool|A` is the list of A's servers.

mod big_value;
mod bucketize;
mod builder;
mod cache_routes;
mod choice;
mod entry;
mod failover;
mod fields;
mod handles;
mod hashing;
mod key_edit;
mod latency;
mod load_balancer;
mod migrate;
mod named;
mod outstanding;
mod pool_route;
mod pools;
mod rate_limit;
mod rendezvous;
mod runtime_vars;
mod salted;
mod selectors;
mod server;
mod shadow_route;
mod shard_split;
mod size_split;
mod slow_warmup;

use std::collections::HashMap;

use crate::jsonm::{self, Env};
use crate::model::*;
use crate::source::Source;
use builder::{Builder, Result};

#[cfg(test)]
pub(crate) use choice::{host_pick, latest_picks};
pub use failover::{DEFAULT_FAILOVER_ERRORS, ERROR_RESULTS};
pub(crate) use key_edit::key_problem;
pub use selectors::OPERATIONS;
pub use server::{parse_server, BadServer};

/// Parses and validates `text`, reporting errors against `file`; JSONM is expanded with no
/// globals and no imports.
pub fn parse_config(file: &str, text: &str) -> Result<Config> {
    parse_config_with(file, text, &Env::default())
}

/// Expands the JSONM in `text` with `env` (as mcrouter does with every config), then parses
/// and validates the result, reporting errors against `file`.
pub fn parse_config_with(file: &str, text: &str, env: &Env) -> Result<Config> {
    let source = Source::new(file, text)?;
    let mut json = jsonm::expand(&source, source.parse()?, env)?;
    salted::expand(&mut json);
    let mut b = Builder {
        src: &source,
        pools_json: None,
        pools: Vec::new(),
        pool_ids: HashMap::new(),
        routes: Vec::new(),
        named: HashMap::new(),
        building: Vec::new(),
        path: Vec::new(),
        warnings: Vec::new(),
        big_values: Vec::new(),
        runtime_vars: env.runtime_vars,
        rv_data: None,
    };
    let entry = b.config(&json)?;
    let config = Config {
        pools: std::mem::take(&mut b.pools),
        routes: std::mem::take(&mut b.routes),
        entry,
        warnings: std::mem::take(&mut b.warnings),
    };
    b.check_big_values(&config)?;
    Ok(config)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
