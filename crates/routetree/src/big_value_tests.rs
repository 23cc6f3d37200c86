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
fn accepted_under_prefix_selection_only() {
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
fn refused_anywhere_else_naming_the_handle_above() {
    let b = big(10, 1, None);
    for (route, parent) in [
        (
            format!(r#"{{"type": "FailoverRoute", "children": [{b}]}}"#),
            "FailoverRoute",
        ),
        (
            format!(r#"{{"type": "AllSyncRoute", "children": [{b}]}}"#),
            "AllSyncRoute",
        ),
        (
            format!(r#"{{"type": "OperationSelectorRoute", "default_policy": {b}}}"#),
            "OperationSelectorRoute",
        ),
        (
            format!(
                r#"{{"type": "BigValueRoute", "split_threshold": 5, "batch_size": 0,
                     "target": {b}}}"#
            ),
            "BigValueRoute",
        ),
        // A prefix selector under a hash is no better.
        (
            format!(
                r#"{{"type": "HashRoute", "children": [{{"type": "PrefixSelectorRoute",
                     "policies": {{"a": {b}}}}}]}}"#
            ),
            "HashRoute",
        ),
    ] {
        let e = err(&with_route(&route));
        let want = format!(
            "BigValueRoute under {parent} is not supported: its chunks would not reach its target"
        );
        assert!(e.message.contains(&want), "{parent}: {e}");
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
    assert_eq!(e.path.to_string(), "named_handles[0]");
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
