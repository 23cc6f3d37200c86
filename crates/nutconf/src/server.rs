//! `servers:` entries: `host:port:weight [name]`, `/path:weight [name]`, and the DNS-named
//! `dns:HOST:PORT:WEIGHT` / `srv:NAME:WEIGHT` (memfleet extension, resolved by the router's `dns`).

use ring::KETAMA_DEFAULT_PORT;

use super::scalar::{nc_atoi, valid_port};

/// Where a backend lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddr {
    Tcp { host: String, port: u16 },
    Unix { path: String },
}

/// One `servers:` entry: `host:port:weight [name]` or `/path:weight [name]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    /// The entry without its node name (twemproxy's `pname`, used in stats).
    pub pname: String,
    pub addr: ServerAddr,
    pub weight: u32,
    /// Node name, when one was given.
    pub name: Option<String>,
    /// The string ketama hashes for this server (twemproxy's `server->name`): the node
    /// name, else the address, plus `:port` unless the port is 11211. Also the identity
    /// that must be unique within a pool.
    pub ketama_name: String,
    /// Whether this server speaks TLS when it says so itself (mcrouter's `:ssl` or `:plain`
    /// suffix); `None`: as the pool's `tls` says.
    pub tls: Option<bool>,
}

impl ServerSpec {
    /// The ring entry for this server, placed exactly as twemproxy places it.
    pub fn ring_server(&self) -> ring::Server {
        let (host, port) = match &self.addr {
            ServerAddr::Tcp { host, port } => (host.clone(), *port),
            ServerAddr::Unix { path } => (path.clone(), 0),
        };
        ring::Server::new(host, port, self.weight).named(self.ketama_name.clone())
    }
}

/// One DNS `servers:` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsName {
    pub lookup: DnsLookup,
    pub weight: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsLookup {
    /// `dns:HOST:PORT:WEIGHT`: every A/AAAA address of HOST, at PORT.
    Addresses { host: String, port: u16 },
    /// `srv:NAME:WEIGHT`: every target and port of the SRV records of NAME.
    Srv { name: String },
}

/// A `dns:HOST:PORT:WEIGHT` or `srv:NAME:WEIGHT` entry; `None` for any other entry.
pub(super) fn parse_dns_server(value: &str) -> Option<Result<DnsName, &'static str>> {
    const FORMAT: &str =
        "has an invalid \"dns:hostname:port:weight\" or \"srv:name:weight\" format string";
    fn name(n: &str) -> Result<String, &'static str> {
        if n.is_empty() || n.contains([' ', ':']) {
            return Err(FORMAT);
        }
        Ok(n.to_owned())
    }
    // Both forms end in `:WEIGHT`; what is before it says what to look up.
    fn entry(
        rest: &str,
        lookup: impl Fn(&str) -> Result<DnsLookup, &'static str>,
    ) -> Result<DnsName, &'static str> {
        let (target, weight) = rest.rsplit_once(':').ok_or(FORMAT)?;
        let lookup = lookup(target)?;
        match nc_atoi(weight) {
            Some(0) | None => Err(FORMAT),
            Some(weight) => Ok(DnsName { lookup, weight }),
        }
    }
    if let Some(rest) = value.strip_prefix("dns:") {
        return Some(entry(rest, |target| {
            let (host, port) = target.rsplit_once(':').ok_or(FORMAT)?;
            Ok(DnsLookup::Addresses {
                host: name(host)?,
                port: valid_port(port).ok_or(FORMAT)?,
            })
        }));
    }
    let rest = value.strip_prefix("srv:")?;
    Some(entry(rest, |target| {
        Ok(DnsLookup::Srv {
            name: name(target)?,
        })
    }))
}

/// Parses a `servers:` entry from its end, as twemproxy's `conf_add_server` does:
/// optional ` name` after the last space, then `:weight`, then (TCP only) `:port`. The
/// error is the rest of nutcracker's sentence after `directive "servers:"`.
pub fn parse_server(value: &str) -> Result<ServerSpec, &'static str> {
    const FORMAT: &str = "has an invalid \"hostname:port:weight [name]\"or \"/path/unix_socket:weight [name]\" format string";
    let unix = value.starts_with('/');
    let (rest, name) = match value.rsplit_once(' ') {
        Some((rest, name)) => (rest, Some(name)),
        None => (value, None),
    };
    let (rest, weight) = rest.rsplit_once(':').ok_or(FORMAT)?;
    // A unix path must not contain another ':'; a TCP entry needs one before the port.
    let (addr, port) = match rest.rsplit_once(':') {
        Some((addr, port)) if !unix => (addr, port),
        Some(_) => return Err(FORMAT),
        None if unix => (rest, ""),
        None => return Err(FORMAT),
    };
    let weight = match nc_atoi(weight) {
        None => {
            return Err("has an invalid weight in \"hostname:port:weight [name]\" format string")
        }
        Some(0) => {
            return Err("has a zero weight in \"hostname:port:weight [name]\" format string")
        }
        Some(w) => w,
    };
    let (server_addr, port_num) = if unix {
        (
            ServerAddr::Unix {
                path: addr.to_owned(),
            },
            0,
        )
    } else {
        let port = valid_port(port)
            .ok_or("has an invalid port in \"hostname:port:weight [name]\" format string")?;
        (
            ServerAddr::Tcp {
                host: addr.to_owned(),
                port,
            },
            port,
        )
    };
    let ketama_name = match name {
        Some(name) => name.to_owned(),
        None if port_num == KETAMA_DEFAULT_PORT => addr.to_owned(),
        // The address plus the raw ":port" text; for a unix path that is "/path:".
        None => value[..addr.len() + 1 + port.len()].to_owned(),
    };
    // twemproxy only trims a non-empty name off the printable name.
    let pname = match name {
        Some(name) if !name.is_empty() => &value[..value.len() - name.len() - 1],
        _ => value,
    };
    Ok(ServerSpec {
        pname: pname.to_owned(),
        addr: server_addr,
        weight,
        name: name.map(str::to_owned),
        ketama_name,
        tls: None,
    })
}
