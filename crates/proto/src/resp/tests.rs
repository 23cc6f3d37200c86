use super::*;
use crate::response::{Frame, MAX_REPLY_LINE};
use proptest::prelude::*;

fn lim() -> Limits {
    Limits::default()
}

fn args_of(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
    match parse_request(buf, &lim()) {
        RespParse::Request(r, n) => (r.args().map(<[u8]>::to_vec).collect(), n),
        other => panic!("{other:?}"),
    }
}

fn err_of(buf: &[u8], limits: &Limits) -> &'static [u8] {
    match parse_request(buf, limits) {
        RespParse::Error { reply, close } => {
            assert!(close);
            reply
        }
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn incomplete(buf: &[u8]) -> Option<usize> {
    match parse_request(buf, &lim()) {
        RespParse::Incomplete { total } => total,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn v(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn multibulk_basic() {
    let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\nrest";
    let (a, n) = args_of(buf);
    assert_eq!(a, v(&["SET", "k", ""]));
    assert_eq!(n, buf.len() - 4);
    match parse_request(buf, &lim()) {
        RespParse::Request(r, _) => {
            assert_eq!(r.raw_multibulk(), Some(&buf[..n]));
            assert_eq!(r.name(), b"SET");
            assert!(!r.is_inline());
        }
        _ => unreachable!(),
    }
}

#[test]
fn many_args_beyond_inline_slots() {
    let mut buf = Vec::new();
    let items: Vec<String> = (0..20).map(|i| format!("a{i}")).collect();
    write_command(&mut buf, items.len(), items.iter().map(|s| s.as_bytes()));
    let RespParse::Request(r, n) = parse_request(&buf, &lim()) else {
        panic!()
    };
    assert_eq!(n, buf.len());
    for (i, it) in items.iter().enumerate() {
        assert_eq!(r.arg(i), Some(it.as_bytes()));
    }
    assert_eq!(r.arg(20), None);
}

// Expected replies below were observed from redis-server 7.0.15 (nc / python socket).
#[test]
fn multibulk_count_errors() {
    for bad in [
        &b"*abc\r\n"[..],
        b"*-0\r\n",
        b"*01\r\n",
        b"*+1\r\n",
        b"*\r\n",
        b"*1 \r\n",
        b"* 1\r\n",
        b"*2147483648\r\n",
        b"*1\n$4\r\nPING\r\n",
        b"*-99999999999999999999\r\n",
    ] {
        assert_eq!(err_of(bad, &lim()), ERR_INVALID_MULTIBULK);
    }
    // INT_MAX itself is accepted (redis 7), then more bytes are awaited.
    assert_eq!(incomplete(b"*2147483647\r\n"), None);
    assert_eq!(incomplete(b"*1048577\r\n"), None);
    let old = Limits {
        max_multibulk_len: 1024 * 1024,
        ..lim()
    };
    assert_eq!(err_of(b"*1048577\r\n", &old), ERR_INVALID_MULTIBULK);
    assert!(matches!(
        parse_request(b"*1048576\r\n", &old),
        RespParse::Incomplete { .. }
    ));
}

#[test]
fn non_positive_counts_are_skipped() {
    assert_eq!(parse_request(b"*0\r\nPING\r\n", &lim()), RespParse::Skip(4));
    assert_eq!(parse_request(b"*-1\r\n", &lim()), RespParse::Skip(5));
    assert_eq!(
        parse_request(b"*-2147483649\r\n", &lim()),
        RespParse::Skip(14)
    );
}

#[test]
fn bulk_length_errors() {
    for bad in [
        &b"*1\r\n$536870913\r\n"[..],
        b"*1\r\n$-1\r\n",
        b"*1\r\n$abc\r\n",
        b"*1\r\n$04\r\n",
        b"*1\r\n$\r\n",
        b"*1\r\n$-0\r\n",
        b"*1\r\n$4 \r\n",
    ] {
        assert_eq!(err_of(bad, &lim()), ERR_INVALID_BULK);
    }
    // 512 MB exactly is fine: nothing is allocated, the total is announced.
    assert_eq!(
        incomplete(b"*1\r\n$536870912\r\n"),
        Some(16 + 536870912 + 2)
    );
}

#[test]
fn expected_dollar() {
    assert_eq!(
        err_of(b"*1\r\nx4\r\nPING\r\n", &lim()),
        b"-ERR Protocol error: expected '$', got 'x'\r\n"
    );
    assert_eq!(
        err_of(b"*1\r\n\r\n4\r\n", &lim()),
        b"-ERR Protocol error: expected '$', got ' '\r\n"
    );
    assert_eq!(
        err_of(b"*1\r\n\n4\r\n", &lim()),
        b"-ERR Protocol error: expected '$', got ' '\r\n"
    );
    assert_eq!(
        err_of(b"*1\r\n\xff4\r\n", &lim()),
        b"-ERR Protocol error: expected '$', got '\xff'\r\n"
    );
    // A NUL hides the line end from redis's strchr: still waiting.
    assert_eq!(incomplete(b"*1\r\n\x004\r\nPING\r\n"), None);
}

#[test]
fn too_big_count_strings() {
    let mut b = b"*".to_vec();
    b.extend(std::iter::repeat_n(b'1', 65535));
    assert_eq!(incomplete(&b), None);
    b.push(b'1');
    assert_eq!(err_of(&b, &lim()), ERR_TOO_BIG_MBULK);
    let mut b = b"*1\r\n$".to_vec();
    b.extend(std::iter::repeat_n(b'1', 65535));
    assert_eq!(incomplete(&b), None);
    b.push(b'1');
    assert_eq!(err_of(&b, &lim()), ERR_TOO_BIG_BULK);
}

#[test]
fn unauthenticated_bounds() {
    let l = Limits {
        unauthenticated: true,
        ..lim()
    };
    assert_eq!(err_of(b"*11\r\n", &l), ERR_UNAUTH_MULTIBULK);
    assert!(matches!(
        parse_request(b"*10\r\n", &l),
        RespParse::Incomplete { .. }
    ));
    assert_eq!(err_of(b"*1\r\n$16385\r\n", &l), ERR_UNAUTH_BULK);
    assert!(matches!(
        parse_request(b"*1\r\n$16384\r\n", &l),
        RespParse::Incomplete { .. }
    ));
}

#[test]
fn crlf_quirks_match_redis() {
    // Bytes after '\r' and after bulk data are skipped unchecked.
    assert_eq!(args_of(b"*1\r\n$4\r\nPINGXY"), (v(&["PING"]), 14));
    assert_eq!(args_of(b"*1\rX$4\r\nPING\r\n").0, v(&["PING"]));
    assert_eq!(args_of(b"*1\r\n$4\rXPING\r\n").0, v(&["PING"]));
    assert_eq!(
        args_of(b"*2\r\n$4\r\nECHO\r\n$1\r\n\x00\r\n").0,
        vec![b"ECHO".to_vec(), vec![0]]
    );
    for partial in [
        &b"*1\r\n"[..],
        b"*1\r",
        b"*1\r\n$4\r\nPING",
        b"*1\r\n$4\r\nPING\r",
        b"*1\r\n$0\r\n",
    ] {
        assert!(matches!(
            parse_request(partial, &lim()),
            RespParse::Incomplete { .. }
        ));
    }
    assert_eq!(incomplete(b"*1\r\n$4\r\nPI"), Some(14));
}

#[test]
fn inline_commands() {
    assert_eq!(args_of(b"PING\r\n"), (v(&["PING"]), 6));
    assert_eq!(args_of(b"PING\n"), (v(&["PING"]), 5));
    assert_eq!(args_of(b"PING\rX\n").0, v(&["PING", "X"]));
    assert_eq!(args_of(b"ECHO  a\t b \r\n").0, v(&["ECHO", "a", "b"]));
    assert_eq!(parse_request(b"\r\nPING\r\n", &lim()), RespParse::Skip(2));
    assert_eq!(parse_request(b"   \r\n", &lim()), RespParse::Skip(5));
    assert_eq!(incomplete(b"PI\x00NG\r\n"), None);
    assert_eq!(incomplete(b"PING"), None);
    let RespParse::Request(r, _) = parse_request(b"set k v\r\n", &lim()) else {
        panic!()
    };
    assert!(r.is_inline() && r.raw_multibulk().is_none());
    let mut mb = Vec::new();
    r.write_multibulk(&mut mb);
    assert_eq!(mb, b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n");
}

#[test]
fn inline_quotes_like_sdssplitargs() {
    assert_eq!(args_of(b"ECHO \"a\\x41\\n\"\r\n").0, v(&["ECHO", "aA\n"]));
    assert_eq!(args_of(b"ECHO 'a\\'b'\r\n").0, v(&["ECHO", "a'b"]));
    assert_eq!(
        args_of(b"ECHO \"\\t\\r\\x4g\\q\"\r\n").0,
        v(&["ECHO", "\t\rx4gq"])
    );
    assert_eq!(args_of(b"ECHO \"\"\r\n").0, v(&["ECHO", ""]));
    assert_eq!(args_of(b"ECHO '' x\r\n").0, v(&["ECHO", "", "x"]));
    assert_eq!(args_of(b"ECHO \"a\"\t\"b\"\r\n").0, v(&["ECHO", "a", "b"]));
    assert_eq!(args_of(b"set a\"b c\" d\r\n").0, v(&["set", "ab c", "d"]));
    for bad in [
        &b"PING \"a\r\n"[..],
        b"ECHO 'a\\\\'\r\n",
        b"ECHO \"a\"b\r\n",
        b"ECHO 'a'b\r\n",
    ] {
        assert_eq!(err_of(bad, &lim()), ERR_UNBALANCED);
    }
}

#[test]
fn inline_too_big() {
    let b = vec![b'P'; 65536];
    assert_eq!(incomplete(&b), None);
    assert_eq!(err_of(&vec![b'P'; 65537], &lim()), ERR_TOO_BIG_INLINE);
    // With its line end present, a long line is taken (as redis does once it has read it).
    let mut b = vec![b'P'; 70000];
    b.extend_from_slice(b"\r\n");
    assert_eq!(args_of(&b).1, 70002);
}

#[test]
fn reply_len_cases() {
    assert_eq!(reply_len(b"+OK\r\n"), Ok(Some(5)));
    assert_eq!(reply_len(b"-ERR x\r\nmore"), Ok(Some(8)));
    assert_eq!(reply_len(b":-12\r\n"), Ok(Some(6)));
    assert_eq!(reply_len(b"$-1\r\n"), Ok(Some(5)));
    assert_eq!(reply_len(b"$3\r\nabc\r\n+"), Ok(Some(9)));
    assert_eq!(reply_len(b"*-1\r\n"), Ok(Some(5)));
    assert_eq!(reply_len(b"*0\r\n"), Ok(Some(4)));
    assert_eq!(reply_len(b"*2\r\n*1\r\n:1\r\n$1\r\na\r\n"), Ok(Some(19)));
    assert_eq!(reply_len(b"*2\r\n*1\r\n:1\r\n"), Ok(None));
    assert_eq!(reply_len(b"$3\r\nabc\r"), Ok(None));
    assert_eq!(reply_len(b""), Ok(None));
    assert_eq!(reply_len(b"+OK"), Ok(None));
    assert_eq!(reply_len(b"$3\r\nabcde"), Err(RespError::BadTerminator));
    assert_eq!(reply_len(b"+OK\n"), Err(RespError::BadTerminator));
    assert_eq!(reply_len(b"!3\r\n"), Err(RespError::BadType(b'!')));
    assert_eq!(reply_len(b"$x\r\n"), Err(RespError::BadLength));
    assert_eq!(reply_len(b":1.5\r\n"), Err(RespError::BadLength));
    assert_eq!(reply_len(b"*-2\r\n"), Err(RespError::BadLength));
    assert_eq!(reply_len(b"$536870913\r\n"), Err(RespError::BadLength));
    // Deep nesting needs no stack.
    let mut deep = b"*1\r\n".repeat(100_000);
    assert_eq!(reply_len(&deep), Ok(None));
    deep.extend_from_slice(b":1\r\n");
    assert_eq!(reply_len(&deep), Ok(Some(deep.len())));
}

#[test]
fn writers() {
    let mut o = Vec::new();
    write_bulk(&mut o, b"ab");
    write_nil(&mut o);
    write_array_header(&mut o, 3);
    write_error(&mut o, b"ERR bad\r\nthing");
    write_integer(&mut o, -7);
    write_simple(&mut o, b"OK");
    assert_eq!(
        o,
        b"$2\r\nab\r\n$-1\r\n*3\r\n-ERR bad  thing\r\n:-7\r\n+OK\r\n"
    );
    assert_eq!(view_reply(b"-ERR x\r\n"), Ok(ReplyView::Error(b"ERR x")));
    assert_eq!(
        view_reply(b"$2\r\nab\r\n"),
        Ok(ReplyView::Bulk(Some(b"ab")))
    );
    assert_eq!(
        view_reply(b"*2\r\n:1\r\n:2\r\n"),
        Ok(ReplyView::Array(Some((2, &b":1\r\n:2\r\n"[..]))))
    );
    let elems: Vec<_> = array_elements(b":1\r\n$1\r\nx\r\n").collect();
    assert_eq!(elems, vec![Ok(&b":1\r\n"[..]), Ok(&b"$1\r\nx\r\n"[..])]);
}

#[test]
fn parse_ll_like_string2ll() {
    assert_eq!(parse_ll(b"0"), Some(0));
    assert_eq!(parse_ll(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(parse_ll(b"9223372036854775807"), Some(i64::MAX));
    for bad in [
        &b""[..],
        b"-",
        b"-0",
        b"01",
        b"+1",
        b" 1",
        b"1 ",
        b"9223372036854775808",
    ] {
        assert_eq!(parse_ll(bad), None, "{bad:?}");
    }
}

/// Seeds also used by the fuzz target: must not break the driver's invariants.
#[test]
fn fuzz_seeds() {
    let seeds: &[&[u8]] = &[
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
        b"PING\r\n\r\nECHO \"a\\x41\" 'b'\r\n*0\r\n*-1\r\nQUIT\n",
        b"*1\r\n$4\r\nPINGXY*1\r\n$1\r\n\xff\r\n",
        b"*2\r\n$3\r\nGET\r\n$-1\r\n",
        b"*1\r\nx\r\n",
        b"ECHO \"unbalanced\r\n",
    ];
    for s in seeds {
        for chunk in [1, 3, 7, s.len()] {
            let whole = drive::run(s, s.len(), &lim());
            assert_eq!(drive::run(s, chunk, &lim()), whole);
        }
    }
    assert_eq!(drive::run(seeds[0], 1, &lim()).requests.len(), 2);
    assert_eq!(drive::run(seeds[1], 1, &lim()).requests.len(), 3);
    assert_eq!(
        drive::run(seeds[4], 1, &lim()).error,
        Some(&EXPECTED_DOLLAR[b'x' as usize][..])
    );
}

#[derive(Clone, Debug)]
enum Model {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Model>>),
}

fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        any::<u8>().prop_filter("no line end", |b| *b != b'\r' && *b != b'\n'),
        0..12,
    )
}

fn model() -> impl Strategy<Value = Model> {
    let leaf = prop_oneof![
        line_bytes().prop_map(Model::Simple),
        line_bytes().prop_map(Model::Error),
        any::<i64>().prop_map(Model::Int),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..40)).prop_map(Model::Bulk),
        Just(Model::Array(None)),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop::collection::vec(inner, 0..6).prop_map(|v| Model::Array(Some(v)))
    })
}

fn serialize(m: &Model, out: &mut Vec<u8>) {
    match m {
        Model::Simple(s) => write_simple(out, s),
        Model::Error(s) => {
            out.push(b'-');
            out.extend_from_slice(s);
            out.extend_from_slice(b"\r\n");
        }
        Model::Int(n) => write_integer(out, *n),
        Model::Bulk(None) => write_nil(out),
        Model::Bulk(Some(b)) => write_bulk(out, b),
        Model::Array(None) => out.extend_from_slice(b"*-1\r\n"),
        Model::Array(Some(v)) => {
            write_array_header(out, v.len());
            for e in v {
                serialize(e, out);
            }
        }
    }
}

fn arg_list() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 1..12)
}

const PIECES: &[&[u8]] = &[
    b"*", b"$", b"\r\n", b"\r", b"\n", b"1", b"2", b"-1", b"0", b"\"", b"'", b"\\x4", b" ", b"a",
    b"\0",
];

fn is_incomplete(p: RespParse<'_>) -> bool {
    matches!(p, RespParse::Incomplete { .. })
}

/// Bytes that make length and reply lines interesting.
const LINE_BYTES: &[u8] = b"0123456789-+$*\r\n\0 a";

proptest! {
    #[test]
    fn simple_length_agrees_with_the_general_path(
        line in prop::collection::vec(prop::sample::select(LINE_BYTES), 0..26),
        type_byte in prop::sample::select(&b"*$"[..]),
    ) {
        let mut buf = vec![type_byte];
        buf.extend_from_slice(&line);
        if let Some((n, next)) = simple_length(&buf, 0) {
            let (cr, after) = length_line(&buf, 0, &lim(), ERR_TOO_BIG_BULK).unwrap();
            prop_assert_eq!(after, next);
            prop_assert_eq!(parse_ll(&buf[1..cr]), Some(n));
        }
    }

    #[test]
    fn find_term_is_the_first_term_before_any_nul(
        line in prop::collection::vec(prop::sample::select(LINE_BYTES), 0..40),
    ) {
        let want = line.iter().position(|&b| b == b'\r' || b == 0).filter(|&i| line[i] == b'\r');
        prop_assert_eq!(find_term(&line, b'\r'), want);
    }

    #[test]
    fn simple_reply_len_agrees_with_the_general_path(
        head in prop::sample::select(&b"+-$"[..]),
        line in prop::collection::vec(prop::sample::select(LINE_BYTES), 0..30),
    ) {
        let mut buf = vec![head];
        buf.extend_from_slice(&line);
        if let Some(n) = reply::simple_reply_len(&buf) {
            prop_assert_eq!(reply::general_reply_len(&buf), Ok(Some(n)));
        }
    }

    #[test]
    fn simple_bulk_len_agrees_with_the_general_path(
        digits in prop::collection::vec(prop::sample::select(&b"0123456789"[..]), 0..10),
        sep in prop::sample::select(&["\r\n", "\r", "\n", "\r\r"][..]),
        data in prop::collection::vec(prop::sample::select(LINE_BYTES), 0..12),
        tail in prop::sample::select(&["\r\n", "\r", "", "\n\r", "\r\nxx"][..]),
    ) {
        let mut buf = b"$".to_vec();
        buf.extend_from_slice(&digits);
        buf.extend_from_slice(sep.as_bytes());
        buf.extend_from_slice(&data);
        buf.extend_from_slice(tail.as_bytes());
        let want = reply::general_reply_len(&buf);
        match reply::simple_reply_len(&buf) {
            Some(n) => prop_assert_eq!(want, Ok(Some(n))),
            // Only lines the general path must judge are left to it.
            None => prop_assert!(want != Ok(Some(buf.len())) || digits.len() > 8
                || (digits.len() > 1 && digits[0] == b'0') || digits.is_empty()),
        }
    }

    #[test]
    fn reply_line_finds_the_first_newline(
        line in prop::collection::vec(prop::sample::select(LINE_BYTES), 0..40),
    ) {
        let want = match line.iter().position(|&b| b == b'\n') {
            None => Ok(None),
            Some(nl) if nl == 0 || line[nl - 1] != b'\r' => Err(RespError::BadTerminator),
            Some(nl) => Ok(Some(nl - 1)),
        };
        prop_assert_eq!(reply::reply_line(&line, 0), want);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300), chunk in 1usize..20, unauth: bool) {
        let l = Limits { unauthenticated: unauth, max_inline_len: 64, ..lim() };
        drive::run(&data, chunk, &l);
        let _ = reply_len(&data);
    }

    #[test]
    fn protocol_like_bytes_never_panic(parts in prop::collection::vec(prop::sample::select(PIECES), 0..60), chunk in 1usize..10) {
        let data: Vec<u8> = parts.concat();
        drive::run(&data, chunk, &Limits { max_inline_len: 32, ..lim() });
        let _ = reply_len(&data);
    }

    #[test]
    fn multibulk_round_trip_byte_by_byte(args in arg_list()) {
        let mut buf = Vec::new();
        write_command(&mut buf, args.len(), args.iter().map(|a| &a[..]));
        for cut in 0..buf.len() {
            prop_assert!(is_incomplete(parse_request(&buf[..cut], &lim())), "cut {}", cut);
        }
        let RespParse::Request(r, n) = parse_request(&buf, &lim()) else { panic!() };
        prop_assert_eq!(n, buf.len());
        prop_assert!(r.args().eq(args.iter().map(|a| &a[..])));
    }

    #[test]
    fn resume_matches_stateless(data in prop::collection::vec(prop::sample::select(PIECES), 0..60), chunk in 1usize..10) {
        let data: Vec<u8> = data.concat();
        let l = Limits { max_inline_len: 32, ..lim() };
        let mut progress = Progress::default();
        let mut buf = Vec::new();
        for piece in data.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                let fresh = parse_request(&buf, &l);
                let resumed = parse_request_resume(&buf, &l, &mut progress);
                prop_assert_eq!(&fresh, &resumed);
                let used = match fresh {
                    RespParse::Request(_, n) | RespParse::Skip(n) => n,
                    RespParse::Incomplete { .. } => break,
                    RespParse::Error { .. } => return Ok(()),
                };
                buf.drain(..used);
            }
        }
    }

    #[test]
    fn big_multibulk_resumes(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..5), 1..40)) {
        let mut buf = Vec::new();
        write_command(&mut buf, args.len(), args.iter().map(|a| &a[..]));
        let mut progress = Progress::default();
        for cut in 1..buf.len() {
            prop_assert!(is_incomplete(parse_request_resume(&buf[..cut], &lim(), &mut progress)));
        }
        let RespParse::Request(r, n) = parse_request_resume(&buf, &lim(), &mut progress) else { panic!() };
        prop_assert_eq!(n, buf.len());
        prop_assert!(r.args().eq(args.iter().map(|a| &a[..])));
        prop_assert_eq!(progress, Progress::default());
    }

    #[test]
    fn inline_round_trip(args in prop::collection::vec("[a-zA-Z0-9_:]{1,10}", 1..10)) {
        let line = format!("{}\r\n", args.join(" "));
        let buf = line.as_bytes();
        for cut in 0..buf.len() - 1 {
            prop_assert!(is_incomplete(parse_request(&buf[..cut], &lim())));
        }
        let RespParse::Request(r, n) = parse_request(buf, &lim()) else { panic!() };
        prop_assert_eq!(n, buf.len());
        prop_assert!(r.args().eq(args.iter().map(|a| a.as_bytes())));
    }

    #[test]
    fn reply_len_agrees_with_serialization(m in model(), tail in prop::collection::vec(any::<u8>(), 0..8)) {
        let mut buf = Vec::new();
        serialize(&m, &mut buf);
        let len = buf.len();
        for cut in 0..len {
            prop_assert_eq!(reply_len(&buf[..cut]), Ok(None));
        }
        buf.extend_from_slice(&tail);
        prop_assert_eq!(reply_len(&buf), Ok(Some(len)));
    }
}

fn resp_frame_all(stream: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    // Feed growing prefixes, as reads would, and frame what is complete.
    let mut f = RespFramer::default();
    let mut out = Vec::new();
    let mut start = 0;
    let mut end = 0;
    while start < stream.len() {
        end = (end + chunk).min(stream.len());
        loop {
            match f.next(&stream[start..end]) {
                Frame::Complete(n) => {
                    out.push(stream[start..start + n].to_vec());
                    start += n;
                }
                Frame::Incomplete(Some(t)) => {
                    assert!(start + t > end, "hint {t} already satisfied");
                    break;
                }
                Frame::Incomplete(None) => break,
                Frame::Invalid => panic!("invalid at {start}"),
            }
        }
        if end == stream.len() && start < stream.len() {
            panic!("left over bytes");
        }
    }
    out
}

#[test]
fn framer_frames_each_reply_kind_in_any_chunking() {
    let replies: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b"-ERR wrong\r\n",
        b":42\r\n",
        b"$5\r\nhello\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*3\r\n$1\r\na\r\n$-1\r\n*2\r\n:1\r\n+x\r\n",
        b"$0\r\n\r\n",
    ];
    let stream: Vec<u8> = replies.concat();
    for chunk in [1, 2, 3, 7, 1000] {
        let got = resp_frame_all(&stream, chunk);
        assert_eq!(got, replies.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
    }
}

#[test]
fn framer_announces_bulk_sizes_and_refuses_garbage() {
    let mut f = RespFramer::default();
    assert_eq!(f.next(b"$10\r\nab"), Frame::Incomplete(Some(17)));
    let mut f = RespFramer::default();
    assert_eq!(
        f.next(b"*2\r\n$1\r\na\r\n$4\r\nx"),
        Frame::Incomplete(Some(21))
    );
    assert_eq!(
        f.next(b"*2\r\n$1\r\na\r\n$4\r\nwxyz\r\n"),
        Frame::Complete(21)
    );
    assert_eq!(RespFramer::default().next(b"?x\r\n"), Frame::Invalid);
    assert_eq!(RespFramer::default().next(b"*x\r\n"), Frame::Invalid);
    assert_eq!(RespFramer::default().next(b"$3\r\nabcde"), Frame::Invalid);
    assert_eq!(
        RespFramer::default().next(&vec![b'+'; MAX_REPLY_LINE + 1]),
        Frame::Invalid
    );
}
