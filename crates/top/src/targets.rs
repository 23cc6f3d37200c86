//! Which servers to watch: from the command line, a nutcracker.yml (read by `nutconf`, the router's
//! parser) or an mcrouter JSON config (read by routetree's).

use std::path::Path;

use crate::TopError;

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    Tcp { host: String, port: u16 },
    Unix(String),
}

/// One watched server: its address and the label it is shown under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub label: String,
    pub addr: Addr,
}

impl Target {
    fn tcp(host: &str, port: u16) -> Target {
        let label = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Target {
            label,
            addr: Addr::Tcp {
                host: host.to_owned(),
                port,
            },
        }
    }

    fn unix(path: &str) -> Target {
        Target {
            label: path.to_owned(),
            addr: Addr::Unix(path.to_owned()),
        }
    }
}

/// A command-line server: `HOST:PORT`, `[V6]:PORT` or a unix socket path (`/...`).
pub fn parse_arg(arg: &str) -> Result<Target, TopError> {
    if arg.starts_with('/') {
        return Ok(Target::unix(arg));
    }
    let server = routetree::parse_server(arg).map_err(TopError::Server)?;
    Ok(Target::tcp(&server.host, server.port))
}

/// Every server of every memcached pool of a nutcracker.yml (Redis pools' servers have no
/// memcached `stats` to read, so they are left out).
pub fn from_nutcracker(path: &Path) -> Result<Vec<Target>, TopError> {
    let config = nutconf::Config::load(path).map_err(TopError::Nutcracker)?;
    Ok(config
        .pools
        .iter()
        .filter(|pool| !pool.redis)
        .flat_map(|pool| pool.servers.iter().map(|s| s.ring_server()))
        // twemproxy's convention, kept by the ring: port 0 means a unix socket path.
        .map(|s| match s.port {
            0 => Target::unix(&s.host),
            port => Target::tcp(&s.host, port),
        })
        .collect())
}

/// Every server of every pool of an mcrouter config given as `--config`: `file:PATH` or the
/// JSON itself, as `memfleet route --config` takes it.
pub fn from_mcrouter(config: &str) -> Result<Vec<Target>, TopError> {
    let (name, text) = match config.strip_prefix("file:") {
        Some(path) => (
            path.to_owned(),
            std::fs::read_to_string(path).map_err(|error| TopError::ReadMcrouter {
                path: path.to_owned(),
                error,
            })?,
        ),
        None => ("--config".to_owned(), config.to_owned()),
    };
    let parsed = routetree::parse_config(&name, &text).map_err(TopError::Mcrouter)?;
    Ok(parsed
        .pools
        .iter()
        .flat_map(|pool| pool.servers.iter())
        .map(|s| Target::tcp(&s.host, s.port))
        .collect())
}

/// Drops repeats (a server in two pools is watched once), keeping first-seen order.
pub fn dedup(targets: Vec<Target>) -> Vec<Target> {
    let mut seen = std::collections::HashSet::new();
    targets
        .into_iter()
        .filter(|t| seen.insert(t.label.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_forms() {
        assert_eq!(
            parse_arg("127.0.0.1:11211").unwrap().label,
            "127.0.0.1:11211"
        );
        let v6 = parse_arg("[::1]:11212").unwrap();
        assert_eq!(v6.label, "[::1]:11212");
        assert_eq!(
            v6.addr,
            Addr::Tcp {
                host: "::1".into(),
                port: 11212
            }
        );
        assert_eq!(
            parse_arg("/run/mc.sock").unwrap().addr,
            Addr::Unix("/run/mc.sock".into())
        );
        assert!(parse_arg("localhost").is_err());
        assert!(parse_arg("h:99999").is_err());
    }

    #[test]
    fn nutcracker_pools_in_file_order_deduplicated() {
        let dir = std::env::temp_dir().join(format!("memfleet-top-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nutcracker.yml");
        std::fs::write(
            &path,
            "alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1 b\n\
             beta:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n   - /tmp/mc.sock:1\n\
             gamma:\n  listen: 127.0.0.1:22123\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n",
        )
        .unwrap();
        let labels: Vec<String> = dedup(from_nutcracker(&path).unwrap())
            .into_iter()
            .map(|t| t.label)
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            labels,
            ["127.0.0.1:11211", "127.0.0.1:11212", "/tmp/mc.sock"]
        );
    }

    #[test]
    fn mcrouter_pools_inline_json() {
        let json = r#"{"pools": {"A": {"servers": ["127.0.0.1:5001", "[::1]:5002"]}},
                       "route": "PoolRoute|A"}"#;
        let labels: Vec<String> = from_mcrouter(json)
            .unwrap()
            .into_iter()
            .map(|t| t.label)
            .collect();
        assert_eq!(labels, ["127.0.0.1:5001", "[::1]:5002"]);
        assert!(matches!(
            from_mcrouter("file:/nonexistent/x.json"),
            Err(TopError::ReadMcrouter { .. })
        ));
        assert!(from_mcrouter("{\"route\": ").is_err());
    }
}
