//! mcrouter's service-info gets (`get __mcrouter__.<command>[(<args>)]`): how the key names
//! a command and its arguments, and the route-tree answers (`route(op,key)`: where a
//! request would go). The router answers the ones about itself (version, config age, ...).

use crate::model::{Config, PoolId};
use crate::parse::OPERATIONS;
use crate::plan::Plan;

/// Keys beginning so are service-info commands, not cache keys.
pub const ADMIN_PREFIX: &[u8] = b"__mcrouter__.";

/// A service-info command split as mcrouter splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminCommand<'k> {
    /// The command name (`version`, `route`, ...).
    pub name: &'k str,
    /// Its arguments: the text in parentheses split at commas; `route` and `route_handles`
    /// split only at the first comma, so a key may hold commas.
    pub args: Vec<&'k str>,
}

impl<'k> AdminCommand<'k> {
    /// The command `key` names, or `None` when it is not a service-info key (or not UTF-8).
    pub fn parse(key: &'k [u8]) -> Option<AdminCommand<'k>> {
        let rest = std::str::from_utf8(key.strip_prefix(ADMIN_PREFIX)?).ok()?;
        let (name, inner) = match rest.find('(') {
            Some(open) if rest.ends_with(')') => (&rest[..open], &rest[open + 1..rest.len() - 1]),
            _ => (rest, ""),
        };
        let args = if inner.is_empty() {
            Vec::new()
        } else if name.starts_with("route") {
            // Without a comma mcrouter takes no arguments at all.
            match inner.split_once(',') {
                Some((op, key)) => vec![op, key],
                None => Vec::new(),
            }
        } else {
            inner.split(',').collect()
        };
        Some(AdminCommand { name, args })
    }
}

/// `route(op,key)`: the servers a request `op` of `key` would be sent to, as
/// (pool, index in pool), in the order the route tree reaches them. Requests are followed
/// as if every server answered a miss (mcrouter's recording requests get a default reply):
/// failover routes stop at their first child, miss-failover and warm-up routes ask every
/// child, shadows are included. Errors read as mcrouter's (`route: ...`).
pub fn destinations(
    config: &Config,
    op: &str,
    key: &[u8],
    default_prefix: &str,
) -> Result<Vec<(PoolId, usize)>, String> {
    if !OPERATIONS.contains(&op) {
        return Err(format!("route: unknown request {op}"));
    }
    let mut out = Vec::new();
    collect(&config.plan(op, key, default_prefix), &mut out);
    Ok(out)
}

fn collect(plan: &Plan, out: &mut Vec<(PoolId, usize)>) {
    match plan {
        Plan::Send(send) => out.push((send.pool, send.index)),
        Plan::All { plans, .. } | Plan::MissFailover { plans, .. } => {
            plans.iter().for_each(|p| collect(p, out))
        }
        Plan::Failover { plans, order, .. } => {
            if let Some(first) = order.first().and_then(|&i| plans.get(i)) {
                collect(first, out);
            }
        }
        Plan::WarmUp { cold, warm, .. } => {
            collect(cold, out);
            collect(warm, out);
        }
        Plan::Shadowed { main, shadows } => {
            collect(main, out);
            shadows.iter().for_each(|(_, p)| collect(p, out));
        }
        Plan::KeySplit {
            replicas,
            fanout,
            pick,
        } => {
            if *fanout {
                replicas.iter().for_each(|p| collect(p, out));
            } else if let Some(p) = replicas.get(pick.unwrap_or(0)) {
                collect(p, out);
            }
        }
        Plan::Rekey { plan, .. } => collect(plan, out),
        Plan::L1L2 { l1, l2, .. } => {
            collect(l1, out);
            collect(l2, out);
        }
        Plan::RateLimit { plan, .. } | Plan::Delay { plan, .. } => collect(plan, out),
        // Any one of them may be picked.
        Plan::Random { plans } => plans.iter().for_each(|p| collect(p, out)),
        Plan::SizeSplit { l1, l2, .. } => {
            collect(l1, out);
            collect(l2, out);
        }
        Plan::Staging { warm, staging, .. } => {
            collect(warm, out);
            collect(staging, out);
        }
        // The target: the failover takes only some gets, while the target warms up.
        Plan::SlowWarmUp { target, .. } => collect(target, out),
        // Its key is not known yet.
        Plan::Null | Plan::Error(_) | Plan::Deferred(_) => {}
    }
}

/// mcrouter's `route` reply: one `host:port` per destination (IPv6 hosts bracketed),
/// separated by CRLF.
pub fn route_reply(config: &Config, destinations: &[(PoolId, usize)]) -> String {
    destinations
        .iter()
        .map(|&(pool, index)| {
            let server = &config.pools[pool].servers[index];
            if server.host.contains(':') {
                format!("[{}]:{}", server.host, server.port)
            } else {
                format!("{}:{}", server.host, server.port)
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_config;

    #[test]
    fn commands_split_as_mcrouter_splits_them() {
        fn p(k: &str) -> Option<AdminCommand<'_>> {
            AdminCommand::parse(k.as_bytes())
        }
        assert_eq!(p("version"), None);
        let c = p("__mcrouter__.version").unwrap();
        assert_eq!((c.name, c.args.len()), ("version", 0));
        let c = p("__mcrouter__.route(get,a,b)").unwrap();
        assert_eq!((c.name, c.args), ("route", vec!["get", "a,b"]));
        let c = p("__mcrouter__.route_handles(set,/r/c/k)").unwrap();
        assert_eq!(c.args, ["set", "/r/c/k"]);
        assert_eq!(p("__mcrouter__.route(get)").unwrap().args.len(), 0);
        assert_eq!(p("__mcrouter__.options(a,b)").unwrap().args, ["a", "b"]);
        // Without the closing parenthesis the whole rest is the name.
        assert_eq!(p("__mcrouter__.route(get,k").unwrap().name, "route(get,k");
    }

    fn config(route: &str) -> Config {
        let text = format!(
            r#"{{"pools": {{"A": {{"servers": ["10.0.0.1:11211", "10.0.0.2:11211", "[::1]:11213"]}},
                           "B": {{"servers": ["10.0.1.1:11211"]}}}},
                "route": {route}}}"#
        );
        parse_config("t.json", &text).unwrap()
    }

    fn reply(c: &Config, op: &str, key: &str) -> String {
        let d = destinations(c, op, key.as_bytes(), "/r/c/").unwrap();
        route_reply(c, &d)
    }

    #[test]
    fn route_lists_the_servers_a_request_reaches() {
        let c = config(r#""PoolRoute|A""#);
        let servers = ["10.0.0.1:11211", "10.0.0.2:11211", "[::1]:11213"];
        for i in 0..50 {
            let key = format!("k{i}");
            let Plan::Send(s) = c.plan("get", key.as_bytes(), "/r/c/") else {
                panic!()
            };
            assert_eq!(reply(&c, "get", &key), servers[s.index]);
        }
        // Every child of an AllSyncRoute, in order.
        let c = config(r#"{"type": "AllSyncRoute", "children": ["PoolRoute|B", "Pool|A"]}"#);
        assert_eq!(
            reply(&c, "set", "x"),
            "10.0.1.1:11211\r\n10.0.0.1:11211\r\n10.0.0.2:11211\r\n[::1]:11213"
        );
        // A failover route sends only to its first child; a miss-failover route to each.
        let c = config(r#"{"type": "FailoverRoute", "children": ["PoolRoute|B", "Pool|A"]}"#);
        assert_eq!(reply(&c, "get", "x"), "10.0.1.1:11211");
        let c =
            config(r#"{"type": "MissFailoverRoute", "children": ["PoolRoute|B", "PoolRoute|B"]}"#);
        assert_eq!(reply(&c, "get", "x"), "10.0.1.1:11211\r\n10.0.1.1:11211");
        let c = config(r#""NullRoute""#);
        assert_eq!(reply(&c, "get", "x"), "");
        assert_eq!(
            destinations(&c, "fly", b"x", "/r/c/"),
            Err("route: unknown request fly".into())
        );
    }
}
