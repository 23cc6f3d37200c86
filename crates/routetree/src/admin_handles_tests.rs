use super::*;
use crate::parse_config;
use crate::plan::Plan;

fn config(route: &str) -> Config {
    let text = format!(
        r#"{{"pools": {{"A": {{"servers": ["10.0.0.1:11211", "10.0.0.2:11211", "[::1]:11213"]}},
                       "B": {{"servers": ["10.0.1.1:11211:ascii:ssl"]}}}},
            "route": {route}}}"#
    );
    parse_config("t.json", &text).unwrap()
}

const NAMING: HostNaming<'static> = HostNaming::server_timeout(1000);

fn handles(c: &Config, op: &str, key: &str) -> String {
    route_handles(c, op, key.as_bytes(), "/r/c/", NAMING).unwrap()
}

fn host(pool: &str, id: usize, ap: &str) -> String {
    format!("host|pool={pool}|id={id}|ap={ap}|timeout=1000ms|keep_routing_prefix=false|msb=0")
}

#[test]
fn a_pool_route_shows_its_asynclog_hash_and_the_picked_server() {
    let c = config(r#""PoolRoute|A""#);
    let aps = [
        "10.0.0.1:11211:ascii:plain:notcompressed",
        "10.0.0.2:11211:ascii:plain:notcompressed",
        "[::1]:11213:ascii:plain:notcompressed",
    ];
    for i in 0..30 {
        let key = format!("k{i}");
        let Plan::Send(s) = c.plan("get", key.as_bytes(), "/r/c/") else {
            panic!()
        };
        let want = format!(
            "proxy\n root\n  asynclog:A\n   selection|hash|Ch3\n    {}\n",
            host("A", s.index, aps[s.index])
        );
        assert_eq!(handles(&c, "get", &key), want);
    }
}

#[test]
fn collections_list_every_child_one_level_deeper() {
    let c = config(
        r#"{"type": "FailoverRoute", "children": ["Pool|B",
             {"type": "AllSyncRoute", "children": ["NullRoute", "Pool|B"]}]}"#,
    );
    let b = host("B", 0, "10.0.1.1:11211:ascii:ssl:notcompressed");
    assert_eq!(
        handles(&c, "set", "x"),
        format!("proxy\n root\n  failover\n   {b}\n   all-sync\n    null\n    {b}\n")
    );
    let c = config(r#"{"type": "HashRoute", "salt": "s", "children": ["NullRoute"]}"#);
    assert_eq!(
        handles(&c, "get", "x"),
        "proxy\n root\n  selection|hash|Ch3|salt=s\n   null\n"
    );
    assert_eq!(
        route_handles(&c, "fly", b"x", "/r/c/", NAMING),
        Err("route: unknown request fly".into())
    );
}

#[test]
fn pools_lists_each_pools_destinations_sorted_by_name() {
    let c = config(r#"{"type": "AllSyncRoute", "children": ["PoolRoute|B", "PoolRoute|A"]}"#);
    let want = format!(
        "{{\n  \"A\": [\n    \"{}\",\n    \"{}\",\n    \"{}\"\n  ],\n  \"B\": [\n    \"{}\"\n  ]\n}}",
        host("A", 0, "10.0.0.1:11211:ascii:plain:notcompressed"),
        host("A", 1, "10.0.0.2:11211:ascii:plain:notcompressed"),
        host("A", 2, "[::1]:11213:ascii:plain:notcompressed"),
        host("B", 0, "10.0.1.1:11211:ascii:ssl:notcompressed"),
    );
    assert_eq!(pools_reply(&c, NAMING), want);
}

#[test]
fn a_load_balancer_is_named_by_its_algorithm_and_lists_every_child() {
    let c = config(r#"{"type": "LoadBalancerRoute", "children": ["NullRoute", "Pool|B"]}"#);
    let b = host("B", 0, "10.0.1.1:11211:ascii:ssl:notcompressed");
    assert_eq!(
        handles(&c, "get", "x"),
        format!("proxy\n root\n  loadbalancer|weighted-hashing\n   null\n   {b}\n")
    );
    let c = config(
        r#"{"type": "PoolRoute", "pool": "A",
            "hash": {"hash_func": "LoadBalancer", "algorithm": "two-random-choices"}}"#,
    );
    let lines: Vec<String> = handles(&c, "get", "x").lines().map(str::to_owned).collect();
    assert_eq!(
        lines[2..4],
        ["  asynclog:A", "   loadbalancer|two-random-choices"]
    );
    assert_eq!(lines.len(), 7, "{lines:?}");
}
