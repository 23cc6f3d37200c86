#![no_main]
//! Arbitrary bytes as the invalidator's YAML config (`memfleet invalidate -c FILE`): parsing
//! must return a config or an error, never panic. An accepted config has what the
//! invalidator needs to start: a slot and publication name safe to put in replication
//! commands, at least one target, tables with parsed key templates, positive timeouts, and
//! pool targets whose ring places keys on their own servers.

use libfuzzer_sys::fuzz_target;

use invalidate::config::{Config, TargetSpec};
use invalidate::template;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(c) = Config::from_yaml_str(&text) else {
        return;
    };
    for name in [&c.source.slot, &c.source.publication] {
        assert!(!name.is_empty() && name.len() <= 63);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
    }
    assert!(!c.targets.is_empty() && !c.tables.is_empty());
    assert!(c.max_batch_keys > 0);
    assert!(!c.ack_timeout.is_zero() && !c.connect_timeout.is_zero());
    assert!(!c.retry_interval.is_zero());
    for (i, t) in c.tables.iter().enumerate() {
        assert!(!t.templates.is_empty() && !t.schema.is_empty() && !t.name.is_empty());
        assert!(t.changes.insert || t.changes.update || t.changes.delete);
        assert!(c.tables[..i]
            .iter()
            .all(|u| (&u.schema, &u.name) != (&t.schema, &t.name)));
        for tpl in &t.templates {
            assert_eq!(template::Template::parse(tpl.source()).as_ref(), Ok(tpl));
        }
    }
    for target in &c.targets {
        if let TargetSpec::Pool {
            servers,
            hash,
            distribution,
            hash_tag,
        } = target
        {
            assert!(!servers.is_empty());
            let ring = ring::Ring::new(
                servers.iter().map(|s| s.ring.clone()).collect(),
                *distribution,
                *hash,
            )
            .with_hash_tag(*hash_tag);
            for key in [&b"k"[..], b"user:{1}:x"] {
                let at = ring.server_for(key).expect("weights are positive");
                assert!(at < servers.len());
            }
        }
    }
});
