//! Checks every key of tests/vectors/mcrouter-bucketize.json: the bucket and the server a
//! bucketized PoolRoute gives each key, as mcrouter's own hash code computes them (see the
//! vectors' README), through the route tree.

use routetree::{parse_config, Entry, Plan, Route};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/mcrouter-bucketize.json"
);

#[test]
fn bucketized_placement_matches_mcrouter() {
    let text = std::fs::read_to_string(VECTORS).expect("read the vectors");
    let doc: Value = serde_json::from_str(&text).expect("vectors are JSON");
    let vectors = doc["vectors"].as_array().expect("vectors");
    for (i, case) in doc["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .enumerate()
    {
        let weights = case["weights"].as_array().expect("weights");
        let servers: Vec<String> = (0..weights.len())
            .map(|s| format!("\"h:{}\"", s + 1))
            .collect();
        let config = format!(
            r#"{{"pools": {{"A": {{"servers": [{}], "weights": {}}}}},
                "route": {{"type": "PoolRoute", "pool": "A", "bucketize": true,
                           "total_buckets": {}, "total_buckets_by_prefix": {},
                           "bucketization_keyspace": "main", "hash": {{"salt": {}}}}}}}"#,
            servers.join(", "),
            case["weights"],
            case["total_buckets"],
            case["total_buckets_by_prefix"],
            case["salt"],
        );
        let c = parse_config("v.json", &config).expect("config");
        let Entry::Default(root) = c.entry else {
            panic!("one route")
        };
        let Route::Bucketize { settings, .. } = &c.routes[root] else {
            panic!("{:?}", c.routes[root])
        };
        let mut checked = 0;
        for v in vectors {
            let key = v["key"].as_str().expect("key");
            let bucket = v["bucket"][i].as_u64().expect("bucket");
            let server = v["server"][i].as_u64().expect("server") as usize;
            assert_eq!(
                settings.bucket(key.as_bytes()),
                bucket,
                "config {i}, key {key:?}"
            );
            match c.plan("get", key.as_bytes(), "/././") {
                Plan::Send(s) => assert_eq!(s.index, server, "config {i}, key {key:?}"),
                other => panic!("config {i}, key {key:?}: {other:?}"),
            }
            checked += 1;
        }
        assert!(checked > 3000, "{checked}");
    }
}
