//! Checks every case and every key of tests/vectors/ketama.json: placements observed
//! on real libmemcached 1.1.4 and nutcracker 0.5.0.

use ring::{Distribution, Hash, Ring, Server};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/ketama.json"
);

fn load() -> Value {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| {
        panic!("cannot read {VECTORS}: {e} (shared/ must sit beside the repository root)")
    });
    serde_json::from_str(&text).expect("ketama.json is not valid JSON")
}

/// Maps an `implementation` string to (distribution, key hash).
fn implementation(name: &str) -> (Distribution, Hash) {
    let hash = |h: &str| Hash::from_name(h).unwrap_or_else(|| panic!("unknown hash {h}"));
    if name == "libmemcached-ketama-weighted" {
        return (Distribution::Ketama, Hash::Md5);
    }
    if let Some(h) = name.strip_prefix("libmemcached-ketama-weighted:") {
        return (Distribution::Ketama, hash(h));
    }
    if let Some(h) = name.strip_prefix("libmemcached-ketama-unweighted:") {
        return (Distribution::KetamaUnweighted, hash(h));
    }
    if let Some(h) = name.strip_prefix("twemproxy:ketama:") {
        return (Distribution::Ketama, hash(h));
    }
    if let Some(h) = name.strip_prefix("twemproxy:modula:") {
        return (Distribution::Modula, hash(h));
    }
    panic!("unknown implementation {name}");
}

fn servers(case: &Value) -> Vec<Server> {
    case["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| {
            let mut server = Server::new(
                s["host"].as_str().expect("host"),
                s["port"].as_u64().expect("port") as u16,
                s["weight"].as_u64().expect("weight") as u32,
            );
            if let Some(name) = s.get("name").and_then(Value::as_str) {
                server = server.named(name);
            }
            server
        })
        .collect()
}

#[test]
fn every_vector_matches() {
    let doc = load();
    let cases = doc["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    let (mut checked, mut failures) = (0usize, Vec::new());
    let mut implementations = std::collections::BTreeSet::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let imp = case["implementation"].as_str().expect("implementation");
        implementations.insert(imp.to_owned());
        let (dist, hash) = implementation(imp);
        let ring = Ring::new(servers(case), dist, hash);
        for (key, want) in case["keys"].as_object().expect("keys") {
            let want = want.as_u64().expect("index") as usize;
            let got = ring.server_for(key.as_bytes());
            checked += 1;
            if got != Some(want) {
                failures.push(format!("{name}: {key:?} -> {got:?}, want {want}"));
            }
        }
    }
    println!(
        "checked {checked} keys in {} cases ({} implementations), {} failures",
        cases.len(),
        implementations.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} mismatches, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    assert_eq!(checked, 41_254, "vector file changed size");
}

/// c5 is c1 without 127.0.0.1:21212; it was also observed after a live ejection, so a
/// three-server ring with the middle one ejected must reproduce it.
#[test]
fn ejection_reproduces_c5() {
    let doc = load();
    let mut checked = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        if !name.ends_with("/c5-c1-without-21212") {
            continue;
        }
        let (dist, hash) = implementation(case["implementation"].as_str().unwrap());
        let mut full = servers(case);
        assert_eq!(full.len(), 2);
        full.insert(1, Server::new("127.0.0.1", 21212, 1));
        let mut ring = Ring::new(full, dist, hash);
        ring.rebuild(&[true, false, true]);
        for (key, want) in case["keys"].as_object().unwrap() {
            let want = [0, 2][want.as_u64().unwrap() as usize];
            assert_eq!(
                ring.server_for(key.as_bytes()),
                Some(want),
                "{name} {key:?}"
            );
            checked += 1;
        }
        // And back: once the server returns, the ring is the full three-server ring.
        ring.rebuild(&[true, true, true]);
        let fresh = Ring::new(ring.servers().to_vec(), dist, hash);
        assert_eq!(ring.continuum(), fresh.continuum());
    }
    println!("checked {checked} c5 keys through ejection");
    assert!(
        checked >= 625 * 10,
        "expected c5 cases for every hash, got {checked}"
    );
}

#[test]
fn computed_hash_values_match() {
    let doc = load();
    let values = doc["computed_hash_values"]["values"]
        .as_object()
        .expect("computed_hash_values.values");
    let mut checked = 0;
    for (label, table) in values {
        // Labels are hash names, possibly with a note: "crc32 (libmemcached 'crc')".
        let hname = label.split_whitespace().next().unwrap();
        let hash = Hash::from_name(hname).unwrap_or_else(|| panic!("unknown hash {label}"));
        for (key, want) in table.as_object().unwrap() {
            assert_eq!(
                u64::from(hash.hash(key.as_bytes())),
                want.as_u64().unwrap(),
                "{label} of {key:?}"
            );
            checked += 1;
        }
    }
    println!("checked {checked} computed hash values");
    assert!(checked >= 80);
}
