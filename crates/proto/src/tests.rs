//! Unit tests: every command and every error reply. Expected bytes were checked against
//! memcached 1.6.18 (see tests/live.rs for the automated comparison).

use crate::reply as r;
use crate::*;

fn p(s: &[u8]) -> Parse<'_> {
    parse(s, &Limits::default())
}

/// Asserts an error reply that consumes the whole input and swallows nothing.
fn assert_err(input: &[u8], reply: &[u8]) {
    match p(input) {
        Parse::Error {
            reply: got,
            consumed,
            swallow,
            close,
            unlink,
        } => {
            assert_eq!(
                String::from_utf8_lossy(got),
                String::from_utf8_lossy(reply),
                "input {:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(consumed, input.len(), "consumed for {input:?}");
            assert_eq!((swallow, close, unlink), (0, false, None));
        }
        other => panic!(
            "{:?}: expected error, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn req(input: &[u8]) -> Request<'_> {
    match p(input) {
        Parse::Request(r, used) => {
            assert_eq!(used, input.len(), "consumed for {input:?}");
            r
        }
        other => panic!(
            "{:?}: expected request, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn keys(k: Keys<'_>) -> Vec<Result<&[u8], KeyTooLong>> {
    k.collect()
}

#[test]
fn empty_and_partial() {
    assert_eq!(p(b""), Parse::Incomplete { total: None });
    assert_eq!(p(b"get k"), Parse::Incomplete { total: None });
    assert_eq!(p(b"get k\r"), Parse::Incomplete { total: None });
    assert_eq!(
        p(b"set k 0 0 5\r\nhel"),
        Parse::Incomplete { total: Some(20) }
    );
}

#[test]
fn get_family() {
    match req(b"get a bb  ccc\r\n") {
        Request::Get { keys: k, cas } => {
            assert!(!cas);
            assert_eq!(keys(k), vec![Ok(&b"a"[..]), Ok(b"bb"), Ok(b"ccc")]);
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(req(b"gets a\r\n"), Request::Get { cas: true, .. }));
    assert!(matches!(req(b"bget a\n"), Request::Get { cas: false, .. }));
    match req(b"gat -1 a b\r\n") {
        Request::Gat {
            exptime,
            keys: k,
            cas,
        } => {
            assert_eq!((exptime, cas), (-1, false));
            assert_eq!(keys(k), vec![Ok(&b"a"[..]), Ok(b"b")]);
        }
        o => panic!("{o:?}"),
    }
    // "gat 10" has no key: memcached answers END.
    match req(b"gats 10\r\n") {
        Request::Gat {
            keys: k,
            cas: true,
            exptime: 10,
        } => assert!(keys(k).is_empty()),
        o => panic!("{o:?}"),
    }
    assert_err(b"gat x a\r\n", r::CLIENT_ERROR_INVALID_EXPTIME);
    assert_err(b"get\r\n", r::ERROR);
    assert_err(b"get   \r\n", r::ERROR);
    assert_err(b"gat\r\n", r::ERROR);
    assert_err(b"getx a\r\n", r::ERROR);
    assert_err(b"bget\r\n", r::ERROR);
    // The key check happens while iterating.
    let mut line = b"get a ".to_vec();
    line.extend_from_slice(&[b'b'; 251]);
    line.extend_from_slice(b" c\r\n");
    match req(&line) {
        Request::Get { keys: k, .. } => assert_eq!(keys(k), vec![Ok(&b"a"[..]), Err(KeyTooLong)]),
        o => panic!("{o:?}"),
    }
}

#[test]
fn many_keys_in_one_get() {
    let mut line = b"get".to_vec();
    for i in 0..5000 {
        line.extend_from_slice(format!(" key:{i:0>200}").as_bytes());
    }
    // Beyond 2048 bytes without newline a get stays Incomplete.
    assert_eq!(p(&line), Parse::Incomplete { total: None });
    line.extend_from_slice(b"\r\n");
    match req(&line) {
        Request::Get { keys: k, .. } => assert_eq!(k.filter(|k| k.is_ok()).count(), 5000),
        o => panic!("{o:?}"),
    }
}

#[test]
fn long_lines_without_newline() {
    let closed = |b: &[u8]| matches!(p(b), Parse::Error { reply: b"", close: true, consumed, .. } if consumed == b.len());
    assert_eq!(p(&[b'x'; 2048]), Parse::Incomplete { total: None });
    assert!(closed(&[b'x'; 2049]));
    let mut set = b"set ".to_vec();
    set.resize(3000, b'a');
    assert!(closed(&set));
    let mut get = b"   gets ".to_vec();
    get.resize(3000, b'a');
    assert_eq!(p(&get), Parse::Incomplete { total: None });
    // More than 100 leading spaces: closed even for a get.
    let mut sp = vec![b' '; 101];
    sp.extend_from_slice(b"get ");
    sp.resize(3000, b'a');
    assert!(closed(&sp));
    // Our own cap on get lines.
    let lim = Limits {
        max_get_line: 10_000,
        ..Limits::default()
    };
    let mut g = b"get ".to_vec();
    g.resize(10_001, b'a');
    assert!(matches!(parse(&g, &lim), Parse::Error { close: true, .. }));
    // A long non-get line that has its newline is processed normally.
    let mut l = vec![b'a'; 3000];
    l.extend_from_slice(b"\r\n");
    assert_err(&l, r::ERROR);
}

#[test]
fn line_endings_and_nul() {
    assert!(matches!(req(b"version\n"), Request::Version));
    assert!(matches!(req(b"version\r\n"), Request::Version));
    // Only one \r is stripped; "\r" alone is a 1-byte command.
    assert_err(b"\r\n", r::ERROR);
    assert_err(b"\n", r::ERROR);
    assert_err(b"version\r\r\n", r::ERROR);
    // A NUL ends the command.
    match req(b"get a\0 b c\r\n") {
        Request::Get { keys: k, .. } => assert_eq!(keys(k), vec![Ok(&b"a"[..])]),
        o => panic!("{o:?}"),
    }
    // Tabs are not separators.
    assert_err(b"get\ta\r\n", r::ERROR);
    assert_err(b"x\r\n", r::ERROR);
    assert_err(b"  \r\n", r::ERROR);
}

#[test]
fn storage_commands() {
    match req(b"set k 5 -1 3\r\nabc\r\n") {
        Request::Store {
            cmd: StoreCmd::Set,
            key: b"k",
            flags: 5,
            exptime: -1,
            data: b"abc",
            cas_unique: 0,
            noreply: false,
        } => {}
        o => panic!("{o:?}"),
    }
    for (cmd, c) in [
        ("add", StoreCmd::Add),
        ("replace", StoreCmd::Replace),
        ("append", StoreCmd::Append),
        ("prepend", StoreCmd::Prepend),
    ] {
        let s = format!("{cmd} k 0 0 1 noreply\r\nx\r\n");
        match req(s.as_bytes()) {
            Request::Store { cmd, noreply, .. } => assert_eq!((cmd, noreply), (c, true)),
            o => panic!("{o:?}"),
        }
    }
    match req(b"cas k 0 0 1 99 noreply\r\nx\r\n") {
        Request::Store {
            cmd: StoreCmd::Cas,
            cas_unique: 99,
            noreply: true,
            ..
        } => {}
        o => panic!("{o:?}"),
    }
    // Any 6th token is accepted and ignored unless it is exactly "noreply".
    assert!(matches!(
        req(b"set k 0 0 1 foo\r\nx\r\n"),
        Request::Store { noreply: false, .. }
    ));
    // memcached truncates the 64-bit parse into 32 bits.
    match req(b"set k 4294967297 4294967297 4294967298\r\nab\r\n") {
        Request::Store {
            flags: 1,
            exptime: 1,
            data: b"ab",
            ..
        } => {}
        o => panic!("{o:?}"),
    }
    // Zero-length value; \r before \n optional in the command line but not in the block.
    assert!(matches!(
        req(b"set k 0 0 0\n\r\n"),
        Request::Store { data: b"", .. }
    ));
}

#[test]
fn storage_errors() {
    assert_err(b"set k 0 0\r\n", r::ERROR);
    assert_err(b"set k 0 0 1 noreply x\r\n", r::ERROR);
    assert_err(b"cas k 0 0 1\r\n", r::ERROR);
    assert_err(b"sett k 0 0 1\r\n", r::ERROR);
    assert_err(b"set k x 0 1\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"set k 0 x 1\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"set k 0 0 x\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"set k -1 0 1\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"set k 0 0 -1\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"set k 0 0 2147483646\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"cas k 0 0 1 x\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"cas k 0 0 1 -1\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    // noreply silences the error (and nothing is swallowed).
    assert_err(b"set k 0 0 noreply\r\n", b"");
    assert_err(b"set k 0 0 -1 noreply\r\n", b"");
    let mut long = b"set ".to_vec();
    long.extend_from_slice(&[b'k'; 251]);
    long.extend_from_slice(b" 0 0 1\r\n");
    assert_err(&long, r::CLIENT_ERROR_BAD_FORMAT);
    // Bad data chunk: exactly len+2 bytes are consumed.
    assert_eq!(
        p(b"set k 0 0 1\r\nab\r\n"),
        Parse::Error {
            reply: r::CLIENT_ERROR_BAD_DATA_CHUNK,
            consumed: 16,
            swallow: 0,
            close: false,
            unlink: None
        }
    );
    assert_eq!(
        p(b"set k 0 0 1 noreply\r\nab\r\n"),
        Parse::Error {
            reply: b"",
            consumed: 24,
            swallow: 0,
            close: false,
            unlink: None
        }
    );
}

#[test]
fn too_large() {
    let l = Limits::default();
    // Boundary measured on memcached 1.6.18 -I 1m: 1048516 bytes fit with a 1-byte key.
    assert!(!l.item_too_large(1, 0, 1048516));
    assert!(l.item_too_large(1, 0, 1048517));
    assert!(!l.item_too_large(1, 1, 1048512));
    assert!(l.item_too_large(1, 1, 1048513));
    assert_eq!(
        p(b"set k 0 0 1048516\r\n"),
        Parse::Incomplete {
            total: Some(1048516 + 21)
        }
    );
    assert_eq!(
        p(b"set k 0 0 1000000000\r\n"),
        Parse::Error {
            reply: r::SERVER_ERROR_TOO_LARGE,
            consumed: 22,
            swallow: 1000000002,
            close: false,
            unlink: Some(Key::raw(b"k")),
        }
    );
    // add does not unlink; noreply silences the reply but still swallows.
    assert_eq!(
        p(b"add k 0 0 2000000 noreply\r\n"),
        Parse::Error {
            reply: b"",
            consumed: 27,
            swallow: 2000002,
            close: false,
            unlink: None,
        }
    );
}

#[test]
fn delete_variants() {
    assert!(matches!(
        req(b"delete k\r\n"),
        Request::Delete {
            key: b"k",
            noreply: false
        }
    ));
    assert!(matches!(
        req(b"delete k 0\r\n"),
        Request::Delete { noreply: false, .. }
    ));
    assert!(matches!(
        req(b"delete k noreply\r\n"),
        Request::Delete { noreply: true, .. }
    ));
    assert!(matches!(
        req(b"delete k 0 noreply\r\n"),
        Request::Delete { noreply: true, .. }
    ));
    assert_err(b"delete k 1\r\n", r::CLIENT_ERROR_DELETE_USAGE);
    assert_err(b"delete k noreply 0\r\n", r::CLIENT_ERROR_DELETE_USAGE);
    assert_err(b"delete k 1 noreply\r\n", b"");
    assert_err(b"delete\r\n", r::ERROR);
    assert_err(b"delete k 0 noreply x\r\n", r::ERROR);
    let mut long = b"delete ".to_vec();
    long.extend_from_slice(&[b'k'; 251]);
    long.extend_from_slice(b"\r\n");
    assert_err(&long, r::CLIENT_ERROR_BAD_FORMAT);
}

#[test]
fn arith_and_touch() {
    assert!(matches!(
        req(b"incr k 5\r\n"),
        Request::Arith {
            incr: true,
            key: b"k",
            delta: 5,
            noreply: false
        }
    ));
    assert!(matches!(
        req(b"decr k 18446744073709551615 noreply\r\n"),
        Request::Arith {
            incr: false,
            delta: u64::MAX,
            noreply: true,
            ..
        }
    ));
    assert_err(b"incr k -1\r\n", r::CLIENT_ERROR_INVALID_DELTA);
    assert_err(b"incr k x\r\n", r::CLIENT_ERROR_INVALID_DELTA);
    assert_err(
        b"incr k 18446744073709551616\r\n",
        r::CLIENT_ERROR_INVALID_DELTA,
    );
    assert_err(b"decr k x noreply\r\n", b"");
    assert_err(b"incr k\r\n", r::ERROR);
    assert_err(b"incr k 1 noreply x\r\n", r::ERROR);
    assert!(matches!(
        req(b"touch k 100\r\n"),
        Request::Touch {
            key: b"k",
            exptime: 100,
            noreply: false
        }
    ));
    assert!(matches!(
        req(b"touch k -1 noreply\r\n"),
        Request::Touch {
            exptime: -1,
            noreply: true,
            ..
        }
    ));
    assert_err(b"touch k x\r\n", r::CLIENT_ERROR_INVALID_EXPTIME);
    assert_err(b"touch k\r\n", r::ERROR);
}

#[test]
fn misc_commands() {
    assert!(matches!(req(b"version extra\r\n"), Request::Version));
    assert!(matches!(req(b"quit\r\n"), Request::Quit));
    assert!(matches!(
        req(b"flush_all\r\n"),
        Request::FlushAll {
            delay: 0,
            noreply: false
        }
    ));
    assert!(matches!(
        req(b"flush_all 10\r\n"),
        Request::FlushAll {
            delay: 10,
            noreply: false
        }
    ));
    assert!(matches!(
        req(b"flush_all noreply\r\n"),
        Request::FlushAll {
            delay: 0,
            noreply: true
        }
    ));
    assert!(matches!(
        req(b"flush_all 5 noreply\r\n"),
        Request::FlushAll {
            delay: 5,
            noreply: true
        }
    ));
    assert!(matches!(
        req(b"flush_all 5 6\r\n"),
        Request::FlushAll {
            delay: 5,
            noreply: false
        }
    ));
    assert_err(b"flush_all x\r\n", r::CLIENT_ERROR_INVALID_EXPTIME);
    assert_err(b"flush_all noreply 1\r\n", r::CLIENT_ERROR_INVALID_EXPTIME);
    assert_err(b"flush_all 1 2 3\r\n", r::ERROR);
    assert!(matches!(
        req(b"verbosity 1\r\n"),
        Request::Verbosity {
            level: 1,
            noreply: false
        }
    ));
    assert!(matches!(
        req(b"verbosity 1 noreply\r\n"),
        Request::Verbosity {
            level: 1,
            noreply: true
        }
    ));
    assert_err(b"verbosity\r\n", r::ERROR);
    assert_err(b"verbosity x\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"verbosity noreply\r\n", b"");
    assert!(matches!(
        req(b"shutdown\r\n"),
        Request::Shutdown(ShutdownMode::Immediate)
    ));
    assert!(matches!(
        req(b"shutdown graceful\r\n"),
        Request::Shutdown(ShutdownMode::Graceful)
    ));
    assert!(matches!(
        req(b"shutdown now\r\n"),
        Request::Shutdown(ShutdownMode::Invalid)
    ));
    assert!(matches!(
        req(b"cache_memlimit 100\r\n"),
        Request::CacheMemlimit {
            megabytes: 100,
            noreply: false
        }
    ));
    assert_err(b"cache_memlimit x\r\n", r::ERROR);
    assert_err(b"cache_memlimit x noreply\r\n", b"");
    assert_err(b"cache_memlimit\r\n", r::ERROR);
    match req(b"stats items  x\r\n") {
        Request::Stats { args } => assert_eq!(args.collect::<Vec<_>>(), vec![&b"items"[..], b"x"]),
        o => panic!("{o:?}"),
    }
    assert!(matches!(req(b"stats\r\n"), Request::Stats { .. }));
    for c in [
        "slabs automove 1",
        "lru_crawler enable",
        "watch",
        "lru mode flat",
        "extstore a b",
        "refresh_certs",
        "track listen",
    ] {
        let s = format!("{c}\r\n");
        match req(s.as_bytes()) {
            Request::Admin { command, .. } => {
                assert!(c.starts_with(std::str::from_utf8(command).unwrap()))
            }
            o => panic!("{o:?}"),
        }
    }
    assert_err(b"lru\r\n", r::ERROR);
    assert_err(b"extstore\r\n", r::ERROR);
    assert_err(b"misbehave\r\n", r::ERROR);
    assert_err(b"debugtime 1\r\n", r::ERROR);
    assert_err(b"unknown a b\r\n", r::ERROR);
}

#[test]
fn http_closes() {
    for line in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"POST /x HTTP/1.0\r\n",
        b"HEAD HTTP/\r\n",
    ] {
        match p(line) {
            Parse::Error {
                reply: b"",
                close: true,
                ..
            } => {}
            o => panic!("{o:?}"),
        }
    }
    // Only reached for commands not dispatched by first letter.
    assert_err(b"set / HTTP/1.1\r\n", r::ERROR);
    assert!(matches!(req(b"gets / HTTP/1.1\r\n"), Request::Get { .. }));
}

#[test]
fn meta_get() {
    match req(b"mg foo s v t Oabc k q\r\n") {
        Request::MetaGet {
            key,
            flags,
            late_error: None,
        } => {
            assert_eq!(key.as_bytes(), b"foo");
            assert!(!key.is_binary());
            let fl: Vec<_> = flags.iter().collect();
            assert_eq!(
                fl,
                vec![
                    (b's', &b""[..]),
                    (b'v', b""),
                    (b't', b""),
                    (b'O', b"abc"),
                    (b'k', b""),
                    (b'q', b"")
                ]
            );
            assert!(flags.noreply() && flags.has(b'v') && !flags.has(b'c'));
            assert_eq!(flags.opaque(), Some(&b"abc"[..]));
        }
        o => panic!("{o:?}"),
    }
    match req(b"mg k T30 N-1 R5 C7 D2 J3 F9 MX\r\n") {
        Request::MetaGet { flags, .. } => {
            assert_eq!(flags.exptime, Some(30));
            assert_eq!(flags.vivify, Some(-1));
            assert_eq!(flags.recache, Some(5));
            assert_eq!(flags.cas, Some(7));
            assert_eq!((flags.delta, flags.initial), (Some(2), Some(3)));
            assert_eq!((flags.client_flags, flags.mode), (9, Some(b'X')));
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(req(b"mg k\r\n"), Request::MetaGet { .. }));
    assert_err(b"mg\r\n", r::ERROR);
    assert_err(b"mg k T1 T2\r\n", r::CLIENT_ERROR_DUPLICATE_FLAG);
    assert_err(b"mg k \x80\r\n", r::CLIENT_ERROR_DUPLICATE_FLAG);
    assert_err(b"mg k Z\r\n", r::CLIENT_ERROR_INVALID_FLAG);
    assert_err(b"mg k Tx\r\n", r::CLIENT_ERROR_BAD_TOKEN);
    assert_err(b"mg k F1x\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"mg k Cx\r\n", r::CLIENT_ERROR_BAD_TOKEN);
    assert_err(b"mg k MXY\r\n", r::CLIENT_ERROR_M_TOKEN_LENGTH);
    assert_err(b"mg k Jx\r\n", r::CLIENT_ERROR_INVALID_INITIAL);
    assert_err(b"mg k Dx\r\n", r::CLIENT_ERROR_INVALID_DELTA_VALUE);
    // Last message wins; an unknown flag stops at once.
    assert_err(b"mg k Tx Dx\r\n", r::CLIENT_ERROR_INVALID_DELTA_VALUE);
    assert_err(b"mg k Tx Fx\r\n", r::CLIENT_ERROR_BAD_TOKEN);
    assert_err(b"mg k Tx Z\r\n", r::CLIENT_ERROR_INVALID_FLAG);
    assert_err(b"mg k ! v\r\n", r::CLIENT_ERROR_INVALID_FLAG);
    let mut long = b"mg ".to_vec();
    long.extend_from_slice(&[b'k'; 251]);
    long.extend_from_slice(b" v\r\n");
    assert_err(&long, r::CLIENT_ERROR_BAD_FORMAT);
    // ntokens > 20: at most 17 flags.
    assert_err(
        b"mg k v s t c f h l u q k O1 P L I T1 N1 R1 C1\r\n",
        r::CLIENT_ERROR_MG_FLAGS_TOO_LONG,
    );
    assert!(matches!(
        req(b"mg k v s t c f h l u q k O1 P L I T1 N1 R1\r\n"),
        Request::MetaGet { .. }
    ));
    let mut op = b"mg k O".to_vec();
    op.extend_from_slice(&[b'1'; 32]);
    op.extend_from_slice(b" v\r\n");
    assert!(matches!(
        req(&op),
        Request::MetaGet {
            late_error: Some(r::CLIENT_ERROR_OPAQUE_TOO_LONG),
            ..
        }
    ));
}

#[test]
fn meta_base64_keys() {
    match req(b"mg a2V5 b k v\r\n") {
        Request::MetaGet { key, .. } => {
            assert_eq!(key.as_bytes(), b"key");
            assert!(key.is_binary());
            assert_eq!(key.wire(), b"a2V5");
        }
        o => panic!("{o:?}"),
    }
    assert_err(b"mg k b\r\n", r::CLIENT_ERROR_DECODING_KEY);
    assert_err(b"mg k=5 b\r\n", r::CLIENT_ERROR_DECODING_KEY);
    assert_err(b"mg ==== b\r\n", r::CLIENT_ERROR_DECODING_KEY);
    assert_err(b"md k b\r\n", r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG);
    // memcached's decoder skips bytes outside the alphabet and stops after padding.
    let mut out = [0u8; 16];
    assert_eq!(base64_decode(b"a2-V5", &mut out), Some(3));
    assert_eq!(base64_decode(b"aw==a2V5", &mut out), Some(1));
    assert_eq!(base64_decode(b"a===", &mut out), None);
    assert_eq!(base64_decode(b"!!", &mut out), None);
    // A 250-byte encoded key decodes into the inline buffer.
    let mut line = b"mg ".to_vec();
    line.extend_from_slice(&[b'/'; 246]);
    line.extend_from_slice(b"== b\r\n");
    match req(&line) {
        Request::MetaGet { key, .. } => assert_eq!(key.as_bytes().len(), 184),
        o => panic!("{o:?}"),
    }
    assert!(
        matches!(req(b"me a2V5 b\r\n"), Request::MetaDebug { key } if key.as_bytes() == b"key")
    );
    assert!(matches!(req(b"me a2V5\r\n"), Request::MetaDebug { key } if key.as_bytes() == b"a2V5"));
    assert_err(b"me k b\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"me\r\n", r::CLIENT_ERROR_BAD_FORMAT);
}

#[test]
fn meta_set() {
    match req(b"ms k 2 T10 F5 c k Oxy q\r\nhi\r\n") {
        Request::MetaSet {
            key,
            flags,
            cmd,
            data,
        } => {
            assert_eq!(
                (key.as_bytes(), cmd, data),
                (&b"k"[..], StoreCmd::Set, &b"hi"[..])
            );
            assert_eq!((flags.exptime, flags.client_flags), (Some(10), 5));
            assert!(flags.noreply());
            let order: Vec<u8> = flags.iter().map(|(f, _)| f).collect();
            assert_eq!(order, b"TFckOq".to_vec());
        }
        o => panic!("{o:?}"),
    }
    for (m, c) in [
        ("", StoreCmd::Set),
        (" MS", StoreCmd::Set),
        (" ME", StoreCmd::Add),
        (" MA", StoreCmd::Append),
        (" MP", StoreCmd::Prepend),
        (" MR", StoreCmd::Replace),
        (" MS C5", StoreCmd::Cas),
        (" MR C5", StoreCmd::Cas),
        (" MA C5", StoreCmd::Append),
        (" C5", StoreCmd::Cas),
    ] {
        let s = format!("ms k 1{m}\r\nx\r\n");
        assert!(
            matches!(req(s.as_bytes()), Request::MetaSet { cmd, .. } if cmd == c),
            "{s}"
        );
    }
    assert_err(b"ms\r\n", r::ERROR);
    assert_err(b"ms k\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"ms k x\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(b"ms k -1\r\n", r::CLIENT_ERROR_BAD_FORMAT);
    assert_err(
        b"ms k 1 a b c d e f g h i j k l m n o p q\r\n",
        r::CLIENT_ERROR_FLAGS_TOO_LONG,
    );
    // Flag errors swallow the data block.
    let swallowed = |input: &[u8], reply: &[u8], swallow: usize| match p(input) {
        Parse::Error {
            reply: got,
            consumed,
            swallow: s,
            close: false,
            ..
        } => {
            assert_eq!(
                (got, consumed, s),
                (reply, input.len(), swallow),
                "{input:?}"
            )
        }
        o => panic!("{o:?}"),
    };
    swallowed(b"ms k 2 Z\r\n", r::CLIENT_ERROR_INVALID_FLAG, 4);
    swallowed(b"ms k 2 q q\r\n", r::CLIENT_ERROR_DUPLICATE_FLAG, 4);
    swallowed(b"ms k 2 MX\r\n", r::CLIENT_ERROR_MS_MODE, 4);
    swallowed(b"ms k 2 b\r\n", r::CLIENT_ERROR_DECODING_KEY, 4);
    swallowed(b"ms k 2 Fx\r\n", r::CLIENT_ERROR_BAD_FORMAT, 4);
    swallowed(
        b"ms k 2 O123456789012345678901234567890123\r\n",
        r::CLIENT_ERROR_OPAQUE_TOO_LONG,
        4,
    );
    // Invalid mode wins over a long opaque (checked first in memcached).
    swallowed(
        b"ms k 2 O123456789012345678901234567890123 MZ\r\n",
        r::CLIENT_ERROR_MS_MODE,
        4,
    );
    match p(b"ms a2V5 2000000 b MA\r\n") {
        Parse::Error {
            reply,
            swallow: 2000002,
            unlink: Some(k),
            ..
        } => {
            assert_eq!(reply, r::SERVER_ERROR_TOO_LARGE);
            assert_eq!(k.as_bytes(), b"key");
        }
        o => panic!("{o:?}"),
    }
    // Bad data chunk is reported even with q.
    assert_eq!(
        p(b"ms k 2 q\r\nabX\r\n"),
        Parse::Error {
            reply: r::CLIENT_ERROR_BAD_DATA_CHUNK,
            consumed: 14,
            swallow: 0,
            close: false,
            unlink: None
        }
    );
    assert_eq!(p(b"ms k 5 T0\r\nab"), Parse::Incomplete { total: Some(18) });
}

#[test]
fn meta_delete_arith_noop() {
    match req(b"md k q C5 I T30 Oop k\r\n") {
        Request::MetaDelete { key, flags } => {
            assert_eq!(key.as_bytes(), b"k");
            assert!(flags.noreply() && flags.has(b'I'));
            assert_eq!((flags.cas, flags.exptime), (Some(5), Some(30)));
        }
        o => panic!("{o:?}"),
    }
    assert_err(b"md\r\n", r::ERROR);
    assert_err(b"md k Z\r\n", r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG);
    assert_err(b"md k q q\r\n", r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG);
    assert_err(b"md k Tx\r\n", r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG);
    assert_err(
        b"md k O123456789012345678901234567890123\r\n",
        r::CLIENT_ERROR_OPAQUE_TOO_LONG,
    );
    assert_err(
        b"md k a b c d e f g h i j k l m n o p q r\r\n",
        r::CLIENT_ERROR_FLAGS_TOO_LONG,
    );
    match req(b"ma k MD D5 J10 N0 v t c\r\n") {
        Request::MetaArithmetic {
            incr: false,
            flags,
            late_error: None,
            ..
        } => {
            assert_eq!(
                (flags.delta, flags.initial, flags.vivify),
                (Some(5), Some(10), Some(0))
            );
        }
        o => panic!("{o:?}"),
    }
    for (m, incr) in [
        ("", true),
        (" MI", true),
        (" M+", true),
        (" MD", false),
        (" M-", false),
    ] {
        let s = format!("ma k{m}\r\n");
        assert!(matches!(req(s.as_bytes()), Request::MetaArithmetic { incr: i, .. } if i == incr));
    }
    assert_err(b"ma k MX\r\n", r::CLIENT_ERROR_MA_MODE);
    assert_err(b"ma k MXX\r\n", r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG);
    assert_err(b"ma k Dx\r\n", r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG);
    assert_err(b"ma\r\n", r::ERROR);
    assert!(matches!(
        req(b"ma k O123456789012345678901234567890123\r\n"),
        Request::MetaArithmetic {
            late_error: Some(r::CLIENT_ERROR_OPAQUE_TOO_LONG),
            ..
        }
    ));
    assert!(matches!(req(b"mn\r\n"), Request::MetaNoop));
    assert!(matches!(req(b"mn x y\r\n"), Request::MetaNoop));
    assert_err(b"mz k\r\n", r::ERROR);
    assert_err(b"m\r\n", r::ERROR);
    assert_err(b"mgx k\r\n", r::ERROR);
}

#[test]
fn pipelined_requests() {
    let input = b"set a 0 0 1\r\n1\r\nget a b\r\nmn\r\ndelete a\r\n";
    let mut off = 0;
    let mut kinds = Vec::new();
    while off < input.len() {
        match p(&input[off..]) {
            Parse::Request(r, used) => {
                kinds.push(std::mem::discriminant(&r));
                off += used;
            }
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(kinds.len(), 4);
}

#[test]
fn mcrouter_lease_commands() {
    let lim = Limits::default();
    let m = |s: &'static [u8]| parse_mcrouter(s, &lim);
    // memcached (and so `parse`) does not know them.
    assert_err(b"lease-get k\r\n", r::ERROR);
    assert_err(b"lease-set k 5 0 0 1\r\n", r::ERROR);
    match m(b"lease-get a bb\r\n") {
        Parse::Request(Request::LeaseGet { keys: k }, 16) => {
            assert_eq!(keys(k), vec![Ok(&b"a"[..]), Ok(&b"bb"[..])])
        }
        other => panic!("{other:?}"),
    }
    let input = b"lease-set k 12345 7 30 2 noreply\r\nhi\r\n";
    assert_eq!(
        parse_mcrouter(input, &lim),
        Parse::Request(
            Request::LeaseSet {
                key: b"k",
                token: 12345,
                flags: 7,
                exptime: 30,
                data: b"hi",
                noreply: true,
            },
            input.len()
        )
    );
    assert_eq!(
        m(b"lease-set k 1 0 0 5\r\nhel"),
        Parse::Incomplete { total: Some(28) }
    );
    // Errors as memcached words them for a storage command.
    let error = |input: &'static [u8]| match m(input) {
        Parse::Error { reply, swallow, .. } => (reply, swallow),
        other => panic!("{other:?}"),
    };
    assert_eq!(error(b"lease-get\r\n"), (r::ERROR, 0));
    assert_eq!(error(b"lease-set k 1 0 0\r\n"), (r::ERROR, 0));
    assert_eq!(
        error(b"lease-set k x 0 0 1\r\nv\r\n"),
        (r::CLIENT_ERROR_BAD_FORMAT, 0)
    );
    assert_eq!(
        error(b"lease-set k 1 0 0 -1\r\n"),
        (r::CLIENT_ERROR_BAD_FORMAT, 0)
    );
    assert_eq!(
        error(b"lease-set k 1 0 0 1\r\nvv\r\n"),
        (r::CLIENT_ERROR_BAD_DATA_CHUNK, 0)
    );
    assert_eq!(
        error(b"lease-set k 1 0 0 2000000\r\n"),
        (r::SERVER_ERROR_TOO_LARGE, 2_000_002)
    );
    assert_eq!(error(b"lease-sets k\r\n"), (r::ERROR, 0));
    // Everything else parses as memcached's.
    assert_eq!(m(b"get k\r\n"), p(b"get k\r\n"));
}
