//! ShardSplitRoute (PoolRoute's `shard_splits`) by key, operation and time.

use ring::{PoolHash, RoutingKey};

use super::*;
use crate::model::{AllMode, ShardSplit};
use crate::{parse_config, Config, Plan, Send};

const DEFAULT: &str = "/r/c/";

fn config(splits: &str) -> Config {
    let text = format!(
        r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"]}}}},
            "route": {{"type": "PoolRoute", "pool": "A", "asynclog": false,
                       "shard_splits": {splits}}}}}"#
    );
    parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn send(key: &str) -> Plan {
    Plan::Send(Send {
        pool: 0,
        index: PoolHash::Ch3.index(RoutingKey::parse(key.as_bytes()).hashed, 5),
        keep_prefix: false,
        exptime: Vec::new(),
        asynclog: None,
    })
}

fn rekey(key: &str) -> Plan {
    Plan::Rekey {
        key: key.as_bytes().to_vec(),
        plan: Box::new(send(key)),
    }
}

#[test]
fn shard_ids_are_found_between_the_first_two_colons() {
    fn id(k: &str) -> Option<&str> {
        shard_id(k.as_bytes()).map(|r| &k[r])
    }
    assert_eq!(id("user:123:name"), Some("123"));
    assert_eq!(id("a:b7:c"), Some("b7"));
    assert_eq!(id("a:12x:c"), None, "must end in a digit");
    assert_eq!(id("a::c"), None);
    assert_eq!(id("a:123"), None, "needs a second colon");
    let key = |k: &str, i| String::from_utf8(split_key(k.as_bytes(), 6, i)).unwrap();
    assert_eq!(key("x:1234:tail", 1), "x:1234aa:tail");
    assert_eq!(key("x:1234:tail", 2), "x:1234ba:tail");
    assert_eq!(key("x:1234:tail", 27), "x:1234ab:tail");
    assert_eq!(key("x:1234:tail", 676), "x:1234zz:tail");
}

#[test]
fn split_shards_go_to_this_hosts_sub_shard_and_deletes_fan_out() {
    // Host id 0 in tests: sub-shard 0, the key itself.
    let c = config(r#"{"10": 3, "20": 1}"#);
    assert_eq!(c.plan("get", b"u:10:k", DEFAULT), send("u:10:k"));
    assert_eq!(c.plan("set", b"u:10:k", DEFAULT), send("u:10:k"));
    assert_eq!(
        c.plan("delete", b"u:10:k", DEFAULT),
        Plan::All {
            mode: AllMode::Initial,
            plans: vec![send("u:10:k"), rekey("u:10aa:k"), rekey("u:10ba:k")],
        }
    );
    // The routing prefix stays in front; the hash stop's tail stays behind.
    assert_eq!(
        c.plan("delete", b"/r/c/u:10:k|#|t", DEFAULT),
        Plan::All {
            mode: AllMode::Initial,
            plans: vec![
                send("/r/c/u:10:k|#|t"),
                rekey("/r/c/u:10aa:k|#|t"),
                rekey("/r/c/u:10ba:k|#|t")
            ],
        }
    );
    // Shards not split, split in one, or keys without a shard id go through as they are.
    for key in ["u:20:k", "u:30:k", "plain"] {
        assert_eq!(
            c.plan("delete", key.as_bytes(), DEFAULT),
            send(key),
            "{key}"
        );
    }
    // An object split fans deletes out only when told to.
    let c = config(r#"{"10": {"old_split_size": 3, "new_split_size": 3}}"#);
    assert_eq!(c.plan("delete", b"u:10:k", DEFAULT), send("u:10:k"));
}

#[test]
fn split_sizes_move_host_by_host_over_the_migration_period() {
    let split = ShardSplit {
        old_size: 2,
        new_size: 4,
        start: 1000,
        period: 100,
        fanout_deletes: false,
    };
    assert_eq!(split.size_at(999, 0), 2);
    assert_eq!(split.size_at(1101, 16383), 4);
    // Halfway, hosts in the lower half of the id space have moved.
    assert_eq!(split.size_at(1050, 8000), 4);
    assert_eq!(split.size_at(1050, 9000), 2);
    assert_eq!(
        split.size_at(1050, 16384 + 8000),
        4,
        "host ids wrap at 16384"
    );
}

#[test]
fn shard_splits_are_checked() {
    let refused = |splits: &str| {
        let text = format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1"]}}}},
                "route": {{"type": "PoolRoute", "pool": "A", "shard_splits": {splits}}}}}"#
        );
        parse_config("t.json", &text).unwrap_err().to_string()
    };
    assert!(refused("[1]").contains("shard_splits must be an object"));
    let e = refused(r#"{"10": 0}"#);
    assert!(
        e.contains("must be an integer above 0") && e.contains("shard_splits.10"),
        "{e}"
    );
    let e = refused(r#"{"10": {"new_split_size": "2"}}"#);
    assert!(
        e.contains("new_split_size must be an integer above 0"),
        "{e}"
    );
    let e = refused(r#"{"10": {"fanout_deletes": 1}}"#);
    assert!(e.contains("fanout_deletes must be true or false"), "{e}");
}
