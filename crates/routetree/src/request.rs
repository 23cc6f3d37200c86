//! One key's request as the route tree runs it: owned (it outlives the client's read
//! buffer while failovers and fills go on), named as mcrouter names operations, and written
//! out per destination with the routing prefix stripped and the exptime rewritten. Pure.

use crate::Send;
use proto::response::Expect;
use proto::{Request, StoreCmd};
use ring::RoutingKey;

use crate::reply::Op;

/// Which get command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetCmd {
    /// `get`
    Get,
    /// `gets`
    Gets,
    /// `gat <exptime>`
    Gat(i64),
    /// `gats <exptime>`
    Gats(i64),
}

/// A request for one key (or flush_all), owned.
// Unmarked fields are the command's own, named as the protocol names them.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReqSpec {
    /// get / gets / gat / gats of one key.
    Get { cmd: GetCmd, key: Vec<u8> },
    /// A storage command.
    Store {
        cmd: StoreCmd,
        key: Vec<u8>,
        flags: u32,
        exptime: i64,
        data: Vec<u8>,
        cas: u64,
    },
    /// delete.
    Delete { key: Vec<u8> },
    /// incr / decr.
    Arith {
        incr: bool,
        key: Vec<u8>,
        delta: u64,
    },
    /// touch.
    Touch { key: Vec<u8>, exptime: i64 },
    /// A meta command (`mg`, `ms`, `md`, `ma`, `me`), without its `q` flag.
    Meta {
        cmd: [u8; 2],
        key: Vec<u8>,
        /// The flag tokens after the key (after the data length for `ms`), `q` removed.
        flags: Vec<u8>,
        /// `ms`: the data block, without its CRLF.
        data: Option<Vec<u8>>,
        /// `b`: the key is base64 and is passed on untouched.
        binary: bool,
        /// `T<exptime>` as given.
        exptime: Option<i64>,
    },
    /// mcrouter's `lease-get` of one key.
    LeaseGet { key: Vec<u8> },
    /// mcrouter's `lease-set`.
    LeaseSet {
        key: Vec<u8>,
        token: u64,
        flags: u32,
        exptime: i64,
        data: Vec<u8>,
    },
    /// flush_all.
    FlushAll { delay: i64 },
    /// WarmUpRoute's read of the warm item: value, flags and remaining TTL.
    FillRead { key: Vec<u8> },
}

impl ReqSpec {
    /// The per-key requests of a parsed client request, or `None` for requests the route
    /// tree does not handle (version, stats, ...). Several for a multi-key get.
    pub fn split(req: &Request<'_>) -> Option<Vec<ReqSpec>> {
        let one = |r| Some(vec![r]);
        let gets = |cmd, keys: &proto::Keys<'_>| {
            let each = |k: &[u8]| ReqSpec::Get {
                cmd,
                key: k.to_vec(),
            };
            Some(keys.flatten().map(each).collect())
        };
        match req {
            Request::Get { keys, cas: false } => gets(GetCmd::Get, keys),
            Request::Get { keys, cas: true } => gets(GetCmd::Gets, keys),
            Request::Gat {
                exptime,
                keys,
                cas: false,
            } => gets(GetCmd::Gat(*exptime), keys),
            Request::Gat {
                exptime,
                keys,
                cas: true,
            } => gets(GetCmd::Gats(*exptime), keys),
            Request::Store {
                cmd,
                key,
                flags,
                exptime,
                data,
                cas_unique,
                ..
            } => one(ReqSpec::Store {
                cmd: *cmd,
                key: key.to_vec(),
                flags: *flags,
                exptime: *exptime,
                data: data.to_vec(),
                cas: *cas_unique,
            }),
            Request::Delete { key, .. } => one(ReqSpec::Delete { key: key.to_vec() }),
            Request::Arith {
                incr, key, delta, ..
            } => one(ReqSpec::Arith {
                incr: *incr,
                key: key.to_vec(),
                delta: *delta,
            }),
            Request::Touch { key, exptime, .. } => one(ReqSpec::Touch {
                key: key.to_vec(),
                exptime: *exptime,
            }),
            Request::FlushAll { delay, .. } => one(ReqSpec::FlushAll { delay: *delay }),
            Request::LeaseGet { keys } => Some(
                keys.flatten()
                    .map(|k| ReqSpec::LeaseGet { key: k.to_vec() })
                    .collect(),
            ),
            Request::LeaseSet {
                key,
                token,
                flags,
                exptime,
                data,
                ..
            } => one(ReqSpec::LeaseSet {
                key: key.to_vec(),
                token: *token,
                flags: *flags,
                exptime: *exptime,
                data: data.to_vec(),
            }),
            Request::MetaGet { key, flags, .. } => one(meta(*b"mg", key, flags, None)),
            Request::MetaSet {
                key, flags, data, ..
            } => one(meta(*b"ms", key, flags, Some(data))),
            Request::MetaDelete { key, flags } => one(meta(*b"md", key, flags, None)),
            Request::MetaArithmetic { key, flags, .. } => one(meta(*b"ma", key, flags, None)),
            Request::MetaDebug { key } => one(ReqSpec::Meta {
                cmd: *b"me",
                key: key.wire().to_vec(),
                flags: if key.is_binary() {
                    b"b".to_vec()
                } else {
                    Vec::new()
                },
                data: None,
                binary: key.is_binary(),
                exptime: None,
            }),
            _ => None,
        }
    }

    /// The key as the client sent it (empty for flush_all).
    pub fn key(&self) -> &[u8] {
        match self {
            ReqSpec::Get { key, .. }
            | ReqSpec::Store { key, .. }
            | ReqSpec::Delete { key }
            | ReqSpec::Arith { key, .. }
            | ReqSpec::Touch { key, .. }
            | ReqSpec::Meta { key, .. }
            | ReqSpec::LeaseGet { key }
            | ReqSpec::LeaseSet { key, .. }
            | ReqSpec::FillRead { key } => key,
            ReqSpec::FlushAll { .. } => b"",
        }
    }

    /// The operation name route handles see (`OperationSelectorRoute`, failover classes).
    pub fn operation(&self) -> &'static str {
        match self {
            ReqSpec::Get { cmd, .. } => match cmd {
                GetCmd::Get => "get",
                GetCmd::Gets => "gets",
                GetCmd::Gat(_) => "gat",
                GetCmd::Gats(_) => "gats",
            },
            ReqSpec::Store { cmd, .. } => cmd.name(),
            ReqSpec::Delete { .. } => "delete",
            ReqSpec::Arith { incr: true, .. } => "incr",
            ReqSpec::Arith { incr: false, .. } => "decr",
            ReqSpec::Touch { .. } => "touch",
            ReqSpec::FlushAll { .. } => "flushall",
            ReqSpec::FillRead { .. } => "get",
            ReqSpec::LeaseGet { .. } => "lease-get",
            ReqSpec::LeaseSet { .. } => "lease-set",
            ReqSpec::Meta { cmd, flags, .. } => meta_operation(cmd, meta_mode(flags)),
        }
    }

    /// Which default reply answers it (NullRoute, AllAsyncRoute).
    pub fn reply_op(&self) -> Op {
        match self {
            ReqSpec::Get { .. } | ReqSpec::FillRead { .. } | ReqSpec::LeaseGet { .. } => Op::Get,
            ReqSpec::Store { .. } | ReqSpec::LeaseSet { .. } => Op::Update,
            ReqSpec::Delete { .. } => Op::Delete,
            ReqSpec::Arith { .. } | ReqSpec::Touch { .. } | ReqSpec::FlushAll { .. } => Op::Other,
            ReqSpec::Meta { cmd, .. } => match cmd {
                b"mg" | b"me" => Op::MetaGet,
                b"ms" => Op::MetaUpdate,
                _ => Op::MetaOther,
            },
        }
    }

    /// The replies its server may send back (see `proto::response::Expect`).
    pub fn expect(&self) -> Expect {
        let meta = |cmd: [u8; 2]| Expect::Meta { cmd, quiet: false };
        match self {
            ReqSpec::Get { .. } => Expect::Get,
            ReqSpec::Store { .. } => Expect::Store,
            ReqSpec::Delete { .. } => Expect::Delete,
            ReqSpec::Arith { .. } => Expect::Arith,
            ReqSpec::Touch { .. } => Expect::Touch,
            ReqSpec::Meta { cmd, .. } => meta(*cmd),
            ReqSpec::LeaseGet { .. } => Expect::LeaseGet,
            ReqSpec::LeaseSet { .. } => Expect::LeaseSet,
            ReqSpec::FlushAll { .. } => Expect::Ok,
            ReqSpec::FillRead { .. } => meta(*b"mg"),
        }
    }

    /// The key as `send`'s server gets it: without the routing prefix unless the pool keeps it.
    pub fn key_for<'s>(&'s self, send: &Send) -> &'s [u8] {
        let key = self.key();
        if send.keep_prefix || matches!(self, ReqSpec::Meta { binary: true, .. }) {
            return key;
        }
        let prefix = RoutingKey::parse(key).prefix.len();
        &key[prefix..]
    }

    /// Writes the request for the server `send` names.
    pub fn write(&self, send: &Send, out: &mut Vec<u8>) {
        let key = self.key_for(send);
        let num = |out: &mut Vec<u8>, n: i64| out.extend_from_slice(n.to_string().as_bytes());
        match self {
            ReqSpec::Get { cmd, .. } => {
                match cmd {
                    GetCmd::Get => out.extend_from_slice(b"get "),
                    GetCmd::Gets => out.extend_from_slice(b"gets "),
                    GetCmd::Gat(e) | GetCmd::Gats(e) => {
                        out.extend_from_slice(if matches!(cmd, GetCmd::Gat(_)) {
                            b"gat "
                        } else {
                            b"gats "
                        });
                        num(out, send.exptime_for(*e));
                        out.push(b' ');
                    }
                }
                out.extend_from_slice(key);
            }
            ReqSpec::Store {
                cmd,
                flags,
                exptime,
                data,
                cas,
                ..
            } => {
                out.extend_from_slice(cmd.name().as_bytes());
                out.push(b' ');
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" {flags} ").as_bytes());
                num(out, send.exptime_for(*exptime));
                out.extend_from_slice(format!(" {}", data.len()).as_bytes());
                if *cmd == StoreCmd::Cas {
                    out.extend_from_slice(format!(" {cas}").as_bytes());
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(data);
            }
            ReqSpec::Delete { .. } => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
            }
            ReqSpec::Arith { incr, delta, .. } => {
                out.extend_from_slice(if *incr { b"incr " } else { b"decr " });
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" {delta}").as_bytes());
            }
            ReqSpec::Touch { exptime, .. } => {
                out.extend_from_slice(b"touch ");
                out.extend_from_slice(key);
                out.push(b' ');
                num(out, send.exptime_for(*exptime));
            }
            ReqSpec::FlushAll { delay } => {
                out.extend_from_slice(b"flush_all ");
                num(out, *delay);
            }
            ReqSpec::LeaseGet { .. } => {
                out.extend_from_slice(b"lease-get ");
                out.extend_from_slice(key);
            }
            ReqSpec::LeaseSet {
                token,
                flags,
                exptime,
                data,
                ..
            } => {
                out.extend_from_slice(b"lease-set ");
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" {token} {flags} ").as_bytes());
                num(out, send.exptime_for(*exptime));
                out.extend_from_slice(format!(" {}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
            }
            ReqSpec::FillRead { .. } => {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" s v t f");
            }
            ReqSpec::Meta {
                cmd,
                flags,
                data,
                exptime,
                ..
            } => {
                out.extend_from_slice(cmd);
                out.push(b' ');
                out.extend_from_slice(key);
                if let Some(d) = data {
                    out.extend_from_slice(format!(" {}", d.len()).as_bytes());
                }
                let new_exptime = match exptime {
                    Some(e) => Some(send.exptime_for(*e)),
                    // A set without T never expires; a rewrite may give it an exptime.
                    None if cmd == b"ms" && !send.exptime.is_empty() => {
                        Some(send.exptime_for(0)).filter(|&e| e != 0)
                    }
                    None => None,
                };
                for t in flags.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
                    if t[0] == b'T' && new_exptime.is_some() {
                        continue;
                    }
                    out.push(b' ');
                    out.extend_from_slice(t);
                }
                if let Some(e) = new_exptime {
                    out.extend_from_slice(b" T");
                    num(out, e);
                }
                if let Some(d) = data {
                    out.extend_from_slice(b"\r\n");
                    out.extend_from_slice(d);
                }
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The operation name of a meta command with mode flag `mode` (`M<mode>`).
fn meta_operation(cmd: &[u8; 2], mode: Option<u8>) -> &'static str {
    match cmd {
        b"mg" => "get",
        b"ms" => match mode {
            Some(b'E') => "add",
            Some(b'A') => "append",
            Some(b'P') => "prepend",
            Some(b'R') => "replace",
            _ => "set",
        },
        b"md" => "delete",
        b"ma" => match mode {
            Some(b'D' | b'd' | b'-') => "decr",
            _ => "incr",
        },
        _ => "metaget",
    }
}

/// The operation name and key of a request for one key, without copying it (for
/// requests that can be passed on as they are); `None` for anything else.
pub fn single_key<'r>(req: &'r Request<'_>) -> Option<(&'static str, &'r [u8])> {
    let one = |keys: &proto::Keys<'r>| {
        let mut it = *keys;
        match (it.next(), it.next()) {
            (Some(Ok(k)), None) => Some(k),
            _ => None,
        }
    };
    Some(match req {
        Request::Get { keys, cas } => (if *cas { "gets" } else { "get" }, one(keys)?),
        Request::Gat { keys, cas, .. } => (if *cas { "gats" } else { "gat" }, one(keys)?),
        Request::Store { cmd, key, .. } => (cmd.name(), *key),
        Request::Delete { key, .. } => ("delete", *key),
        Request::Arith { incr, key, .. } => (if *incr { "incr" } else { "decr" }, *key),
        Request::Touch { key, .. } => ("touch", *key),
        Request::MetaGet { key, flags, .. } => (meta_operation(b"mg", flags.mode), key.wire()),
        Request::MetaSet { key, flags, .. } => (meta_operation(b"ms", flags.mode), key.wire()),
        Request::MetaDelete { key, flags } => (meta_operation(b"md", flags.mode), key.wire()),
        Request::MetaArithmetic { key, flags, .. } => {
            (meta_operation(b"ma", flags.mode), key.wire())
        }
        Request::MetaDebug { key } => ("metaget", key.wire()),
        _ => return None,
    })
}

fn meta(
    cmd: [u8; 2],
    key: &proto::Key<'_>,
    flags: &proto::MetaFlags<'_>,
    data: Option<&[u8]>,
) -> ReqSpec {
    let mut kept = Vec::with_capacity(flags.raw().len());
    for t in flags.raw().split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if t == b"q" {
            continue;
        }
        if !kept.is_empty() {
            kept.push(b' ');
        }
        kept.extend_from_slice(t);
    }
    ReqSpec::Meta {
        cmd,
        key: key.wire().to_vec(),
        flags: kept,
        data: data.map(<[u8]>::to_vec),
        binary: key.is_binary(),
        exptime: flags.exptime,
    }
}

fn meta_mode(flags: &[u8]) -> Option<u8> {
    flags
        .split(|&b| b == b' ')
        .find_map(|t| t.strip_prefix(b"M").and_then(|m| m.first().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExptimeAction;

    fn send(keep_prefix: bool, exptime: Vec<(ExptimeAction, i64)>) -> Send {
        Send {
            pool: 0,
            index: 0,
            keep_prefix,
            exptime,
            asynclog: None,
        }
    }

    fn specs(raw: &[u8]) -> Vec<ReqSpec> {
        match proto::parse(raw, &proto::Limits::default()) {
            proto::Parse::Request(req, _) => ReqSpec::split(&req).unwrap(),
            _ => panic!("does not parse"),
        }
    }

    fn written(raw: &[u8], send: &Send) -> Vec<Vec<u8>> {
        specs(raw)
            .iter()
            .map(|s| {
                let mut out = Vec::new();
                s.write(send, &mut out);
                out
            })
            .collect()
    }

    #[test]
    fn each_send_expects_what_the_request_would() {
        for raw in [
            &b"get a b\r\n"[..],
            b"gats 5 k\r\n",
            b"cas k 0 0 1 9\r\nx\r\n",
            b"delete k\r\n",
            b"incr k 1\r\n",
            b"touch k 5\r\n",
            b"flush_all\r\n",
            b"mg k v\r\n",
            b"ms k 1 T5\r\nx\r\n",
            b"me k\r\n",
        ] {
            let proto::Parse::Request(req, _) = proto::parse(raw, &proto::Limits::default()) else {
                panic!("does not parse");
            };
            for spec in ReqSpec::split(&req).unwrap() {
                assert_eq!(Some(spec.expect()), Expect::of(&req), "{raw:?}");
            }
        }
        // Sent without its q, a quiet meta command gets its reply whatever it is.
        assert_eq!(
            specs(b"md k q\r\n")[0].expect(),
            Expect::Meta {
                cmd: *b"md",
                quiet: false
            }
        );
        let lease = proto::parse_mcrouter(b"lease-get k\r\n", &proto::Limits::default());
        let proto::Parse::Request(req, _) = lease else {
            panic!("does not parse");
        };
        assert_eq!(ReqSpec::split(&req).unwrap()[0].expect(), Expect::LeaseGet);
    }

    #[test]
    fn gets_split_per_key_and_lose_the_prefix() {
        let plain = send(false, vec![]);
        assert_eq!(
            written(b"get /a/b/k1 k2\r\n", &plain),
            vec![b"get k1\r\n".to_vec(), b"get k2\r\n".to_vec()]
        );
        assert_eq!(
            written(b"get /a/b/k1\r\n", &send(true, vec![])),
            vec![b"get /a/b/k1\r\n".to_vec()]
        );
        assert_eq!(specs(b"gats 5 k\r\n")[0].operation(), "gats");
    }

    #[test]
    fn storage_exptimes_are_rewritten() {
        let min10 = send(false, vec![(ExptimeAction::Min, 10)]);
        let cases: [(&[u8], &[u8]); 5] = [
            (
                b"set /a/b/k 3 0 2 noreply\r\nhi\r\n",
                b"set k 3 10 2\r\nhi\r\n",
            ),
            (b"cas k 0 5 1 99\r\nx\r\n", b"cas k 0 5 1 99\r\nx\r\n"),
            (b"touch k 100\r\n", b"touch k 10\r\n"),
            (b"gat 100 k\r\n", b"gat 10 k\r\n"),
            (b"incr k 5\r\n", b"incr k 5\r\n"),
        ];
        for (request, sent) in cases {
            assert_eq!(written(request, &min10), vec![sent.to_vec()]);
        }
    }

    #[test]
    fn meta_requests_lose_q_and_get_exptimes() {
        let min10 = send(false, vec![(ExptimeAction::Min, 10)]);
        assert_eq!(
            written(b"ms /a/b/k 2 q T100 F3\r\nhi\r\n", &min10),
            vec![b"ms k 2 F3 T10\r\nhi\r\n".to_vec()]
        );
        assert_eq!(
            written(b"ms k 2 F3\r\nhi\r\n", &min10),
            vec![b"ms k 2 F3 T10\r\nhi\r\n".to_vec()],
            "no T is never-expires: capped"
        );
        assert_eq!(
            written(b"mg k v t q\r\n", &send(false, vec![])),
            vec![b"mg k v t\r\n".to_vec()]
        );
        let raw = b"ms k 1 MA\r\nx\r\n";
        let ms = &specs(raw)[0];
        match proto::parse(raw, &proto::Limits::default()) {
            proto::Parse::Request(req, _) => {
                assert_eq!(single_key(&req), Some(("append", &b"k"[..])))
            }
            _ => panic!(),
        }
        assert_eq!(ms.operation(), "append");
        assert_eq!(specs(b"md k q\r\n")[0].operation(), "delete");
        assert_eq!(specs(b"ma k MD\r\n")[0].operation(), "decr");
    }

    #[test]
    fn fill_read_asks_for_flags_and_ttl() {
        let mut out = Vec::new();
        ReqSpec::FillRead {
            key: b"/a/b/k".to_vec(),
        }
        .write(&send(false, vec![]), &mut out);
        assert_eq!(out, b"mg k s v t f\r\n");
    }
}
