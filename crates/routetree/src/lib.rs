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

pub mod error;
pub mod model;
pub mod parse;
pub mod plan;
pub mod source;

pub use crate::error::{ConfigError, Path, Seg};
pub use crate::model::*;
pub use crate::parse::{parse_config, parse_server, OPERATIONS};
pub use crate::plan::{Plan, Send};
