use super::*;
use crate::Request;

/// A request packet built by hand (independent of `encode`), with a lying body length when
/// `body` is given. Leaked so that parsed requests can outlive the statement (tests only).
fn raw(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], body: Option<u32>) -> &'static [u8] {
    let mut v = vec![0x80, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    let len = body.unwrap_or((extras.len() + key.len() + value.len()) as u32);
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
    v.extend_from_slice(&7u64.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    Box::leak(v.into_boxed_slice())
}

fn parse(buf: &[u8]) -> BinParse<'_> {
    parse_request(buf, &Settings::default())
}

fn request(buf: &[u8]) -> (BinRequest<'_>, usize) {
    match parse(buf) {
        BinParse::Request(r, n) => (r, n),
        other => panic!("not a request: {other:?}"),
    }
}

fn error(buf: &[u8]) -> BinError<'_> {
    match parse(buf) {
        BinParse::Error(e) => e,
        other => panic!("not an error: {other:?}"),
    }
}

fn ext(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn header_then_head_then_body_incomplete() {
    let p = raw(opcode::SET, &[0; 8], b"key", b"value", None);
    assert_eq!(parse(&p[..23]), BinParse::Incomplete { total: 24 });
    assert_eq!(parse(&p[..30]), BinParse::Incomplete { total: 35 });
    assert_eq!(parse(&p[..36]), BinParse::Incomplete { total: 40 });
    assert_eq!(request(p).1, 40);
}

#[test]
fn get_family() {
    for (code, quiet, with_key) in [
        (opcode::GET, false, false),
        (opcode::GETQ, true, false),
        (opcode::GETK, false, true),
        (opcode::GETKQ, true, true),
    ] {
        let p = raw(code, &[], b"k y", b"", None);
        let (r, n) = request(p);
        assert_eq!(n, 27);
        assert_eq!(
            (r.opcode, r.opaque, r.cas, r.quiet),
            (code, 0xdead_beef, 7, quiet)
        );
        let touch = None;
        assert_eq!(
            r.command,
            Command::Get {
                key: b"k y",
                touch,
                with_key
            }
        );
        assert_eq!(r.request(), None);
    }
    for (code, quiet, with_key) in [
        (opcode::GAT, false, false),
        (opcode::GATQ, true, false),
        (opcode::GATK, false, true),
        (opcode::GATKQ, true, true),
    ] {
        let p = raw(code, &0xffff_fffe_u32.to_be_bytes(), b"k", b"", None);
        let (r, n) = request(p);
        assert_eq!((n, r.quiet), (29, quiet));
        let touch = Some(0xffff_fffe);
        assert_eq!(
            r.command,
            Command::Get {
                key: b"k",
                touch,
                with_key
            }
        );
    }
    // No key, extras on get, body longer than key: invalid arguments, then close.
    for p in [
        raw(opcode::GET, &[], b"", b"", None),
        raw(opcode::GETK, &[1, 2, 3, 4], b"k", b"", None),
        raw(opcode::GETQ, &[], b"k", b"v", None),
        raw(opcode::GAT, &[], b"k", b"", None),
        raw(opcode::GATK, &[0; 4], b"", b"", None),
    ] {
        let e = error(p);
        assert_eq!((e.status, e.close), (Some(Status::InvalidArguments), true));
    }
}

#[test]
fn touch() {
    let p = raw(opcode::TOUCH, &10u32.to_be_bytes(), b"k", b"", None);
    let (r, _) = request(p);
    assert_eq!(
        r.command,
        Command::Touch {
            key: b"k",
            exptime: 10
        }
    );
    let req = Request::Touch {
        key: b"k",
        exptime: 10,
        noreply: false,
    };
    assert_eq!(r.request(), Some(req));
    // The body past extras + key is not consumed: memcached reads it as the next request.
    let p = raw(opcode::TOUCH, &10u32.to_be_bytes(), b"k", b"xy", None);
    assert_eq!(request(p).1, 29);
}

#[test]
fn stores() {
    let e = ext(&[&5u32.to_be_bytes(), &60u32.to_be_bytes()]);
    for (code, cmd, quiet) in [
        (opcode::SET, StoreCmd::Set, false),
        (opcode::SETQ, StoreCmd::Set, true),
        (opcode::ADD, StoreCmd::Add, false),
        (opcode::ADDQ, StoreCmd::Add, true),
        (opcode::REPLACE, StoreCmd::Replace, false),
        (opcode::REPLACEQ, StoreCmd::Replace, true),
    ] {
        let p = raw(code, &e, b"key", b"val\r\n", None);
        let (r, n) = request(p);
        assert_eq!((n, r.quiet), (p.len(), quiet));
        let data = b"val\r\n";
        let command = Command::Store {
            cmd,
            key: b"key",
            flags: 5,
            exptime: 60,
            data,
        };
        assert_eq!(r.command, command);
        // A request CAS turns set/add/replace into cas, as memcached's NREAD_CAS.
        let Some(Request::Store {
            cmd: mapped,
            cas_unique,
            noreply,
            ..
        }) = r.request()
        else {
            panic!("no mapping")
        };
        assert_eq!((mapped, cas_unique, noreply), (StoreCmd::Cas, 7, quiet));
    }
    for (code, cmd) in [
        (opcode::APPEND, StoreCmd::Append),
        (opcode::APPENDQ, StoreCmd::Append),
        (opcode::PREPEND, StoreCmd::Prepend),
        (opcode::PREPENDQ, StoreCmd::Prepend),
    ] {
        let p = raw(code, &[], b"key", b"", None);
        let (r, _) = request(p);
        let command = Command::Store {
            cmd,
            key: b"key",
            flags: 0,
            exptime: 0,
            data: b"",
        };
        assert_eq!(r.command, command);
        assert!(matches!(r.request(), Some(Request::Store { cmd: c, .. }) if c == cmd));
        let e = error(raw(code, &[0; 4], b"key", b"", None));
        assert_eq!(e.status, Some(Status::InvalidArguments));
    }
    for p in [
        raw(opcode::SET, &[0; 4], b"key", b"v", None),
        raw(opcode::ADD, &[0; 8], b"", b"v", None),
    ] {
        assert_eq!(error(p).status, Some(Status::InvalidArguments));
    }
}

#[test]
fn not_stored_status_depends_on_the_command() {
    let e = [0u8; 8];
    let want = [
        (opcode::ADDQ, Status::KeyExists),
        (opcode::REPLACE, Status::KeyNotFound),
        (opcode::SET, Status::NotStored),
    ];
    for (code, status) in want {
        let (mut r, _) = request(raw(code, &e, b"k", b"v", None));
        r.cas = 0;
        assert_eq!(r.not_stored_status(), status);
        r.cas = 1;
        assert_eq!(r.not_stored_status(), Status::NotStored);
    }
    let (r, _) = request(raw(opcode::APPEND, &[], b"k", b"v", None));
    assert_eq!(r.not_stored_status(), Status::NotStored);
}

#[test]
fn too_large_swallows_without_waiting_for_the_value() {
    let settings = Settings {
        limits: crate::Limits {
            item_size_max: 100,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = ext(&[&0u32.to_be_bytes(), &0u32.to_be_bytes()]);
    // 48 + 1 + 2 + 8 + key 3 + value 38 = 100 fits; 39 does not.
    let fits = raw(opcode::SET, &e, b"key", &[b'v'; 38], None);
    assert!(matches!(
        parse_request(fits, &settings),
        BinParse::Request(..)
    ));
    let big = raw(opcode::SETQ, &e, b"key", &[], Some(11 + 39));
    let BinParse::Error(err) = parse_request(big, &settings) else {
        panic!()
    };
    assert_eq!(err.status, Some(Status::TooLarge));
    assert_eq!((err.consumed, err.swallow, err.close), (35, 39, false));
    assert_eq!(err.unlink, Some(&b"key"[..]));
    let big = raw(opcode::ADD, &e, b"key", &[], Some(0xffff_ffff));
    let BinParse::Error(err) = parse_request(big, &settings) else {
        panic!()
    };
    assert_eq!((err.swallow, err.unlink), (0xffff_ffff - 11, None));
    let big = raw(opcode::APPEND, &[], b"key", &[], Some(3 + 40));
    let BinParse::Error(err) = parse_request(big, &settings) else {
        panic!()
    };
    assert_eq!((err.status, err.swallow), (Some(Status::TooLarge), 40));
}

#[test]
fn delete_and_arith() {
    let (r, _) = request(raw(opcode::DELETEQ, &[], b"k", b"", None));
    assert_eq!((r.command, r.quiet), (Command::Delete { key: b"k" }, true));
    assert_eq!(r.request(), None, "delete with a CAS has no text form");
    assert!(error(raw(opcode::DELETE, &[0; 4], b"k", b"", None)).close);
    let e = ext(&[
        &3u64.to_be_bytes(),
        &9u64.to_be_bytes(),
        &u32::MAX.to_be_bytes(),
    ]);
    for (code, incr, quiet) in [
        (opcode::INCREMENT, true, false),
        (opcode::INCREMENTQ, true, true),
        (opcode::DECREMENT, false, false),
        (opcode::DECREMENTQ, false, true),
    ] {
        let (r, n) = request(raw(code, &e, b"n", b"", None));
        assert_eq!((n, r.quiet), (45, quiet));
        let command = Command::Arith {
            incr,
            key: b"n",
            delta: 3,
            initial: 9,
            exptime: u32::MAX,
        };
        assert_eq!(r.command, command);
        let bad = error(raw(code, &e[..8], b"n", b"", None));
        assert_eq!(bad.status, Some(Status::InvalidArguments));
    }
}

#[test]
fn no_key_commands() {
    for (code, command) in [
        (opcode::VERSION, Command::Version),
        (opcode::NOOP, Command::Noop),
        (opcode::QUIT, Command::Quit),
        (opcode::QUITQ, Command::Quit),
        (opcode::FLUSH, Command::Flush { delay: 0 }),
        (opcode::FLUSHQ, Command::Flush { delay: 0 }),
    ] {
        let (r, n) = request(raw(code, &[], b"", b"", None));
        assert_eq!((r.command, n), (command, 24));
        let e = error(raw(code, &[], b"k", b"", None));
        assert_eq!((e.status, e.close), (Some(Status::InvalidArguments), true));
    }
    let (r, n) = request(raw(opcode::FLUSH, &30u32.to_be_bytes(), b"", b"", None));
    assert_eq!((r.command, n), (Command::Flush { delay: 30 }, 28));
    let req = Request::FlushAll {
        delay: 30,
        noreply: false,
    };
    assert_eq!(r.request(), Some(req));
    let e = error(raw(opcode::FLUSH, &[0; 8], b"", b"", None));
    assert_eq!(e.status, Some(Status::InvalidArguments));
}

#[test]
fn stat_and_verbosity() {
    let (r, n) = request(raw(opcode::STAT, &[], b"", b"", None));
    assert_eq!((r.command, n), (Command::Stat { key: b"" }, 24));
    let (r, _) = request(raw(opcode::STAT, &[], b"settings", b"", None));
    assert_eq!(r.command, Command::Stat { key: b"settings" });
    assert!(error(raw(opcode::STAT, &[0], b"", b"", None)).close);
    // Not implemented by memcached 1.6.18's binary protocol.
    let e = error(raw(opcode::VERBOSITY, &1u32.to_be_bytes(), b"", b"", None));
    assert_eq!(
        (e.status, e.consumed, e.swallow),
        (Some(Status::UnknownCommand), 28, 4)
    );
}

#[test]
fn sasl() {
    let off = error(raw(opcode::SASL_AUTH, &[], b"PLAIN", b"\0u\0p", None));
    assert_eq!(off.status, Some(Status::UnknownCommand));
    assert_eq!((off.consumed, off.swallow, off.close), (29, 4, false));
    let off = error(raw(opcode::SASL_LIST_MECHS, &[], b"", b"", None));
    assert_eq!((off.status, off.swallow), (Some(Status::UnknownCommand), 0));
    let on = Settings {
        sasl: true,
        ..Default::default()
    };
    let p = raw(opcode::SASL_STEP, &[], b"PLAIN", b"\0u\0p", None);
    let BinParse::Request(r, n) = parse_request(p, &on) else {
        panic!()
    };
    let command = Command::Sasl {
        step: true,
        mechanism: b"PLAIN",
        data: b"\0u\0p",
    };
    assert_eq!((r.command, n), (command, p.len()));
    let p = raw(opcode::SASL_AUTH, &[], &[b'M'; 33], b"x", None);
    let BinParse::Error(e) = parse_request(p, &on) else {
        panic!()
    };
    assert_eq!(
        (e.status, e.swallow, e.close),
        (Some(Status::InvalidArguments), 1, false)
    );
    // Before authentication only version and SASL pass.
    let p = raw(opcode::GET, &[], b"k", b"", None);
    let BinParse::Error(e) = parse_request(p, &on) else {
        panic!()
    };
    assert_eq!((e.status, e.close), (Some(Status::AuthError), true));
    let p = raw(opcode::VERSION, &[], b"", b"", None);
    assert!(matches!(parse_request(p, &on), BinParse::Request(..)));
    let authed = Settings {
        authenticated: true,
        ..on
    };
    let p = raw(opcode::GET, &[], b"k", b"", None);
    assert!(matches!(parse_request(p, &authed), BinParse::Request(..)));
}

#[test]
fn malformed_frames() {
    let mut p = raw(opcode::NOOP, &[], b"", b"", None).to_vec();
    p[0] = 0x81;
    let e = error(&p);
    assert_eq!((e.status, e.close), (None, true));
    let mut out = Vec::new();
    e.write_reply(&mut out);
    assert!(out.is_empty());
    // Key + extras longer than the body: unknown command, then close.
    let e = error(raw(opcode::GET, &[], b"key", b"", Some(2)));
    assert_eq!((e.status, e.close), (Some(Status::UnknownCommand), true));
    // Key too long, even for an unknown opcode.
    let long = [b'k'; 251];
    let e = error(raw(0x55, &[], &long, b"", None));
    assert_eq!((e.status, e.close), (Some(Status::InvalidArguments), true));
    assert!(matches!(
        parse(raw(opcode::GET, &[], &long[..250], b"", None)),
        BinParse::Request(..)
    ));
    // Unknown opcode: the body length is swallowed after extras + key.
    let e = error(raw(0x55, &[1], b"ab", b"cdef", None));
    assert_eq!((e.consumed, e.swallow, e.close), (27, 7, false));
    // A key length of 65535 is waited for (memcached reads header + extras + key first).
    let p = raw(opcode::GET, &[], b"", b"", None);
    let mut p2 = p.to_vec();
    p2[2] = 0xff;
    p2[3] = 0xff;
    p2[4] = 0xff;
    assert_eq!(
        parse(&p2),
        BinParse::Incomplete {
            total: 24 + 255 + 65535
        }
    );
}

fn one(out: &[u8]) -> BinResponse<'_> {
    match parse_response(out) {
        ResponseParse::Response(r, n) => {
            assert_eq!(n, out.len());
            r
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn compose_replies() {
    let get = raw(opcode::GETK, &[], b"key", b"", None);
    let (r, _) = request(get);
    let mut out = Vec::new();
    r.write_hit(&mut out, 0x01020304, 99, b"value");
    let mut want = vec![0x81, 0x0c, 0, 3, 4, 0, 0, 0, 0, 0, 0, 12];
    want.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
    want.extend_from_slice(&99u64.to_be_bytes());
    want.extend_from_slice(&[1, 2, 3, 4]);
    want.extend_from_slice(b"keyvalue");
    assert_eq!(out, want);
    out.clear();
    r.write_miss(&mut out);
    let m = one(&out);
    assert_eq!(
        (m.status(), m.key, m.value),
        (Some(Status::KeyNotFound), &b"key"[..], &b""[..])
    );

    let (r, _) = request(raw(opcode::GET, &[], b"key", b"", None));
    out.clear();
    r.write_miss(&mut out);
    assert_eq!(
        (one(&out).value, one(&out).key),
        (&b"Not found"[..], &b""[..])
    );
    let (r, _) = request(raw(opcode::GETQ, &[], b"key", b"", None));
    out.clear();
    r.write_miss(&mut out);
    assert!(out.is_empty());
    r.write_hit(&mut out, 0, 1, b"v");
    assert_eq!(
        (one(&out).opcode, one(&out).extras),
        (opcode::GETQ, &[0u8; 4][..])
    );

    let (r, _) = request(raw(opcode::TOUCH, &[0; 4], b"key", b"", None));
    out.clear();
    r.write_hit(&mut out, 5, 1, b"ignored");
    let t = one(&out);
    assert_eq!(
        (t.extras, t.key, t.value),
        (&5u32.to_be_bytes()[..], &b""[..], &b""[..])
    );

    let (r, _) = request(raw(opcode::SETQ, &[0; 8], b"key", b"v", None));
    out.clear();
    r.write_ok(&mut out, 5, b"");
    assert!(out.is_empty(), "quiet success is silent");
    r.write_error(&mut out, Status::KeyExists);
    let e = one(&out);
    assert_eq!(
        (e.status(), e.value, e.cas),
        (Some(Status::KeyExists), &b"Data exists for key."[..], 0)
    );

    let (r, _) = request(raw(opcode::INCREMENT, &[0; 20], b"n", b"", None));
    out.clear();
    r.write_arith(&mut out, 42, 8);
    let a = one(&out);
    assert_eq!((a.value, a.cas), (&42u64.to_be_bytes()[..], 8));

    out.clear();
    write_stat(&mut out, 3, b"pid", b"12");
    write_stat(&mut out, 3, b"", b"");
    let ResponseParse::Response(s, n) = parse_response(&out) else {
        panic!()
    };
    assert_eq!(
        (s.opcode, s.key, s.value, s.opaque, n),
        (opcode::STAT, &b"pid"[..], &b"12"[..], 3, 29)
    );
    assert_eq!(one(&out[n..]).key, b"");

    let e = error(raw(0x55, &[], b"", b"", None));
    out.clear();
    e.write_reply(&mut out);
    let u = one(&out);
    assert_eq!(
        (u.opcode, u.opaque, u.value),
        (0x55, 0xdead_beef, &b"Unknown command"[..])
    );
}

#[test]
fn response_framing() {
    assert_eq!(
        parse_response(&[0x81; 10]),
        ResponseParse::Incomplete { total: 24 }
    );
    assert_eq!(parse_response(&[0x80; 24]), ResponseParse::Invalid);
    let mut out = Vec::new();
    write_stat(&mut out, 0, b"ab", b"cd");
    assert_eq!(
        parse_response(&out[..27]),
        ResponseParse::Incomplete { total: 28 }
    );
    out[3] = 9;
    assert_eq!(parse_response(&out), ResponseParse::Invalid);
}

#[test]
fn encode_round_trips() {
    for p in [
        raw(opcode::SET, &[0, 0, 0, 1, 0, 0, 0, 2], b"key", b"val", None),
        raw(opcode::GATKQ, &[0, 0, 0, 9], b"key", b"", None),
        raw(opcode::INCREMENTQ, &[1; 20], b"key", b"", None),
        raw(opcode::APPEND, &[], b"key", b"tail", None),
        raw(opcode::FLUSHQ, &[0, 0, 0, 9], b"", b"", None),
        raw(opcode::STAT, &[], b"items", b"", None),
        raw(opcode::TOUCH, &[0, 0, 0, 9], b"key", b"", None),
    ] {
        let (r, _) = request(p);
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(out, p);
    }
}

#[test]
fn from_header_takes_opcode_and_opaque_of_what_arrived() {
    let p = raw(opcode::SET, &[0; 8], b"key", b"v", None);
    let r = BinRequest::from_header(p);
    assert_eq!(
        (r.opcode, r.opaque, r.cas, r.quiet),
        (opcode::SET, 0xdead_beef, 0, false)
    );
    let r = BinRequest::from_header(&p[..14]);
    assert_eq!((r.opcode, r.opaque), (opcode::SET, 0xdead_0000));
    assert_eq!(BinRequest::from_header(&[0x80]).opcode, 0);
}

#[test]
fn key_range_once_the_header_is_in() {
    let p = raw(opcode::SET, &[0; 8], b"key", b"v", None);
    assert_eq!(key_range(p), Some(32..35));
    assert_eq!(&p[key_range(&p[..HEADER_LEN]).unwrap()], b"key");
    assert_eq!(key_range(&p[..HEADER_LEN - 1]), None);
}
