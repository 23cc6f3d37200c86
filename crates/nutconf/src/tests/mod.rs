//! Whole files through `Config::from_yaml_str`, as nutcracker reads them: twemproxy's sample
//! configs, defaults, every directive. The children hold the refusals (`refused`), the
//! `servers:` entries (`servers`), the TLS directives (`tls`) and the comparison with the
//! installed nutcracker (`nutcracker`).

mod nutcracker;
mod refused;
mod servers;
mod tls;

use std::time::Duration;

use ring::{Distribution, Hash};

use super::*;

fn parse(text: &str) -> Config {
    Config::from_yaml_str(text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"))
}

fn reject(text: &str) -> String {
    match Config::from_yaml_str(text) {
        Ok(c) => panic!("accepted: {c:?}\n---\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// The structure of twemproxy's conf/nutcracker.yml (five pools, every common key).
const FIVE_POOLS: &str = "\
alpha:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: true
  redis: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:6379:1

beta:
  listen: 127.0.0.1:22122
  hash: fnv1a_64
  hash_tag: \"{}\"
  distribution: ketama
  auto_eject_hosts: false
  timeout: 400
  redis: true
  servers:
   - 127.0.0.1:6380:1 server1
   - 127.0.0.1:6381:1 server2
   - 127.0.0.1:6382:1 server3
   - 127.0.0.1:6383:1 server4

gamma:
  listen: 127.0.0.1:22123
  hash: fnv1a_64
  distribution: ketama
  timeout: 400
  backlog: 1024
  preconnect: true
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 3
  servers:
   - 127.0.0.1:11212:1
   - 127.0.0.1:11213:1

delta:
  listen: 127.0.0.1:22124
  hash: fnv1a_64
  distribution: ketama
  timeout: 100
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:11214:1
   - 127.0.0.1:11215:1
   - 127.0.0.1:11216:1
   - 127.0.0.1:11217:1
   - 127.0.0.1:11218:1
   - 127.0.0.1:11219:1
   - 127.0.0.1:11220:1
   - 127.0.0.1:11221:1
   - 127.0.0.1:11222:1
   - 127.0.0.1:11223:1

omega:
  listen: /tmp/gamma
  hash: hsieh
  distribution: ketama
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:11214:100000
   - 127.0.0.1:11215:1
";

/// The structure of conf/nutcracker.leaf.yml.
const LEAF: &str = "\
leaf:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:11212:1
   - 127.0.0.1:11213:1
";

/// The structure of conf/nutcracker.root.yml.
const ROOT: &str = "\
root:
  listen: 127.0.0.1:22120
  hash: fnv1a_64
  distribution: ketama
  preconnect: true
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:22121:1
";

const MINIMAL: &str = "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n";

#[test]
fn twemproxy_sample_configs_parse() {
    let c = parse(FIVE_POOLS);
    let names: Vec<_> = c.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma", "delta", "omega"]);

    let alpha = c.pool("alpha").unwrap();
    assert!(alpha.redis && alpha.auto_eject_hosts);
    assert_eq!(alpha.server_retry_timeout, Duration::from_millis(2000));
    assert_eq!(alpha.server_failure_limit, 1);
    assert_eq!(alpha.timeout, None);

    let beta = c.pool("beta").unwrap();
    assert_eq!(beta.hash_tag, Some(*b"{}"));
    assert_eq!(beta.timeout, Some(Duration::from_millis(400)));
    assert_eq!(beta.servers.len(), 4);
    assert_eq!(beta.servers[0].name.as_deref(), Some("server1"));
    assert_eq!(beta.servers[0].pname, "127.0.0.1:6380:1");
    assert_eq!(beta.servers[0].ketama_name, "server1");

    let gamma = c.pool("gamma").unwrap();
    assert_eq!(gamma.backlog, 1024);
    assert!(gamma.preconnect);
    assert_eq!(gamma.servers[0].ketama_name, "127.0.0.1:11212");

    assert_eq!(c.pool("delta").unwrap().servers.len(), 10);

    let omega = c.pool("omega").unwrap();
    assert_eq!(
        omega.listen,
        Listen::Unix {
            path: "/tmp/gamma".into(),
            mode: None
        }
    );
    assert_eq!(omega.hash, Hash::Hsieh);
    assert_eq!(omega.servers[0].weight, 100_000);

    let leaf = parse(LEAF);
    assert_eq!(leaf.pools[0].servers.len(), 2);
    let root = parse(ROOT);
    assert_eq!(
        root.pools[0].listen,
        Listen::Tcp {
            host: "127.0.0.1".into(),
            port: 22120
        }
    );
    assert!(root.pools[0].preconnect);
}

#[test]
fn defaults_match_twemproxy() {
    let p = &parse(MINIMAL).pools[0];
    assert_eq!(p.hash, Hash::Fnv1a64);
    assert_eq!(p.distribution, Distribution::Ketama);
    assert_eq!(p.hash_tag, None);
    assert_eq!(p.timeout, None);
    assert_eq!(p.backlog, 512);
    assert_eq!(p.client_connections, 0);
    assert!(!p.redis && !p.preconnect && !p.tcpkeepalive && !p.reuseport);
    assert!(!p.auto_eject_hosts);
    assert_eq!(p.redis_db, 0);
    assert_eq!(p.redis_auth, None);
    assert_eq!(p.server_connections, 1);
    assert_eq!(p.server_retry_timeout, Duration::from_secs(30));
    assert_eq!(p.server_failure_limit, 2);
    assert_eq!(p.client_auth, None);
    assert_eq!(p.item_size_max, 64 * 1024 * 1024);
    assert_eq!(p.big_value_split_threshold, 0);
    assert_eq!(p.big_value_batch_size, 10);
    assert!(p.big_value_hide_reply_flag);
    assert_eq!(p.hot_keys, crate::HotKeys::default());
    assert!(!p.hot_keys.enabled);
    // Port 11211 is left out of the ketama name.
    assert_eq!(p.servers[0].ketama_name, "127.0.0.1");
}

#[test]
fn every_directive_is_read() {
    let c = parse(
        "pool:
  listen: /var/run/mf.sock 0660
  hash: murmur
  hash_tag: \"$$\"
  distribution: modula
  timeout: 250
  backlog: 128
  client_connections: 4096
  redis: true
  redis_auth: s3cret
  redis_db: 3
  preconnect: true
  tcpkeepalive: true
  reuseport: true
  auto_eject_hosts: true
  server_connections: 4
  server_retry_timeout: 500
  server_failure_limit: 5
  client_auth: letmein
  item_size_max: 1048576
  big_value_split_threshold: 1000000
  big_value_batch_size: 4
  big_value_hide_reply_flag: false
  server_max_inflight: 64
  hot_keys: true
  hot_key_ttl: 250
  hot_key_share: 5%
  hot_key_max: 8
  hot_key_sample: 4
  active_req_limit: 500
  servers:
   - /tmp/mc.sock:2 local
   - /tmp/mc2.sock:1
   - 10.0.0.1:11211:3
",
    );
    let p = &c.pools[0];
    assert_eq!(
        p.listen,
        Listen::Unix {
            path: "/var/run/mf.sock".into(),
            mode: Some(0o660)
        }
    );
    assert_eq!(p.hash, Hash::Murmur);
    assert_eq!(p.hash_tag, Some(*b"$$"));
    assert_eq!(p.distribution, Distribution::Modula);
    assert_eq!(p.timeout, Some(Duration::from_millis(250)));
    assert_eq!(p.backlog, 128);
    assert_eq!(p.client_connections, 4096);
    assert!(p.redis && p.preconnect && p.tcpkeepalive && p.reuseport && p.auto_eject_hosts);
    assert_eq!(p.redis_auth.as_deref(), Some("s3cret"));
    assert_eq!(p.redis_db, 3);
    assert_eq!(p.server_connections, 4);
    assert_eq!(p.server_retry_timeout, Duration::from_millis(500));
    assert_eq!(p.server_failure_limit, 5);
    assert_eq!(p.client_auth.as_deref(), Some("letmein"));
    assert_eq!(p.item_size_max, 1024 * 1024);
    assert_eq!(p.big_value_split_threshold, 1_000_000);
    assert_eq!(p.big_value_batch_size, 4);
    assert!(!p.big_value_hide_reply_flag);
    assert_eq!(p.server_max_inflight, 64);
    assert_eq!(
        p.hot_keys,
        crate::HotKeys {
            enabled: true,
            ttl_ms: 250,
            share: 0.05,
            max: 8,
            sample: 4
        }
    );
    assert_eq!(p.active_req_limit, 500);
    assert_eq!(
        p.servers[0].addr,
        ServerAddr::Unix {
            path: "/tmp/mc.sock".into()
        }
    );
    assert_eq!(p.servers[0].ketama_name, "local");
    // twemproxy keeps the ':' before the weight in a unix server's ketama name.
    assert_eq!(p.servers[1].ketama_name, "/tmp/mc2.sock:");
    assert_eq!(p.servers[2].weight, 3);
}

#[test]
fn rates_are_token_buckets_per_class() {
    let c = parse(
        "a:
  listen: 127.0.0.1:22121
  gets_rate: 1000
  gets_burst: 50
  deletes_rate: 10
  servers:
   - 127.0.0.1:11211:1
",
    );
    let r = &c.pools[0].rates;
    let rate = |rate, burst| Some(crate::TokenRate { rate, burst });
    assert_eq!(r.gets, rate(1000, 50));
    assert_eq!(r.sets, None, "a class without a rate is not limited");
    assert_eq!(r.deletes, rate(10, 10), "the burst defaults to the rate");
    assert!(r.any());
    let redis = reject("a:\n  listen: 127.0.0.1:22121\n  redis: true\n  sets_rate: 5\n  servers:\n   - 127.0.0.1:6379:1\n");
    assert!(redis.contains("memcached pools only"), "{redis}");
    assert!(
        !parse("a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n").pools[0]
            .rates
            .any()
    );
    assert_eq!(c.pools[0].active_req_limit, 0, "no limit by default");
}

#[test]
fn ring_uses_twemproxy_point_names() {
    let c = parse(FIVE_POOLS);
    let beta = c.pool("beta").unwrap().ring();
    assert_eq!(beta.hash_tag(), Some(*b"{}"));
    assert_eq!(beta.servers()[0].point_label(), "server1");
    assert_eq!(beta.server_for(b"a{x}"), beta.server_for(b"b{x}"));
    let gamma = c.pool("gamma").unwrap().ring();
    assert_eq!(gamma.servers()[1].point_label(), "127.0.0.1:11213");
    assert_eq!(gamma.continuum().len(), 320);
}

#[test]
fn quoting_and_comments_are_plain_yaml() {
    let c = parse(
        "# memfleet
a:   # pool
  listen: '127.0.0.1:22121' # trailing
  hash: \"md5\"
  servers:
   - \"127.0.0.1:11211:1\"
",
    );
    assert_eq!(c.pools[0].hash, Hash::Md5);
}

#[test]
fn hot_key_share_is_a_fraction_or_a_percentage() {
    assert_eq!(crate::parse_share("0.2"), Ok(0.2));
    assert_eq!(crate::parse_share("20%"), Ok(0.2));
    assert_eq!(crate::parse_share("1"), Ok(1.0));
    for bad in ["0", "0%", "1.5", "150%", "x", "-0.1"] {
        assert!(crate::parse_share(bad).is_err(), "{bad}");
    }
    let zero =
        "p:\n  listen: 127.0.0.1:22121\n  hot_key_max: 0\n  servers:\n   - 127.0.0.1:11211:1\n";
    assert!(Config::from_yaml_str(zero).is_err());
}
