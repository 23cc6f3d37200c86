//! Config reading: forms mcrouter accepts, and refusals that name file, line and key.

use super::*;
use crate::error::ConfigError;
use ring::PoolHash;

fn ok(text: &str) -> Config {
    parse_config("t.json", text).unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> ConfigError {
    match parse_config("t.json", text) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

fn entry_route(c: &Config) -> &Route {
    match &c.entry {
        Entry::Default(id) => &c.routes[*id],
        Entry::Aliases(t) => &c.routes[t[0].1],
    }
}

const POOLS: &str = r#""pools": {"A": {"servers": ["127.0.0.1:5000", "127.0.0.1:5001", "[::1]:5002"]},
                              "B": {"servers": ["localhost:6000"]}}"#;

fn with_route(route: &str) -> String {
    format!("{{{POOLS}, \"route\": {route}}}")
}

#[test]
fn string_and_object_forms_are_the_same_handle() {
    let a = ok(&with_route(r#""PoolRoute|A""#));
    let b = ok(&with_route(r#"{"type": "PoolRoute", "pool": "A"}"#));
    assert_eq!(entry_route(&a), entry_route(&b));
    assert_eq!(a.pools[0].servers.len(), 3);
    assert_eq!(a.pools[0].servers[2].host, "::1");
    assert_eq!(a.pools[0].servers[2].port, 5002);
    // Only the pools a route uses are built, as in mcrouter.
    assert_eq!(a.pools.len(), 1);
}

/// mcrouter's own test config for SaltedFailoverRoute (test_deterministic_failover3.json,
/// shortened) reads as the FailoverRoute it stands for, written out by hand.
#[test]
fn salted_failover_route_is_its_failover_route() {
    let policy = r#""failover_policy": {"type": "DeterministicOrderPolicy", "max_tries": 3,
                                        "max_error_tries": 2}"#;
    let hash = r#""hash": {"hash_func": "WeightedCh3", "weights": [0.7, 0.65, 1.0, 0.8]}"#;
    let salted = ok(&with_route(&format!(
        r#"{{"type": "SaltedFailoverRoute", "pool": "A", {hash}, {policy}}}"#
    )));
    let by_hand = ok(&with_route(&format!(
        r#"{{"type": "FailoverRoute", {hash}, {policy},
             "children": [{{"type": "PoolRoute", "pool": "A", {hash}}}, "Pool|A"]}}"#
    )));
    assert_eq!(salted.routes, by_hand.routes);
    assert_eq!(salted.entry, by_hand.entry);
    let Route::Failover {
        children, policy, ..
    } = entry_route(&salted)
    else {
        panic!("{:?}", entry_route(&salted));
    };
    // The pool route first, then each of A's three servers.
    assert_eq!(children.len(), 4);
    assert!(matches!(
        policy,
        FailoverPolicy::DeterministicOrder { max_tries: 3, .. }
    ));
    let e = err(&with_route(r#"{"type": "SaltedFailoverRoute", "pool": 7}"#));
    assert!(
        e.to_string().contains("SaltedFailoverRoute needs a 'pool'"),
        "{e}"
    );
}

#[test]
fn pool_list_expands_to_its_servers() {
    let c = ok(&with_route(r#""AllSyncRoute|Pool|A""#));
    let Route::All { mode, children } = entry_route(&c) else {
        panic!("{c:?}")
    };
    assert_eq!(*mode, AllMode::Sync);
    let want: Vec<Target> = (0..3)
        .map(|index| Target::Server { pool: 0, index })
        .collect();
    assert_eq!(children, &want);
    // Arrays of lists flatten.
    let c = ok(&with_route(
        r#"{"type": "AllAsyncRoute", "children": ["Pool|A", ["Pool|B"], ""]}"#,
    ));
    let Route::All { children, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(children.len(), 4);
}

#[test]
fn named_handles_are_built_once_and_shared() {
    let c = ok(&format!(
        r#"{{{POOLS}, "named_handles": {{"main": {{"type": "PoolRoute", "pool": "A"}}}},
             "route": {{"type": "FailoverRoute", "children": ["main", "main", "PoolRoute|B"]}}}}"#
    ));
    let Route::Failover { children, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(children[0], children[1]);
    assert_ne!(children[0], children[2]);
    // The array form names handles with "name"; later strings refer to them.
    let c = ok(&format!(
        r#"{{{POOLS}, "named_handles": [{{"name": "n", "type": "NullRoute"}}],
             "route": "AllSyncRoute|n"}}"#
    ));
    let Route::All { children, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(
        c.routes[match children[0] {
            Target::Route(id) => id,
            _ => panic!(),
        }],
        Route::Null
    );
}

#[test]
fn route_cycles_are_refused_with_the_chain() {
    let e = err(&format!(
        r#"{{{POOLS}, "named_handles": {{
              "a": {{"type": "FailoverRoute", "children": ["PoolRoute|A", "b"]}},
              "b": {{"type": "AllSyncRoute", "children": ["a"]}}}},
            "route": "a"}}"#
    ));
    assert!(e.message.contains("route cycle: a -> b -> a"), "{e}");
    assert_eq!(e.path.to_string(), "named_handles.b.children[0]");
    assert_eq!(e.line, 4);
    // A handle naming itself.
    let e = err(&format!(
        r#"{{{POOLS}, "named_handles": {{"x": "AllSyncRoute|x"}}, "route": "x"}}"#
    ));
    assert!(e.message.contains("route cycle: x -> x"), "{e}");
}

#[test]
fn unknown_type_is_refused_where_it_is() {
    let e = err(&with_route(
        "{\n \"type\": \"FancyRoute\", \"children\": []}",
    ));
    assert!(
        e.message.contains("unknown route handle type 'FancyRoute'"),
        "{e}"
    );
    assert_eq!(
        (e.file.as_str(), e.path.to_string().as_str()),
        ("t.json", "route")
    );
    assert_eq!(e.line, 2);
    let e = err(&with_route(r#""NoSuchThing""#));
    assert!(
        e.message
            .contains("neither a route handle type nor a named handle"),
        "{e}"
    );
    let e = err(&with_route(r#""OutstandingLimitRoute|x""#));
    assert!(e.message.contains("PoolRoute's \"max_outstanding\""), "{e}");
    let e = err(&with_route(r#"{"type": "SRRoute", "service_name": "x"}"#));
    assert!(
        e.message
            .contains("'SRRoute' routes through Facebook's service router"),
        "{e}"
    );
}

#[test]
fn missing_pool_names_it_and_the_known_ones() {
    let e = err(&with_route(
        r#"{"type": "HashRoute", "children": ["PoolRoute|A", "PoolRoute|C"]}"#,
    ));
    assert_eq!(e.message, "pool 'C' is not defined (pools: A, B)");
    assert_eq!(e.path.to_string(), "route.children[1]");
}

#[test]
fn jsonm_is_expanded_before_parsing() {
    let c = ok(r#"{
      "macros": {"pool": {"type": "macroDef", "params": ["port"],
                          "result": {"servers": ["h:%port%"]}}},
      "pools": {"A": "@pool(1)"},
      "route": "PoolRoute|A"
    }"#);
    assert_eq!(c.pools.len(), 1);
    assert_eq!(c.pools[0].servers[0].port, 1);
    // mcrouter refuses a lone '%' in any string; so does memfleet, at that string.
    let e = err(&with_route(r#""ErrorRoute|100% @home""#));
    assert!(e.message.contains("Odd number of percent signs"), "{e}");
    assert_eq!(e.path.to_string(), "route");
    ok(&with_route(r#""ErrorRoute|100\\% @home""#));
}

#[test]
fn malformed_json_names_file_line_and_key() {
    let text = "{\n  \"pools\": {\n    \"A\": {\"servers\": [\"h:1\",, \"h:2\"]}\n  },\n  \"route\": \"PoolRoute|A\"\n}";
    let e = err(text);
    assert_eq!(e.line, 3);
    assert_eq!(e.path.to_string(), "pools.A.servers[0]");
    assert!(e.to_string().starts_with("t.json:3:"), "{e}");
}

#[test]
fn comments_and_trailing_commas_are_accepted() {
    let c = ok("// leading\n{ /* pools */ \"pools\": {\"A\": {\"servers\": [\"h:1\", /* two */ \"h:2\",],},},\n \"route\": \"PoolRoute|A\", // end\n}");
    assert_eq!(c.pools[0].servers.len(), 2);
}

#[test]
fn route_and_routes_are_exclusive_and_required() {
    assert!(err(r#"{"route": "NullRoute", "routes": []}"#)
        .message
        .contains("both"));
    assert!(err(r#"{"pools": {}}"#)
        .message
        .contains("no 'route' or 'routes'"));
    assert!(err("[]").message.contains("must be an object"));
}

#[test]
fn routes_by_alias_in_both_forms() {
    let c = ok(&format!(
        r#"{{{POOLS}, "routes": [{{"aliases": ["/r/c1/", "/r/c2/"], "route": "PoolRoute|A"}},
                                {{"aliases": ["/r/c3/"], "route": "PoolRoute|B"}}]}}"#
    ));
    let Entry::Aliases(table) = &c.entry else {
        panic!()
    };
    let names: Vec<&str> = table.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(names, ["/r/c1/", "/r/c2/", "/r/c3/"]);
    assert_eq!(table[0].1, table[1].1);
    let c = ok(&format!(
        r#"{{{POOLS}, "routes": {{"/r/c1/": "PoolRoute|A"}}}}"#
    ));
    assert!(matches!(&c.entry, Entry::Aliases(t) if t.len() == 1));
    let e = err(&format!(
        r#"{{{POOLS}, "routes": [{{"aliases": ["r/c1"], "route": "PoolRoute|A"}}]}}"#
    ));
    assert!(
        e.message.contains("not of the form /region/cluster/"),
        "{e}"
    );
    assert_eq!(e.path.to_string(), "routes[0].aliases[0]");
}

#[test]
fn servers() {
    let s = parse_server("cache-1.example:11211").unwrap();
    assert_eq!(
        (s.host.as_str(), s.port, s.protocol),
        ("cache-1.example", 11211, None)
    );
    let s = parse_server("[2001:db8::1]:11211:ascii:plain").unwrap();
    assert_eq!(s.host, "2001:db8::1");
    assert_eq!(s.protocol.as_deref(), Some("ascii"));
    assert_eq!(s.security.as_deref(), Some("plain"));
    for bad in [
        "host",
        "host:",
        "host:99999",
        "::1:11211",
        "[::1]11211",
        "[::1:11211",
        ":11211",
        "h:1:smoke",
    ] {
        assert!(parse_server(bad).is_err(), "{bad}");
    }
    let e = err(r#"{"pools": {"A": {"servers": ["h:1", "h:2:caret"]}}, "route": "PoolRoute|A"}"#);
    assert!(e.message.contains("ascii only"), "{e}");
    assert_eq!(e.path.to_string(), "pools.A.servers[1]");
}

#[test]
fn hash_functions() {
    let hash_of = |c: &Config| match entry_route(c) {
        Route::Pool { hash, .. } => hash.clone(),
        other => panic!("{other:?}"),
    };
    let c = ok(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "hash": "Crc32"}"#,
    ));
    assert_eq!(hash_of(&c), PoolHash::Crc32);
    let c = ok(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedCh3", "weights": [1, 0.5, 0, 0.9]}}"#,
    ));
    // mcrouter reads as many weights as there are servers.
    assert_eq!(hash_of(&c), PoolHash::WeightedCh3(vec![1.0, 0.5, 0.0]));
    let c = ok(
        r#"{"pools": {"W": {"servers": ["h:1", "h:2"], "weights": [0.2, 1]}}, "route": "PoolRoute|W"}"#,
    );
    assert_eq!(hash_of(&c), PoolHash::WeightedCh3(vec![0.2, 1.0]));
    let c = ok(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedCh3", "weights": [1]}}"#,
    ));
    assert_eq!(hash_of(&c), PoolHash::WeightedCh3(vec![1.0, 0.5, 0.5]));
    assert!(
        c.warnings[0].contains("missing ones are 0.5"),
        "{:?}",
        c.warnings
    );
    let e = err(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedCh3", "weights": [1, 1.5, 1]}}"#,
    ));
    assert!(e.message.contains("outside [0, 1]"), "{e}");
    assert_eq!(e.path.to_string(), "route.hash.weights[1]");
    let e = err(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "hash": "Latest"}"#,
    ));
    assert!(e.message.contains("in a HashRoute's hash_func only"), "{e}");
    let e = err(&with_route(
        r#"{"type": "HashRoute", "children": "Pool|A", "hash_func": "Nope"}"#,
    ));
    assert!(e.message.contains("unknown hash function 'Nope'"), "{e}");
}

#[test]
fn failover_with_exptime_caps_failover_children() {
    let c = ok(&with_route(
        r#"{"type": "FailoverWithExptimeRoute", "normal": "PoolRoute|A", "failover": ["PoolRoute|B"], "failover_exptime": 30}"#,
    ));
    let Route::Failover {
        children, errors, ..
    } = entry_route(&c)
    else {
        panic!()
    };
    assert_eq!(children.len(), 2);
    let Target::Route(capped) = children[1] else {
        panic!()
    };
    assert!(matches!(
        c.routes[capped],
        Route::ModifyExptime {
            exptime: 30,
            action: ExptimeAction::Min,
            ..
        }
    ));
    assert!(errors.gets.contains(&"tko".to_owned()));
    let c = ok(&with_route(
        r#"{"type": "FailoverWithExptimeRoute", "normal": "PoolRoute|A", "failover": "PoolRoute|B", "failover_exptime": 0}"#,
    ));
    let Route::Failover { children, .. } = entry_route(&c) else {
        panic!()
    };
    assert!(matches!(
        c.routes[match children[1] {
            Target::Route(id) => id,
            _ => panic!(),
        }],
        Route::Pool { .. }
    ));
}

#[test]
fn failover_errors_and_limit() {
    let c = ok(&with_route(
        r#"{"type": "FailoverRoute", "children": ["PoolRoute|A", "PoolRoute|B"],
            "failover_errors": {"gets": ["timeout"], "deletes": []}, "failover_limit": {"rate": 2}}"#,
    ));
    let Route::Failover { errors, limit, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(errors.gets, ["timeout"]);
    assert!(errors.deletes.is_empty());
    assert!(errors.updates.contains(&"connect_error".to_owned()));
    assert_eq!(
        *limit,
        Some(FailoverLimit {
            rate: 1.0,
            burst: 1000.0
        })
    );
    let e = err(&with_route(
        r#"{"type": "FailoverRoute", "children": "Pool|A", "failover_errors": ["timeout", "oops"]}"#,
    ));
    assert!(e.message.contains("'oops' is not an error result"), "{e}");
    assert_eq!(e.path.to_string(), "route.failover_errors[1]");
}

#[test]
fn selectors_and_exptime() {
    let c = ok(&with_route(
        r#"{"type": "OperationSelectorRoute", "operation_policies": {"set": "PoolRoute|A", "delete": "AllSyncRoute|Pool|A"},
            "default_policy": "PoolRoute|B"}"#,
    ));
    let Route::OperationSelector { policies, default } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(
        policies.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
        ["delete", "set"]
    );
    assert!(default.is_some());
    let e = err(&with_route(
        r#"{"type": "OperationSelectorRoute", "operation_policies": {"fetch": "NullRoute"}}"#,
    ));
    assert!(e.message.contains("unknown operation 'fetch'"), "{e}");
    let e = err(&with_route(
        r#"{"type": "ModifyExptimeRoute", "target": "NullRoute", "exptime": 0, "action": "min"}"#,
    ));
    assert!(e.message.contains("non-zero"), "{e}");
    let e = err(&with_route(
        r#"{"type": "ModifyExptimeRoute", "target": "NullRoute", "exptime": 5, "action": "max"}"#,
    ));
    assert_eq!(e.path.to_string(), "route.action");
    let e = err(&with_route(r#"{"type": "PrefixSelectorRoute"}"#));
    assert!(e.message.contains("'policies' or 'wildcard'"), "{e}");
    let e = err(&with_route(
        r#"{"type": "WarmUpRoute", "cold": "PoolRoute|A"}"#,
    ));
    assert!(e.message.contains("no 'warm'"), "{e}");
    let e = err(&with_route(
        r#"{"type": "PrefixSelectorRoute", "wildcard": "Pool|A"}"#,
    ));
    assert!(
        e.message.contains("expected one route handle, got 3"),
        "{e}"
    );
}

#[test]
fn shadows() {
    let c = ok(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "shadows": [
            {"target": "PoolRoute|B", "index_range": [0, 2], "key_fraction_range": [0, 0.5]}]}"#,
    ));
    let Route::Pool { shadows, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(shadows[0].index_range, (0, 2));
    assert_eq!(shadows[0].key_fraction_range, (0.0, 0.5));
    let e = err(&with_route(
        r#"{"type": "PoolRoute", "pool": "A", "shadows": [{"target": "NullRoute", "index_range": [3, 1]}]}"#,
    ));
    assert_eq!(e.path.to_string(), "route.shadows[0].index_range");
}

#[test]
fn pool_inheritance() {
    let c = ok(
        r#"{"pools": {"base": {"servers": ["h:1", "h:2"], "keep_routing_prefix": true},
                              "child": {"inherit": "base", "keep_routing_prefix": false}},
                   "route": "PoolRoute|child"}"#,
    );
    assert_eq!(c.pools[0].servers.len(), 2);
    assert!(!c.pools[0].keep_routing_prefix);
    let e =
        err(r#"{"pools": {"a": {"inherit": "b"}, "b": {"inherit": "a"}}, "route": "PoolRoute|a"}"#);
    assert!(
        e.message.contains("pool inheritance cycle: a -> b -> a"),
        "{e}"
    );
}

#[test]
fn unterminated_comment_is_refused() {
    let e = err("{\"route\": \"NullRoute\" /* open");
    assert!(e.message.contains("unterminated"), "{e}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Fragments of mcrouter configs, so random text often gets deep into the parser.
    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("{".to_owned()),
            Just("}".to_owned()),
            Just("[".to_owned()),
            Just("]".to_owned()),
            Just(",".to_owned()),
            Just(":".to_owned()),
            Just("\"route\"".to_owned()),
            Just("\"routes\"".to_owned()),
            Just("\"pools\"".to_owned()),
            Just("\"servers\"".to_owned()),
            Just("\"type\"".to_owned()),
            Just("\"children\"".to_owned()),
            Just("\"name\"".to_owned()),
            Just("\"named_handles\"".to_owned()),
            Just("\"PoolRoute|A\"".to_owned()),
            Just("\"Pool|A\"".to_owned()),
            Just("\"A\"".to_owned()),
            Just("\"h:1\"".to_owned()),
            Just("\"AllSyncRoute\"".to_owned()),
            Just("\"FailoverRoute\"".to_owned()),
            Just("\"HashRoute\"".to_owned()),
            Just("\"weights\"".to_owned()),
            Just("\"WeightedCh3\"".to_owned()),
            Just("//".to_owned()),
            Just("/*".to_owned()),
            Just("*/".to_owned()),
            Just("\n".to_owned()),
            "[ -~]{0,4}",
            any::<u32>().prop_map(|n| n.to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any text gets a config or an error, never a panic, and errors say where.
        #[test]
        fn any_text_is_accepted_or_refused(parts in proptest::collection::vec(fragment(), 0..60)) {
            let text = parts.concat();
            match parse_config("f.json", &text) {
                Ok(c) => {
                    let _ = c.plan("get", b"/r/c/k", "/r/c/");
                }
                Err(e) => prop_assert!(e.to_string().starts_with("f.json"), "{e}"),
            }
        }

        /// A PoolRoute over n servers places every key exactly where Ch3 does.
        #[test]
        fn pool_route_agrees_with_ch3(n in 1usize..40, keys in proptest::collection::vec("[!-~]{0,40}", 1..20)) {
            let servers: Vec<String> = (0..n).map(|i| format!("\"h{i}:11211\"")).collect();
            let text = format!(r#"{{"pools": {{"P": {{"servers": [{}]}}}}, "route": "PoolRoute|P"}}"#, servers.join(","));
            let c = parse_config("p.json", &text).unwrap();
            for key in keys {
                let want = PoolHash::Ch3.index(ring::RoutingKey::parse(key.as_bytes()).hashed, n);
                match c.plan("get", key.as_bytes(), "/r/c/") {
                    crate::Plan::Send(s) => prop_assert_eq!(s.index, want),
                    crate::Plan::Error(_) => prop_assert!(key.starts_with('/')),
                    other => prop_assert!(false, "{:?}", other),
                }
            }
        }

        /// Comments and trailing commas anywhere between tokens change nothing.
        #[test]
        fn comments_between_tokens_change_nothing(seed in proptest::collection::vec(0u8..4, 40)) {
            let tokens = [
                "{", "\"pools\"", ":", "{", "\"A\"", ":", "{", "\"servers\"", ":", "[",
                "\"h:1\"", ",", "\"h:2\"", "]", "}", "}", ",", "\"route\"", ":",
                "\"PoolRoute|A\"", "}",
            ];
            let plain = ok(&tokens.concat());
            let mut text = String::new();
            for (i, t) in tokens.iter().enumerate() {
                if matches!(*t, "}" | "]") && seed[i % seed.len()] == 3 && !text.trim_end().ends_with(['{', '[', ',']) {
                    text.push(',');
                }
                text.push_str(t);
                match seed[i % seed.len()] {
                    0 => text.push_str(" // c\n"),
                    1 => text.push_str("/* c */"),
                    _ => text.push(' '),
                }
            }
            prop_assert_eq!(ok(&text), plain);
        }
    }
}

#[test]
fn failover_policy_types_are_checked() {
    let route = |policy: &str| {
        format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3"]}}}},
                "route": {{"type": "FailoverRoute", "children": "Pool|A", "failover_policy": {policy}}}}}"#
        )
    };
    // A type mcrouter does not know is its default: children in order, the policy's other
    // fields unread, nothing logged.
    let c = ok(&route(r#"{"type": "FancyPolicy", "max_tries": "x"}"#));
    let Route::Failover { policy, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(policy, &FailoverPolicy::InOrder);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let e = err(&route(r#"{"type": "RendezvousPolicy"}"#)).to_string();
    assert!(e.contains("RendezvousPolicy needs 'tags'"), "{e}");
    let e = err(&route(
        r#"{"type": "DeterministicOrderPolicy", "max_tries": 2}"#,
    ))
    .to_string();
    assert!(e.contains("needs 'max_error_tries'"), "{e}");
    let e = err(&route(r#"{"max_tries": 2}"#)).to_string();
    assert!(e.contains("failover_policy has no 'type'"), "{e}");
    let e = err(&route(
        r#"{"type": "DeterministicOrderPolicy", "max_tries": 2, "max_error_tries": 1, "hash": {"hash_func": "Crc32"}}"#,
    ))
    .to_string();
    assert!(e.contains("Ch3 or WeightedCh3"), "{e}");
    // Too many tries are cut to what there is, with a warning (as mcrouter).
    let c = parse_config(
        "t.json",
        &route(r#"{"type": "DeterministicOrderPolicy", "max_tries": 9, "max_error_tries": 5}"#),
    )
    .unwrap();
    let Route::Failover { policy, .. } = entry_route(&c) else {
        panic!()
    };
    let FailoverPolicy::DeterministicOrder {
        max_tries,
        max_error_tries,
        ..
    } = policy
    else {
        panic!("{policy:?}")
    };
    assert_eq!((*max_tries, *max_error_tries), (3, 3));
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    // LeastFailuresPolicy: max_tries only (required, cut to the children).
    let e = err(&route(r#"{"type": "LeastFailuresPolicy"}"#)).to_string();
    assert!(e.contains("LeastFailuresPolicy needs 'max_tries'"), "{e}");
    let c = parse_config(
        "t.json",
        &route(r#"{"type": "LeastFailuresPolicy", "max_tries": 5}"#),
    )
    .unwrap();
    let Route::Failover { policy, .. } = entry_route(&c) else {
        panic!()
    };
    assert_eq!(policy, &FailoverPolicy::LeastFailures { max_tries: 3 });
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
}

#[test]
fn pool_wide_security_and_port_override() {
    let pool = |fields: &str| {
        format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2:ascii:plain"], {fields}}}}},
                "route": "PoolRoute|A"}}"#
        )
    };
    let servers = |fields: &str| -> Vec<(u16, Option<String>)> {
        let c = parse_config("t.json", &pool(fields)).unwrap();
        c.pools[0]
            .servers
            .iter()
            .map(|s| (s.port, s.security.clone()))
            .collect()
    };
    let ssl = || Some("ssl".to_owned());
    let plain = || Some("plain".to_owned());
    // A server's own field wins over the pool's default.
    assert_eq!(servers(r#""use_ssl": true"#), [(1, ssl()), (2, plain())]);
    assert_eq!(servers(r#""use_ssl": false"#), [(1, None), (2, plain())]);
    let fizz = || Some("fizz".to_owned());
    assert_eq!(
        servers(r#""security_mech": "fizz", "use_ssl": false"#),
        [(1, fizz()), (2, plain())],
        "security_mech before use_ssl"
    );
    assert_eq!(
        servers(r#""use_ssl": true, "port_override": 11212"#),
        [(11212, ssl()), (11212, plain())]
    );
    // Agreeing data-center pairs override every server.
    assert_eq!(
        servers(
            r#""security_mech_within_dc": "ssl", "security_mech_cross_dc": "ssl",
               "port_override_within_dc": 7, "port_override_cross_dc": 7"#
        ),
        [(7, ssl()), (7, ssl())]
    );
    // Differing pairs: open-source mcrouter takes no server as in the local data center,
    // so the _cross_dc half overrides every server and the _within_dc half is unused.
    assert_eq!(
        servers(
            r#""security_mech_within_dc": "plain", "security_mech_cross_dc": "ssl",
               "port_override_within_dc": 7, "port_override_cross_dc": 8"#
        ),
        [(8, ssl()), (8, ssl())]
    );
    assert_eq!(
        servers(r#""security_mech_cross_dc": "ssl", "port_override_cross_dc": 8"#),
        [(8, ssl()), (8, ssl())]
    );
    // A lone _within_dc half: the pool-wide settings apply.
    assert_eq!(
        servers(
            r#""security_mech_within_dc": "ssl", "security_mech": "fizz",
               "port_override_within_dc": 7, "port_override": 9"#
        ),
        [(9, fizz()), (9, plain())]
    );
    assert_eq!(
        servers(r#""port_override_cross_dc": 8, "port_override": 9"#),
        [(8, None), (8, plain())],
        "the cross half over port_override"
    );
    let c = parse_config(
        "t.json",
        &pool(r#""security_mech_within_dc": "ssl", "port_override_within_dc": 7"#),
    )
    .unwrap();
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(
        c.warnings[0].contains("security_mech_within_dc is not used"),
        "{:?}",
        c.warnings
    );
    let e = err(&pool(r#""port_override": 70000"#)).to_string();
    assert!(
        e.contains("port_override must be an integer in 1..=65535"),
        "{e}"
    );
    let e = err(&pool(r#""security_mech": true"#)).to_string();
    assert!(e.contains("security_mech must be a string"), "{e}");
}

#[test]
fn rate_limit_route_reads_mcrouter_rates() {
    let c = ok(&with_route(
        r#"{"type": "RateLimitRoute", "target": "PoolRoute|A",
            "rates": {"gets_rate": 100, "sets_rate": 10.5, "sets_burst": 50}}"#,
    ));
    let Route::RateLimit {
        rates, fallback, ..
    } = entry_route(&c)
    else {
        panic!("{c:?}");
    };
    assert_eq!(
        *rates,
        Rates {
            gets: Some(TokenRate {
                rate: 100.0,
                burst: 100.0
            }),
            sets: Some(TokenRate {
                rate: 10.5,
                burst: 50.0
            }),
            deletes: None,
        }
    );
    assert_eq!(*fallback, None);
    let e = err(&with_route(
        r#"{"type": "RateLimitRoute", "target": "PoolRoute|A"}"#,
    ));
    assert!(e.message.contains("has no 'rates'"), "{e}");
    let e = err(&with_route(
        r#"{"type": "RateLimitRoute", "target": "PoolRoute|A", "rates": {"gets_rate": -1}}"#,
    ));
    assert!(e.message.contains("gets_rate must be a number >= 0"), "{e}");
    assert_eq!(e.path.to_string(), "route.rates.gets_rate");
    let e = err(&with_route(
        r#"{"type": "RateLimitRoute", "target": "PoolRoute|A", "rates": {"sets_burst": 5}}"#,
    ));
    assert!(e.message.contains("sets_burst without sets_rate"), "{e}");
}

#[test]
fn pool_region_cluster_and_server_timeout() {
    let c = ok(
        r#"{"pools": {"A": {"servers": ["h:1"], "region": "east", "cluster": "web",
                                    "server_timeout": 250},
                             "B": {"servers": ["h:2"]}},
                   "route": {"type": "AllSyncRoute", "children": ["PoolRoute|A", "PoolRoute|B"]}}"#,
    );
    assert_eq!(c.pools[0].region.as_deref(), Some("east"));
    assert_eq!(c.pools[0].cluster.as_deref(), Some("web"));
    assert_eq!(c.pools[0].server_timeout_ms, Some(250));
    assert_eq!(
        (&c.pools[1].region, c.pools[1].server_timeout_ms),
        (&None, None)
    );
    // mcrouter logs a region that is not a string and goes on without it.
    let c = ok(
        r#"{"pools": {"A": {"servers": ["h:1"], "region": 5, "cluster": "web"}},
                   "route": "PoolRoute|A"}"#,
    );
    assert_eq!(c.pools[0].region, None);
    assert!(
        c.warnings[0].contains("region is not a string"),
        "{:?}",
        c.warnings
    );
    let e = err(
        r#"{"pools": {"A": {"servers": ["h:1"], "server_timeout": 0}},
                    "route": "PoolRoute|A"}"#,
    )
    .to_string();
    assert!(
        e.contains("server_timeout must be an integer in 1..=1000000"),
        "{e}"
    );
}
