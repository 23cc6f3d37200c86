#![no_main]
//! Arbitrary bytes as nutcracker.yml (`memfleet route -c FILE`): parsing must return a config
//! or an error, never panic or hang. An accepted config must hold what validation promises
//! (pools with distinct names and listen addresses, servers with distinct ketama names,
//! non-zero server connections) and every pool's ring must place keys on its own servers.

use libfuzzer_sys::fuzz_target;
use nutconf::{Config, Listen};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(config) = Config::from_yaml_str(&text) else {
        return;
    };
    assert!(!config.pools.is_empty());
    let listen = |l: &Listen| match l {
        Listen::Tcp { host, port } => format!("{host}:{port}"),
        Listen::Unix { path, .. } => path.clone(),
    };
    for (i, pool) in config.pools.iter().enumerate() {
        for other in &config.pools[i + 1..] {
            assert_ne!(pool.name, other.name);
            assert_ne!(listen(&pool.listen), listen(&other.listen));
        }
        assert!(pool.server_connections > 0);
        let dns = config.dns.iter().any(|d| d.pool == i);
        assert!(
            dns || !pool.servers.is_empty(),
            "pool {} has no servers",
            pool.name
        );
        for (j, s) in pool.servers.iter().enumerate() {
            assert!(pool.servers[j + 1..]
                .iter()
                .all(|t| t.ketama_name != s.ketama_name));
        }
        let ring = pool.ring();
        assert_eq!(ring.servers().len(), pool.servers.len());
        for key in [&b"k"[..], b"", b"{tag}key", b"user:1234"] {
            if let Some(at) = ring.server_for(key) {
                assert!(at < pool.servers.len());
            }
        }
    }
    for d in &config.dns {
        assert!(d.pool < config.pools.len() && !d.names.is_empty());
    }
    assert_eq!(Config::from_yaml_str(&text).as_ref(), Ok(&config));
});
