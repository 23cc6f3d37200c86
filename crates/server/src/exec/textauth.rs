//! The text protocol's login under `-Y`, as memcached 1.6 does it: until a connection has
//! authenticated, its only request is `set <key> <flags> <exptime> <bytes>` whose value is
//! `user password`. The key, flags and exptime are ignored and nothing is stored.
//!
//! Replies: `STORED` (logged in; later requests run normally), `CLIENT_ERROR authentication
//! failure`, `CLIENT_ERROR bad authentication token format` (the value has fewer than two
//! space-separated words; words after the second are ignored, as in memcached),
//! `CLIENT_ERROR bad command line termination` (the value does not end in `\r\n`), and
//! `CLIENT_ERROR unauthenticated` for any other line. The connection stays open after each,
//! except when a line has no newline within [`MAX_LINE`] bytes, which closes it. A declared
//! value larger than [`MAX_VALUE`] also answers `CLIENT_ERROR unauthenticated` and closes
//! the connection, so a client that has not logged in cannot make the server buffer much.

use crate::auth::Authenticator;

/// Bytes a login line may take before its newline (memcached closes past 2048).
pub const MAX_LINE: usize = 2048;
/// Largest `user password` value taken (two names of up to a password file line each).
pub const MAX_VALUE: usize = 1024;

const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";

/// What one login step did with the bytes at the front of the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not a whole request yet; wait for more bytes.
    Incomplete,
    /// `used` bytes were answered (the reply is in `out`); `ok` when the client logged in.
    Answered { used: usize, ok: bool },
    /// Answered (reply in `out`); the connection closes.
    Close,
}

/// Handles the request at the front of `buf` for a connection that has not logged in yet.
pub fn step(auth: &Authenticator, buf: &[u8], out: &mut Vec<u8>) -> Step {
    // As memcached: no request is shorter than two bytes, so one byte (a lone newline) waits.
    if buf.len() < 2 {
        return Step::Incomplete;
    }
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE {
            return Step::Close;
        }
        return Step::Incomplete;
    };
    let line = &buf[..nl];
    let Some(size) = login_size(line) else {
        out.extend_from_slice(UNAUTHENTICATED);
        return Step::Answered {
            used: nl + 1,
            ok: false,
        };
    };
    if size > MAX_VALUE {
        out.extend_from_slice(UNAUTHENTICATED);
        return Step::Close;
    }
    let used = nl + 1 + size + 2;
    if buf.len() < used {
        return Step::Incomplete;
    }
    let value = &buf[nl + 1..used];
    let Some(credentials) = value.strip_suffix(b"\r\n") else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line termination\r\n");
        return Step::Answered { used, ok: false };
    };
    let mut words = credentials.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let (Some(user), Some(pass)) = (words.next(), words.next()) else {
        out.extend_from_slice(b"CLIENT_ERROR bad authentication token format\r\n");
        return Step::Answered { used, ok: false };
    };
    let ok = auth.verify(user, pass);
    out.extend_from_slice(if ok {
        b"STORED\r\n"
    } else {
        b"CLIENT_ERROR authentication failure\r\n"
    });
    Step::Answered { used, ok }
}

/// The value size of a `set` line (at least five words, the first exactly `set`, the fifth
/// an unsigned 32-bit number), or None for any other line.
fn login_size(line: &[u8]) -> Option<usize> {
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    if words.next()? != b"set" {
        return None;
    }
    let size = words.nth(3)?;
    // memcached's number parser stops at trailing whitespace: "9\r" is 9.
    let size = size.strip_suffix(b"\r").unwrap_or(size);
    let size: u32 = std::str::from_utf8(size).ok()?.parse().ok()?;
    Some(size as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        // Tests run in parallel: each gets a file of its own.
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("memfleet-textauth-{}-{n}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, b"user:pass\n").unwrap();
        let a = Authenticator::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        a
    }

    fn run(buf: &[u8]) -> (Step, String) {
        let mut out = Vec::new();
        let s = step(&auth(), buf, &mut out);
        (s, String::from_utf8(out).unwrap())
    }

    #[test]
    fn good_credentials_log_in_and_leave_the_rest() {
        let req = b"set k 0 0 9\r\nuser pass\r\nget k\r\n";
        let (s, out) = run(req);
        assert_eq!(s, Step::Answered { used: 24, ok: true });
        assert_eq!(out, "STORED\r\n");
    }

    #[test]
    fn flags_exptime_noreply_and_extra_words_are_ignored() {
        assert_eq!(run(b"set a b c 9 noreply\r\nuser pass\r\n").1, "STORED\r\n");
        assert_eq!(run(b"set  a 0 0 11\r\nuser pass x\r\n").1, "STORED\r\n");
        assert_eq!(run(b"set a 0 0 10\r\nuser  pass\r\n").1, "STORED\r\n");
        assert_eq!(run(b"set a 0 0 9\nuser pass\r\n").1, "STORED\r\n");
    }

    #[test]
    fn bad_password_is_an_authentication_failure() {
        let (s, out) = run(b"set k 0 0 9\r\nuser pasx\r\n");
        assert_eq!(
            s,
            Step::Answered {
                used: 24,
                ok: false
            }
        );
        assert_eq!(out, "CLIENT_ERROR authentication failure\r\n");
    }

    #[test]
    fn any_other_line_is_unauthenticated() {
        for line in [
            &b"get foo\r\n"[..],
            b"mg foo v\r\n",
            b"\r\n",
            b"set\r\n",
            b"set a 0 0\r\n",
            b"set a 0 0 abc\r\n",
            b"set a 0 0 -1\r\n",
            b"SET a 0 0 9\r\n",
        ] {
            let (s, out) = run(line);
            assert_eq!(
                s,
                Step::Answered {
                    used: line.len(),
                    ok: false
                }
            );
            assert_eq!(out, "CLIENT_ERROR unauthenticated\r\n");
        }
    }

    #[test]
    fn value_must_be_two_words_ending_in_crlf() {
        assert_eq!(
            run(b"set a 0 0 4\r\nuser\r\n").1,
            "CLIENT_ERROR bad authentication token format\r\n"
        );
        assert_eq!(
            run(b"set a 0 0 9\r\nuser passXX").1,
            "CLIENT_ERROR bad command line termination\r\n"
        );
    }

    #[test]
    fn partial_requests_wait_and_long_lines_close() {
        assert_eq!(run(b"set a 0 0 9\r\nuser pa").0, Step::Incomplete);
        assert_eq!(run(b"set a 0 0").0, Step::Incomplete);
        assert_eq!(run(b"\n").0, Step::Incomplete);
        assert_eq!(run(&[b'x'; MAX_LINE + 1]).0, Step::Close);
        let (s, out) = run(b"set a 0 0 100000\r\n");
        assert_eq!(s, Step::Close);
        assert_eq!(out, "CLIENT_ERROR unauthenticated\r\n");
    }
}
