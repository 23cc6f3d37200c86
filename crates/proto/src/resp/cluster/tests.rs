//! Replies recorded from redis-server 7.0.15 (crates/proto/tests/cluster/README.md says how).

use super::*;

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../../../tests/cluster/", $name, ".resp")).as_slice()
    };
}

fn addr(host: &str, port: u16) -> NodeAddr {
    NodeAddr {
        host: host.to_string(),
        port,
    }
}

fn local(port: u16) -> NodeAddr {
    addr("127.0.0.1", port)
}

fn shard(slots: &[(u16, u16)], primary: Option<NodeAddr>, replicas: &[NodeAddr]) -> ClusterShard {
    ClusterShard {
        slots: slots.to_vec(),
        primary,
        replicas: replicas.to_vec(),
    }
}

fn topology(shards: Vec<ClusterShard>) -> ClusterTopology {
    ClusterTopology { shards }
}

#[test]
fn three_primaries() {
    let want = topology(vec![
        shard(&[(0, 5460)], Some(local(61801)), &[]),
        shard(&[(5461, 10922)], Some(local(61802)), &[]),
        shard(&[(10923, 16383)], Some(local(61803)), &[]),
    ]);
    assert_eq!(
        parse_cluster_shards(fixture!("c3-shards"), "x"),
        Ok(want.clone())
    );
    assert_eq!(
        parse_cluster_slots(fixture!("c3-slots"), "x"),
        Ok(want.clone())
    );
    assert_eq!(want.covered_slots(), 16384);
    assert_eq!(want.nodes(), vec![local(61801), local(61802), local(61803)]);
    let owners = want.slot_owners();
    assert_eq!(owners.len(), 16384);
    assert_eq!(
        (owners[0], owners[5460], owners[5461]),
        (Some(0), Some(0), Some(1))
    );
    assert_eq!((owners[10923], owners[16383]), (Some(2), Some(2)));
}

#[test]
fn primaries_with_replicas() {
    let want = topology(vec![
        shard(&[(0, 5460)], Some(local(61811)), &[local(61816)]),
        shard(&[(5461, 10922)], Some(local(61812)), &[local(61814)]),
        shard(&[(10923, 16383)], Some(local(61813)), &[local(61815)]),
    ]);
    assert_eq!(
        parse_cluster_shards(fixture!("c6-shards-online"), "x"),
        Ok(want.clone())
    );
    // Just after creation the replicas were "loading": left out.
    let mut loading = want.clone();
    loading.shards.iter_mut().for_each(|s| s.replicas.clear());
    assert_eq!(
        parse_cluster_shards(fixture!("c6-shards"), "x"),
        Ok(loading)
    );
    // Meanwhile CLUSTER SLOTS listed the replicas but 61814, which had not synced yet.
    let mut early = want.clone();
    early.shards[1].replicas.clear();
    assert_eq!(parse_cluster_slots(fixture!("c6-slots"), "x"), Ok(early));
    let nodes = want.nodes();
    assert_eq!(nodes[..3], [local(61811), local(61812), local(61813)]);
    assert_eq!(nodes[3..], [local(61816), local(61814), local(61815)]);
}

#[test]
fn after_a_failover() {
    // 61812 was killed and 61814 promoted: SHARDS lists 61812 as a slotless failed shard.
    let shards = parse_cluster_shards(fixture!("c6-shards-failover"), "x").unwrap();
    assert_eq!(
        shards,
        topology(vec![
            shard(&[(0, 5460)], Some(local(61811)), &[local(61816)]),
            shard(&[(10923, 16383)], Some(local(61813)), &[local(61815)]),
            shard(&[(5461, 10922)], Some(local(61814)), &[]),
        ])
    );
    let slots = parse_cluster_slots(fixture!("c6-slots-failover"), "x").unwrap();
    assert_eq!(
        slots.shards[1],
        shard(&[(5461, 10922)], Some(local(61814)), &[])
    );
    assert_eq!(slots.covered_slots(), 16384);
    assert_eq!(
        shards.slot_owners(),
        slots
            .slot_owners()
            .iter()
            .map(|o| o.map(|i| [0, 2, 1][i as usize]))
            .collect::<Vec<_>>()
    );
}

#[test]
fn failed_primary_not_yet_replaced() {
    // 61813 killed while its replica had cluster-replica-no-failover set.
    let t = parse_cluster_shards(fixture!("c6-shards-primary-failed"), "x").unwrap();
    assert_eq!(t.shards[1], shard(&[(10923, 16383)], None, &[local(61815)]));
    assert_eq!(t.covered_slots(), 10923);
    assert_eq!(t.slot_owners()[10923], None);
    assert!(t.nodes().contains(&local(61815)));
    assert!(!t.nodes().contains(&local(61813)));
    // CLUSTER SLOTS has no health: it still names the failed primary.
    let s = parse_cluster_slots(fixture!("c6-slots-primary-failed"), "x").unwrap();
    assert_eq!(s.shards[2].primary, Some(local(61813)));
}

#[test]
fn announced_hostnames() {
    // cluster-preferred-endpoint-type hostname; only 61811 has a hostname. Asked 61816.
    let t = parse_cluster_shards(fixture!("c6-shards-hostname"), "10.1.1.1").unwrap();
    assert_eq!(
        t,
        topology(vec![
            shard(&[(5461, 10922)], Some(local(61814)), &[]),
            shard(&[(10923, 16383)], None, &[local(61815)]),
            shard(
                &[(0, 5460)],
                Some(addr("node-a.example", 61811)),
                &[local(61816)]
            ),
        ])
    );
    let s = parse_cluster_slots(fixture!("c6-slots-hostname"), "10.1.1.1").unwrap();
    assert_eq!(
        s,
        topology(vec![
            shard(
                &[(0, 5460)],
                Some(addr("node-a.example", 61811)),
                &[local(61816)]
            ),
            shard(&[(5461, 10922)], Some(local(61814)), &[]),
            shard(&[(10923, 16383)], Some(local(61813)), &[local(61815)]),
        ])
    );
}

#[test]
fn node_that_does_not_know_its_ip() {
    // A lone node announces ip and endpoint "": it is the node asked.
    let t = parse_cluster_shards(fixture!("solo-shards"), "10.0.0.9").unwrap();
    assert_eq!(
        t,
        topology(vec![shard(&[], Some(addr("10.0.0.9", 61809)), &[])])
    );
    assert_eq!(t.covered_slots(), 0);
    assert_eq!(
        parse_cluster_slots(fixture!("solo-slots"), "10.0.0.9"),
        Ok(topology(vec![]))
    );
    // Slots 0-2, 5-6, 100 and 200-300: SLOTS lists each range apart, gathered into one shard.
    let ranges = [(0, 2), (5, 6), (100, 100), (200, 300)];
    let want = topology(vec![shard(&ranges, Some(addr("10.0.0.9", 61809)), &[])]);
    assert_eq!(
        parse_cluster_shards(fixture!("solo-gappy-shards"), "10.0.0.9"),
        Ok(want.clone())
    );
    assert_eq!(
        parse_cluster_slots(fixture!("solo-gappy-slots"), "10.0.0.9"),
        Ok(want.clone())
    );
    assert_eq!(want.covered_slots(), 3 + 2 + 1 + 101);
    let owners = want.slot_owners();
    assert_eq!(
        (owners[2], owners[3], owners[300], owners[301]),
        (Some(0), None, Some(0), None)
    );
}

#[test]
fn question_mark_without_ip_is_skipped_in_slots() {
    let reply = b"*1\r\n*4\r\n:0\r\n:9\r\n*3\r\n$1\r\n?\r\n:7000\r\n$1\r\na\r\n*2\r\n$3\r\nh.x\r\n:7001\r\n";
    assert_eq!(
        parse_cluster_slots(reply, "x"),
        Ok(topology(vec![shard(&[(0, 9)], None, &[addr("h.x", 7001)])]))
    );
}

#[test]
fn shards_tls_port_and_missing_endpoint() {
    // No endpoint: the ip; port 0 or absent: tls-port; unknown fields skipped, any type.
    let reply = b"*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:1\r\n$5\r\nnodes\r\n*1\r\n*10\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$4\r\nport\r\n:0\r\n$8\r\ntls-port\r\n:6390\r\n$5\r\nextra\r\n*1\r\n:1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
    assert_eq!(
        parse_cluster_shards(reply, "x"),
        Ok(topology(vec![shard(
            &[(0, 1)],
            Some(addr("10.0.0.1", 6390)),
            &[]
        )]))
    );
}

#[test]
fn bad_slot_ranges_are_errors() {
    for (start, end) in [(0, 16384), (5, 4), (-1, 3), (0, 1i64 << 40)] {
        let slots = format!("*1\r\n*3\r\n:{start}\r\n:{end}\r\n*2\r\n$1\r\na\r\n:1\r\n");
        assert!(
            parse_cluster_slots(slots.as_bytes(), "x").is_err(),
            "{start}-{end}"
        );
        let shards = format!("*1\r\n*2\r\n$5\r\nslots\r\n*2\r\n:{start}\r\n:{end}\r\n");
        assert!(
            parse_cluster_shards(shards.as_bytes(), "x").is_err(),
            "{start}-{end}"
        );
    }
    // An odd count of slot bounds.
    assert!(parse_cluster_shards(b"*1\r\n*2\r\n$5\r\nslots\r\n*1\r\n:0\r\n", "x").is_err());
}

#[test]
fn not_whole_replies_are_errors() {
    let full = fixture!("c3-slots");
    assert!(parse_cluster_slots(&full[..full.len() - 1], "x").is_err());
    assert!(parse_cluster_slots(&[full, b"+OK\r\n"].concat(), "x").is_err());
    assert!(
        parse_cluster_shards(b"-ERR This instance has cluster support disabled\r\n", "x")
            .unwrap_err()
            .contains("cluster support disabled")
    );
    assert!(parse_cluster_slots(b"", "x").is_err());
}

#[test]
fn redirects_from_redis() {
    assert_eq!(
        parse_redirect(fixture!("moved")),
        Some(Redirect::Moved {
            slot: 12182,
            addr: local(61803)
        })
    );
    assert_eq!(
        parse_redirect(fixture!("ask")),
        Some(Redirect::Ask {
            slot: 12182,
            addr: local(61801)
        })
    );
    assert_eq!(
        parse_redirect(fixture!("tryagain")),
        Some(Redirect::TryAgain)
    );
    assert_eq!(
        parse_redirect(fixture!("clusterdown")),
        Some(Redirect::ClusterDown)
    );
    assert_eq!(
        parse_redirect(fixture!("clusterdown-down")),
        Some(Redirect::ClusterDown)
    );
    assert_eq!(
        parse_redirect(fixture!("moved-hostname")),
        Some(Redirect::Moved {
            slot: 3300,
            addr: addr("node-a.example", 61811)
        })
    );
    assert_eq!(
        parse_redirect(fixture!("moved-unknown-endpoint")),
        Some(Redirect::Moved {
            slot: 7365,
            addr: addr("?", 61814)
        })
    );
}

#[test]
fn redirect_edge_cases() {
    let moved = |slot, host: &str, port| {
        Some(Redirect::Moved {
            slot,
            addr: addr(host, port),
        })
    };
    assert_eq!(
        parse_redirect(b"-MOVED 3999 :6381\r\n"),
        moved(3999, "", 6381)
    );
    assert_eq!(
        parse_redirect(b"-MOVED 0 ::1:6381\r\n"),
        moved(0, "::1", 6381)
    );
    assert_eq!(
        parse_redirect(b"-MOVED 16383 [::1]:6381\r\n"),
        moved(16383, "::1", 6381)
    );
    assert_eq!(parse_redirect(b"-TRYAGAIN\r\n"), Some(Redirect::TryAgain));
    assert_eq!(
        parse_redirect(b"-CLUSTERDOWN\r\n"),
        Some(Redirect::ClusterDown)
    );
    for bad in [
        &b"-MOVED 16384 a:1\r\n"[..],
        b"-MOVED 1 a\r\n",
        b"-MOVED 1 a:\r\n",
        b"-MOVED 1 a:0\r\n",
        b"-MOVED 1 a:65536\r\n",
        b"-MOVED +1 a:1\r\n",
        b"-MOVED 1 a:+1\r\n",
        b"-MOVED 1 a:1 b\r\n",
        b"-MOVED  1 a:1\r\n",
        b"-MOVED 1\r\n",
        b"-MOVED 1 a:1\r\n+OK\r\n",
        b"-MOVED 1 a:1",
        b"+MOVED 1 a:1\r\n",
        b"$14\r\n-MOVED 1 a:1\r\n\r\n",
        b"-ERR unknown command\r\n",
        b"-CLUSTERDOWNX\r\n",
        b"-moved 1 a:1\r\n",
        b"",
    ] {
        assert_eq!(
            parse_redirect(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn display() {
    assert_eq!(local(6379).to_string(), "127.0.0.1:6379");
    assert_eq!(addr("::1", 6379).to_string(), "[::1]:6379");
    assert_eq!(addr("redis.example", 1).to_string(), "redis.example:1");
}

#[test]
fn sentinel_master_addr() {
    assert_eq!(
        parse_master_addr(fixture!("sentinel-addr")),
        Ok(Some(local(61820)))
    );
    assert_eq!(
        parse_master_addr(fixture!("sentinel-addr-unknown")),
        Ok(None)
    );
    assert_eq!(parse_master_addr(b"$-1\r\n"), Ok(None));
    let err = parse_master_addr(fixture!("sentinel-addr-error")).unwrap_err();
    assert!(err.contains("wrong number of arguments"), "{err}");
    for bad in [
        &b"*1\r\n$1\r\na\r\n"[..],
        b"*2\r\n$1\r\na\r\n$3\r\nabc\r\n",
        b"*2\r\n$1\r\na\r\n$1\r\n0\r\n",
        b"*2\r\n$1\r\na\r\n$5\r\n70000\r\n",
        b"*2\r\n$0\r\n\r\n$2\r\n10\r\n",
        b"*2\r\n$1\r\na\r\n:10\r\n",
        b"*3\r\n$1\r\na\r\n$2\r\n10\r\n$1\r\nx\r\n",
        b"*2\r\n$1\r\na\r\n$2\r\n10\r\n+OK\r\n",
        b"+OK\r\n",
        b"*2\r\n$1\r\na\r\n",
        b"",
    ] {
        assert!(
            parse_master_addr(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn sentinel_replicas() {
    assert_eq!(
        parse_sentinel_replicas(fixture!("sentinel-replicas")),
        Ok(vec![local(62631), local(63293)])
    );
    // 62631 killed: flagged "s_down,slave,disconnected".
    assert_eq!(
        parse_sentinel_replicas(fixture!("sentinel-replicas-down")),
        Ok(vec![local(63293)])
    );
    assert_eq!(parse_sentinel_replicas(b"*0\r\n"), Ok(vec![]));
    let err = parse_sentinel_replicas(b"-ERR No such master with that name\r\n").unwrap_err();
    assert!(err.contains("No such master"), "{err}");
    for bad in [
        &b"*1\r\n*2\r\n$2\r\nip\r\n$1\r\na\r\n"[..],
        b"*1\r\n*4\r\n$2\r\nip\r\n$1\r\na\r\n$4\r\nport\r\n$1\r\n0\r\n",
        b"*1\r\n*3\r\n$2\r\nip\r\n$1\r\na\r\n$4\r\nport\r\n",
        b"+OK\r\n",
    ] {
        assert!(
            parse_sentinel_replicas(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn sentinel_switch_master() {
    let frame = fixture!("sentinel-switch-master");
    assert_eq!(parse_switch_master(frame, "mymaster"), Some(local(61822)));
    assert_eq!(parse_switch_master(frame, "other"), None);
    assert_eq!(parse_switch_master(frame, "mymaste"), None);
    assert_eq!(
        parse_switch_master(fixture!("sentinel-subscribe"), "mymaster"),
        None
    );
    assert_eq!(
        parse_switch_master(&frame[..frame.len() - 2], "mymaster"),
        None
    );
    let pmessage = b"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$14\r\n+switch-master\r\n$24\r\nm 10.0.0.1 1 10.0.0.2 26\r\n";
    assert_eq!(
        parse_switch_master(pmessage, "m"),
        Some(addr("10.0.0.2", 26))
    );
    let other_channel =
        b"*3\r\n$7\r\nmessage\r\n$5\r\n+sdown\r\n$24\r\nm 10.0.0.1 1 10.0.0.2 26\r\n";
    assert_eq!(parse_switch_master(other_channel, "m"), None);
    let short = b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$13\r\nm 10.0.0.1 1 \r\n";
    assert_eq!(parse_switch_master(short, "m"), None);
}
