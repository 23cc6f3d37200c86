//! Replies as mcrouter's route handles see them: a result class per reply (hit, miss,
//! stored, an error kind, ...), its severity, the error replies the router makes up, and how
//! the replies of several children combine. Pure: bytes in, bytes out.

/// The result of one reply, named as mcrouter names them (`failover_errors` uses the names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McResult {
    /// A get hit (`VALUE`, `VA`, `HD` for mg).
    Found,
    /// A successful update or delete (`STORED`, `DELETED`, `TOUCHED`, `OK`, a number, `HD`).
    Ok,
    /// `EXISTS` / `EX`.
    Exists,
    /// A get miss (`END`, `EN`), `NOT_FOUND`, `NF`.
    NotFound,
    /// `NOT_STORED` / `NS`.
    NotStored,
    /// The server did not answer within `--server-timeout`.
    Timeout,
    /// The connection could not be made within `--server-timeout`.
    ConnectTimeout,
    /// The connection was refused (or failed while connecting).
    ConnectError,
    /// The server is marked TKO: the request was not sent.
    Tko,
    /// `SERVER_ERROR ...` from the server, or a connection that broke mid-request.
    RemoteError,
    /// An error made up by the router (ErrorRoute, a config that routes nowhere).
    LocalError,
    /// `CLIENT_ERROR ...` / `ERROR`.
    ClientError,
}

impl McResult {
    /// mcrouter's name without `mc_res_`, as `failover_errors` lists them.
    pub fn name(self) -> &'static str {
        match self {
            McResult::Found => "found",
            McResult::Ok => "ok",
            McResult::Exists => "exists",
            McResult::NotFound => "notfound",
            McResult::NotStored => "notstored",
            McResult::Timeout => "timeout",
            McResult::ConnectTimeout => "connect_timeout",
            McResult::ConnectError => "connect_error",
            McResult::Tko => "tko",
            McResult::RemoteError => "remote_error",
            McResult::LocalError => "local_error",
            McResult::ClientError => "client_error",
        }
    }

    /// Whether this is an error result (anything but a hit, miss or update outcome).
    pub fn is_error(self) -> bool {
        self.severity() >= 5
    }

    /// How bad a result is (mcrouter's `resultSeverity`): AllSyncRoute replies with the
    /// worst of its children's replies.
    pub fn severity(self) -> u8 {
        match self {
            McResult::Found | McResult::Ok | McResult::Exists => 1,
            McResult::NotFound | McResult::NotStored => 4,
            McResult::Timeout
            | McResult::ConnectTimeout
            | McResult::ConnectError
            | McResult::Tko => 5,
            McResult::RemoteError => 7,
            McResult::LocalError => 8,
            McResult::ClientError => 9,
        }
    }

    /// The ASCII reply mcrouter writes for an error result it made up.
    pub fn error_reply(self) -> &'static [u8] {
        match self {
            McResult::Timeout => b"SERVER_ERROR timeout\r\n",
            McResult::ConnectTimeout => b"SERVER_ERROR connection timeout\r\n",
            McResult::ConnectError => b"SERVER_ERROR connection error\r\n",
            McResult::Tko => b"SERVER_ERROR unavailable\r\n",
            McResult::LocalError => b"SERVER_ERROR local error\r\n",
            McResult::ClientError => b"CLIENT_ERROR\r\n",
            _ => b"SERVER_ERROR remote error\r\n",
        }
    }
}

/// A reply and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The reply as the client would get it.
    pub bytes: Vec<u8>,
    /// Its result class.
    pub result: McResult,
}

impl Reply {
    /// A reply the router makes up for an error result.
    pub fn error(result: McResult) -> Reply {
        Reply {
            bytes: result.error_reply().to_vec(),
            result,
        }
    }

    /// ErrorRoute's reply: `SERVER_ERROR <message>`.
    pub fn local_error(message: &str) -> Reply {
        let line: String = message
            .chars()
            .filter(|c| *c != '\r' && *c != '\n')
            .collect();
        Reply {
            bytes: format!("SERVER_ERROR {line}\r\n").into_bytes(),
            result: McResult::LocalError,
        }
    }

    /// A reply from a server, classified.
    pub fn from_server(bytes: &[u8]) -> Reply {
        Reply {
            result: classify(bytes),
            bytes: bytes.to_vec(),
        }
    }
}

/// The result class of a complete server reply.
pub fn classify(reply: &[u8]) -> McResult {
    let end = memchr::memchr(b'\n', reply).unwrap_or(reply.len());
    let line = reply[..end].strip_suffix(b"\r").unwrap_or(&reply[..end]);
    let word = line.split(|&b| b == b' ').next().unwrap_or(b"");
    match word {
        b"VALUE" | b"VA" => McResult::Found,
        // LVALUE: mcrouter's lease-get miss (with a lease token).
        b"END" | b"EN" | b"NOT_FOUND" | b"NF" | b"LVALUE" | b"NOT_FOUND_HOT" => McResult::NotFound,
        b"STORED" | b"STALE_STORED" | b"DELETED" | b"TOUCHED" | b"OK" | b"HD" | b"ME" | b"MN" => {
            McResult::Ok
        }
        b"EXISTS" | b"EX" => McResult::Exists,
        b"NOT_STORED" | b"NS" => McResult::NotStored,
        b"SERVER_ERROR" => McResult::RemoteError,
        b"CLIENT_ERROR" | b"ERROR" => McResult::ClientError,
        w if !w.is_empty() && w.iter().all(u8::is_ascii_digit) => McResult::Ok,
        _ => McResult::RemoteError,
    }
}

/// Whether a get-like reply is a hit. An `mg` without `v` answers `HD` for a hit.
pub fn is_hit(reply: &Reply) -> bool {
    reply.result == McResult::Found
        || (reply.result == McResult::Ok && reply.bytes.starts_with(b"HD"))
}

/// The reply the client gets from NullRoute (and from AllAsyncRoute at once), per request:
/// a miss for gets, not stored for updates, not found for deletes and arithmetic.
pub fn default_reply(op: Op) -> Reply {
    let (bytes, result): (&[u8], _) = match op {
        Op::Get => (b"END\r\n", McResult::NotFound),
        Op::Update => (b"NOT_STORED\r\n", McResult::NotStored),
        Op::Delete | Op::Other => (b"NOT_FOUND\r\n", McResult::NotFound),
        Op::MetaGet => (b"EN\r\n", McResult::NotFound),
        Op::MetaUpdate => (b"NS\r\n", McResult::NotStored),
        Op::MetaOther => (b"NF\r\n", McResult::NotFound),
    };
    Reply {
        bytes: bytes.to_vec(),
        result,
    }
}

/// What kind of request a reply answers, for the default reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// get, gets, gat, gats.
    Get,
    /// set, add, replace, append, prepend, cas.
    Update,
    /// delete.
    Delete,
    /// incr, decr, touch, flush_all.
    Other,
    /// mg, me.
    MetaGet,
    /// ms.
    MetaUpdate,
    /// md, ma.
    MetaOther,
}

/// AllSyncRoute: the worst reply (the first of the worst, in child order).
pub fn worst(replies: &[Reply]) -> Option<&Reply> {
    let mut best: Option<&Reply> = None;
    for r in replies {
        if best.is_none_or(|b| r.result.severity() > b.result.severity()) {
            best = Some(r);
        }
    }
    best
}

/// AllMajorityRoute's decision after the replies so far (`total` children in all): the
/// reply once one non-error result class holds a majority (`total / 2 + 1`); when every
/// child answered without one, the most frequent class (ties: the worse one).
pub fn majority(replies: &[Reply], total: usize) -> Option<&Reply> {
    let need = total / 2 + 1;
    let count = |res: McResult| replies.iter().filter(|r| r.result == res).count();
    if let Some(r) = replies
        .iter()
        .find(|r| !r.result.is_error() && count(r.result) >= need)
    {
        return Some(r);
    }
    if replies.len() < total {
        return None;
    }
    replies.iter().max_by(|a, b| {
        (count(a.result), a.result.severity()).cmp(&(count(b.result), b.result.severity()))
    })
}

/// MissFailoverRoute with `return_best_on_error`: a non-error reply over an error, else the
/// last.
pub fn best_of(replies: &[Reply]) -> Option<&Reply> {
    replies
        .iter()
        .rev()
        .find(|r| !r.result.is_error())
        .or(replies.last())
}

/// A get reply for one key with the server's key replaced by the client's (a routing prefix
/// was stripped before the request went out); also the `k` flag of a meta reply.
pub fn rekey(reply: &[u8], sent: &[u8], client: &[u8]) -> Vec<u8> {
    if sent == client {
        return reply.to_vec();
    }
    let end = memchr::memchr(b'\n', reply).map_or(reply.len(), |i| i + 1);
    let (head, rest) = reply.split_at(end);
    let mut out = Vec::with_capacity(reply.len() + client.len());
    let line = head.strip_suffix(b"\r\n").unwrap_or(head);
    let mut tokens = line.split(|&b| b == b' ');
    match tokens.next() {
        Some(w @ (b"VALUE" | b"LVALUE" | b"ME")) => {
            out.extend_from_slice(w);
            for (i, t) in tokens.enumerate() {
                out.push(b' ');
                out.extend_from_slice(if i == 0 && t == sent { client } else { t });
            }
        }
        Some(w @ (b"VA" | b"HD" | b"EN" | b"NF" | b"NS" | b"EX")) => {
            out.extend_from_slice(w);
            for t in tokens {
                out.push(b' ');
                match t.strip_prefix(b"k") {
                    Some(k) if k == sent => {
                        out.push(b'k');
                        out.extend_from_slice(client);
                    }
                    _ => out.extend_from_slice(t),
                }
            }
        }
        _ => return reply.to_vec(),
    }
    out.extend_from_slice(&head[line.len()..]);
    out.extend_from_slice(rest);
    out
}

/// Puts the per-key replies of a split `get k1 k2 ...` together in key order: every key's
/// items, then `END`. If one key failed, its error is the reply (as one request's error).
pub fn merge_gets(parts: &[Reply], out: &mut Vec<u8>) {
    if let Some(err) = parts.iter().find(|r| r.result.is_error()) {
        out.extend_from_slice(&err.bytes);
        return;
    }
    for p in parts {
        out.extend_from_slice(p.bytes.strip_suffix(b"END\r\n").unwrap_or(&p.bytes));
    }
    out.extend_from_slice(b"END\r\n");
}

/// Whether a meta command sent with `q` would have been silent: `EN` for mg, `HD` for
/// the others (the router sends meta requests without `q` to see every result).
pub fn quiet_hides(meta_get: bool, reply: &[u8]) -> bool {
    if meta_get {
        reply == b"EN\r\n"
    } else {
        reply.starts_with(b"HD") && (reply.len() == 4 || reply[2] == b' ')
    }
}

/// The item of an `mg <key> s v t f` reply: (flags, remaining ttl or -1, value).
pub fn meta_item(reply: &[u8]) -> Option<(u32, i64, &[u8])> {
    let nl = memchr::memchr(b'\n', reply)?;
    let line = reply[..nl].strip_suffix(b"\r")?;
    let mut tokens = line.split(|&b| b == b' ');
    if tokens.next()? != b"VA" {
        return None;
    }
    let len: usize = std::str::from_utf8(tokens.next()?).ok()?.parse().ok()?;
    let (mut flags, mut ttl) = (0u32, -1i64);
    for t in tokens {
        let num = |v: &[u8]| std::str::from_utf8(v).ok()?.parse::<i64>().ok();
        match t.split_first() {
            Some((b'f', v)) => flags = u32::try_from(num(v)?).ok()?,
            Some((b't', v)) => ttl = num(v)?,
            _ => {}
        }
    }
    let value = reply.get(nl + 1..nl + 1 + len)?;
    Some((flags, ttl, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(bytes: &[u8]) -> Reply {
        Reply::from_server(bytes)
    }

    #[test]
    fn classifies_text_and_meta_replies() {
        assert_eq!(classify(b"VALUE k 0 1\r\nx\r\nEND\r\n"), McResult::Found);
        assert_eq!(classify(b"END\r\n"), McResult::NotFound);
        assert_eq!(classify(b"STORED\r\n"), McResult::Ok);
        assert_eq!(classify(b"NOT_STORED\r\n"), McResult::NotStored);
        assert_eq!(classify(b"42\r\n"), McResult::Ok);
        assert_eq!(
            classify(b"SERVER_ERROR out of memory\r\n"),
            McResult::RemoteError
        );
        assert_eq!(classify(b"CLIENT_ERROR bad\r\n"), McResult::ClientError);
        assert_eq!(classify(b"VA 1 t-1\r\nx\r\n"), McResult::Found);
        assert_eq!(classify(b"EN\r\n"), McResult::NotFound);
        assert_eq!(classify(b"NS\r\n"), McResult::NotStored);
        assert!(is_hit(&r(b"HD t5\r\n")));
        assert!(!is_hit(&r(b"EN\r\n")));
    }

    #[test]
    fn all_sync_takes_the_worst() {
        let replies = [r(b"STORED\r\n"), r(b"NOT_STORED\r\n"), r(b"STORED\r\n")];
        assert_eq!(worst(&replies).unwrap().bytes, b"NOT_STORED\r\n");
        let replies = [r(b"STORED\r\n"), Reply::error(McResult::ConnectError)];
        assert_eq!(
            worst(&replies).unwrap().bytes,
            b"SERVER_ERROR connection error\r\n"
        );
        assert!(worst(&[]).is_none());
    }

    #[test]
    fn majority_needs_half_plus_one_non_errors() {
        let ok = r(b"STORED\r\n");
        let down = Reply::error(McResult::Tko);
        assert_eq!(
            majority(std::slice::from_ref(&ok), 3),
            None,
            "1 of 3 is not enough yet"
        );
        assert_eq!(majority(&[ok.clone(), ok.clone()], 3), Some(&ok));
        assert_eq!(majority(&[down.clone(), ok.clone()], 3), None);
        assert_eq!(
            majority(&[down.clone(), ok.clone(), down.clone()], 3),
            Some(&down),
            "no majority: the most frequent"
        );
        assert_eq!(
            majority(&[down.clone(), down.clone()], 3),
            None,
            "errors never win early"
        );
        assert_eq!(
            majority(&[down.clone(), ok.clone()], 2),
            Some(&down),
            "tie: the worse"
        );
    }

    #[test]
    fn best_of_prefers_non_errors() {
        let miss = r(b"END\r\n");
        let err = Reply::error(McResult::Timeout);
        assert_eq!(best_of(&[miss.clone(), err.clone()]), Some(&miss));
        assert_eq!(best_of(std::slice::from_ref(&err)), Some(&err));
    }

    #[test]
    fn rekey_restores_the_client_key() {
        assert_eq!(
            rekey(b"VALUE k 5 1 77\r\nx\r\nEND\r\n", b"k", b"/a/b/k"),
            b"VALUE /a/b/k 5 1 77\r\nx\r\nEND\r\n"
        );
        assert_eq!(
            rekey(b"VA 1 kk f0\r\nx\r\n", b"k", b"/a/b/k"),
            b"VA 1 k/a/b/k f0\r\nx\r\n"
        );
        assert_eq!(
            rekey(b"ME k exp=-1 la=0\r\n", b"k", b"/a/b/k"),
            b"ME /a/b/k exp=-1 la=0\r\n"
        );
        assert_eq!(rekey(b"END\r\n", b"k", b"/a/b/k"), b"END\r\n");
        assert_eq!(rekey(b"STORED\r\n", b"k", b"k"), b"STORED\r\n");
    }

    #[test]
    fn merges_per_key_gets_in_order() {
        let mut out = Vec::new();
        merge_gets(
            &[
                r(b"VALUE b 0 1\r\n2\r\nEND\r\n"),
                r(b"END\r\n"),
                r(b"VALUE a 0 1\r\n1\r\nEND\r\n"),
            ],
            &mut out,
        );
        assert_eq!(out, b"VALUE b 0 1\r\n2\r\nVALUE a 0 1\r\n1\r\nEND\r\n");
        out.clear();
        merge_gets(&[r(b"END\r\n"), Reply::error(McResult::Tko)], &mut out);
        assert_eq!(out, b"SERVER_ERROR unavailable\r\n");
    }

    #[test]
    fn quiet_meta_hides_only_the_quiet_results() {
        assert!(quiet_hides(true, b"EN\r\n"));
        assert!(!quiet_hides(true, b"VA 1\r\nx\r\n"));
        assert!(quiet_hides(false, b"HD\r\n"));
        assert!(quiet_hides(false, b"HD O1\r\n"));
        assert!(!quiet_hides(false, b"NS\r\n"));
    }

    #[test]
    fn reads_meta_items() {
        assert_eq!(
            meta_item(b"VA 3 f7 t99\r\nabc\r\n"),
            Some((7, 99, &b"abc"[..]))
        );
        assert_eq!(meta_item(b"VA 1 f0 t-1\r\nz\r\n"), Some((0, -1, &b"z"[..])));
        assert_eq!(meta_item(b"EN\r\n"), None);
        assert_eq!(meta_item(b"VA 9 f0\r\nshort\r\n"), None);
    }
}
