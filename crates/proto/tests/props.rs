//! Property tests: no panics on arbitrary input, round trips, byte-at-a-time feeding.

use proptest::prelude::*;
use proto::{parse, parse_mcrouter, stream, Limits, Parse, Request, StoreCmd};

/// A request model we can serialize; `parse` must give it back.
#[derive(Clone, Debug)]
enum Model {
    Get(Vec<Vec<u8>>, bool),
    Gat(i32, Vec<Vec<u8>>),
    Store(StoreCmd, Vec<u8>, u32, i32, Vec<u8>, u64, bool),
    Delete(Vec<u8>, bool),
    Arith(bool, Vec<u8>, u64, bool),
    Touch(Vec<u8>, i32, bool),
    MetaGet(Vec<u8>, Option<i32>, bool),
    MetaSet(Vec<u8>, u32, Vec<u8>, bool),
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Any bytes but space, \n and NUL; 1..=250 bytes.
    prop::collection::vec(
        any::<u8>().prop_filter("sep", |b| ![b' ', b'\n', 0].contains(b)),
        1..=250,
    )
    .prop_filter("not noreply", |k| k != b"noreply")
}

fn store_cmd() -> impl Strategy<Value = StoreCmd> {
    prop_oneof![
        Just(StoreCmd::Set),
        Just(StoreCmd::Add),
        Just(StoreCmd::Replace),
        Just(StoreCmd::Append),
        Just(StoreCmd::Prepend),
        Just(StoreCmd::Cas),
    ]
}

fn model() -> impl Strategy<Value = Model> {
    let mkey = "[a-zA-Z0-9_:]{1,40}".prop_map(|s| s.into_bytes());
    prop_oneof![
        (prop::collection::vec(key(), 1..20), any::<bool>()).prop_map(|(k, c)| Model::Get(k, c)),
        (any::<i32>(), prop::collection::vec(key(), 0..5)).prop_map(|(e, k)| Model::Gat(e, k)),
        (
            store_cmd(),
            key(),
            any::<u32>(),
            any::<i32>(),
            prop::collection::vec(any::<u8>(), 0..300),
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(|(c, k, f, e, d, u, n)| Model::Store(c, k, f, e, d, u, n)),
        (key(), any::<bool>()).prop_map(|(k, n)| Model::Delete(k, n)),
        (any::<bool>(), key(), any::<u64>(), any::<bool>())
            .prop_map(|(i, k, d, n)| Model::Arith(i, k, d, n)),
        (key(), any::<i32>(), any::<bool>()).prop_map(|(k, e, n)| Model::Touch(k, e, n)),
        (mkey.clone(), any::<Option<i32>>(), any::<bool>())
            .prop_map(|(k, t, q)| Model::MetaGet(k, t, q)),
        (
            mkey,
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..300),
            any::<bool>()
        )
            .prop_map(|(k, f, d, q)| Model::MetaSet(k, f, d, q)),
    ]
}

fn serialize(m: &Model) -> Vec<u8> {
    let mut o = Vec::new();
    let nr = |o: &mut Vec<u8>, n: bool| {
        if n {
            o.extend_from_slice(b" noreply")
        }
    };
    match m {
        Model::Get(keys, cas) => {
            o.extend_from_slice(if *cas { b"gets" } else { b"get" });
            for k in keys {
                o.push(b' ');
                o.extend_from_slice(k);
            }
        }
        Model::Gat(e, keys) => {
            o.extend_from_slice(format!("gat {e}").as_bytes());
            for k in keys {
                o.push(b' ');
                o.extend_from_slice(k);
            }
        }
        Model::Store(c, k, f, e, d, u, n) => {
            o.extend_from_slice(c.name().as_bytes());
            o.push(b' ');
            o.extend_from_slice(k);
            o.extend_from_slice(format!(" {f} {e} {}", d.len()).as_bytes());
            if *c == StoreCmd::Cas {
                o.extend_from_slice(format!(" {u}").as_bytes());
            }
            nr(&mut o, *n);
            o.extend_from_slice(b"\r\n");
            o.extend_from_slice(d);
        }
        Model::Delete(k, n) => {
            o.extend_from_slice(b"delete ");
            o.extend_from_slice(k);
            nr(&mut o, *n);
        }
        Model::Arith(i, k, d, n) => {
            o.extend_from_slice(if *i { b"incr " } else { b"decr " });
            o.extend_from_slice(k);
            o.extend_from_slice(format!(" {d}").as_bytes());
            nr(&mut o, *n);
        }
        Model::Touch(k, e, n) => {
            o.extend_from_slice(b"touch ");
            o.extend_from_slice(k);
            o.extend_from_slice(format!(" {e}").as_bytes());
            nr(&mut o, *n);
        }
        Model::MetaGet(k, t, q) => {
            o.extend_from_slice(b"mg ");
            o.extend_from_slice(k);
            o.extend_from_slice(b" v k");
            if let Some(t) = t {
                o.extend_from_slice(format!(" T{t}").as_bytes());
            }
            if *q {
                o.extend_from_slice(b" q");
            }
        }
        Model::MetaSet(k, f, d, q) => {
            o.extend_from_slice(b"ms ");
            o.extend_from_slice(k);
            o.extend_from_slice(format!(" {} F{f}", d.len()).as_bytes());
            if *q {
                o.extend_from_slice(b" q");
            }
            o.extend_from_slice(b"\r\n");
            o.extend_from_slice(d);
        }
    }
    o.extend_from_slice(b"\r\n");
    o
}

fn matches(m: &Model, r: &Request<'_>) -> bool {
    let ks = |keys: proto::Keys<'_>| keys.map(|k| k.unwrap().to_vec()).collect::<Vec<_>>();
    match (m, r) {
        (Model::Get(k, c), Request::Get { keys, cas }) => ks(*keys) == *k && c == cas,
        (
            Model::Gat(e, k),
            Request::Gat {
                exptime,
                keys,
                cas: false,
            },
        ) => i64::from(*e) == *exptime && ks(*keys) == *k,
        (
            Model::Store(c, k, f, e, d, u, n),
            Request::Store {
                cmd,
                key,
                flags,
                exptime,
                data,
                cas_unique,
                noreply,
            },
        ) => {
            c == cmd
                && k == key
                && f == flags
                && i64::from(*e) == *exptime
                && d == data
                && (if *c == StoreCmd::Cas {
                    u == cas_unique
                } else {
                    *cas_unique == 0
                })
                && n == noreply
        }
        (Model::Delete(k, n), Request::Delete { key, noreply }) => k == key && n == noreply,
        (
            Model::Arith(i, k, d, n),
            Request::Arith {
                incr,
                key,
                delta,
                noreply,
            },
        ) => i == incr && k == key && d == delta && n == noreply,
        (
            Model::Touch(k, e, n),
            Request::Touch {
                key,
                exptime,
                noreply,
            },
        ) => k == key && i64::from(*e) == *exptime && n == noreply,
        (
            Model::MetaGet(k, t, q),
            Request::MetaGet {
                key,
                flags,
                late_error: None,
            },
        ) => {
            key.as_bytes() == k.as_slice()
                && flags.exptime == t.map(i64::from)
                && flags.noreply() == *q
                && flags.has(b'v')
                && flags.has(b'k')
        }
        (
            Model::MetaSet(k, f, d, q),
            Request::MetaSet {
                key,
                flags,
                cmd: StoreCmd::Set,
                data,
            },
        ) => {
            key.as_bytes() == k.as_slice()
                && flags.client_flags == *f
                && data == d
                && flags.noreply() == *q
        }
        _ => false,
    }
}

const PIECES: &[&[u8]] = &[
    b"get ",
    b"set ",
    b"ms ",
    b"mg ",
    b"md ",
    b"ma ",
    b"cas ",
    b"delete ",
    b"incr ",
    b"gat ",
    b"noreply",
    b"\r\n",
    b"\n",
    b" ",
    b"0",
    b"1",
    b"-1",
    b"5",
    b"k",
    b"b",
    b"T",
    b"q",
    b"O",
    b"M",
    b"\0",
    b"a2V5",
    b"=",
    b"4294967297",
    b"2000000",
    b"HTTP/",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..4096), chunk in 1usize..64) {
        let _ = parse(&data, &Limits::default());
        stream::run(&data, chunk, &Limits::default());
    }

    #[test]
    fn protocol_like_bytes_never_panic(
        parts in prop::collection::vec(prop::sample::select(PIECES), 0..64),
        chunk in 1usize..16,
    ) {
        let data: Vec<u8> = parts.concat();
        stream::run(&data, chunk, &Limits { item_size_max: 1000, ..Limits::default() });
    }

    #[test]
    fn mcrouter_dialect_never_panics(
        parts in prop::collection::vec(prop::sample::select(LEASE_PIECES), 0..64),
        chunk in 1usize..16,
    ) {
        let data: Vec<u8> = parts.concat();
        let limits = Limits { item_size_max: 1000, ..Limits::default() };
        stream::run_with(&data, chunk, &limits, parse_mcrouter);
        stream::run_with(&data, data.len().max(1), &limits, parse_mcrouter);
    }

    #[test]
    fn lease_set_round_trip(
        k in key(),
        token in any::<u64>(),
        flags in any::<u32>(),
        exptime in any::<i32>(),
        data in prop::collection::vec(any::<u8>(), 0..300),
        noreply in any::<bool>(),
    ) {
        let mut bytes = format!(" {token} {flags} {exptime} {}", data.len()).into_bytes();
        bytes.splice(0..0, k.iter().copied());
        bytes.splice(0..0, b"lease-set ".iter().copied());
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(&data);
        bytes.extend_from_slice(b"\r\n");
        let want = Request::LeaseSet {
            key: &k,
            token,
            flags,
            exptime: i64::from(exptime),
            data: &data,
            noreply,
        };
        prop_assert_eq!(parse_mcrouter(&bytes, &Limits::default()), Parse::Request(want, bytes.len()));
        for i in 0..bytes.len() {
            let p = parse_mcrouter(&bytes[..i], &Limits::default());
            prop_assert!(matches!(p, Parse::Incomplete { .. }), "prefix {}: {:?}", i, p);
        }
        // A memcached server answers ERROR for the line and again for the data block.
        let refused = matches!(parse(&bytes, &Limits::default()), Parse::Error { reply, .. } if reply == b"ERROR\r\n");
        prop_assert!(refused);
    }

    #[test]
    fn round_trip(m in model()) {
        let bytes = serialize(&m);
        match parse(&bytes, &Limits::default()) {
            Parse::Request(r, used) => {
                prop_assert_eq!(used, bytes.len());
                prop_assert!(matches(&m, &r), "{:?} parsed as {:?}", m, r);
            }
            other => prop_assert!(false, "{:?} parsed as {:?}", m, other),
        }
    }

    #[test]
    fn byte_at_a_time(m in model()) {
        let bytes = serialize(&m);
        // Long get lines are fine too: they stay Incomplete past 2048 bytes.
        for i in 0..bytes.len() {
            let p = parse(&bytes[..i], &Limits::default());
            prop_assert!(matches!(p, Parse::Incomplete { .. }), "prefix {} of {:?}: {:?}", i, m, p);
        }
        let whole = parse(&bytes, &Limits::default());
        let mut with_tail = bytes.clone();
        with_tail.extend_from_slice(b"get x\r\n");
        let tailed = parse(&with_tail, &Limits::default());
        prop_assert_eq!(&whole, &tailed);
        let out = stream::run(&bytes, 1, &Limits::default());
        prop_assert_eq!((out.requests, out.errors), (1, 0));
    }
}

/// Pieces of mcrouter's lease commands, for the dialect's never-panic property.
const LEASE_PIECES: &[&[u8]] = &[
    b"lease-get ",
    b"lease-set ",
    b"k ",
    b"123 ",
    b"0 ",
    b"-1 ",
    b"18446744073709551616 ",
    b"5",
    b"2000 ",
    b"noreply",
    b"\r\n",
    b"\n",
    b"hello",
    b" ",
    b"get k",
    b"set k 0 0 1",
];

/// The same loop as the `text_parse` fuzz target, over the checked-in seed corpus.
#[test]
fn seed_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/text_parse");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("seed corpus") {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        for chunk in [1, 7, 4096] {
            stream::run(&data, chunk, &Limits::default());
            stream::run(
                &data,
                chunk,
                &Limits {
                    item_size_max: 64,
                    use_cas: false,
                    max_get_line: 4096,
                },
            );
        }
        n += 1;
    }
    assert!(n >= 10, "only {n} seeds");
}
