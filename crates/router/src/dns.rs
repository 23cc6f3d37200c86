//! DNS membership: pool servers given as `dns:HOST:PORT:WEIGHT` (every A/AAAA address of
//! HOST) or `srv:NAME:WEIGHT` (every SRV target of NAME). The control thread looks them up
//! at start, on SIGHUP and every `dns_refresh_ms`; a changed membership is installed as a
//! reload, so ketama moves only the keys of the servers that came or went.
//!
//! Each resolved server is named as a written `host:port:weight` entry would be (the address
//! for A/AAAA, the target host for SRV): a server's ketama points depend on its own name only.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfigGroup, ResolverConfig, ResolverOpts,
};
use hickory_resolver::Resolver;

use ring::KETAMA_DEFAULT_PORT;

use nutconf::{Config, DnsLookup, DnsName, ServerAddr, ServerSpec};

use crate::error::RouteError;

/// One resolved server: what it is called in the ring and where it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    /// The host part of the ketama name: the address (A/AAAA) or the target host (SRV).
    pub host: String,
    pub addr: SocketAddr,
    pub weight: u32,
}

/// The resolved servers of each DNS pool of a config, in `Config::dns` order, each sorted.
pub type Membership = Vec<Vec<Member>>;

impl Member {
    /// The `servers:` entry this member stands for.
    pub fn spec(&self) -> ServerSpec {
        let port = self.addr.port();
        let host = match self.addr.ip() {
            // A bare v6 literal stays unambiguous before `:port` in the bracket form.
            IpAddr::V6(ip) if self.host == ip.to_string() => format!("[{ip}]"),
            _ => self.host.clone(),
        };
        let ketama_name = if port == KETAMA_DEFAULT_PORT {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        ServerSpec {
            pname: format!("{host}:{port}:{}", self.weight),
            addr: ServerAddr::Tcp {
                host: self.addr.ip().to_string(),
                port,
            },
            weight: self.weight,
            name: None,
            ketama_name,
            tls: None,
        }
    }
}

/// The config with each DNS pool's resolved members added to its written servers.
/// A name that is also written as a fixed server is kept once.
pub fn expand(config: &Config, members: &Membership) -> Config {
    let mut out = config.clone();
    for (dns, found) in config.dns.iter().zip(members) {
        let pool = &mut out.pools[dns.pool];
        for m in found {
            let spec = m.spec();
            if !pool
                .servers
                .iter()
                .any(|s| s.ketama_name == spec.ketama_name)
            {
                pool.servers.push(spec);
            }
        }
    }
    out
}

/// Sorts and dedups one pool's members (an address listed under two names counts once).
pub fn normalize(mut found: Vec<Member>) -> Vec<Member> {
    found.sort();
    found.dedup_by(|a, b| a.host == b.host && a.addr == b.addr);
    found
}

/// What changed between two memberships of the same config, for the log.
pub fn diff(old: &Membership, new: &Membership) -> (Vec<String>, Vec<String>) {
    let names = |m: &Membership| -> std::collections::BTreeSet<String> {
        m.iter()
            .flatten()
            .map(|m| match m.addr.ip().to_string() == m.host {
                true => m.spec().pname,
                // An SRV target keeps its name when its address changes: show both.
                false => format!("{}@{}", m.spec().pname, m.addr.ip()),
            })
            .collect()
    };
    let (old, new) = (names(old), names(new));
    (
        new.difference(&old).cloned().collect(),
        old.difference(&new).cloned().collect(),
    )
}

/// The control thread's resolver and refresh clock.
pub struct Dns {
    resolver: Option<Resolver>,
    server: Option<SocketAddr>,
    next: Option<Instant>,
}

impl Dns {
    /// `server`: the nameserver to ask (`--dns-server`), else /etc/resolv.conf's.
    pub fn new(server: Option<SocketAddr>) -> Dns {
        Dns {
            resolver: None,
            server,
            next: None,
        }
    }

    fn resolver(&mut self) -> Result<&Resolver, RouteError> {
        if self.resolver.is_none() {
            let (config, mut opts) = match self.server {
                Some(addr) => (
                    ResolverConfig::from_parts(
                        None,
                        vec![],
                        NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true),
                    ),
                    ResolverOpts::default(),
                ),
                None => hickory_resolver::system_conf::read_system_conf().map_err(|e| {
                    RouteError::Dns(format!("dns: cannot read the system resolver config: {e}"))
                })?,
            };
            opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
            opts.timeout = Duration::from_secs(2);
            opts.attempts = 2;
            let r = Resolver::new(config, opts)
                .map_err(|e| RouteError::Dns(format!("dns: resolver: {e}")))?;
            self.resolver = Some(r);
        }
        Ok(self.resolver.as_ref().expect("set above"))
    }

    /// Looks up every DNS name of the config. Any failure fails the whole round so a
    /// nameserver hiccup never shrinks a pool.
    pub fn resolve(&mut self, config: &Config) -> Result<Membership, RouteError> {
        self.next = config
            .dns
            .iter()
            .map(|d| d.refresh)
            .min()
            .map(|every| Instant::now() + every);
        if config.dns.is_empty() {
            return Ok(Vec::new());
        }
        let resolver = self.resolver()?;
        // Every round asks the nameserver: membership must follow it, not the TTLs.
        resolver.clear_cache();
        let mut all = Vec::with_capacity(config.dns.len());
        for dns in &config.dns {
            let mut found = Vec::new();
            for name in &dns.names {
                lookup(resolver, name, &mut found)?;
            }
            let found = normalize(found);
            if found.is_empty() {
                let pool = &config.pools[dns.pool].name;
                return Err(RouteError::Dns(format!(
                    "dns: pool '{pool}': no addresses found"
                )));
            }
            all.push(found);
        }
        Ok(all)
    }

    /// True when a refresh is due (checked by the control thread's tick).
    /// The address a server's host name stands for: the lowest of its A/AAAA addresses, so
    /// a name with several keeps the same one from look-up to look-up.
    pub fn lookup_host(&mut self, host: &str) -> Result<IpAddr, RouteError> {
        let resolver = self.resolver()?;
        resolver.clear_cache();
        let ips = resolver
            .lookup_ip(host)
            .map_err(|e| RouteError::Dns(format!("dns: {host}: {e}")))?;
        ips.iter()
            .min()
            .ok_or_else(|| RouteError::Dns(format!("dns: {host}: no address")))
    }

    /// The next refresh in `every` (none when `None`), for callers that do not go through
    /// [`Dns::resolve`].
    pub fn schedule(&mut self, every: Option<Duration>) {
        self.next = every.map(|every| Instant::now() + every);
    }

    pub fn due(&self) -> bool {
        self.next.is_some_and(|t| Instant::now() >= t)
    }
}

fn lookup(resolver: &Resolver, name: &DnsName, out: &mut Vec<Member>) -> Result<(), RouteError> {
    match &name.lookup {
        DnsLookup::Addresses { host, port } => {
            let ips = resolver
                .lookup_ip(host.as_str())
                .map_err(|e| RouteError::Dns(format!("dns: {host}: {e}")))?;
            out.extend(ips.iter().map(|ip| Member {
                host: ip.to_string(),
                addr: SocketAddr::new(ip, *port),
                weight: name.weight,
            }));
        }
        DnsLookup::Srv { name: srv } => {
            let records = resolver
                .srv_lookup(srv.as_str())
                .map_err(|e| RouteError::Dns(format!("dns: {srv}: {e}")))?;
            for r in records.iter() {
                let target = r.target().to_utf8();
                let target = target.trim_end_matches('.');
                let ip = resolver
                    .lookup_ip(target)
                    .map_err(|e| RouteError::Dns(format!("dns: {srv}: target {target}: {e}")))?
                    .iter()
                    .next()
                    .ok_or_else(|| {
                        RouteError::Dns(format!("dns: {srv}: target {target} has no address"))
                    })?;
                out.push(Member {
                    host: target.to_owned(),
                    addr: SocketAddr::new(ip, r.port()),
                    weight: name.weight,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(host: &str, addr: &str) -> Member {
        Member {
            host: host.into(),
            addr: addr.parse().unwrap(),
            weight: 1,
        }
    }

    #[test]
    fn members_are_named_as_written_entries_are() {
        let a = member("10.0.0.1", "10.0.0.1:11211").spec();
        assert_eq!(a.ketama_name, "10.0.0.1");
        assert_eq!(a.pname, "10.0.0.1:11211:1");
        let b = member("10.0.0.2", "10.0.0.2:11311").spec();
        assert_eq!(b.ketama_name, "10.0.0.2:11311");
        let srv = member("cache-0.cache.ns.svc", "10.0.0.3:11211").spec();
        assert_eq!(srv.ketama_name, "cache-0.cache.ns.svc");
        assert_eq!(
            srv.addr,
            ServerAddr::Tcp {
                host: "10.0.0.3".into(),
                port: 11211
            }
        );
        let v6 = member("::1", "[::1]:11311").spec();
        assert_eq!(v6.ketama_name, "[::1]:11311");
    }

    #[test]
    fn a_resolved_server_keeps_its_ring_points_whoever_else_is_there() {
        let text = "a:\n  listen: 127.0.0.1:22121\n  distribution: ketama\n  servers:\n   - dns:cache.example:11211:1\n";
        let config = Config::from_yaml_str(text).unwrap();
        assert!(config.pools[0].servers.is_empty());
        let two = vec![vec![
            member("10.0.0.1", "10.0.0.1:11211"),
            member("10.0.0.2", "10.0.0.2:11211"),
        ]];
        let mut three = two.clone();
        // Sorts between the two others: no index or order may leak into the names.
        three[0].push(member("10.0.0.15", "10.0.0.15:11211"));
        let three = vec![normalize(three[0].clone())];
        let (before, after) = (expand(&config, &two), expand(&config, &three));
        let (r2, r3) = (before.pools[0].ring(), after.pools[0].ring());
        let name = |c: &Config, i: usize| c.pools[0].servers[i].ketama_name.clone();
        let mut moved = 0;
        for k in 0..3000 {
            let key = format!("key:{k}");
            let (x, y) = (r2.server_for(key.as_bytes()), r3.server_for(key.as_bytes()));
            let (x, y) = (name(&before, x.unwrap()), name(&after, y.unwrap()));
            if x != y {
                assert_eq!(y, "10.0.0.15", "a key moved between two old servers");
                moved += 1;
            }
        }
        // The newcomer's share: about a third, as uneven as 3 servers' 160 points each make it.
        assert!((300..1500).contains(&moved), "moved {moved} of 3000");
    }

    #[test]
    fn diff_reports_servers_that_came_and_went() {
        let old = vec![vec![
            member("10.0.0.1", "10.0.0.1:1"),
            member("10.0.0.2", "10.0.0.2:1"),
        ]];
        let new = vec![vec![
            member("10.0.0.2", "10.0.0.2:1"),
            member("10.0.0.3", "10.0.0.3:1"),
        ]];
        assert_eq!(
            diff(&old, &new),
            (
                vec!["10.0.0.3:1:1".to_string()],
                vec!["10.0.0.1:1:1".to_string()]
            )
        );
        assert_eq!(diff(&new, &new), (vec![], vec![]));
    }

    #[test]
    fn normalize_makes_order_irrelevant() {
        let a = normalize(vec![
            member("10.0.0.2", "10.0.0.2:1"),
            member("10.0.0.1", "10.0.0.1:1"),
        ]);
        let b = normalize(vec![
            member("10.0.0.1", "10.0.0.1:1"),
            member("10.0.0.2", "10.0.0.2:1"),
            member("10.0.0.1", "10.0.0.1:1"),
        ]);
        assert_eq!(a, b);
    }
}
