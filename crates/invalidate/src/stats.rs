//! Counters and the commit → acknowledged latency, served as memcached-style `STAT` lines
//! on the optional stats listener (`stats`, `reset`, `quit`).

use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::fanout::SinkStats;
use crate::keys::Skipped;
use crate::visible::VisibilityStats;
use crate::InvalidateError;

/// The standby that gates the deletes, and what waits on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    /// The standby's `pg_last_wal_replay_lsn()` when last asked (0 before it answered).
    pub replay_lsn: u64,
    /// WAL bytes between that and the commit of the oldest held transaction.
    pub lag_bytes: u64,
    pub held_transactions: u64,
    pub held_keys: u64,
    pub up: bool,
    /// Failed connections and queries to the standby.
    pub errors: u64,
}

pub struct Stats {
    pub transactions: u64,
    pub row_changes: u64,
    pub keys_sent: u64,
    pub skipped: Skipped,
    pub ignored_changes: u64,
    pub truncates: u64,
    pub confirmed_lsn: String,
    pub sinks: Vec<(String, SinkStats)>,
    /// With `source.replica_dsn`: what waits on the standby.
    pub replica: Option<ReplicaStats>,
    /// The check that the primary's snapshots see a batch's transactions (`visible`).
    pub visibility: VisibilityStats,
    /// `remote_markers_release: message`: marker tokens read from transactions' messages,
    /// and message lines that were not `<key> <token>`.
    pub marker_tokens: u64,
    pub bad_marker_lines: u64,
    /// Microseconds from a transaction's commit (PostgreSQL's clock) to the moment all its
    /// deletes were acknowledged or spooled (ours); both clocks are the same on one host.
    latency: Histogram<u64>,
    /// Microseconds from the Commit message's arrival here to the same moment: our share.
    local_latency: Histogram<u64>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            transactions: 0,
            row_changes: 0,
            keys_sent: 0,
            skipped: Skipped::default(),
            ignored_changes: 0,
            truncates: 0,
            confirmed_lsn: String::new(),
            sinks: Vec::new(),
            replica: None,
            visibility: VisibilityStats::default(),
            marker_tokens: 0,
            bad_marker_lines: 0,
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds"),
            local_latency: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("histogram bounds"),
        }
    }
}

impl Stats {
    /// Records one transaction: from its commit, and from its arrival here, to its ack.
    pub fn record_latency(&mut self, since_commit: i64, since_arrival: i64) {
        self.latency.saturating_record(since_commit.max(1) as u64);
        self.local_latency
            .saturating_record(since_arrival.max(1) as u64);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut stat = |name: &str, value: String| {
            out.push_str("STAT ");
            out.push_str(name);
            out.push(' ');
            out.push_str(&value);
            out.push_str("\r\n");
        };
        stat("transactions", self.transactions.to_string());
        stat("row_changes", self.row_changes.to_string());
        stat("keys_sent", self.keys_sent.to_string());
        stat("keys_too_long", self.skipped.too_long.to_string());
        stat("keys_bad_byte", self.skipped.bad_byte.to_string());
        stat("keys_unresolved", self.skipped.unresolved.to_string());
        stat("ignored_changes", self.ignored_changes.to_string());
        stat("truncates", self.truncates.to_string());
        stat("confirmed_lsn", self.confirmed_lsn.clone());
        let total = |f: fn(&SinkStats) -> u64| {
            self.sinks
                .iter()
                .map(|(_, s)| f(s))
                .sum::<u64>()
                .to_string()
        };
        stat("deleted", total(|s| s.deleted));
        stat("not_found", total(|s| s.not_found));
        stat("refused", total(|s| s.refused));
        stat("spooled", total(|s| s.spooled));
        stat("replayed", total(|s| s.replayed));
        stat("target_failures", total(|s| s.failures));
        stat("visibility_waits", self.visibility.waits.to_string());
        stat(
            "visibility_unconfirmed",
            self.visibility.unconfirmed.to_string(),
        );
        stat("visibility_resent", self.visibility.resent.to_string());
        stat("visibility_pending", self.visibility.pending.to_string());
        stat("visibility_dropped", self.visibility.dropped.to_string());
        stat("marked_stale", total(|s| s.marked_stale));
        stat("stale_as_delete", total(|s| s.stale_as_delete));
        stat("markers_sent", total(|s| s.markers_sent));
        stat("markers_deleted", total(|s| s.markers_deleted));
        stat("marker_tokens", self.marker_tokens.to_string());
        stat("bad_marker_lines", self.bad_marker_lines.to_string());
        stat("markers_released", total(|s| s.markers_released));
        stat("markers_superseded", total(|s| s.markers_superseded));
        stat("markers_gone", total(|s| s.markers_gone));
        stat(
            "markers_release_dropped",
            total(|s| s.markers_release_dropped),
        );
        stat(
            "markers_release_as_delete",
            total(|s| s.markers_release_as_delete),
        );
        if let Some(r) = &self.replica {
            let lsn = pgwire_replication::Lsn::from_u64(r.replay_lsn);
            stat("replica_replay_lsn", lsn.to_string());
            stat("replica_lag_bytes", r.lag_bytes.to_string());
            stat("held_transactions", r.held_transactions.to_string());
            stat("held_keys", r.held_keys.to_string());
            stat("replica_up", u8::from(r.up).to_string());
            stat("replica_errors", r.errors.to_string());
        }
        stat("latency_count", self.latency.len().to_string());
        for (prefix, h) in [
            ("latency", &self.latency),
            ("local_latency", &self.local_latency),
        ] {
            for (name, q) in [("p50", 0.5), ("p99", 0.99), ("p999", 0.999)] {
                stat(
                    &format!("{prefix}_{name}_us"),
                    h.value_at_quantile(q).to_string(),
                );
            }
            stat(&format!("{prefix}_max_us"), h.max().to_string());
        }
        out.push_str("END\r\n");
        out
    }
}

/// Serves the stats on `addr` until the process ends.
pub async fn listen(addr: &str, stats: Arc<Mutex<Stats>>) -> Result<(), InvalidateError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| InvalidateError::Stats {
            addr: addr.to_owned(),
            error,
        })?;
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let stats = stats.clone();
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                // A connection may send at most 64 KiB, so one endless line cannot grow the buffer.
                let mut lines = BufReader::new(r.take(64 * 1024)).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply = match line.trim() {
                        "stats" => stats.lock().expect("stats lock").render(),
                        "reset" => {
                            let mut s = stats.lock().expect("stats lock");
                            s.latency.reset();
                            s.local_latency.reset();
                            drop(s);
                            "RESET\r\n".to_owned()
                        }
                        "quit" => break,
                        _ => "ERROR\r\n".to_owned(),
                    };
                    if w.write_all(reply.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    Ok(())
}
