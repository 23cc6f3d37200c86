//! Differential check of the binary codec against a real memcached 1.6.18 (started by the
//! test, see `testpeer`; skipped when not installed).
//!
//! * Every opcode, composed with `BinRequest::encode`: memcached's replies must parse with
//!   `parse_response` and carry the statuses, keys and values predicted here.
//! * Malformed input (wrong magic, lying lengths, long keys, unknown opcodes, wrong extras,
//!   too large values, trailing body bytes): the bytes memcached answers must equal the
//!   replies `parse_request` predicts when its errors are applied as a server would (consume,
//!   swallow, close).

use proto::binary::{
    opcode as op, parse_request, parse_response, BinParse, BinRequest, Command, ResponseParse,
    Settings, Status,
};
use proto::StoreCmd;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use testpeer::memcached;

/// A marker noop ends each exchange; its reply tells that everything before was answered.
const MARK: u32 = 0xfeed_f00d;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s
}

fn packet(opcode: u8, opaque: u32, cas: u64, command: Command<'_>) -> Vec<u8> {
    let quiet = false;
    let mut out = Vec::new();
    BinRequest {
        opcode,
        opaque,
        cas,
        quiet,
        command,
    }
    .encode(&mut out);
    out
}

fn noop(opaque: u32) -> Vec<u8> {
    packet(op::NOOP, opaque, 0, Command::Noop)
}

/// One reply, owned.
#[derive(Debug, Clone, PartialEq)]
struct Reply {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Reads replies until `done` says so, the peer closes, or nothing comes for 2 s (a failure
/// the caller's assertions report). Returns the replies and whether the connection closed.
fn read_replies(s: &mut TcpStream, done: impl Fn(&[Reply]) -> bool) -> (Vec<Reply>, bool) {
    let mut buf = Vec::new();
    let mut replies = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        while let ResponseParse::Response(r, n) = parse_response(&buf) {
            replies.push(Reply {
                opcode: r.opcode,
                status: r.status,
                opaque: r.opaque,
                cas: r.cas,
                extras: r.extras.to_vec(),
                key: r.key.to_vec(),
                value: r.value.to_vec(),
            });
            buf.drain(..n);
        }
        assert_ne!(
            parse_response(&buf),
            ResponseParse::Invalid,
            "unparsable: {buf:?}"
        );
        if done(&replies) {
            return (replies, false);
        }
        match s.read(&mut chunk) {
            Ok(0) => return (replies, true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (replies, true),
            Err(e) => panic!("no reply from memcached: {e}; have {replies:?}"),
        }
    }
}

/// Sends `input` and a marker noop; returns the replies before the marker's.
fn exchange(s: &mut TcpStream, input: &[u8]) -> Vec<Reply> {
    let mut msg = input.to_vec();
    msg.extend_from_slice(&noop(MARK));
    s.write_all(&msg).unwrap();
    let (mut replies, closed) = read_replies(s, |r| r.last().is_some_and(|r| r.opaque == MARK));
    assert!(!closed, "closed; replies {replies:?}");
    replies.pop();
    replies
}

fn status(r: &Reply) -> Option<Status> {
    Status::from_code(r.status)
}

fn store(opcode: u8, key: &[u8], flags: u32, data: &[u8], cas: u64) -> Vec<u8> {
    let cmd = StoreCmd::Set; // encode only distinguishes append/prepend (no extras)
    let cmd = if matches!(
        opcode,
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ
    ) {
        StoreCmd::Append
    } else {
        cmd
    };
    packet(
        opcode,
        1,
        cas,
        Command::Store {
            cmd,
            key,
            flags,
            exptime: 0,
            data,
        },
    )
}

fn get(opcode: u8, key: &[u8], touch: Option<u32>) -> Vec<u8> {
    let with_key = matches!(opcode, op::GETK | op::GETKQ | op::GATK | op::GATKQ);
    packet(
        opcode,
        2,
        0,
        Command::Get {
            key,
            touch,
            with_key,
        },
    )
}

fn arith(opcode: u8, key: &[u8], delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    let incr = matches!(opcode, op::INCREMENT | op::INCREMENTQ);
    packet(
        opcode,
        3,
        0,
        Command::Arith {
            incr,
            key,
            delta,
            initial,
            exptime,
        },
    )
}

fn one(s: &mut TcpStream, input: &[u8]) -> Reply {
    let r = exchange(s, input);
    assert_eq!(r.len(), 1, "{r:?}");
    r[0].clone()
}

#[test]
fn every_opcode_gets_the_predicted_reply() {
    let Some((port, _server)) = memcached() else {
        return;
    };
    let mut s = connect(port);
    let k: &[u8] = b"bin live key";

    let r = one(&mut s, &packet(op::VERSION, 9, 0, Command::Version));
    assert_eq!(
        (status(&r), r.value.as_slice(), r.opaque),
        (Some(Status::Success), &b"1.6.18"[..], 9)
    );
    assert_eq!(
        one(
            &mut s,
            &packet(op::FLUSH, 0, 0, Command::Flush { delay: 0 })
        )
        .status,
        0
    );
    assert!(exchange(
        &mut s,
        &packet(op::FLUSHQ, 0, 0, Command::Flush { delay: 0 })
    )
    .is_empty());

    // Stores.
    let set = one(&mut s, &store(op::SET, k, 0x0102_0304, b"hello", 0));
    assert_eq!((status(&set), set.value.len()), (Some(Status::Success), 0));
    assert_ne!(set.cas, 0, "a store reply carries the new CAS");
    assert!(exchange(&mut s, &store(op::SETQ, k, 0x0102_0304, b"hello", 0)).is_empty());
    let r = one(&mut s, &store(op::ADD, k, 0, b"x", 0));
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::KeyExists), Status::KeyExists.message())
    );
    assert_eq!(
        status(&one(&mut s, &store(op::ADDQ, k, 0, b"x", 0))),
        Some(Status::KeyExists)
    );
    let r = one(&mut s, &store(op::REPLACE, b"bin missing", 0, b"x", 0));
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::KeyNotFound), &b"Not found"[..])
    );
    assert_eq!(
        status(&one(&mut s, &store(op::SET, k, 0, b"x", 1))),
        Some(Status::KeyExists)
    );
    let r = one(&mut s, &store(op::APPEND, b"bin missing", 0, b"x", 0));
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::NotStored), &b"Not stored."[..])
    );
    assert_eq!(
        status(&one(&mut s, &store(op::APPEND, k, 0, b"!", 0))),
        Some(Status::Success)
    );
    assert!(exchange(&mut s, &store(op::PREPENDQ, k, 0, b">", 0)).is_empty());
    assert_eq!(
        status(&one(&mut s, &store(op::PREPEND, k, 0, b"<", 0))),
        Some(Status::Success)
    );
    assert!(exchange(&mut s, &store(op::REPLACEQ, b"bin missing", 0, b"x", 0)).len() == 1);
    assert!(exchange(&mut s, &store(op::APPENDQ, k, 0, b"", 0)).is_empty());

    // Gets.
    for code in [op::GET, op::GETQ, op::GETK, op::GETKQ] {
        let r = one(&mut s, &get(code, k, None));
        let key: &[u8] = if matches!(code, op::GETK | op::GETKQ) {
            k
        } else {
            b""
        };
        assert_eq!((r.opcode, status(&r)), (code, Some(Status::Success)));
        assert_eq!(
            (r.extras.as_slice(), r.key.as_slice()),
            (&[1u8, 2, 3, 4][..], key)
        );
        assert_eq!(r.value, b"<>hello!");
        assert_ne!(r.cas, 0);
    }
    let r = one(&mut s, &get(op::GET, b"bin missing", None));
    assert_eq!(
        (status(&r), r.value.as_slice(), r.key.len()),
        (Some(Status::KeyNotFound), &b"Not found"[..], 0)
    );
    let r = one(&mut s, &get(op::GETK, b"bin missing", None));
    assert_eq!(
        (status(&r), r.value.as_slice(), r.key.as_slice()),
        (Some(Status::KeyNotFound), &b""[..], &b"bin missing"[..])
    );
    assert!(exchange(&mut s, &get(op::GETQ, b"bin missing", None)).is_empty());
    assert!(exchange(&mut s, &get(op::GETKQ, b"bin missing", None)).is_empty());

    // Touch and get-and-touch.
    let r = one(
        &mut s,
        &packet(
            op::TOUCH,
            4,
            0,
            Command::Touch {
                key: k,
                exptime: 1000,
            },
        ),
    );
    assert_eq!(
        (status(&r), r.extras.as_slice(), r.value.len()),
        (Some(Status::Success), &[1u8, 2, 3, 4][..], 0)
    );
    for code in [op::GAT, op::GATQ, op::GATK, op::GATKQ] {
        let r = one(&mut s, &get(code, k, Some(1000)));
        assert_eq!((r.opcode, r.value.as_slice()), (code, &b"<>hello!"[..]));
    }
    let r = one(&mut s, &get(op::GATK, b"bin missing", Some(0)));
    assert_eq!(
        (status(&r), r.key.as_slice()),
        (Some(Status::KeyNotFound), &b"bin missing"[..])
    );
    assert!(exchange(&mut s, &get(op::GATQ, b"bin missing", Some(0))).is_empty());
    let touch_miss = packet(
        op::TOUCH,
        4,
        0,
        Command::Touch {
            key: b"bin missing",
            exptime: 0,
        },
    );
    assert_eq!(one(&mut s, &touch_miss).value, b"Not found");

    // Counters.
    let n: &[u8] = b"bin counter";
    let r = one(&mut s, &arith(op::INCREMENT, n, 5, 40, 0));
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::Success), &40u64.to_be_bytes()[..])
    );
    assert_ne!(r.cas, 0);
    let r = one(&mut s, &arith(op::INCREMENT, n, 5, 40, 0));
    assert_eq!(r.value, 45u64.to_be_bytes());
    assert!(exchange(&mut s, &arith(op::DECREMENTQ, n, 50, 0, 0)).is_empty());
    assert_eq!(
        one(&mut s, &arith(op::DECREMENT, n, 1, 0, 0)).value,
        0u64.to_be_bytes()
    );
    let r = one(
        &mut s,
        &arith(op::INCREMENTQ, b"bin missing", 1, 0, u32::MAX),
    );
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::KeyNotFound), &b"Not found"[..])
    );
    let r = one(&mut s, &arith(op::DECREMENT, k, 1, 0, 0));
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::NonNumeric), Status::NonNumeric.message())
    );

    // Deletes.
    let r = one(
        &mut s,
        &packet(op::DELETE, 5, 1, Command::Delete { key: k }),
    );
    assert_eq!(
        status(&r),
        Some(Status::KeyExists),
        "delete checks the request CAS"
    );
    assert!(exchange(
        &mut s,
        &packet(op::DELETEQ, 5, 0, Command::Delete { key: k })
    )
    .is_empty());
    let r = one(
        &mut s,
        &packet(op::DELETEQ, 5, 0, Command::Delete { key: k }),
    );
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::KeyNotFound), &b"Not found"[..])
    );
    assert_eq!(
        status(&one(
            &mut s,
            &packet(op::DELETE, 5, 0, Command::Delete { key: n })
        )),
        Some(Status::Success)
    );

    // Stats: one packet per statistic, then an empty one.
    s.write_all(&packet(op::STAT, 6, 0, Command::Stat { key: b"" }))
        .unwrap();
    let (stats, _) = read_replies(&mut s, |r| r.last().is_some_and(|r| r.key.is_empty()));
    assert!(stats.len() > 20);
    assert!(stats
        .iter()
        .all(|r| r.opcode == op::STAT && r.status == 0 && r.opaque == 6 && r.cas == 0));
    assert!(stats
        .iter()
        .any(|r| r.key == b"version" && r.value == b"1.6.18"));
    assert!(stats.last().unwrap().value.is_empty());
    s.write_all(&packet(op::STAT, 6, 0, Command::Stat { key: b"settings" }))
        .unwrap();
    let (stats, _) = read_replies(&mut s, |r| r.last().is_some_and(|r| r.key.is_empty()));
    assert!(stats
        .iter()
        .any(|r| r.key == b"item_size_max" && r.value == b"1048576"));
    let r = one(
        &mut s,
        &packet(op::STAT, 6, 0, Command::Stat { key: b"bogus" }),
    );
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::KeyNotFound), &b"Not found"[..])
    );

    // SASL is off without -S: unknown command, and the data is swallowed.
    let r = one(
        &mut s,
        &packet(op::SASL_LIST_MECHS, 7, 0, Command::SaslListMechs),
    );
    assert_eq!(
        (status(&r), r.value.as_slice()),
        (Some(Status::UnknownCommand), &b"Unknown command"[..])
    );
    let auth = Command::Sasl {
        step: false,
        mechanism: b"PLAIN",
        data: b"\0user\0pass",
    };
    assert_eq!(
        status(&one(&mut s, &packet(op::SASL_AUTH, 7, 0, auth))),
        Some(Status::UnknownCommand)
    );

    // Quit: quitq closes silently, quit answers first.
    let mut q = connect(port);
    q.write_all(&packet(op::QUITQ, 8, 0, Command::Quit))
        .unwrap();
    let (r, closed) = read_replies(&mut q, |_| false);
    assert!(closed && r.is_empty(), "{r:?}");
    let mut q = connect(port);
    q.write_all(&packet(op::QUIT, 8, 0, Command::Quit)).unwrap();
    let (r, closed) = read_replies(&mut q, |_| false);
    assert!(
        closed && r.len() == 1 && r[0].status == 0 && r[0].opcode == op::QUIT,
        "{r:?}"
    );
}

/// Raw request bytes with any lengths.
fn raw(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], body: Option<u32>) -> Vec<u8> {
    let mut v = vec![0x80, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    let len = body.unwrap_or((extras.len() + key.len() + value.len()) as u32);
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(&u32::from(opcode).to_be_bytes());
    v.extend_from_slice(&0u64.to_be_bytes());
    [v.as_slice(), extras, key, value].concat()
}

/// What memcached should write for `input` (a noop, malformed requests, noops), applying the
/// codec's errors as a server must; and whether it then closes.
fn predict(input: &[u8]) -> (Vec<u8>, bool) {
    let settings = Settings::default();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        match parse_request(&input[pos..], &settings) {
            BinParse::Incomplete { .. } => break,
            BinParse::Request(r, n) => {
                match r.command {
                    Command::Noop => r.write_ok(&mut out, 0, b""),
                    Command::Get { .. } | Command::Touch { .. } => r.write_miss(&mut out),
                    Command::Stat { key: b"bogus" } => r.write_error(&mut out, Status::KeyNotFound),
                    other => panic!("case uses {other:?}"),
                }
                pos += n;
            }
            BinParse::Error(e) => {
                e.write_reply(&mut out);
                if e.close {
                    return (out, true);
                }
                pos += e.consumed + e.swallow;
            }
        }
    }
    (out, false)
}

#[test]
fn malformed_input_gets_memcacheds_exact_bytes() {
    let Some((port, _server)) = memcached() else {
        return;
    };
    let nop = raw(op::NOOP, &[], b"", b"", None);
    let long = [b'k'; 251];
    let big = vec![b'v'; 1 << 20];
    let cases: Vec<Vec<u8>> = vec![
        // Wrong magic after a binary start.
        [
            &nop[..],
            b"\x81\x0a\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        ]
        .concat(),
        [&nop[..], b"get foo\r\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"].concat(),
        // Extras + key longer than the body.
        raw(op::GET, &[], b"key", b"", Some(2)),
        raw(op::SET, &[0; 8], b"key", b"", Some(10)),
        raw(0x55, &[0; 4], b"key", b"", Some(0)),
        // Key too long: for known and unknown opcodes.
        raw(op::GET, &[], &long, b"", None),
        raw(0x55, &[], &long, b"", None),
        // Unknown opcodes: the body length is swallowed after extras + key.
        [raw(0x55, &[], b"", b"", None), nop.clone()].concat(),
        [
            raw(op::VERBOSITY, &1u32.to_be_bytes(), b"", b"", None),
            b"1234".to_vec(),
            nop.clone(),
        ]
        .concat(),
        [
            raw(0xff, &[9; 3], b"ab", b"cdefg", None),
            b"12345".to_vec(),
            nop.clone(),
        ]
        .concat(),
        [raw(0x25, &[], b"", b"xyz", None), nop.clone()].concat(),
        // Wrong extras, key or body for the opcode: invalid arguments, then close.
        raw(op::GET, &[0; 4], b"key", b"", None),
        raw(op::GETQ, &[], b"", b"", None),
        raw(op::GETK, &[], b"key", b"v", None),
        raw(op::SET, &[0; 4], b"key", b"v", None),
        raw(op::ADDQ, &[0; 8], b"", b"v", None),
        raw(op::APPEND, &[0; 8], b"key", b"v", None),
        raw(op::PREPENDQ, &[], b"", b"v", None),
        raw(op::DELETE, &[0; 4], b"key", b"", None),
        raw(op::DELETEQ, &[], b"key", b"v", None),
        raw(op::INCREMENT, &[0; 8], b"key", b"", None),
        raw(op::DECREMENTQ, &[0; 20], b"", b"", None),
        raw(op::QUIT, &[], b"k", b"", None),
        raw(op::FLUSH, &[0; 8], b"", b"", None),
        raw(op::FLUSHQ, &[0; 4], b"", b"x", None),
        raw(op::NOOP, &[], b"", b"x", None),
        raw(op::VERSION, &[0; 4], b"", b"", None),
        raw(op::STAT, &[0; 4], b"", b"", None),
        raw(op::TOUCH, &[], b"key", b"", None),
        raw(op::GATK, &[0; 4], b"", b"", None),
        raw(op::SASL_LIST_MECHS, &[], b"PLAIN", b"", None),
        raw(op::SASL_AUTH, &[0; 4], b"PLAIN", b"", None),
        raw(op::SASL_STEP, &[], b"", b"x", None),
        // Body bytes past the key of stat/touch/gat are read as the next request.
        [raw(op::STAT, &[], b"bogus", &nop, None), nop.clone()].concat(),
        [raw(op::TOUCH, &[0; 4], b"nokey", &nop, None), nop.clone()].concat(),
        [
            raw(
                op::GATQ,
                &[0; 4],
                b"nokey",
                &raw(op::GETK, &[], b"x", b"", None),
                None,
            ),
            nop.clone(),
        ]
        .concat(),
        // SASL off: unknown command, the data swallowed.
        [
            raw(op::SASL_STEP, &[], b"PLAIN", b"secret", None),
            nop.clone(),
        ]
        .concat(),
        // Too large: the value is swallowed without being waited for; set unlinks the old item.
        [raw(op::SET, &[0; 8], b"key", &big, None), nop.clone()].concat(),
        [raw(op::APPENDQ, &[], b"key", &big, None), nop.clone()].concat(),
    ];
    for (i, case) in cases.iter().enumerate() {
        let input = [&nop[..], case, &nop].concat();
        let (want, close) = predict(&input);
        let mut s = connect(port);
        s.write_all(&input).unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        let closed = loop {
            if got.len() >= want.len() && !close {
                break false;
            }
            match s.read(&mut chunk) {
                Ok(0) => break true,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
                Err(e) => panic!("case {i}: no reply ({e}); got {got:?}, want {want:?}"),
            }
        };
        assert_eq!(got, want, "case {i}: {:?}", &case[..case.len().min(40)]);
        assert_eq!(closed, close, "case {i}: close");
        // Every reply parses.
        let mut rest = &got[..];
        while !rest.is_empty() {
            let ResponseParse::Response(_, n) = parse_response(rest) else {
                panic!("case {i}: unparsable reply {rest:?}")
            };
            rest = &rest[n..];
        }
    }
}
