//! The replies of `stats`, `stats latency` and `stats hotkeys` as numbers. Pure: no I/O.
//!
//! Parsing is lenient on purpose: `memfleet top` watches servers it does not control
//! (memcached of any 1.x version, memfleet of any version), so an unknown or malformed line
//! is skipped rather than failing the whole reply.

use std::collections::HashMap;

/// The `STAT name value` lines of one reply, by name.
pub fn stat_lines(reply: &str) -> HashMap<&str, &str> {
    reply
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|rest| rest.trim_end().split_once(' '))
        .collect()
}

/// The counters that `memfleet top` reads from a general `stats` reply. A counter the
/// server does not report is 0 (memcached 1.4 lacks some that 1.6 has).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct General {
    /// Key operations since start: gets (per key), stores, touches, deletes, incr/decr.
    pub ops: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub evictions: u64,
    pub curr_connections: u64,
    pub bytes: u64,
    pub limit_maxbytes: u64,
    /// Seconds since the server started: a smaller value than last time means a restart.
    pub uptime: u64,
}

/// The counters whose sum is "ops": each is one key operation as memcached counts them.
/// `cmd_set` already includes add/replace/append/prepend/cas.
const OP_COUNTERS: &[&str] = &[
    "cmd_get",
    "cmd_set",
    "cmd_touch",
    "delete_hits",
    "delete_misses",
    "incr_hits",
    "incr_misses",
    "decr_hits",
    "decr_misses",
];

/// Reads a `stats` reply; `None` when it has no `STAT` line at all (not a stats reply).
pub fn parse_general(reply: &str) -> Option<General> {
    let stats = stat_lines(reply);
    if stats.is_empty() {
        return None;
    }
    let num = |name: &str| {
        stats
            .get(name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(General {
        ops: OP_COUNTERS
            .iter()
            .map(|c| num(c))
            .fold(0, u64::saturating_add),
        get_hits: num("get_hits"),
        get_misses: num("get_misses"),
        evictions: num("evictions"),
        curr_connections: num("curr_connections"),
        bytes: num("bytes"),
        limit_maxbytes: num("limit_maxbytes"),
        uptime: num("uptime"),
    })
}

/// The worst p99 over all commands of a `stats latency` reply (`STAT <cmd>:p99_us <µs>`,
/// or `:p99`), in microseconds. `None` when the server has no such command (memcached
/// replies `ERROR`), has latency off, or has no requests to report yet.
pub fn parse_p99(reply: &str) -> Option<f64> {
    stat_lines(reply)
        .into_iter()
        .filter(|(name, _)| {
            let field = name.rsplit(':').next().unwrap_or(name);
            field == "p99" || field == "p99_us"
        })
        .filter_map(|(_, value)| value.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .reduce(f64::max)
}

/// One hot key and how often the sketch saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    pub key: String,
    pub count: u64,
}

/// The keys of a `stats hotkeys` reply, most requested first: `STAT hotkey:<key> <count>`
/// lines, as memfleet serve writes them (other lines, such as `sample_rate`, `sampled` or
/// `hotkeys_status disabled`, are about the sketch, not keys).
pub fn parse_hotkeys(reply: &str) -> Vec<HotKey> {
    let mut keys: Vec<HotKey> = stat_lines(reply)
        .into_iter()
        .filter_map(|(name, value)| {
            Some(HotKey {
                key: name
                    .strip_prefix("hotkey:")
                    .filter(|k| !k.is_empty())?
                    .to_owned(),
                count: value.split_whitespace().next()?.parse().ok()?,
            })
        })
        .collect();
    keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMCACHED_STATS: &str = "STAT pid 1\r\nSTAT uptime 42\r\nSTAT version 1.6.18\r\n\
        STAT curr_connections 3\r\nSTAT cmd_get 10\r\nSTAT cmd_set 5\r\nSTAT cmd_touch 1\r\n\
        STAT get_hits 7\r\nSTAT get_misses 3\r\nSTAT delete_hits 2\r\nSTAT delete_misses 1\r\n\
        STAT incr_hits 1\r\nSTAT incr_misses 0\r\nSTAT decr_hits 0\r\nSTAT decr_misses 1\r\n\
        STAT bytes 1024\r\nSTAT limit_maxbytes 67108864\r\nSTAT evictions 9\r\n\
        STAT rusage_user 0.1234\r\nEND\r\n";

    #[test]
    fn general_stats_sum_key_operations() {
        let g = parse_general(MEMCACHED_STATS).unwrap();
        assert_eq!(g.ops, 10 + 5 + 1 + 2 + 1 + 1 + 1);
        assert_eq!((g.get_hits, g.get_misses), (7, 3));
        assert_eq!((g.evictions, g.curr_connections), (9, 3));
        assert_eq!((g.bytes, g.limit_maxbytes, g.uptime), (1024, 64 << 20, 42));
    }

    #[test]
    fn missing_or_malformed_counters_read_as_zero() {
        let g =
            parse_general("STAT cmd_get x\r\nSTAT get_hits\r\nSTAT bytes 5\r\nEND\r\n").unwrap();
        assert_eq!((g.ops, g.get_hits, g.bytes), (0, 0, 5));
    }

    #[test]
    fn a_reply_without_stat_lines_is_not_stats() {
        assert_eq!(parse_general("ERROR\r\n"), None);
        assert_eq!(parse_general("END\r\n"), None);
    }

    #[test]
    fn p99_is_the_worst_command() {
        let reply = "STAT get:count 9\r\nSTAT get:p50_us 12.0\r\nSTAT get:p99_us 80.5\r\n\
                     STAT set:p99_us 120.5\r\nSTAT set:p99.9_us 900.0\r\nSTAT set:max_us 950.0\r\n\
                     STAT delete:p99_us n/a\r\nEND\r\n";
        assert_eq!(parse_p99(reply), Some(120.5));
        assert_eq!(parse_p99("STAT get:p99 33\r\nEND\r\n"), Some(33.0));
    }

    #[test]
    fn p99_absent_on_plain_memcached_or_when_off() {
        assert_eq!(parse_p99("ERROR\r\n"), None);
        assert_eq!(parse_p99("STAT latency_status disabled\r\nEND\r\n"), None);
        assert_eq!(parse_p99("END\r\n"), None);
        assert_eq!(parse_p99("STAT get:p50_us 3\r\nEND\r\n"), None);
        assert_eq!(
            parse_p99("STAT get:p99_us -4\r\nSTAT x:p99_us inf\r\nEND\r\n"),
            None
        );
    }

    #[test]
    fn hot_keys_sorted_by_count_without_the_sketch_lines() {
        let reply = "STAT sample_rate 100\r\nSTAT sampled 5000\r\nSTAT hotkey:user:1 30\r\n\
                     STAT hotkey:user:2 50\r\nSTAT hotkey:a\\x00b 7\r\nEND\r\n";
        let keys = parse_hotkeys(reply);
        let got: Vec<(&str, u64)> = keys.iter().map(|k| (k.key.as_str(), k.count)).collect();
        assert_eq!(got, [("user:2", 50), ("user:1", 30), ("a\\x00b", 7)]);
        assert!(parse_hotkeys("ERROR\r\n").is_empty());
        assert!(parse_hotkeys("STAT hotkeys_status disabled\r\nEND\r\n").is_empty());
        assert!(parse_hotkeys("STAT hotkey:k many\r\nSTAT hotkey: 3\r\nEND\r\n").is_empty());
    }
}
