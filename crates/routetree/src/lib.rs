//! mcrouter's JSON config as a typed route tree, and what the tree does with one request.
//! Pure: no I/O, no sockets. The router reads the file, calls [`parse_config`], and for each
//! request asks [`Config::plan`] which servers get it and how their replies combine.
//!
//! ```
//! let config = routetree::parse_config("demo.json", r#"{
//!     // comments are allowed, as in mcrouter
//!     "pools": {"A": {"servers": ["127.0.0.1:11211", "[::1]:11212"]}},
//!     "route": "PoolRoute|A"
//! }"#).unwrap();
//! match config.plan("get", b"user:42", "/region/cluster/") {
//!     routetree::Plan::Send(send) => assert!(send.index < 2),
//!     other => panic!("{other:?}"),
//! }
//! ```

#![warn(missing_docs)]

pub mod admin;
pub mod admin_handles;
pub mod big_value;
pub mod error;
pub mod exec;
pub mod jsonm;
pub mod lease;
pub mod model;
pub mod parse;
pub mod plan;
pub mod reply;
pub mod request;
pub mod server_stats;
pub mod source;
#[cfg(test)]
mod test_support;
pub mod timeouts;
pub mod tko;

pub use crate::error::{ConfigError, Path, Seg};
pub use crate::model::*;
pub use crate::parse::{parse_config, parse_config_with, parse_server, BadServer, OPERATIONS};
pub use crate::plan::{unix_now, Plan, Send};

/// mcrouter's default routing prefix when `--route-prefix` is not given.
pub const DEFAULT_ROUTE_PREFIX: &str = "/././";

/// What `--validate-config` checks: the config parses and validates, and when it routes by
/// alias, the router's default routing prefix is one of them (mcrouter refuses it otherwise).
pub fn validate(file: &str, text: &str, default_prefix: &str) -> Result<Config, ConfigError> {
    validate_with(file, text, default_prefix, &jsonm::Env::default())
}

/// [`validate`], expanding JSONM with `env`'s globals and imports.
pub fn validate_with(
    file: &str,
    text: &str,
    default_prefix: &str,
    env: &jsonm::Env,
) -> Result<Config, ConfigError> {
    let config = parse_config_with(file, text, env)?;
    if let Entry::Aliases(table) = &config.entry {
        if !table.iter().any(|(alias, _)| alias == default_prefix) {
            let aliases: Vec<&str> = table.iter().map(|(a, _)| a.as_str()).collect();
            let mut err = ConfigError::at(
                file,
                0,
                0,
                &format!(
                    "the default routing prefix {default_prefix} (--route-prefix) is not among \
                     the routes' aliases ({})",
                    aliases.join(", ")
                ),
            );
            err.path = Path(vec![Seg::Key("routes".into())]);
            return Err(err);
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_prefix_must_be_routed() {
        let text = r#"{"routes": [{"aliases": ["/a/b/"], "route": "NullRoute"}]}"#;
        assert!(super::validate("v.json", text, "/a/b/").is_ok());
        let e = super::validate("v.json", text, super::DEFAULT_ROUTE_PREFIX).unwrap_err();
        assert!(
            e.to_string()
                .contains("/././ (--route-prefix) is not among"),
            "{e}"
        );
        // A single "route" serves whatever the default prefix is.
        assert!(super::validate("v.json", r#"{"route": "NullRoute"}"#, "/x/y/").is_ok());
    }
}
