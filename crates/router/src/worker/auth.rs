//! Client authentication, for both protocols: memcached's `set`-based login against
//! `client_auth`, and the Redis connection commands a Redis pool answers itself because they
//! are about the client's session with the router, not about data (AUTH and HELLO; replies
//! worded as redis-server 7.0 words them, checked live).

use proto::redis_cmd::{ERR_AUTH_NOT_SET, ERR_WRONGPASS};
use proto::resp::{self, RespRequest};
use proto::Request;

use nutconf::Pool;

pub const OK: &[u8] = b"+OK\r\n";
const ERR_HELLO_NOAUTH: &[u8] = b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n";
const ERR_NOPROTO: &[u8] = b"-NOPROTO unsupported protocol version\r\n";
const ERR_PROTOVER: &[u8] = b"-ERR Protocol version is not an integer or out of range\r\n";

/// memcached's text-protocol authentication (`-Y authfile`), against the pool's
/// `client_auth` password: the first command must be `set <any key> <flags> <exptime>
/// <bytes>` whose data is `<user> <password>`; any user name is accepted.
pub fn memcached_login(req: &Request<'_>, password: Option<&str>) -> &'static [u8] {
    let Request::Store {
        cmd: proto::StoreCmd::Set,
        data,
        ..
    } = req
    else {
        return b"CLIENT_ERROR unauthenticated\r\n";
    };
    let mut tokens = data.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let (Some(_user), Some(pass)) = (tokens.next(), tokens.next()) else {
        return b"CLIENT_ERROR bad authentication token format\r\n";
    };
    if password.is_some_and(|pw| same_secret(pw.as_bytes(), pass)) {
        proto::reply::STORED
    } else {
        b"CLIENT_ERROR authentication failure\r\n"
    }
}

/// True when clients of the pool must authenticate before any command runs.
pub fn needs_auth(cfg: &Pool) -> bool {
    cfg.client_auth.is_some() || (cfg.redis && cfg.redis_auth.is_some())
}

/// Password equality whose time does not depend on where the bytes differ.
pub fn same_secret(known: &[u8], given: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(known.ct_eq(given))
}

/// Checks `[user] password`. Accepted passwords: the pool's `redis_auth` and memfleet's
/// `client_auth`; the only user is `default`. Ok(()) or the error reply.
fn check_password(cfg: &Pool, user: Option<&[u8]>, pass: &[u8]) -> Result<(), &'static [u8]> {
    let user_ok = user.is_none_or(|u| u == b"default");
    if !needs_auth(cfg) {
        // redis: the default user has no password, so only `AUTH default <any>` passes.
        return match user {
            Some(_) if user_ok => Ok(()),
            Some(_) => Err(ERR_WRONGPASS),
            None => Err(ERR_AUTH_NOT_SET),
        };
    }
    let known = [cfg.redis_auth.as_deref(), cfg.client_auth.as_deref()];
    // Every known password is compared (no early exit) in constant time per byte.
    let matched = known
        .iter()
        .flatten()
        .fold(false, |m, pw| m | same_secret(pw.as_bytes(), pass));
    if user_ok && matched {
        Ok(())
    } else {
        Err(ERR_WRONGPASS)
    }
}

/// The reply to `AUTH [user] password` (arity already checked by the command table).
pub fn auth(cfg: &Pool, req: &RespRequest<'_>) -> &'static [u8] {
    let (user, pass) = match req.argc() {
        3 => (req.arg(1), req.arg(2).unwrap_or_default()),
        _ => (None, req.arg(1).unwrap_or_default()),
    };
    match check_password(cfg, user, pass) {
        Ok(()) => OK,
        Err(e) => e,
    }
}

/// A client's session state that HELLO changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    pub authed: bool,
    /// 2 or 3: the RESP version the client asked for.
    pub proto: u8,
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`. Protocol 3 is served by converting the
/// backends' RESP2 replies (see `proto::resp::resp3`); the reply is redis-server's map, as a
/// map in RESP3 and a flat array in RESP2. Appends the reply; returns the session afterwards
/// (unchanged when HELLO fails, as in redis).
pub fn hello(cfg: &Pool, req: &RespRequest<'_>, now: Session, out: &mut Vec<u8>) -> Session {
    let mut proto = now.proto;
    if let Some(v) = req.arg(1) {
        match resp::parse_ll(v) {
            None => {
                out.extend_from_slice(ERR_PROTOVER);
                return now;
            }
            Some(v @ (2 | 3)) => proto = v as u8,
            Some(_) => {
                out.extend_from_slice(ERR_NOPROTO);
                return now;
            }
        }
    }
    let mut i = 2;
    let mut login = None;
    while let Some(opt) = req.arg(i) {
        let left = req.argc() - i - 1;
        if opt.eq_ignore_ascii_case(b"auth") && left >= 2 {
            login = Some((
                req.arg(i + 1).unwrap_or_default(),
                req.arg(i + 2).unwrap_or_default(),
            ));
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"setname") && left >= 1 {
            i += 2;
        } else {
            out.extend_from_slice(b"-ERR Syntax error in HELLO option '");
            out.extend(
                opt.iter()
                    .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
            );
            out.extend_from_slice(b"'\r\n");
            return now;
        }
    }
    let mut authed = now.authed;
    if let Some((user, pass)) = login {
        if let Err(e) = check_password(cfg, Some(user), pass) {
            out.extend_from_slice(e);
            return now;
        }
        authed = true;
    }
    if !authed {
        out.extend_from_slice(ERR_HELLO_NOAUTH);
        return now;
    }
    if proto == 3 {
        out.extend_from_slice(b"%7\r\n");
    } else {
        resp::write_array_header(out, 14);
    }
    for (k, v) in [
        ("server", "memfleet-route"),
        ("version", env!("CARGO_PKG_VERSION")),
    ] {
        resp::write_bulk(out, k.as_bytes());
        resp::write_bulk(out, v.as_bytes());
    }
    resp::write_bulk(out, b"proto");
    resp::write_integer(out, i64::from(proto));
    resp::write_bulk(out, b"id");
    resp::write_integer(out, 0);
    for (k, v) in [("mode", "proxy"), ("role", "master")] {
        resp::write_bulk(out, k.as_bytes());
        resp::write_bulk(out, v.as_bytes());
    }
    resp::write_bulk(out, b"modules");
    resp::write_array_header(out, 0);
    Session { authed, proto }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nutconf::Config;
    use proto::resp::drive::with_command;

    fn pool(extra: &str) -> Pool {
        let yaml = format!(
            "p:\n  listen: 127.0.0.1:22121\n  redis: true\n{extra}  servers:\n   - 127.0.0.1:6379:1\n"
        );
        Config::from_yaml_str(&yaml).unwrap().pools.remove(0)
    }

    fn hello_of(cfg: &Pool, args: &[&[u8]], authed: bool) -> (Vec<u8>, bool) {
        let (out, s) = hello_in(cfg, args, Session { authed, proto: 2 });
        (out, s.authed)
    }

    fn hello_in(cfg: &Pool, args: &[&[u8]], now: Session) -> (Vec<u8>, Session) {
        with_command(args, |r| {
            let mut out = Vec::new();
            let s = hello(cfg, r, now, &mut out);
            (out, s)
        })
    }

    #[test]
    fn auth_accepts_either_password_for_the_default_user() {
        let cfg = pool("  redis_auth: back\n  client_auth: front\n");
        assert!(needs_auth(&cfg));
        assert_eq!(with_command(&[b"AUTH", b"back"], |r| auth(&cfg, r)), OK);
        assert_eq!(with_command(&[b"AUTH", b"front"], |r| auth(&cfg, r)), OK);
        assert_eq!(
            with_command(&[b"AUTH", b"default", b"front"], |r| auth(&cfg, r)),
            OK
        );
        assert_eq!(
            with_command(&[b"AUTH", b"bob", b"front"], |r| auth(&cfg, r)),
            ERR_WRONGPASS
        );
        assert_eq!(
            with_command(&[b"AUTH", b"nope"], |r| auth(&cfg, r)),
            ERR_WRONGPASS
        );
        let open = pool("");
        assert!(!needs_auth(&open));
        assert_eq!(
            with_command(&[b"AUTH", b"x"], |r| auth(&open, r)),
            ERR_AUTH_NOT_SET
        );
        assert_eq!(
            with_command(&[b"AUTH", b"default", b"x"], |r| auth(&open, r)),
            OK
        );
    }

    #[test]
    fn hello_authenticates_and_switches_protocol() {
        let cfg = pool("  redis_auth: pw\n");
        let (out, ok) = hello_of(&cfg, &[b"HELLO", b"2"], false);
        assert_eq!((out.as_slice(), ok), (ERR_HELLO_NOAUTH, false));
        let (out, ok) = hello_of(&cfg, &[b"hello", b"2", b"AUTH", b"default", b"bad"], false);
        assert_eq!((out.as_slice(), ok), (ERR_WRONGPASS, false));
        let (out, ok) = hello_of(
            &cfg,
            &[b"HELLO", b"2", b"auth", b"default", b"pw", b"SETNAME", b"n"],
            false,
        );
        assert!(ok);
        assert!(out.starts_with(b"*14\r\n$6\r\nserver\r\n$14\r\nmemfleet-route\r\n"));
        assert!(out.ends_with(b"$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:0\r\n$4\r\nmode\r\n$5\r\nproxy\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"));
        assert_eq!(proto::resp::reply_len(&out), Ok(Some(out.len())));
        assert_eq!(hello_of(&cfg, &[b"HELLO", b"4"], true).0, ERR_NOPROTO);
        let two = Session {
            authed: true,
            proto: 2,
        };
        let (out, s) = hello_in(&cfg, &[b"HELLO", b"3"], two);
        assert_eq!(s.proto, 3);
        assert!(out.starts_with(b"%7\r\n$6\r\nserver\r\n"));
        assert!(out.ends_with(b"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:0\r\n$4\r\nmode\r\n$5\r\nproxy\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"));
        // Without a version the protocol stays; a failed HELLO changes nothing.
        let three = Session { proto: 3, ..two };
        assert_eq!(hello_in(&cfg, &[b"HELLO"], three).1, three);
        let locked = Session {
            authed: false,
            proto: 2,
        };
        let (out, s) = hello_in(&cfg, &[b"HELLO", b"3", b"AUTH", b"default", b"no"], locked);
        assert_eq!((out.as_slice(), s), (ERR_WRONGPASS, locked));
        let (_, s) = hello_in(&cfg, &[b"HELLO", b"3", b"AUTH", b"default", b"pw"], locked);
        assert_eq!(
            s,
            Session {
                authed: true,
                proto: 3
            }
        );
        assert_eq!(hello_of(&cfg, &[b"HELLO", b"x"], true).0, ERR_PROTOVER);
        assert_eq!(
            hello_of(&cfg, &[b"HELLO", b"2", b"AUTH", b"u"], true).0,
            b"-ERR Syntax error in HELLO option 'AUTH'\r\n"
        );
        assert!(hello_of(&cfg, &[b"HELLO"], true).1);
    }
}
