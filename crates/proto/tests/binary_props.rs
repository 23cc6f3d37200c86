//! Property tests of the binary codec: arbitrary bytes never panic or claim more than given,
//! every request round-trips through `encode` and `parse_request`, also fed in pieces.

use proptest::prelude::*;
use proto::binary::{
    opcode as op, parse_request, parse_response, BinParse, BinRequest, Command, ResponseParse,
    Settings,
};
use proto::{Limits, StoreCmd};

/// SASL on and authenticated, so that every command parses.
const SETTINGS: Settings = Settings {
    limits: Limits {
        item_size_max: 1 << 20,
        use_cas: true,
        max_get_line: 1 << 22,
    },
    sasl: true,
    authenticated: true,
};

fn key(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..=max)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..300)
}

/// An opcode and an owned command it carries.
#[derive(Clone, Debug)]
enum Model {
    Get(u8, Vec<u8>, Option<u32>),
    Touch(Vec<u8>, u32),
    Store(u8, Vec<u8>, u32, u32, Vec<u8>),
    Delete(u8, Vec<u8>),
    Arith(u8, Vec<u8>, u64, u64, u32),
    Bare(u8),
    Flush(u8, u32),
    Stat(Vec<u8>),
    Sasl(u8, Vec<u8>, Vec<u8>),
}

fn model() -> impl Strategy<Value = Model> {
    let get = prop::sample::select(vec![op::GET, op::GETQ, op::GETK, op::GETKQ]);
    let gat = prop::sample::select(vec![op::GAT, op::GATQ, op::GATK, op::GATKQ]);
    let set = prop::sample::select(vec![
        op::SET,
        op::SETQ,
        op::ADD,
        op::ADDQ,
        op::REPLACE,
        op::REPLACEQ,
    ]);
    let cat = prop::sample::select(vec![op::APPEND, op::APPENDQ, op::PREPEND, op::PREPENDQ]);
    let arith = prop::sample::select(vec![
        op::INCREMENT,
        op::INCREMENTQ,
        op::DECREMENT,
        op::DECREMENTQ,
    ]);
    let bare = prop::sample::select(vec![
        op::NOOP,
        op::VERSION,
        op::QUIT,
        op::QUITQ,
        op::SASL_LIST_MECHS,
    ]);
    prop_oneof![
        (get, key(250)).prop_map(|(o, k)| Model::Get(o, k, None)),
        (gat, key(250), any::<u32>()).prop_map(|(o, k, t)| Model::Get(o, k, Some(t))),
        (key(250), any::<u32>()).prop_map(|(k, t)| Model::Touch(k, t)),
        (set, key(250), any::<u32>(), any::<u32>(), value())
            .prop_map(|(o, k, f, e, v)| Model::Store(o, k, f, e, v)),
        (cat, key(250), value()).prop_map(|(o, k, v)| Model::Store(o, k, 0, 0, v)),
        (
            prop::sample::select(vec![op::DELETE, op::DELETEQ]),
            key(250)
        )
            .prop_map(|(o, k)| Model::Delete(o, k)),
        (arith, key(250), any::<u64>(), any::<u64>(), any::<u32>())
            .prop_map(|(o, k, d, i, e)| Model::Arith(o, k, d, i, e)),
        bare.prop_map(Model::Bare),
        (
            prop::sample::select(vec![op::FLUSH, op::FLUSHQ]),
            any::<u32>()
        )
            .prop_map(|(o, d)| Model::Flush(o, d)),
        prop::collection::vec(any::<u8>(), 0..=250).prop_map(Model::Stat),
        (
            prop::sample::select(vec![op::SASL_AUTH, op::SASL_STEP]),
            key(32),
            value()
        )
            .prop_map(|(o, k, v)| Model::Sasl(o, k, v)),
    ]
}

fn command(m: &Model) -> (u8, Command<'_>) {
    let cmd_of = |o: u8| match o {
        op::SET | op::SETQ => StoreCmd::Set,
        op::ADD | op::ADDQ => StoreCmd::Add,
        op::REPLACE | op::REPLACEQ => StoreCmd::Replace,
        op::APPEND | op::APPENDQ => StoreCmd::Append,
        _ => StoreCmd::Prepend,
    };
    match m {
        Model::Get(o, k, touch) => {
            let with_key = matches!(*o, op::GETK | op::GETKQ | op::GATK | op::GATKQ);
            (
                *o,
                Command::Get {
                    key: k,
                    touch: *touch,
                    with_key,
                },
            )
        }
        Model::Touch(k, t) => (
            op::TOUCH,
            Command::Touch {
                key: k,
                exptime: *t,
            },
        ),
        Model::Store(o, k, flags, exptime, data) => (
            *o,
            Command::Store {
                cmd: cmd_of(*o),
                key: k,
                flags: *flags,
                exptime: *exptime,
                data,
            },
        ),
        Model::Delete(o, k) => (*o, Command::Delete { key: k }),
        Model::Arith(o, k, delta, initial, exptime) => (
            *o,
            Command::Arith {
                incr: matches!(*o, op::INCREMENT | op::INCREMENTQ),
                key: k,
                delta: *delta,
                initial: *initial,
                exptime: *exptime,
            },
        ),
        Model::Bare(o) => (
            *o,
            match *o {
                op::NOOP => Command::Noop,
                op::VERSION => Command::Version,
                op::SASL_LIST_MECHS => Command::SaslListMechs,
                _ => Command::Quit,
            },
        ),
        Model::Flush(o, d) => (*o, Command::Flush { delay: *d }),
        Model::Stat(k) => (op::STAT, Command::Stat { key: k }),
        Model::Sasl(o, k, v) => (
            *o,
            Command::Sasl {
                step: *o == op::SASL_STEP,
                mechanism: k,
                data: v,
            },
        ),
    }
}

fn quiet(o: u8) -> bool {
    matches!(
        o,
        op::GETQ
            | op::GETKQ
            | op::GATQ
            | op::GATKQ
            | op::SETQ
            | op::ADDQ
            | op::REPLACEQ
            | op::APPENDQ
            | op::PREPENDQ
            | op::DELETEQ
            | op::INCREMENTQ
            | op::DECREMENTQ
            | op::QUITQ
            | op::FLUSHQ
    )
}

/// The largest buffer `parse_request` may ask for with `SETTINGS`.
const MAX_TOTAL: usize = 24 + 8 + 250 + (1 << 20);

fn check_bounds(buf: &[u8], settings: &Settings) {
    match parse_request(buf, settings) {
        BinParse::Request(_, n) => assert!(n > 0 && n <= buf.len()),
        BinParse::Incomplete { total } => {
            assert!(total > buf.len() && total <= MAX_TOTAL.max(24 + 255 + 65535))
        }
        BinParse::Error(e) => assert!(e.consumed <= buf.len() && (e.consumed > 0 || e.close)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..400),
                                   magic in any::<bool>(), sasl in any::<bool>()) {
        if magic && !bytes.is_empty() {
            bytes[0] = 0x80;
        }
        let settings = Settings { sasl, authenticated: !sasl || magic, ..Settings::default() };
        check_bounds(&bytes, &settings);
        let _ = parse_response(&bytes);
        if let ResponseParse::Response(_, n) = parse_response(&bytes) {
            prop_assert!(n <= bytes.len());
        }
    }

    #[test]
    fn requests_round_trip(m in model(), opaque in any::<u32>(), cas in any::<u64>(), cut in any::<prop::sample::Index>()) {
        let (opcode, command) = command(&m);
        let req = BinRequest { opcode, opaque, cas, quiet: quiet(opcode), command };
        let mut wire = Vec::new();
        req.encode(&mut wire);
        prop_assert_eq!(parse_request(&wire, &SETTINGS), BinParse::Request(req, wire.len()));
        // A prefix asks for more, never for more than the whole request.
        let short = &wire[..cut.index(wire.len())];
        match parse_request(short, &SETTINGS) {
            BinParse::Incomplete { total } => prop_assert!(total > short.len() && total <= wire.len()),
            other => prop_assert!(false, "prefix {} of {}: {:?}", short.len(), wire.len(), other),
        }
        // Pipelined after another request, with a trailing partial one.
        let mut two = wire.clone();
        two.extend_from_slice(&wire);
        two.extend_from_slice(&wire[..cut.index(wire.len())]);
        let BinParse::Request(_, n) = parse_request(&two, &SETTINGS) else { panic!() };
        prop_assert_eq!(parse_request(&two[n..], &SETTINGS), BinParse::Request(req, wire.len()));
    }

    #[test]
    fn hits_compose_and_parse_back(m in model(), flags in any::<u32>(), cas in any::<u64>(), v in value()) {
        let (opcode, command) = command(&m);
        let req = BinRequest { opcode, opaque: 5, cas: 0, quiet: quiet(opcode), command };
        let mut out = Vec::new();
        req.write_hit(&mut out, flags, cas, &v);
        let ResponseParse::Response(r, n) = parse_response(&out) else { panic!() };
        prop_assert_eq!((n, r.opcode, r.opaque, r.cas, r.status), (out.len(), opcode, 5, cas, 0));
        prop_assert_eq!(r.extras, &flags.to_be_bytes()[..]);
    }
}
