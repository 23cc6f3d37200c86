//! What a config is expanded with besides its own text: the globals every macro sees, the
//! loader for imports, the host's addresses and the runtime variables file.

use serde_json::{Map, Value};

/// Most values plus string bytes an expansion may produce.
pub const SIZE_LIMIT: usize = 64 << 20;

/// Reads the file an `@import(path)` names; `Err` carries why it cannot.
pub type Import<'a> = &'a dyn Fn(&str) -> Result<String, String>;

/// What a config is expanded with besides its own text.
pub struct Env<'a> {
    /// Parameters every macro sees, like mcrouter's `default-route` (consts).
    pub globals: Map<String, Value>,
    /// Reads imported files.
    pub import: Import<'a>,
    /// Most values plus string bytes the expansion may make (default [`SIZE_LIMIT`]).
    pub size_limit: usize,
    /// The host's own addresses, for `@isLocalIp` (None: unknown, and the call fails).
    pub local_ips: Option<&'a [std::net::IpAddr]>,
    /// mcrouter's runtime variables file (`--runtime-vars-file`), if one was read: not
    /// JSONM, but the other input a config is read with (WeightedCh3Rv's weights).
    pub runtime_vars: Option<RuntimeVars<'a>>,
}

/// The runtime variables file as read: its name (for messages) and its text.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeVars<'a> {
    /// The file's path.
    pub file: &'a str,
    /// Its contents.
    pub text: &'a str,
}

/// The globals mcrouter derives from its default routing prefix (`/region/cluster/`):
/// `default-route`, `default-region` and `default-cluster`.
pub fn route_globals(default_prefix: &str) -> Map<String, Value> {
    let mut parts = default_prefix.split('/').skip(1);
    let region = parts.next().unwrap_or_default();
    let cluster = parts.next().unwrap_or_default();
    let mut globals = Map::new();
    globals.insert("default-route".into(), default_prefix.into());
    globals.insert("default-region".into(), region.into());
    globals.insert("default-cluster".into(), cluster.into());
    globals
}

/// A loader for configs that came from no file: every import fails.
pub fn no_imports(path: &str) -> Result<String, String> {
    Err(format!("Can not read {path}: the config came from no file"))
}

impl Default for Env<'_> {
    fn default() -> Self {
        Env {
            globals: Map::new(),
            import: &no_imports,
            size_limit: SIZE_LIMIT,
            local_ips: None,
            runtime_vars: None,
        }
    }
}
