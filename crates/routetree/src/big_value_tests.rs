//! BigValueRoute: its fields, where it is accepted, and which settings a key gets.

use crate::error::ConfigError;
use crate::model::*;
use crate::parse_config;

const POOLS: &str = r#""pools": {"A": {"servers": ["127.0.0.1:5000", "127.0.0.1:5001"]}}"#;

fn with_route(route: &str) -> String {
    format!("{{{POOLS}, \"route\": {route}}}")
}

fn ok(text: &str) -> Config {
    parse_config("t.json", text).unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> ConfigError {
    match parse_config("t.json", text) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

fn big(threshold: usize, batch: usize, hide: Option<bool>) -> String {
    let hide = hide.map_or(String::new(), |h| format!(r#", "hide_reply_flag": {h}"#));
    format!(
        r#"{{"type": "BigValueRoute", "target": "PoolRoute|A",
            "split_threshold": {threshold}, "batch_size": {batch}{hide}}}"#
    )
}

fn settings(threshold: usize, batch: usize, hide_reply_flag: bool) -> Option<BigValueSettings> {
    Some(BigValueSettings {
        threshold,
        batch,
        hide_reply_flag,
    })
}

#[test]
fn fields_are_read_with_mcrouters_defaults() {
    let c = ok(&with_route(&big(1000, 4, None)));
    assert!(c.has_big_value());
    assert_eq!(c.big_value(b"k", "/r/c/"), settings(1000, 4, false));
    let c = ok(&with_route(&big(0, 0, Some(true))));
    assert_eq!(c.big_value(b"k", "/r/c/"), settings(0, 0, true));
    let Entry::Default(id) = c.entry else {
        panic!()
    };
    let Route::BigValue { target, .. } = &c.routes[id] else {
        panic!("{:?}", c.routes[id])
    };
    assert!(matches!(c.routes[route_id(*target)], Route::Pool { .. }));
}

fn route_id(t: Target) -> RouteId {
    match t {
        Target::Route(id) => id,
        other => panic!("{other:?}"),
    }
}

#[test]
fn required_fields_and_types_are_checked() {
    let no_target = r#"{"type": "BigValueRoute", "split_threshold": 1, "batch_size": 1}"#;
    let e = err(&with_route(no_target));
    assert!(e.message.contains("BigValueRoute has no 'target'"), "{e}");
    let e = err(&with_route(
        r#"{"type": "BigValueRoute", "target": "PoolRoute|A", "batch_size": 1}"#,
    ));
    assert!(
        e.message.contains("BigValueRoute has no 'split_threshold'"),
        "{e}"
    );
    let e = err(&with_route(
        r#"{"type": "BigValueRoute", "target": "PoolRoute|A", "split_threshold": 1}"#,
    ));
    assert!(
        e.message.contains("BigValueRoute has no 'batch_size'"),
        "{e}"
    );
    for (field, bad) in [
        ("split_threshold", "-1"),
        ("split_threshold", "\"10\""),
        ("batch_size", "1.5"),
    ] {
        let text =
            big(1, 1, None).replace(&format!(r#""{field}": 1"#), &format!(r#""{field}": {bad}"#));
        let e = err(&with_route(&text));
        assert!(
            e.message.contains(&format!("{field} must be an integer")),
            "{e}"
        );
        assert_eq!(e.path.to_string(), format!("route.{field}"));
    }
    let e = err(&with_route(
        &big(1, 1, None).replace("1}", r#"1, "hide_reply_flag": 1}"#),
    ));
    assert!(
        e.message.contains("hide_reply_flag must be true or false"),
        "{e}"
    );
    let e = err(&with_route(r#""BigValueRoute|PoolRoute|A""#));
    assert!(e.message.contains("BigValueRoute must be an object"), "{e}");
}

#[test]
fn accepted_under_prefix_selection() {
    // Aliases, PrefixSelectorRoute policies and wildcard, and named handles they name.
    let text = format!(
        r#"{{{POOLS}, "named_handles": [{{"name": "bv", "type": "BigValueRoute",
              "target": "PoolRoute|A", "split_threshold": 7, "batch_size": 2}}],
            "routes": [{{"aliases": ["/r/c/"], "route": {{"type": "PrefixSelectorRoute",
                "policies": {{"a:": "bv", "b:": {b}}}, "wildcard": {w}}}}},
              {{"aliases": ["/r/d/"], "route": {d}}}]}}"#,
        b = big(100, 0, Some(true)),
        w = big(50, 3, None),
        d = big(9, 9, None),
    );
    let c = ok(&text);
    assert_eq!(c.big_value(b"a:x", "/r/c/"), settings(7, 2, false));
    assert_eq!(c.big_value(b"/r/c/a:x", "/r/c/"), settings(7, 2, false));
    assert_eq!(c.big_value(b"b:x", "/r/c/"), settings(100, 0, true));
    assert_eq!(c.big_value(b"zzz", "/r/c/"), settings(50, 3, false));
    assert_eq!(c.big_value(b"/r/d/a:x", "/r/c/"), settings(9, 9, false));
    // A chunk key keeps the key's prefixes, so it finds the same handle.
    assert_eq!(
        c.big_value(b"/r/c/b:x:0:123", "/r/c/"),
        settings(100, 0, true)
    );
    assert_eq!(c.big_value(b"/nope/x/a:x", "/r/c/"), None);
}

#[test]
fn keys_without_one_on_their_path_get_none() {
    let text = with_route(&format!(
        r#"{{"type": "PrefixSelectorRoute", "policies": {{"a:": {b}, "a:long": {l}}},
             "wildcard": "PoolRoute|A"}}"#,
        b = big(10, 1, None),
        l = big(20, 2, None),
    ));
    let c = ok(&text);
    assert_eq!(c.big_value(b"a:1", "/r/c/"), settings(10, 1, false));
    // The longest matching prefix, as requests are routed.
    assert_eq!(c.big_value(b"a:longer", "/r/c/"), settings(20, 2, false));
    assert_eq!(c.big_value(b"b:1", "/r/c/"), None);
    let c = ok(&with_route(r#""PoolRoute|A""#));
    assert!(!c.has_big_value());
    assert_eq!(c.big_value(b"a:1", "/r/c/"), None);
}

#[test]
fn refused_where_chunks_cannot_follow_naming_the_handle_above() {
    let b = big(10, 1, None);
    for (route, parent, why) in [
        (
            format!(r#"{{"type": "FailoverRoute", "children": [{b}]}}"#),
            "FailoverRoute",
            "for each chunk on its own",
        ),
        (
            format!(r#"{{"type": "AllSyncRoute", "children": [{b}]}}"#),
            "AllSyncRoute",
            "sends to several children",
        ),
        (
            format!(
                r#"{{"type": "BigValueRoute", "split_threshold": 5, "batch_size": 0,
                     "target": {b}}}"#
            ),
            "BigValueRoute",
            "split the inner one's chunks again",
        ),
        (
            format!(r#"{{"type": "ModifyKeyRoute", "target": {b}, "set_key_suffix": "x"}}"#),
            "ModifyKeyRoute",
            "rewrites the key",
        ),
        // A hash under a failover is no better.
        (
            format!(
                r#"{{"type": "FailoverRoute", "children": [{{"type": "HashRoute",
                     "children": [{b}, "PoolRoute|A"]}}]}}"#
            ),
            "FailoverRoute",
            "for each chunk on its own",
        ),
    ] {
        let e = err(&with_route(&route));
        let want = format!("BigValueRoute under {parent} is not supported: ");
        assert!(e.message.contains(&want), "{parent}: {e}");
        assert!(e.message.contains(why), "{parent}: {e}");
        assert!(e.line > 0, "{e}");
    }
    // A named handle accepted in one place is still refused in another.
    let text = format!(
        r#"{{{POOLS}, "named_handles": [{{"name": "bv", "type": "BigValueRoute",
              "target": "PoolRoute|A", "split_threshold": 7, "batch_size": 2}}],
            "routes": [{{"aliases": ["/r/c/"], "route": "bv"}},
                       {{"aliases": ["/r/d/"], "route": {{"type": "RandomRoute",
                         "children": ["bv", "PoolRoute|A"]}}}}]}}"#
    );
    let e = err(&text);
    assert!(e.message.contains("BigValueRoute under RandomRoute"), "{e}");
    assert!(e.message.contains("at random"), "{e}");
    assert_eq!(e.path.to_string(), "named_handles[0]");
}

#[test]
fn handles_that_pick_one_child_by_the_request_lead_to_it() {
    let (b, c) = (big(10, 1, None), big(20, 2, None));
    let text = with_route(&format!(
        r#"{{"type": "OperationSelectorRoute", "default_policy": "PoolRoute|A",
             "operation_policies": {{
               "set": {{"type": "HashRoute", "children": [{b}, {c}, "PoolRoute|A"]}},
               "get": {{"type": "ModifyExptimeRoute", "exptime": 5,
                        "target": {{"type": "LatencyInjectionRoute", "child": {b},
                                    "before_latency_ms": 1}}}}}}}}"#
    ));
    let conf = ok(&text);
    assert_eq!(
        conf.big_value_for("get", b"k", "/r/c/"),
        settings(10, 1, false)
    );
    assert_eq!(conf.big_value_for("delete", b"k", "/r/c/"), None);
    // The hash picks by the key: each key meets the BigValueRoute (or pool) it hashes to.
    let mut seen = std::collections::HashSet::new();
    for i in 0..60 {
        let key = format!("key{i}");
        let pick = ring::PoolHash::Ch3.index(key.as_bytes(), 3);
        let want = [settings(10, 1, false), settings(20, 2, false), None][pick];
        assert_eq!(
            conf.big_value_for("set", key.as_bytes(), "/r/c/"),
            want,
            "{key}"
        );
        seen.insert(pick);
    }
    assert_eq!(seen.len(), 3);
}

#[test]
fn chunks_follow_the_base_keys_choice_then_their_own_key() {
    // A HashRoute over two BigValueRoutes, each over a pool of 5 servers: the base key picks
    // the child, the chunk key picks the server in its pool, as mcrouter's BigValueRoute
    // sends each chunk to its target.
    let text = r#"{"pools": {"P": {"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"]},
                             "Q": {"servers": ["h:6", "h:7", "h:8", "h:9", "h:10"]}},
                   "route": {"type": "HashRoute", "children": [
                     {"type": "BigValueRoute", "target": "PoolRoute|P",
                      "split_threshold": 10, "batch_size": 0},
                     {"type": "BigValueRoute", "target": "PoolRoute|Q",
                      "split_threshold": 10, "batch_size": 0}]}}"#;
    let conf = ok(text);
    let send = |plan: crate::Plan| match plan {
        crate::Plan::Send(s) => (conf.pools[s.pool].name.clone(), s.index),
        other => panic!("{other:?}"),
    };
    let mut moved = 0;
    for i in 0..40 {
        let base = format!("blob{i}");
        let child = ring::PoolHash::Ch3.index(base.as_bytes(), 2);
        let pool = ["P", "Q"][child];
        for chunk in 0..3 {
            let key = format!("{base}:{chunk}:1234567");
            let got = send(conf.plan_chunk_at("set", "set", key.as_bytes(), "/r/c/", 0));
            let server = ring::PoolHash::Ch3.index(key.as_bytes(), 5);
            assert_eq!(got, (pool.to_owned(), server), "{key}");
            // Planned from the top as any key, the chunk would pick its child by itself.
            let plain = send(conf.plan_at("set", key.as_bytes(), "/r/c/", 0));
            moved += usize::from(plain.0 != pool);
        }
    }
    assert!(moved > 0, "the chunk's own hash would have moved some");
    // Not a chunk key, or no BigValueRoute on the base's path: planned as any key.
    assert_eq!(
        send(conf.plan_chunk_at("set", "set", b"blob1", "/r/c/", 0)),
        send(conf.plan_at("set", b"blob1", "/r/c/", 0))
    );
    assert_eq!(crate::plan::chunk_base(b"a:b:0:99"), Some(&b"a:b"[..]));
    assert_eq!(crate::plan::chunk_base(b"a:x:99"), None);
    assert_eq!(crate::plan::chunk_base(b":0:99"), None);
}

#[test]
fn route_handles_name_it_as_mcrouter_does() {
    let c = ok(&with_route(&big(1000, 4, Some(true))));
    let out = crate::admin_handles::route_handles(
        &c,
        "get",
        b"k",
        "/r/c/",
        crate::admin_handles::HostNaming::server_timeout(1000),
    )
    .unwrap();
    let line = out.lines().nth(2).unwrap();
    assert_eq!(
        line,
        "  big-value|split_threshold=1000|batch_size=4|hide_reply_flag=true"
    );
}
