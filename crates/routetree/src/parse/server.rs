//! One server address as a pool lists it.

use std::fmt;

use crate::model::Server;

/// Why a server address was refused: `server '<text>': <reason>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadServer(String);

impl fmt::Display for BadServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadServer {}

/// `host:port[:protocol[:security]]`, IPv6 hosts in brackets.
pub fn parse_server(s: &str) -> std::result::Result<Server, BadServer> {
    let bad = |why: &str| BadServer(format!("server '{s}': {why}"));
    let (host, rest) = if let Some(inner) = s.strip_prefix('[') {
        let Some((host, rest)) = inner.split_once(']') else {
            return Err(bad("missing ']' after the IPv6 address"));
        };
        let Some(rest) = rest.strip_prefix(':') else {
            return Err(bad("expected ':port' after ']'"));
        };
        (host, rest)
    } else {
        match s.split_once(':') {
            Some((host, rest)) => (host, rest),
            None => return Err(bad("expected host:port")),
        }
    };
    if host.is_empty() || host.contains(['[', ']', ' ']) {
        return Err(bad("bad host"));
    }
    let mut parts = rest.split(':');
    let port = parts.next().unwrap_or("");
    let port: u16 = match port.parse() {
        Ok(p) => p,
        _ => {
            return Err(bad(
                "the port must be a number up to 65535 (IPv6 needs [brackets])",
            ))
        }
    };
    let protocol = parts.next().map(str::to_owned);
    let security = parts.next().map(str::to_owned);
    if parts.next().is_some() {
        return Err(bad("too many ':' fields"));
    }
    if let Some(p) = &protocol {
        if !["ascii", "caret", "umbrella", "thrift"].contains(&p.as_str()) {
            return Err(bad("protocol must be ascii, caret, umbrella or thrift"));
        }
    }
    Ok(Server {
        host: host.to_owned(),
        port,
        protocol,
        security,
    })
}
