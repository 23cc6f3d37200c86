//! Redis Cluster and Sentinel replies: the slot map (`CLUSTER SHARDS`, `CLUSTER SLOTS`), the
//! redirection errors (`-MOVED`, `-ASK`, `-TRYAGAIN`, `-CLUSTERDOWN`), Sentinel's
//! `get-master-addr-by-name` and `replicas` replies and its `+switch-master` messages.
//!
//! Every parser takes one whole RESP2 reply, walks it with [`reply_len`], [`view_reply`] and
//! [`array_elements`], and allocates only for what it keeps (never from a claimed count).
//! Shapes checked against redis-server 7.0.15 (fixtures in `crates/proto/tests/cluster/`):
//!
//! * `CLUSTER SHARDS` lists a failed primary that its replica replaced as a shard of its own
//!   with no slots; such a shard, once its failed nodes are left out, is dropped.
//! * `CLUSTER SLOTS` keeps naming a failed primary until a replica is promoted (it has no
//!   health field): only `CLUSTER SHARDS` can tell.
//! * With `cluster-preferred-endpoint-type hostname`, a node without a hostname is announced as
//!   `?`, its IP then given as the `ip` metadata (SLOTS) or field (SHARDS); it is used then.
//! * A node that does not know its own IP announces the empty string: it is the node asked.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::{array_elements, reply_len, view_reply, ReplyView};

const SLOTS: usize = 16384;

/// A node address as a cluster or a Sentinel announces it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeAddr {
    /// Host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// One shard: its slot ranges, primary and replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterShard {
    /// Inclusive slot ranges this shard serves.
    pub slots: Vec<(u16, u16)>,
    /// The primary, None while it is failed and no replica has taken over.
    pub primary: Option<NodeAddr>,
    /// Replicas that are online (health "online" in CLUSTER SHARDS; all of them in CLUSTER SLOTS).
    pub replicas: Vec<NodeAddr>,
}

/// A cluster's slot map as one node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClusterTopology {
    /// The shards in reply order.
    pub shards: Vec<ClusterShard>,
}

impl ClusterTopology {
    /// Slots served by some primary.
    pub fn covered_slots(&self) -> usize {
        self.slot_owners().iter().filter(|o| o.is_some()).count()
    }

    /// Every node named (primaries first, then replicas), each once, in a stable order.
    pub fn nodes(&self) -> Vec<NodeAddr> {
        let mut seen = HashSet::new();
        let primaries = self.shards.iter().filter_map(|s| s.primary.as_ref());
        let replicas = self.shards.iter().flat_map(|s| s.replicas.iter());
        primaries
            .chain(replicas)
            .filter(|n| seen.insert(*n))
            .cloned()
            .collect()
    }

    /// For each of the 16384 slots, the index in `nodes()` of its primary (None: uncovered).
    /// A slot claimed by two shards goes to the first; an index past `u16::MAX` is None.
    pub fn slot_owners(&self) -> Vec<Option<u16>> {
        let mut index: HashMap<&NodeAddr, usize> = HashMap::new();
        for p in self.shards.iter().filter_map(|s| s.primary.as_ref()) {
            let next = index.len();
            index.entry(p).or_insert(next);
        }
        let mut owners = vec![None; SLOTS];
        for shard in &self.shards {
            let Some(p) = &shard.primary else { continue };
            let Ok(i) = u16::try_from(index[p]) else {
                continue;
            };
            for &(start, end) in &shard.slots {
                let end = usize::from(end).min(SLOTS - 1);
                for owner in owners.iter_mut().take(end + 1).skip(start.into()) {
                    owner.get_or_insert(i);
                }
            }
        }
        owners
    }
}

/// The elements of a complete array reply (`what` names it in errors).
fn elements<'a>(
    reply: &'a [u8],
    what: &'static str,
) -> Result<impl Iterator<Item = Result<&'a [u8], String>>, String> {
    match view_reply(reply).map_err(|e| format!("{what}: {e}"))? {
        ReplyView::Array(Some((_, body))) => {
            Ok(array_elements(body).map(move |e| e.map_err(|e| format!("{what}: {e}"))))
        }
        ReplyView::Error(text) => Err(format!("{what}: error reply: {}", lossy(text))),
        _ => Err(format!("{what}: not an array")),
    }
}

/// A reply that must be exactly one complete RESP2 reply.
fn whole(reply: &[u8]) -> Result<(), String> {
    match reply_len(reply) {
        Ok(Some(n)) if n == reply.len() => Ok(()),
        Ok(Some(_)) => Err("bytes after the reply".into()),
        Ok(None) => Err("incomplete reply".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A bulk or simple string element.
fn string<'a>(e: &'a [u8], what: &str) -> Result<&'a [u8], String> {
    match view_reply(e) {
        Ok(ReplyView::Bulk(Some(s)) | ReplyView::Simple(s)) => Ok(s),
        _ => Err(format!("{what}: not a string")),
    }
}

fn utf8<'a>(s: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(s).map_err(|_| format!("{what}: not UTF-8"))
}

/// An integer element (or a string of digits, as Sentinel sends ports).
fn integer(e: &[u8], what: &str) -> Result<i64, String> {
    match view_reply(e) {
        Ok(ReplyView::Integer(n)) => Ok(n),
        Ok(ReplyView::Bulk(Some(s)) | ReplyView::Simple(s)) => std::str::from_utf8(s)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{what}: not a number")),
        _ => Err(format!("{what}: not an integer")),
    }
}

fn port(n: i64) -> Result<u16, String> {
    u16::try_from(n)
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("bad port {n}"))
}

fn slot(n: i64) -> Result<u16, String> {
    u16::try_from(n)
        .ok()
        .filter(|&s| usize::from(s) < SLOTS)
        .ok_or_else(|| format!("slot {n} out of range"))
}

fn slot_range(start: i64, end: i64) -> Result<(u16, u16), String> {
    let (start, end) = (slot(start)?, slot(end)?);
    if start > end {
        return Err(format!("slot range {start}-{end} is reversed"));
    }
    Ok((start, end))
}

/// The address a node is reached at: `announced` unless it is empty (the node asked) or `?`
/// (no hostname: its `ip`, else the node asked).
fn node_host(announced: &str, ip: Option<&str>, asked: &str) -> String {
    match announced {
        "" => asked,
        "?" => ip
            .filter(|ip| !ip.is_empty() && *ip != "?")
            .unwrap_or(asked),
        host => host,
    }
    .to_string()
}

/// A whole RESP2 reply to `CLUSTER SHARDS` (Redis 7). `asked` is the host the command was sent
/// to: a node announcing endpoint "" or "?" is reached there (use "ip" when "endpoint" is absent,
/// "port" or else "tls-port"). Nodes whose health is "fail" are left out (a failed primary: the
/// shard has primary None until its replica is promoted).
///
/// An endpoint of "?" (a node without the hostname that `cluster-preferred-endpoint-type
/// hostname` asks for) is reached at its "ip" when that is given, and only else at `asked`.
pub fn parse_cluster_shards(reply: &[u8], asked: &str) -> Result<ClusterTopology, String> {
    whole(reply)?;
    let mut topology = ClusterTopology::default();
    for shard in elements(reply, "CLUSTER SHARDS")? {
        if let Some(shard) = parse_shard(shard?, asked)? {
            topology.shards.push(shard);
        }
    }
    Ok(topology)
}

/// One shard map: `slots` (flat start/end pairs) and `nodes`.
fn parse_shard(shard: &[u8], asked: &str) -> Result<Option<ClusterShard>, String> {
    let mut out = ClusterShard {
        slots: Vec::new(),
        primary: None,
        replicas: Vec::new(),
    };
    let mut fields = elements(shard, "shard")?;
    while let Some(key) = fields.next() {
        let key = string(key?, "shard field")?;
        let value = fields.next().ok_or("shard: field without a value")??;
        match key {
            b"slots" => {
                let mut bounds = elements(value, "slots")?;
                while let Some(start) = bounds.next() {
                    let start = integer(start?, "slot")?;
                    let end = bounds.next().ok_or("slots: odd count")??;
                    out.slots.push(slot_range(start, integer(end, "slot")?)?);
                }
            }
            b"nodes" => {
                for node in elements(value, "nodes")? {
                    let Some((addr, primary)) = parse_shard_node(node?, asked)? else {
                        continue;
                    };
                    if primary {
                        // Two live primaries in a shard would be a broken reply; the first wins.
                        out.primary.get_or_insert(addr);
                    } else if !out.replicas.contains(&addr) {
                        out.replicas.push(addr);
                    }
                }
            }
            _ => {}
        }
    }
    let empty = out.slots.is_empty() && out.primary.is_none() && out.replicas.is_empty();
    Ok((!empty).then_some(out))
}

/// One node map of a shard: its address and whether it is the primary; None when it is left
/// out (failed, or a replica that is not online).
fn parse_shard_node(node: &[u8], asked: &str) -> Result<Option<(NodeAddr, bool)>, String> {
    let (mut endpoint, mut ip) = (None, None);
    let (mut plain_port, mut tls_port) = (None, None);
    let (mut primary, mut health) = (false, None);
    let mut fields = elements(node, "node")?;
    while let Some(key) = fields.next() {
        let key = string(key?, "node field")?;
        let value = fields.next().ok_or("node: field without a value")??;
        match key {
            b"endpoint" => endpoint = Some(utf8(string(value, "endpoint")?, "endpoint")?),
            b"ip" => ip = Some(utf8(string(value, "ip")?, "ip")?),
            b"port" => plain_port = Some(integer(value, "port")?),
            b"tls-port" => tls_port = Some(integer(value, "tls-port")?),
            b"role" => primary = string(value, "role")? == b"master",
            b"health" => health = Some(string(value, "health")?),
            _ => {}
        }
    }
    let port = match (plain_port, tls_port) {
        (Some(p), _) if p != 0 => port(p)?,
        (_, Some(p)) => port(p)?,
        _ => return Err("node without a port".into()),
    };
    match health {
        Some(b"fail" | b"failed") => return Ok(None),
        Some(h) if !primary && h != b"online" => return Ok(None),
        _ => {}
    }
    let host = match endpoint {
        Some(e) => node_host(e, ip, asked),
        None => node_host(ip.unwrap_or(""), None, asked),
    };
    Ok(Some((NodeAddr { host, port }, primary)))
}

/// A whole RESP2 reply to `CLUSTER SLOTS` (Redis 3..7): [start, end, [host, port, id, ...], replicas...].
/// Empty host => `asked`. "?" host => that node is skipped.
///
/// A "?" host is taken from the node's `ip` metadata when Redis gives it (7.0 does whenever the
/// preferred endpoint is not the IP); only a node without one is skipped. Ranges of one
/// primary (Redis lists each contiguous range apart) are gathered into one shard.
pub fn parse_cluster_slots(reply: &[u8], asked: &str) -> Result<ClusterTopology, String> {
    whole(reply)?;
    let mut topology = ClusterTopology::default();
    for entry in elements(reply, "CLUSTER SLOTS")? {
        let mut parts = elements(entry?, "slot range")?;
        let start = integer(parts.next().ok_or("slot range: no start")??, "slot")?;
        let end = integer(parts.next().ok_or("slot range: no end")??, "slot")?;
        let range = slot_range(start, end)?;
        let mut primary = None;
        let mut replicas: Vec<NodeAddr> = Vec::new();
        for (i, node) in parts.enumerate() {
            let node = parse_slots_node(node?, asked)?;
            if i == 0 {
                primary = node;
            } else if let Some(n) = node.filter(|n| !replicas.contains(n)) {
                replicas.push(n);
            }
        }
        let same = primary
            .is_some()
            .then(|| topology.shards.iter_mut().find(|s| s.primary == primary))
            .flatten();
        match same {
            Some(shard) => {
                shard.slots.push(range);
                for r in replicas {
                    if !shard.replicas.contains(&r) {
                        shard.replicas.push(r);
                    }
                }
            }
            None => topology.shards.push(ClusterShard {
                slots: vec![range],
                primary,
                replicas,
            }),
        }
    }
    Ok(topology)
}

/// `[host, port, id?, metadata?]`; None for a `?` host without an `ip` in its metadata.
fn parse_slots_node(node: &[u8], asked: &str) -> Result<Option<NodeAddr>, String> {
    let mut parts = elements(node, "node")?;
    let host = utf8(
        string(parts.next().ok_or("node: no host")??, "host")?,
        "host",
    )?;
    let port = port(integer(parts.next().ok_or("node: no port")??, "port")?)?;
    let _id = parts.next().transpose()?;
    let mut ip = None;
    if let Some(meta) = parts.next().transpose()? {
        let mut fields = elements(meta, "node metadata")?;
        while let Some(key) = fields.next() {
            let key = string(key?, "metadata key")?;
            let value = fields
                .next()
                .ok_or("node metadata: key without a value")??;
            if key == b"ip" {
                ip = Some(utf8(string(value, "ip")?, "ip")?);
            }
        }
    }
    if host == "?" && ip.is_none_or(|ip| ip.is_empty() || ip == "?") {
        return Ok(None);
    }
    Ok(Some(NodeAddr {
        host: node_host(host, ip, asked),
        port,
    }))
}

/// A Redis Cluster redirection or retry error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// The slot has moved for good: update the slot map.
    Moved {
        /// The key's slot.
        slot: u16,
        /// The node now serving it.
        addr: NodeAddr,
    },
    /// The slot is migrating: send `ASKING` then the command to `addr`, this once.
    Ask {
        /// The key's slot.
        slot: u16,
        /// The node importing it.
        addr: NodeAddr,
    },
    /// -TRYAGAIN: a multi-key command during a slot's migration; retry shortly.
    TryAgain,
    /// -CLUSTERDOWN: the cluster cannot serve now (failover in progress).
    ClusterDown,
}

/// A whole reply: Some when it is one of Redis Cluster's redirection/retry errors
/// ("-MOVED 3999 127.0.0.1:6381\r\n", "-ASK 3999 127.0.0.1:6381\r\n", "-TRYAGAIN ...",
/// "-CLUSTERDOWN ..."). Also accept RESP3 blob errors? no: only simple errors (what redis sends).
/// The endpoint in MOVED may be ":6381" (empty host: same host as the node asked; return host "").
///
/// Redis writes IPv6 hosts without brackets (`::1:6381`; the port is after the last colon) and a
/// node without the hostname the cluster prefers as `?:6381`: the host is then "?", as sent.
pub fn parse_redirect(reply: &[u8]) -> Option<Redirect> {
    if reply.first() != Some(&b'-') || whole(reply).is_err() {
        return None;
    }
    let Ok(ReplyView::Error(text)) = view_reply(reply) else {
        return None;
    };
    let mut words = text.split(|&b| b == b' ');
    let moved = match words.next()? {
        b"TRYAGAIN" => return Some(Redirect::TryAgain),
        b"CLUSTERDOWN" => return Some(Redirect::ClusterDown),
        b"MOVED" => true,
        b"ASK" => false,
        _ => return None,
    };
    let slot = std::str::from_utf8(words.next()?).ok()?;
    if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let slot = slot
        .parse::<u16>()
        .ok()
        .filter(|&s| usize::from(s) < SLOTS)?;
    let endpoint = std::str::from_utf8(words.next()?).ok()?;
    if words.next().is_some() {
        return None;
    }
    let (host, port) = endpoint.rsplit_once(':')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port = port.parse::<u16>().ok().filter(|&p| p != 0)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let addr = NodeAddr {
        host: host.to_string(),
        port,
    };
    Some(if moved {
        Redirect::Moved { slot, addr }
    } else {
        Redirect::Ask { slot, addr }
    })
}

/// Reply to `SENTINEL get-master-addr-by-name <name>`: Ok(None) for a nil (unknown master),
/// Ok(Some(addr)) for a 2-element array of bulk strings [ip, port]; Err for anything else
/// (an error reply's text included in the Err string).
pub fn parse_master_addr(reply: &[u8]) -> Result<Option<NodeAddr>, String> {
    whole(reply)?;
    match view_reply(reply).map_err(|e| e.to_string())? {
        // Sentinel answers an unknown name with a nil array.
        ReplyView::Array(None) | ReplyView::Bulk(None) => Ok(None),
        ReplyView::Array(Some((2, _))) => {
            let mut parts = elements(reply, "master address")?;
            let host = parts.next().ok_or("master address: no host")??;
            let host = match view_reply(host) {
                Ok(ReplyView::Bulk(Some(h))) => utf8(h, "master host")?,
                _ => return Err("master address: host is not a bulk string".into()),
            };
            if host.is_empty() {
                return Err("master address: empty host".into());
            }
            let port_elem = parts.next().ok_or("master address: no port")??;
            if !matches!(view_reply(port_elem), Ok(ReplyView::Bulk(Some(_)))) {
                return Err("master address: port is not a bulk string".into());
            }
            let port = port(integer(port_elem, "master port")?)?;
            Ok(Some(NodeAddr {
                host: host.to_string(),
                port,
            }))
        }
        ReplyView::Error(text) => Err(format!("sentinel error: {}", lossy(text))),
        _ => Err("master address: not a nil or a 2-element array".into()),
    }
}

/// Reply to `SENTINEL REPLICAS <name>`: the replicas a Sentinel takes to be serving, each a
/// flat map with `ip`, `port` and `flags`; those flagged `s_down`, `o_down` or
/// `disconnected` are left out. An error reply (an unknown master) is an Err.
pub fn parse_sentinel_replicas(reply: &[u8]) -> Result<Vec<NodeAddr>, String> {
    whole(reply)?;
    let mut out = Vec::new();
    for replica in elements(reply, "SENTINEL REPLICAS")? {
        let (mut ip, mut port_num, mut down) = (None, None, false);
        let mut fields = elements(replica?, "replica")?;
        while let Some(key) = fields.next() {
            let key = string(key?, "replica field")?;
            let value = fields.next().ok_or("replica: field without a value")??;
            match key {
                b"ip" => ip = Some(utf8(string(value, "ip")?, "ip")?),
                b"port" => port_num = Some(port(integer(value, "port")?)?),
                b"flags" => {
                    down = string(value, "flags")?
                        .split(|&b| b == b',')
                        .any(|f| matches!(f, b"s_down" | b"o_down" | b"disconnected"))
                }
                _ => {}
            }
        }
        let (Some(host), Some(port)) = (ip.filter(|h| !h.is_empty()), port_num) else {
            return Err("replica without an ip or a port".into());
        };
        let addr = NodeAddr {
            host: host.to_string(),
            port,
        };
        if !down && !out.contains(&addr) {
            out.push(addr);
        }
    }
    Ok(out)
}

/// One pub/sub message frame received on a Sentinel subscription to `+switch-master`
/// (RESP2: ["message", "+switch-master", "<name> <oldip> <oldport> <newip> <newport>"]):
/// the new primary when it is about master `name`, None otherwise (other masters, subscribe
/// confirmations, anything else). A pattern subscription's `pmessage` frame is read too.
pub fn parse_switch_master(frame: &[u8], name: &str) -> Option<NodeAddr> {
    whole(frame).ok()?;
    // At most 5 elements are looked at; a longer frame is not a message.
    let parts = elements(frame, "message")
        .ok()?
        .take(5)
        .map(|e| e.and_then(|e| string(e, "message part")))
        .collect::<Result<Vec<&[u8]>, String>>()
        .ok()?;
    let payload = match parts[..] {
        [b"message", b"+switch-master", payload] => payload,
        [b"pmessage", _, b"+switch-master", payload] => payload,
        _ => return None,
    };
    let payload = std::str::from_utf8(payload).ok()?;
    let words: Vec<&str> = payload.split(' ').take(6).collect();
    let [master, _old_ip, _old_port, new_ip, new_port] = words[..] else {
        return None;
    };
    if master != name || new_ip.is_empty() || !new_port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port = new_port.parse::<u16>().ok().filter(|&p| p != 0)?;
    Some(NodeAddr {
        host: new_ip.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests;
