//! `listen:`, where a pool accepts clients: `host:port` or `/path/to.sock [mode]`.

use super::scalar::{strtol_octal, valid_port};

/// Where a pool accepts clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// `host:port`; `host` is unresolved, as written.
    Tcp { host: String, port: u16 },
    /// `/path/to.sock [mode]`; `mode` is the octal permission, `None` when absent or 0.
    Unix { path: String, mode: Option<u32> },
}

pub(super) fn parse_listen(value: &str) -> Result<Listen, &'static str> {
    if value.starts_with('/') {
        let Some((path, perm)) = value.rsplit_once(' ') else {
            return Ok(Listen::Unix {
                path: value.to_owned(),
                mode: None,
            });
        };
        let mode = strtol_octal(perm)
            .filter(|&m| (0..=0o777).contains(&m))
            .ok_or("has an invalid file permission in \"socket_path permission\" format string")?;
        return Ok(Listen::Unix {
            path: path.to_owned(),
            mode: (mode != 0).then_some(mode as u32),
        });
    }
    let (host, port) = value
        .rsplit_once(':')
        .ok_or("has an invalid \"hostname:port\" format string")?;
    let port = valid_port(port).ok_or("has an invalid port in \"hostname:port\" format string")?;
    // twemproxy resolves the name here; without doing I/O we can at least refuse what
    // no resolver accepts (empty names, characters outside host names and IP literals).
    if !plausible_host(host) {
        return Err("has an invalid value");
    }
    Ok(Listen::Tcp {
        host: host.to_owned(),
        port,
    })
}

fn plausible_host(host: &str) -> bool {
    host.parse::<std::net::IpAddr>().is_ok()
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')))
}
