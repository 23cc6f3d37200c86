//! Property tests of the Redis Cluster and Sentinel reply parsers: arbitrary bytes and
//! arbitrary RESP never panic, a topology written as CLUSTER SLOTS or CLUSTER SHARDS parses
//! back to itself, and slot ranges outside 0..=16383 or reversed are errors.

use proptest::prelude::*;
use proto::resp::cluster::{
    parse_cluster_shards, parse_cluster_slots, parse_master_addr, parse_redirect,
    parse_switch_master, ClusterShard, ClusterTopology, NodeAddr, Redirect,
};
use proto::resp::{write_array_header, write_bulk, write_error, write_integer, write_nil};

const SLOTS: usize = 16384;

/// Every parser over `bytes`; whatever parses must be coherent.
fn parse_all(bytes: &[u8]) {
    for topology in [
        parse_cluster_shards(bytes, "asked"),
        parse_cluster_slots(bytes, "asked"),
    ]
    .into_iter()
    .flatten()
    {
        check_topology(&topology);
    }
    if let Some(Redirect::Moved { slot, addr } | Redirect::Ask { slot, addr }) =
        parse_redirect(bytes)
    {
        assert!(usize::from(slot) < SLOTS);
        assert_ne!(addr.port, 0);
        let _ = addr.to_string();
    }
    if let Ok(Some(addr)) = parse_master_addr(bytes) {
        assert!(!addr.host.is_empty() && addr.port != 0);
    }
    if let Some(addr) = parse_switch_master(bytes, "m") {
        assert!(!addr.host.is_empty() && addr.port != 0);
    }
}

fn check_topology(t: &ClusterTopology) {
    let nodes = t.nodes();
    let owners = t.slot_owners();
    assert_eq!(owners.len(), SLOTS);
    assert!(owners
        .iter()
        .flatten()
        .all(|&i| usize::from(i) < nodes.len()));
    assert_eq!(t.covered_slots(), owners.iter().flatten().count());
    for shard in &t.shards {
        assert!(shard
            .slots
            .iter()
            .all(|&(s, e)| s <= e && usize::from(e) < SLOTS));
        if let Some(p) = &shard.primary {
            assert!(!p.host.is_empty() && p.port != 0);
        }
    }
}

/// A RESP value to write out.
#[derive(Clone, Debug)]
enum Value {
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Error(Vec<u8>),
    Array(Vec<Value>),
}

fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Int(n) => write_integer(out, *n),
        Value::Bulk(b) => write_bulk(out, b),
        Value::Nil => write_nil(out),
        Value::Error(e) => write_error(out, e),
        Value::Array(items) => {
            write_array_header(out, items.len());
            items.iter().for_each(|i| write(out, i));
        }
    }
}

/// Words the parsers look for, so that random replies reach past the first check.
const WORDS: &[&str] = &[
    "slots",
    "nodes",
    "port",
    "tls-port",
    "ip",
    "endpoint",
    "role",
    "master",
    "replica",
    "health",
    "online",
    "fail",
    "loading",
    "?",
    "",
    "10.0.0.1",
    "::1",
    "message",
    "pmessage",
    "+switch-master",
    "m 10.0.0.1 1 10.0.0.2 2",
    "m a b c 0",
    "x 1 2 3 4",
    "7000",
    "0",
];

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop_oneof![Just(-1i64), Just(0), Just(16383), Just(16384), Just(65536)]
            .prop_map(Value::Int),
        (0i64..17000).prop_map(Value::Int),
        prop::sample::select(WORDS).prop_map(|w| Value::Bulk(w.as_bytes().to_vec())),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Value::Bulk),
        Just(Value::Nil),
        prop::sample::select(&["MOVED 1 a:1", "ASK 16383 ::1:2", "TRYAGAIN x", "ERR"][..])
            .prop_map(|e| Value::Error(e.as_bytes().to_vec())),
    ];
    leaf.prop_recursive(5, 64, 16, |inner| {
        prop::collection::vec(inner, 0..16).prop_map(Value::Array)
    })
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9.-]{1,20}",
        (1u8..=254, 0u8..=255).prop_map(|(a, b)| format!("10.{a}.{b}.1")),
        Just("::1".to_string()),
        Just("fe80::2".to_string()),
    ]
}

fn node() -> impl Strategy<Value = NodeAddr> {
    (host(), 1u16..).prop_map(|(host, port)| NodeAddr { host, port })
}

fn range() -> impl Strategy<Value = (u16, u16)> {
    (0u16..16384, 0u16..16384).prop_map(|(a, b)| (a.min(b), a.max(b)))
}

/// Shards with distinct primaries and at least one range each (what CLUSTER SLOTS can say).
fn topology() -> impl Strategy<Value = ClusterTopology> {
    let shard = (
        prop::collection::vec(range(), 1..4),
        node(),
        prop::collection::vec(node(), 0..3),
    )
        .prop_map(|(slots, primary, mut replicas)| {
            let mut seen = std::collections::HashSet::new();
            replicas.retain(|r| seen.insert(r.clone()));
            ClusterShard {
                slots,
                primary: Some(primary),
                replicas,
            }
        });
    prop::collection::vec(shard, 0..6).prop_map(|mut shards| {
        let mut seen = std::collections::HashSet::new();
        shards.retain(|s| seen.insert(s.primary.clone()));
        ClusterTopology { shards }
    })
}

/// CLUSTER SLOTS as Redis 7 writes it: one entry per range, metadata maps included.
fn slots_reply(t: &ClusterTopology) -> Vec<u8> {
    let entries: Vec<_> = t
        .shards
        .iter()
        .flat_map(|s| s.slots.iter().map(move |r| (s, r)))
        .collect();
    let mut out = Vec::new();
    write_array_header(&mut out, entries.len());
    for (shard, &(start, end)) in entries {
        let nodes: Vec<_> = shard.primary.iter().chain(&shard.replicas).collect();
        write_array_header(&mut out, 2 + nodes.len());
        write_integer(&mut out, start.into());
        write_integer(&mut out, end.into());
        for n in nodes {
            write_array_header(&mut out, 4);
            write_bulk(&mut out, n.host.as_bytes());
            write_integer(&mut out, n.port.into());
            write_bulk(&mut out, &[b'f'; 40]);
            write_array_header(&mut out, 0);
        }
    }
    out
}

/// CLUSTER SHARDS as Redis 7 writes it, every node online.
fn shards_reply(t: &ClusterTopology) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_header(&mut out, t.shards.len());
    for shard in &t.shards {
        write_array_header(&mut out, 4);
        write_bulk(&mut out, b"slots");
        write_array_header(&mut out, 2 * shard.slots.len());
        for &(start, end) in &shard.slots {
            write_integer(&mut out, start.into());
            write_integer(&mut out, end.into());
        }
        write_bulk(&mut out, b"nodes");
        let nodes: Vec<_> = shard
            .primary
            .iter()
            .map(|p| (p, "master"))
            .chain(shard.replicas.iter().map(|r| (r, "replica")))
            .collect();
        write_array_header(&mut out, nodes.len());
        for (n, role) in nodes {
            let fields: [(&str, Value); 7] = [
                ("id", Value::Bulk(vec![b'f'; 40])),
                ("port", Value::Int(n.port.into())),
                ("ip", Value::Bulk(n.host.clone().into_bytes())),
                ("endpoint", Value::Bulk(n.host.clone().into_bytes())),
                ("role", Value::Bulk(role.as_bytes().to_vec())),
                ("replication-offset", Value::Int(0)),
                ("health", Value::Bulk(b"online".to_vec())),
            ];
            write_array_header(&mut out, 2 * fields.len());
            for (k, v) in fields {
                write_bulk(&mut out, k.as_bytes());
                write(&mut out, &v);
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        parse_all(&bytes);
    }

    #[test]
    fn arbitrary_resp_never_panics(v in value(), cut in any::<prop::sample::Index>()) {
        let mut bytes = Vec::new();
        write(&mut bytes, &v);
        parse_all(&bytes);
        // And every prefix of it (an incomplete reply is an error, never a panic).
        parse_all(&bytes[..cut.index(bytes.len() + 1)]);
    }

    #[test]
    fn slots_round_trip(t in topology()) {
        let parsed = parse_cluster_slots(&slots_reply(&t), "asked");
        prop_assert_eq!(parsed.as_ref(), Ok(&t));
        check_topology(&t);
    }

    #[test]
    fn shards_round_trip(t in topology()) {
        prop_assert_eq!(parse_cluster_shards(&shards_reply(&t), "asked"), Ok(t));
    }

    #[test]
    fn bad_ranges_are_errors(
        t in topology().prop_filter("a shard", |t| !t.shards.is_empty()),
        which in any::<prop::sample::Index>(),
        bad in prop_oneof![
            (16384u16.., any::<u16>()).prop_map(|(s, e)| (s, e)),
            (any::<u16>(), 16384u16..).prop_map(|(s, e)| (s, e)),
            (1u16..16384).prop_flat_map(|s| (Just(s), 0..s)),
        ],
    ) {
        let mut t = t;
        let i = which.index(t.shards.len());
        t.shards[i].slots[0] = bad;
        prop_assert!(parse_cluster_slots(&slots_reply(&t), "asked").is_err());
        prop_assert!(parse_cluster_shards(&shards_reply(&t), "asked").is_err());
    }
}
