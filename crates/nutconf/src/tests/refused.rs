//! What nutcracker refuses, refused with its reasons; the C quirks it accepts, accepted.

use super::*;

#[test]
fn bad_values_are_refused_with_reasons() {
    let with = |line: &str| {
        format!("a:\n  listen: 127.0.0.1:22121\n  {line}\n  servers:\n   - 127.0.0.1:11211:1\n")
    };
    let cases: &[(&str, &str)] = &[
        ("hash: md6", "directive \"hash\" is not a valid hash"),
        ("distribution: vnode", "is not a valid distribution"),
        (
            "hash_tag: \"{{}\"",
            "is not a valid hash tag string with two characters",
        ),
        ("timeout: -1", "directive \"timeout\" is not a number"),
        ("timeout: 1.5", "is not a number"),
        ("preconnect: yes", "is not \"true\" or \"false\""),
        ("redis: True", "is not \"true\" or \"false\""),
        ("timeout:", "has an empty value"),
        (
            "client_connection: 5",
            "directive \"client_connection\" is unknown",
        ),
        (
            "listen: 127.0.0.1:22122",
            "directive \"listen\" is a duplicate",
        ),
        ("redis_auth: pw", "only valid for a redis pool"),
        ("server_connections: 0", "cannot be 0"),
        (
            "item_size_max: 1023",
            "directive \"item_size_max\" is not between 1024 and 1073741824 (bytes)",
        ),
        ("item_size_max: 1073741825", "is not between"),
        ("item_size_max: 64m", "is not a number"),
        ("sets_burst: 5", "has sets_burst without sets_rate"),
        ("gets_rate: 1.5", "directive \"gets_rate\" is not a number"),
        ("active_req_limit: -1", "is not a number"),
    ];
    for (line, want) in cases {
        let err = reject(&with(line));
        assert!(err.contains(want), "{line}: got {err}");
    }
}

#[test]
fn bad_files_are_refused_with_reasons() {
    let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("# only a comment\n", "empty"),
            ("---\na:\n  listen: 1.2.3.4:1\n", "'---'"),
            ("a:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:11211:1]\n", "flow style"),
            ("a:\n  listen: 127.0.0.1:1\n  hash_tag: {}\n  servers:\n   - 127.0.0.1:11211:1\n", "flow style"),
            ("a: &x\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n", "anchor"),
            ("a:\n  listen: !!str 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n", "tag"),
            ("a: b\n", "must be a mapping"),
            ("- a\n", "top level must be a mapping"),
            ("a:\n  listen: 127.0.0.1:1\n  hash: md5\n", "no \"servers:\" sequence"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - host: x\n", "items must be plain strings"),
            ("a:\n  listen: 127.0.0.1:1\n  x:\n    y: z\n  servers:\n   - 127.0.0.1:11211:1\n", "depth greater than 2"),
            ("a:\n  listen: 127.0.0.1:1\n  hash:\n   - md5\n  servers:\n   - 127.0.0.1:11211:1\n", "more than one sequence"),
            ("a:\n  listen: 127.0.0.1:1\n  hash:\n   - md5\n", "has no servers"),
            ("a:\n  servers:\n   - 127.0.0.1:11211:1\n", "missing directive \"listen:\""),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11211:2\n", "same name '127.0.0.1'"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:1:1 x\n   - 127.0.0.1:2:1 x\n", "same name 'x'"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\nb:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n", "same listen address"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\na:\n  listen: 127.0.0.1:2\n  servers:\n   - 127.0.0.1:11211:1\n", "pools with same name"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:0\n", "zero weight"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:x\n", "invalid weight"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:0:1\n", "invalid port"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - localhost:1\n", "format string"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - /tmp/a:b.sock:1\n", "format string"),
            ("a:\n  listen: 127.0.0.1\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid \"hostname:port\""),
            ("a:\n  listen: 127.0.0.1:99999\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid port"),
            ("a:\n  listen: :22121\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid value"),
            ("a:\n  listen: 127.0.0.1#:22121\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid value"),
            ("a:\n  listen: \"[::1]:22121\"\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid value"),
            ("a:\n  listen: /tmp/x.sock 1777\n  servers:\n   - 127.0.0.1:11211:1\n", "file permission"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n  - 127.0.0.1:11211:1\n - x\n", "invalid YAML"),
        ];
    for (text, want) in cases {
        let err = reject(text);
        assert!(err.contains(want), "{text:?}: got {err}");
    }
}

#[test]
fn errors_name_pool_and_line() {
    let err =
        reject("alpha:\n  listen: 127.0.0.1:1\n  hash: md6\n  servers:\n   - 127.0.0.1:11211:1\n");
    assert_eq!(
        err,
        "conf: pool 'alpha' line 3: directive \"hash\" is not a valid hash"
    );
}

#[test]
fn c_number_and_permission_quirks() {
    // nc_atoi wraps like the C int it fills: nutcracker -t accepts this weight.
    let c = parse("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:99999999999\n");
    assert_eq!(c.pools[0].servers[0].weight, 1_215_752_191);
    // strtol(.., 8) stops at the first non-octal digit: "0999" is mode 0 (default).
    let c = parse("a:\n  listen: /tmp/x.sock 0999\n  servers:\n   - 127.0.0.1:11211:1\n");
    assert_eq!(
        c.pools[0].listen,
        Listen::Unix {
            path: "/tmp/x.sock".into(),
            mode: None
        }
    );
    // Two servers on the same address with different node names are distinct.
    parse("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1 x\n   - 127.0.0.1:11211:1 y\n");
    // IPv6 literal without brackets: the port is after the last ':'.
    let c = parse("a:\n  listen: ::1:22121\n  servers:\n   - ::1:11211:1\n");
    assert_eq!(
        c.pools[0].servers[0].addr,
        ServerAddr::Tcp {
            host: "::1".into(),
            port: 11211
        }
    );
}

#[test]
fn learned_redis_pools_are_checked() {
    let pool = |lines: &str| {
        format!("a:\n  listen: 127.0.0.1:22121\n{lines}  servers:\n   - 127.0.0.1:7000:1\n")
    };
    let ok = parse(&pool("  redis: true\n  redis_cluster: true\n"));
    assert_eq!(ok.pools[0].redis_topology, RedisTopology::Cluster);
    let ok = parse(&pool(
        "  redis: true\n  redis_sentinel: mymaster\n  redis_auth: front\n  redis_backend_user: app\n  redis_backend_auth: back\n",
    ));
    let p = &ok.pools[0];
    assert_eq!(p.redis_topology, RedisTopology::Sentinel("mymaster".into()));
    assert_eq!(p.backend_auth(), Some((Some("app"), "back")));
    let plain = parse(&pool("  redis: true\n  redis_auth: front\n"));
    assert_eq!(plain.pools[0].redis_topology, RedisTopology::Fixed);
    assert_eq!(plain.pools[0].backend_auth(), Some((None, "front")));
    let cases: &[(&str, &str)] = &[
        ("  redis_cluster: true\n", "only valid for a redis pool"),
        ("  redis_sentinel: m\n", "only valid for a redis pool"),
        (
            "  redis: true\n  redis_cluster: true\n  redis_sentinel: m\n",
            "both",
        ),
        (
            "  redis: true\n  redis_backend_user: app\n",
            "without \"redis_backend_auth:\"",
        ),
        (
            "  redis: true\n  redis_cluster: true\n  redis_db: 2\n",
            "only database 0",
        ),
    ];
    for (lines, want) in cases {
        let err = reject(&pool(lines));
        assert!(err.contains(want), "{lines}: got {err}");
    }
}

#[test]
fn sentinel_login_is_apart_from_the_backends() {
    let pool = |lines: &str| {
        format!("a:\n  listen: 127.0.0.1:22121\n  redis: true\n{lines}  servers:\n   - 127.0.0.1:26379:1\n")
    };
    let ok = parse(&pool(
        "  redis_sentinel: m\n  redis_sentinel_user: watcher\n  redis_sentinel_auth: s3\n  redis_backend_auth: back\n",
    ));
    let p = &ok.pools[0];
    assert_eq!(p.sentinel_auth(), Some((Some("watcher"), "s3")));
    assert_eq!(p.backend_auth(), Some((None, "back")));
    let ok = parse(&pool("  redis_sentinel: m\n  redis_sentinel_auth: s3\n"));
    assert_eq!(ok.pools[0].sentinel_auth(), Some((None, "s3")));
    assert_eq!(
        ok.pools[0].backend_auth(),
        None,
        "the Sentinels' password is theirs only"
    );
    let cases: &[(&str, &str)] = &[
        (
            "  redis_cluster: true\n  redis_sentinel_auth: s3\n",
            "needs \"redis_sentinel:\"",
        ),
        ("  redis_sentinel_auth: s3\n", "needs \"redis_sentinel:\""),
        (
            "  redis_sentinel: m\n  redis_sentinel_user: watcher\n",
            "without \"redis_sentinel_auth:\"",
        ),
    ];
    for (lines, want) in cases {
        let err = reject(&pool(lines));
        assert!(err.contains(want), "{lines}: got {err}");
    }
}

#[test]
fn redis_read_from_takes_primary_or_replicas_on_learned_pools() {
    let pool = |lines: &str| {
        format!("a:\n  listen: 127.0.0.1:22121\n{lines}  servers:\n   - 127.0.0.1:7000:1\n")
    };
    let default = parse(&pool("  redis: true\n  redis_cluster: true\n"));
    assert_eq!(default.pools[0].redis_read_from, ReadFrom::Primary);
    let cases: &[(&str, ReadFrom)] = &[
        (
            "  redis_cluster: true\n  redis_read_from: replicas\n",
            ReadFrom::Replicas,
        ),
        (
            "  redis_cluster: true\n  redis_read_from: primary\n",
            ReadFrom::Primary,
        ),
        (
            "  redis_sentinel: m\n  redis_read_from: replicas\n",
            ReadFrom::Replicas,
        ),
    ];
    for (lines, want) in cases {
        let ok = parse(&pool(&format!("  redis: true\n{lines}")));
        assert_eq!(ok.pools[0].redis_read_from, *want, "{lines}");
    }
    let refused: &[(&str, &str)] = &[
        (
            "  redis: true\n  redis_cluster: true\n  redis_read_from: replica\n",
            "line 5: directive \"redis_read_from\" is not \"primary\" or \"replicas\"",
        ),
        (
            "  redis: true\n  redis_cluster: true\n  redis_read_from: Replicas\n",
            "is not \"primary\" or \"replicas\"",
        ),
        (
            "  redis: true\n  redis_read_from: replicas\n",
            "needs \"redis_cluster:\" or \"redis_sentinel:\"",
        ),
        (
            "  redis: true\n  redis_read_from: primary\n",
            "needs \"redis_cluster:\" or \"redis_sentinel:\"",
        ),
        ("  redis_read_from: replicas\n", "only valid for a redis pool"),
        (
            "  redis: true\n  redis_sentinel: m\n  redis_read_from: replicas\n  redis_read_from: primary\n",
            "duplicate",
        ),
    ];
    for (lines, want) in refused {
        let err = reject(&pool(lines));
        assert!(err.contains(want), "{lines}: got {err}");
    }
}
