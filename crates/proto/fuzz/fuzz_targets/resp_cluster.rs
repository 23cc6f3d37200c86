#![no_main]
//! Arbitrary bytes through the Redis Cluster and Sentinel reply parsers: none may panic, and
//! what parses must hold together (slot ranges in 0..=16383 and in order, every slot owner an
//! index into the node list, ports non-zero).

use libfuzzer_sys::fuzz_target;
use proto::resp::cluster::{
    parse_cluster_shards, parse_cluster_slots, parse_master_addr, parse_redirect,
    parse_switch_master, ClusterTopology, Redirect,
};

const SLOTS: usize = 16384;

fn check(t: &ClusterTopology) {
    let nodes = t.nodes();
    let owners = t.slot_owners();
    assert_eq!(owners.len(), SLOTS);
    assert!(owners
        .iter()
        .flatten()
        .all(|&i| usize::from(i) < nodes.len()));
    assert!(t.covered_slots() <= SLOTS);
    for shard in &t.shards {
        assert!(shard
            .slots
            .iter()
            .all(|&(s, e)| s <= e && usize::from(e) < SLOTS));
        let named = shard.primary.iter().chain(&shard.replicas);
        assert!(named.clone().all(|n| n.port != 0 && nodes.contains(n)));
    }
}

fuzz_target!(|data: &[u8]| {
    for t in [
        parse_cluster_shards(data, "asked"),
        parse_cluster_slots(data, "asked"),
    ]
    .iter()
    .flatten()
    {
        check(t);
    }
    if let Some(Redirect::Moved { slot, addr } | Redirect::Ask { slot, addr }) =
        parse_redirect(data)
    {
        assert!(usize::from(slot) < SLOTS && addr.port != 0);
        let _ = addr.to_string();
    }
    if let Ok(Some(addr)) = parse_master_addr(data) {
        assert!(!addr.host.is_empty() && addr.port != 0);
    }
    if let Some(addr) = parse_switch_master(data, "mymaster") {
        assert!(!addr.host.is_empty() && addr.port != 0);
    }
});
