//! mcrouter's `stats servers` and `stats suspect_servers`: the result a server's reply
//! stands for (mcrouter's carbon results, in their order), one destination's figures, and
//! the text of both replies (`STAT <name> <value>` lines, then `END`).

use proto::response::Expect;

use crate::admin_handles::access_point;
use crate::model::{Config, PoolId};
use crate::reply::McResult;

/// mcrouter's reply results, numbered as its carbon `Result` enum is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Res {
    Unknown = 0,
    Deleted,
    Touched,
    Found,
    FoundStale,
    NotFound,
    NotFoundHot,
    NotStored,
    StaleStored,
    Ok,
    Stored,
    Exists,
    Ooo,
    Timeout,
    ConnectTimeout,
    ConnectError,
    Busy,
    TryAgain,
    Shutdown,
    Tko,
    BadCommand,
    BadKey,
    BadFlags,
    BadExptime,
    BadLeaseId,
    BadCasId,
    BadValue,
    Aborted,
    ClientError,
    LocalError,
    RemoteError,
    Waiting,
    DeadlineExceeded,
    PermissionDenied,
    HotKey,
    Overloaded,
}

/// How many results there are.
pub const NUM_RESULTS: usize = 36;

/// Each result's name as `stats servers` prints it (mcrouter's, without `mc_res_`).
pub const RESULT_NAMES: [&str; NUM_RESULTS] = [
    "unknown",
    "deleted",
    "touched",
    "found",
    "foundstale",
    "notfound",
    "notfoundhot",
    "notstored",
    "stalestored",
    "ok",
    "stored",
    "exists",
    "ooo",
    "timeout",
    "connect_timeout",
    "connect_error",
    "busy",
    "try_again",
    "shutdown",
    "tko",
    "bad_command",
    "bad_key",
    "bad_flags",
    "bad_exptime",
    "bad_lease_id",
    "bad_cas_id",
    "bad_value",
    "aborted",
    "client_error",
    "local_error",
    "remote_error",
    "waiting",
    "deadline_exceeded",
    "permission_denied",
    "hot_key",
    "overloaded",
];

/// The `SERVER_ERROR <code>` mcrouter reads as `busy`.
const SERVER_ERROR_BUSY: &[u8] = b"307";

impl Res {
    /// The result a complete server reply stands for, as mcrouter's ascii client parses
    /// it; `expect` tells which command it answers.
    pub fn of_reply(expect: Expect, reply: &[u8]) -> Res {
        let end = reply
            .iter()
            .position(|&b| b == b' ' || b == b'\r' || b == b'\n')
            .unwrap_or(reply.len());
        let cmd = match expect {
            Expect::Meta { cmd, .. } => cmd,
            _ => [0, 0],
        };
        match &reply[..end] {
            b"VALUE" | b"VA" => Res::Found,
            // A lease token: mcrouter reads it as a miss.
            b"END" | b"LVALUE" | b"NOT_FOUND" | b"EN" | b"NF" => Res::NotFound,
            b"STORED" => Res::Stored,
            b"STALE_STORED" => Res::StaleStored,
            b"NOT_STORED" | b"NS" => Res::NotStored,
            b"EXISTS" | b"EX" => Res::Exists,
            b"DELETED" => Res::Deleted,
            b"TOUCHED" => Res::Touched,
            b"OK" | b"VERSION" | b"ME" => Res::Ok,
            b"HD" => meta_success(cmd, Res::Found),
            // A quiet meta command's end: what `q` hid.
            b"MN" => meta_success(cmd, Res::NotFound),
            b"SERVER_ERROR" => {
                let code = reply[end..].trim_ascii_start();
                if code.starts_with(SERVER_ERROR_BUSY)
                    && code.get(SERVER_ERROR_BUSY.len()) == Some(&b' ')
                {
                    Res::Busy
                } else {
                    Res::RemoteError
                }
            }
            b"CLIENT_ERROR" | b"ERROR" => Res::ClientError,
            // incr/decr: the new value.
            w if !w.is_empty() && w.iter().all(u8::is_ascii_digit) => Res::Stored,
            _ => Res::RemoteError,
        }
    }

    /// The result of a send the router failed (timeout, connection error, ...).
    pub fn of_failure(result: McResult) -> Res {
        match result {
            McResult::Found => Res::Found,
            McResult::Ok => Res::Ok,
            McResult::Exists => Res::Exists,
            McResult::NotFound => Res::NotFound,
            McResult::NotStored => Res::NotStored,
            McResult::Timeout => Res::Timeout,
            McResult::ConnectTimeout => Res::ConnectTimeout,
            McResult::ConnectError => Res::ConnectError,
            McResult::Tko => Res::Tko,
            McResult::RemoteError => Res::RemoteError,
            McResult::LocalError => Res::LocalError,
            McResult::ClientError => Res::ClientError,
        }
    }

    /// Its name in `stats servers`.
    pub fn name(self) -> &'static str {
        RESULT_NAMES[self as usize]
    }
}

/// What a meta command's bare success (`HD`, or the `MN` after a quiet one) stands for:
/// mg `get` (a hit for `HD`), ms a store, md a delete, ma an arithmetic store.
fn meta_success(cmd: [u8; 2], mg: Res) -> Res {
    match &cmd {
        b"mg" => mg,
        b"ms" | b"ma" => Res::Stored,
        b"md" => Res::Deleted,
        _ => Res::Ok,
    }
}

/// The connection states `stats servers` counts, in mcrouter's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    /// Never connected.
    New = 0,
    /// Connected.
    Up,
    /// Dropped by an error (or by the server).
    Down,
    /// Closed by the router.
    Closed,
}

const STATE_NAMES: [&str; 4] = ["new", "up", "down", "closed"];

/// One destination's figures, summed over the worker threads.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerStat {
    /// Replies per result.
    pub results: [u64; NUM_RESULTS],
    /// Threads whose connection is in each [`ConnState`].
    pub states: [u64; 4],
    /// Hard TKO.
    pub hard_tko: bool,
    /// Soft TKO.
    pub soft_tko: bool,
    /// The threads' average latencies (µs) added up, and how many threads have one.
    pub sum_latency_us: f64,
    /// See `sum_latency_us`.
    pub latencies: u64,
    /// Requests waiting for their connection to be made.
    pub pending: u64,
    /// Requests written (or being written) and not answered yet.
    pub inflight: u64,
}

impl Default for ServerStat {
    fn default() -> Self {
        ServerStat {
            results: [0; NUM_RESULTS],
            states: [0; 4],
            hard_tko: false,
            soft_tko: false,
            sum_latency_us: 0.0,
            latencies: 0,
            pending: 0,
            inflight: 0,
        }
    }
}

impl ServerStat {
    /// The value of its `stats servers` line: average latency, request counts, TKO mark,
    /// connection states, then the results seen (in that order, zeros left out).
    pub fn value(&self) -> String {
        let avg = if self.latencies == 0 {
            0.0
        } else {
            self.sum_latency_us / self.latencies as f64
        };
        let mut out = format!(
            "avg_latency_us:{avg:.3} pending_reqs:{} inflight_reqs:{}",
            self.pending, self.inflight
        );
        if self.hard_tko {
            out.push_str(" hard_tko; ");
        } else if self.soft_tko {
            out.push_str(" soft_tko; ");
        }
        for (name, &n) in STATE_NAMES.iter().zip(&self.states) {
            if n > 0 {
                out.push_str(&format!(" {name}:{n}"));
            }
        }
        let mut sep = ";";
        for (name, &n) in RESULT_NAMES.iter().zip(&self.results) {
            if n > 0 {
                out.push_str(&format!("{sep} {name}:{n}"));
                sep = "";
            }
        }
        out
    }
}

/// The value of a `stats suspect_servers` line.
pub fn suspect_value(tko: bool, failures: u64) -> String {
    let status = if tko { "tko" } else { "down" };
    format!("status:{status} num_failures:{failures}")
}

/// The name `stats servers` gives server `index` of `pool`: its access point and the
/// server timeout (`-<ms>`), as mcrouter keys an ascii destination (the only protocol
/// memfleet speaks).
pub fn destination_name(config: &Config, pool: PoolId, index: usize, timeout_ms: u64) -> String {
    format!("{}-{timeout_ms}", access_point(config, pool, index))
}

/// The name `stats suspect_servers` gives server `index` of `pool`: `host:port` (IPv6
/// bracketed), as mcrouter's TKO tracking keys its servers.
pub fn host_port(config: &Config, pool: PoolId, index: usize) -> String {
    let s = &config.pools[pool].servers[index];
    if s.host.contains(':') {
        format!("[{}]:{}", s.host, s.port)
    } else {
        format!("{}:{}", s.host, s.port)
    }
}

/// A stats reply: `STAT <name> <value>` per line, then `END`.
pub fn stats_reply<'a>(lines: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (name, value) in lines {
        out.push_str("STAT ");
        out.push_str(name);
        out.push(' ');
        out.push_str(value);
        out.push_str("\r\n");
    }
    out.push_str("END\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_numbered_and_named_as_mcrouter_does() {
        assert_eq!(Res::Overloaded as usize + 1, NUM_RESULTS);
        assert_eq!(Res::Found.name(), "found");
        assert_eq!(Res::ConnectError as usize, 15);
        assert_eq!(Res::ConnectError.name(), "connect_error");
        assert_eq!(Res::RemoteError as usize, 30);
        assert_eq!(Res::TryAgain.name(), "try_again");
    }

    #[test]
    fn replies_map_to_results() {
        let r = |e, s: &[u8]| Res::of_reply(e, s);
        assert_eq!(r(Expect::Get, b"VALUE k 0 1\r\nv\r\nEND\r\n"), Res::Found);
        assert_eq!(r(Expect::Get, b"END\r\n"), Res::NotFound);
        assert_eq!(r(Expect::Store, b"STORED\r\n"), Res::Stored);
        assert_eq!(r(Expect::Store, b"NOT_STORED\r\n"), Res::NotStored);
        assert_eq!(r(Expect::Delete, b"DELETED\r\n"), Res::Deleted);
        assert_eq!(r(Expect::Touch, b"TOUCHED\r\n"), Res::Touched);
        assert_eq!(r(Expect::Arith, b"42\r\n"), Res::Stored);
        assert_eq!(r(Expect::Ok, b"OK\r\n"), Res::Ok);
        assert_eq!(
            r(Expect::Store, b"SERVER_ERROR out of memory\r\n"),
            Res::RemoteError
        );
        assert_eq!(r(Expect::Store, b"SERVER_ERROR 307 busy\r\n"), Res::Busy);
        assert_eq!(r(Expect::Store, b"CLIENT_ERROR bad\r\n"), Res::ClientError);
        let ms = Expect::Meta {
            cmd: *b"ms",
            quiet: true,
        };
        let mg = Expect::Meta {
            cmd: *b"mg",
            quiet: false,
        };
        assert_eq!(r(ms, b"HD\r\n"), Res::Stored);
        assert_eq!(r(ms, b"MN\r\n"), Res::Stored);
        assert_eq!(r(mg, b"HD\r\n"), Res::Found);
        assert_eq!(r(mg, b"EN\r\n"), Res::NotFound);
    }

    #[test]
    fn server_line_has_mcrouters_fields_order_and_separators() {
        let mut s = ServerStat::default();
        assert_eq!(
            s.value(),
            "avg_latency_us:0.000 pending_reqs:0 inflight_reqs:0"
        );
        s.states[ConnState::Up as usize] = 2;
        s.states[ConnState::New as usize] = 1;
        s.results[Res::Stored as usize] = 5;
        s.results[Res::Found as usize] = 3;
        s.sum_latency_us = 100.0 + 51.2345;
        s.latencies = 2;
        s.inflight = 1;
        assert_eq!(
            s.value(),
            "avg_latency_us:75.617 pending_reqs:0 inflight_reqs:1 new:1 up:2; found:3 stored:5"
        );
        s.hard_tko = true;
        s.soft_tko = true;
        s.states = [0, 0, 2, 0];
        s.results = [0; NUM_RESULTS];
        s.results[Res::ConnectError as usize] = 4;
        s.pending = 2;
        s.inflight = 0;
        s.latencies = 0;
        assert_eq!(
            s.value(),
            "avg_latency_us:0.000 pending_reqs:2 inflight_reqs:0 hard_tko;  down:2; connect_error:4"
        );
        s.hard_tko = false;
        assert!(s.value().contains(" soft_tko;  down:2"));
    }

    #[test]
    fn suspect_line_and_reply() {
        assert_eq!(suspect_value(true, 3), "status:tko num_failures:3");
        assert_eq!(suspect_value(false, 1), "status:down num_failures:1");
        assert_eq!(stats_reply([]), "END\r\n");
        assert_eq!(
            stats_reply([("127.0.0.1:1", "status:tko num_failures:1")]),
            "STAT 127.0.0.1:1 status:tko num_failures:1\r\nEND\r\n"
        );
    }

    #[test]
    fn destination_names() {
        let config = crate::parse_config(
            "t.json",
            r#"{"pools": {"A": {"servers": ["127.0.0.1:5000", "[::1]:5001:ascii:ssl"]}},
                "route": "PoolRoute|A"}"#,
        )
        .unwrap();
        assert_eq!(
            destination_name(&config, 0, 0, 1000),
            "127.0.0.1:5000:ascii:plain:notcompressed-1000"
        );
        assert_eq!(
            destination_name(&config, 0, 1, 300),
            "[::1]:5001:ascii:ssl:notcompressed-300"
        );
        assert_eq!(host_port(&config, 0, 0), "127.0.0.1:5000");
        assert_eq!(host_port(&config, 0, 1), "[::1]:5001");
    }
}
