//! `memfleet invalidate`: follows PostgreSQL's logical replication stream (pgoutput) and
//! deletes the cache keys each committed row change makes stale. A transaction's position
//! is confirmed to the slot only after all its deletes were acknowledged or spooled, so a
//! crash, a database restart or a cache outage loses nothing.

macro_rules! warn {
    ($($t:tt)*) => { eprintln!("memfleet invalidate: warning: {}", format_args!($($t)*)) };
}
macro_rules! info {
    ($($t:tt)*) => { eprintln!("memfleet invalidate: {}", format_args!($($t)*)) };
}

pub mod config;
mod error;
// `config` and the fuzz target of the config read key templates from here.
pub use pgoutput::template;
pub mod fanout;
pub mod keys;
pub mod memcache;
pub mod replica;
pub mod source;
pub mod stats;
pub mod visible;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgwire_replication::client::ReplicationClient;
use pgwire_replication::{Lsn, ReplicationEvent};

use crate::config::Config;
pub use crate::error::InvalidateError;
use crate::fanout::Fanout;
use crate::keys::{KeyMaker, Release};
use crate::replica::Gate;
use crate::stats::Stats;
use crate::visible::Visibility;
use pgoutput::template::BadKey;
use pgoutput::Message;

#[derive(clap::Args, Debug)]
pub struct InvalidateArgs {
    /// The configuration file (YAML): source, targets and tables with key templates.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
    /// Check the configuration against the database (and create a missing publication
    /// and slot), then exit without streaming.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: InvalidateArgs) -> Result<(), InvalidateError> {
    let text =
        std::fs::read_to_string(&args.config).map_err(|error| InvalidateError::ReadConfig {
            path: args.config.clone(),
            error,
        })?;
    let config = Config::from_yaml_str(&text).map_err(|error| InvalidateError::Config {
        path: args.config.clone(),
        error,
    })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| InvalidateError::Setup {
            what: "runtime",
            error,
        })?;
    rt.block_on(async {
        // A stray HUP (a terminal closing) must not stop invalidations. Once tokio installs
        // its handler, the signal's default action is gone for the life of the process; the
        // configuration is not re-read, so the events themselves are never read.
        let _hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|error| InvalidateError::Setup {
                what: "signal handler",
                error,
            })?;
        stream(config, args.check).await
    })
}

/// Deletes computed since the last flush, and the newest commit they cover.
#[derive(Default)]
struct Batch {
    keys: Vec<Vec<u8>>,
    seen: HashSet<Vec<u8>>,
    /// Remote markers the batch's transactions set, each released after those
    /// transactions' keys.
    releases: Vec<Release>,
    /// Commit times (PostgreSQL epoch, µs) of the transactions the batch completes, and
    /// when their Commit messages arrived here.
    commits: Vec<(i64, std::time::Instant)>,
    /// Their transaction ids.
    xids: Vec<u32>,
    last_commit: Option<Lsn>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.releases.is_empty() && self.last_commit.is_none()
    }

    /// Nothing to send (commits to confirm, maybe).
    fn nothing_to_send(&self) -> bool {
        self.keys.is_empty() && self.releases.is_empty()
    }

    /// The transactions whose deletes the batch carries: those it completes, and the one
    /// still arriving when the batch goes out mid-transaction. pgoutput sends a transaction
    /// only once it has committed, but new snapshots may not see that commit yet.
    fn carried_xids(&self, open: Open) -> Vec<u32> {
        let mut xids = self.xids.clone();
        if open.in_transaction {
            xids.push(open.xid);
        }
        xids
    }

    /// Appends a later batch: its keys not already here, its commits.
    fn absorb(&mut self, later: Batch) {
        if self.seen.is_empty() {
            self.seen.extend(self.keys.iter().cloned());
        }
        for k in later.keys {
            if self.seen.insert(k.clone()) {
                self.keys.push(k);
            }
        }
        self.releases.extend(later.releases);
        self.commits.extend(later.commits);
        self.xids.extend(later.xids);
        if later.last_commit.is_some() {
            self.last_commit = later.last_commit;
        }
    }
}

/// Where the batch in hand stands in the transaction stream, for the replica gate.
#[derive(Clone, Copy, Default)]
struct Open {
    /// Between a Begin and its Commit: the server's position is not ours to confirm.
    in_transaction: bool,
    /// The open transaction's commit record start (Begin's final LSN) plus one: a replay
    /// position past it has replayed the commit.
    gate: Lsn,
    xid: u32,
}

/// How often an idle stream asks again whether unconfirmed transactions are visible.
const RECHECK: Duration = Duration::from_millis(20);

/// Seconds between the Unix epoch and PostgreSQL's (2000-01-01), in microseconds.
const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

fn now_unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Delivers the batch, then confirms its last commit: the only place the slot advances.
async fn flush(
    batch: &mut Batch,
    fanout: &mut Fanout,
    client: &ReplicationClient,
    stats: &Mutex<Stats>,
) -> Result<(), InvalidateError> {
    if !batch.nothing_to_send() {
        fanout
            .deliver(&batch.keys, &batch.releases)
            .await
            .map_err(InvalidateError::SpoolWrite)?;
    }
    if let Some(lsn) = batch.last_commit {
        client.update_applied_lsn(lsn);
    }
    let now = now_unix_micros();
    let acked = std::time::Instant::now();
    let mut s = stats.lock().expect("stats lock");
    s.keys_sent += batch.keys.len() as u64;
    s.transactions += batch.commits.len() as u64;
    for &(c, received) in &batch.commits {
        s.record_latency(
            now - (c + PG_EPOCH_OFFSET_MICROS),
            acked.duration_since(received).as_micros() as i64,
        );
    }
    if let Some(lsn) = batch.last_commit {
        s.confirmed_lsn = lsn.to_string();
    }
    s.sinks = fanout
        .sinks
        .iter()
        .map(|k| (k.label.clone(), k.stats))
        .collect();
    drop(s);
    batch.keys.clear();
    batch.seen.clear();
    batch.releases.clear();
    batch.commits.clear();
    batch.xids.clear();
    batch.last_commit = None;
    Ok(())
}

/// Delivers the batch in hand: without a replica gate once the primary's snapshots see its
/// transactions; with one, queued until the replica has replayed it (delivered with
/// everything else it passed, in order).
#[allow(clippy::too_many_arguments)]
async fn settle(
    batch: &mut Batch,
    open: Open,
    gate: &mut Option<Gate<Batch>>,
    visible: &mut Visibility,
    fanout: &mut Fanout,
    client: &ReplicationClient,
    stats: &Mutex<Stats>,
) -> Result<(), InvalidateError> {
    let Some(g) = gate else {
        confirm_visible(batch, open, visible, stats).await;
        return flush(batch, fanout, client, stats).await;
    };
    if batch.nothing_to_send() && !g.holding() {
        // No deletes and nothing older waiting: the commits are only confirmed.
        flush(batch, fanout, client, stats).await?;
    } else if !batch.is_empty() {
        // Keys come between a Begin and its Commit; were any outside, the last Begin's
        // gate is past them.
        let lsn = match batch.last_commit {
            Some(lsn) if !open.in_transaction => lsn,
            _ => open.gate,
        };
        let mut held = std::mem::take(batch);
        // Only the queue's release merges batches again; the set would double the memory.
        held.seen = HashSet::new();
        let (keys, txns) = (held.keys.len() + held.releases.len(), held.commits.len());
        g.hold(lsn, keys, txns, held);
    }
    release(g, fanout, client, stats).await
}

/// Without a replica gate, waits until the primary shows the batch's transactions; when
/// that cannot be confirmed, keeps its keys to be sent again once it can.
async fn confirm_visible(
    batch: &Batch,
    open: Open,
    visible: &mut Visibility,
    stats: &Mutex<Stats>,
) {
    if batch.nothing_to_send() {
        return;
    }
    let xids = batch.carried_xids(open);
    if !visible.wait(&xids).await {
        visible.remember(xids, &batch.keys);
    }
    stats.lock().expect("stats lock").visibility = visible.stats();
}

/// Delivers and confirms, in order, the held batches the replica has replayed.
async fn release(
    gate: &mut Gate<Batch>,
    fanout: &mut Fanout,
    client: &ReplicationClient,
    stats: &Mutex<Stats>,
) -> Result<(), InvalidateError> {
    let mut batches = gate.ready().into_iter();
    if let Some(mut ready) = batches.next() {
        for b in batches {
            ready.absorb(b);
        }
        flush(&mut ready, fanout, client, stats).await?;
    }
    gate.publish();
    Ok(())
}

/// Sends again the deletes that went out before their transactions were seen, once the
/// primary shows them.
async fn resend(
    visible: &mut Visibility,
    fanout: &mut Fanout,
    stats: &Mutex<Stats>,
) -> Result<(), InvalidateError> {
    let keys = visible.due().await;
    stats.lock().expect("stats lock").visibility = visible.stats();
    if !keys.is_empty() {
        fanout
            .deliver(&keys, &[])
            .await
            .map_err(InvalidateError::SpoolWrite)?;
    }
    Ok(())
}

/// Tries targets with spooled deletes again, and publishes what the targets did.
async fn replay(fanout: &mut Fanout, stats: &Mutex<Stats>) -> Result<(), InvalidateError> {
    fanout
        .replay_spools()
        .await
        .map_err(InvalidateError::SpoolRewrite)?;
    stats.lock().expect("stats lock").sinks = fanout
        .sinks
        .iter()
        .map(|k| (k.label.clone(), k.stats))
        .collect();
    Ok(())
}

async fn stream(config: Config, check_only: bool) -> Result<(), InvalidateError> {
    let pg = source::parse_dsn(&config.source.dsn)?;
    let prepared = source::prepare(&config, &pg).await?;
    for w in &prepared.warnings {
        warn!("{w}");
    }
    for c in &prepared.created {
        info!("created {c}");
    }
    let replica = match &config.source.replica_dsn {
        Some(dsn) => Some(replica::parse_dsn(dsn)?),
        None => None,
    };
    if let Some(r) = &replica {
        match replica::verify(r, &pg, &config).await? {
            None => info!(
                "deletes wait for replica {} (a standby) to replay their transactions",
                source::describe(r)
            ),
            Some(why) if check_only => return Err(InvalidateError::Database(why)),
            // The gate's own task says so, and keeps trying.
            Some(_) => {}
        }
    }
    if check_only {
        info!("configuration checked");
        return Ok(());
    }
    let mut fanout = Fanout::new(&config).map_err(|error| InvalidateError::SpoolDir {
        dir: config.spool_dir.clone(),
        error,
    })?;
    let stats = Arc::new(Mutex::new(Stats::default()));
    if let Some(addr) = &config.stats {
        stats::listen(addr, stats.clone()).await?;
    }
    let repl = source::replication_config(&config, &pg)?;
    let mut client = ReplicationClient::connect(repl.clone())
        .await
        .map_err(|error| InvalidateError::Replication {
            slot: config.source.slot.clone(),
            error,
        })?;
    info!(
        "streaming slot {} (publication {}) to {} target server(s)",
        config.source.slot,
        config.source.publication,
        fanout.sinks.len()
    );
    let mut keys = KeyMaker::new(config.tables.clone())
        .with_markers(config.remote_markers.clone(), config.remote_markers_release);
    let mut batch = Batch::default();
    let mut gate = replica.map(|r| Gate::start(r, &config, stats.clone()));
    let mut visible = Visibility::new(
        pg.clone(),
        config.connect_timeout,
        // The question's own timeout: generous, since an unanswered one means resends.
        config.connect_timeout.max(config.ack_timeout),
        config.retry_interval,
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| InvalidateError::Setup {
        what: "signal handler",
        error,
    })?;
    loop {
        let ended = session(
            &config,
            &mut client,
            &mut keys,
            &mut batch,
            &mut gate,
            &mut visible,
            &mut fanout,
            &stats,
            &mut terminate,
        )
        .await?;
        let Some(why) = ended else { break };
        // The stream broke (PostgreSQL restarted, the network failed): everything not
        // confirmed comes again from the slot, so the half-received batch is dropped.
        warn!("{why}; reconnecting");
        batch = Batch::default();
        if let Some(g) = &mut gate {
            g.clear();
        }
        client = loop {
            tokio::select! {
                _ = tokio::time::sleep(config.retry_interval) => {}
                _ = terminate.recv() => { info!("stopped"); return Ok(()); }
                _ = tokio::signal::ctrl_c() => { info!("stopped"); return Ok(()); }
            }
            match ReplicationClient::connect(repl.clone()).await {
                Ok(c) => break c,
                Err(e) => warn!("replication connection to slot {}: {e}", config.source.slot),
            }
        };
        info!("streaming slot {} again", config.source.slot);
    }
    // Deliver what was received, confirm it, and let the client send that position. What
    // the replica has not replayed yet is left to the slot, to be sent again next time.
    match &mut gate {
        None => {
            confirm_visible(&batch, Open::default(), &mut visible, &stats).await;
            flush(&mut batch, &mut fanout, &client, &stats).await?
        }
        Some(g) => release(g, &mut fanout, &client, &stats).await?,
    }
    resend(&mut visible, &mut fanout, &stats).await?;
    if visible.has_unconfirmed() {
        warn!(
            "stopping with {} deletes not sent again: their transactions were not seen visible",
            visible.stats().pending
        );
    }
    client.stop();
    let _ = tokio::time::timeout(Duration::from_secs(2), client.shutdown()).await;
    info!("stopped");
    Ok(())
}

/// Streams until told to stop (`Ok(None)`) or until the stream breaks (`Ok(Some(why))`);
/// an `Err` is fatal: a message that cannot be decoded or a spool that cannot be written.
#[allow(clippy::too_many_arguments)]
async fn session(
    config: &Config,
    client: &mut ReplicationClient,
    keys: &mut KeyMaker,
    batch: &mut Batch,
    gate: &mut Option<Gate<Batch>>,
    visible: &mut Visibility,
    fanout: &mut Fanout,
    stats: &Mutex<Stats>,
    terminate: &mut tokio::signal::unix::Signal,
) -> Result<Option<String>, InvalidateError> {
    let mut fresh = Vec::new();
    // The open transaction's marker releases: they join the batch at its Commit, behind
    // its keys.
    let mut releases = Vec::new();
    let mut open = Open::default();
    loop {
        // Wait for the stream only as long as there is nothing else to do: a pending batch
        // goes out as soon as the stream has nothing more ready.
        let wait = if !batch.is_empty() {
            Duration::ZERO
        } else if visible.has_unconfirmed() {
            RECHECK
        } else {
            config.retry_interval
        };
        let holding = gate.as_ref().is_some_and(|g| g.holding());
        // Holding all it may: the stream waits (the slot keeps the WAL) until the replica
        // catches up.
        let full = gate.as_ref().is_some_and(|g| g.full());
        let event = tokio::select! {
            r = tokio::time::timeout(wait, client.recv()), if !full => r,
            _ = async { gate.as_mut().expect("holding").progressed().await }, if holding => {
                release(gate.as_mut().expect("holding"), fanout, client, stats).await?;
                continue;
            }
            _ = terminate.recv() => return Ok(None),
            _ = tokio::signal::ctrl_c() => return Ok(None),
        };
        let event = match event {
            Err(_idle) => {
                settle(batch, open, gate, visible, fanout, client, stats).await?;
                resend(visible, fanout, stats).await?;
                replay(fanout, stats).await?;
                continue;
            }
            Ok(Err(e)) => return Ok(Some(format!("replication stream: {e}"))),
            Ok(Ok(None)) => return Ok(Some("replication stream ended".into())),
            Ok(Ok(Some(ev))) => ev,
        };
        match event {
            ReplicationEvent::XLogData { data, .. } => {
                let msg = pgoutput::decode(&data).map_err(InvalidateError::Decode)?;
                if matches!(
                    msg,
                    Message::Insert { .. } | Message::Update { .. } | Message::Delete { .. }
                ) {
                    stats.lock().expect("stats lock").row_changes += 1;
                }
                for note in keys.apply(&msg, &mut fresh) {
                    let why = match note.reason {
                        BadKey::TooLong => "longer than 250 bytes",
                        BadKey::BadByte => "contains a space or control character",
                    };
                    let shown =
                        String::from_utf8_lossy(&note.key[..note.key.len().min(80)]).into_owned();
                    warn!(
                        "table {} template {:?}: key {shown:?}... ({} bytes) is {why}; not sent",
                        note.table,
                        note.template,
                        note.key.len()
                    );
                }
                for k in fresh.drain(..) {
                    if batch.seen.insert(k.clone()) {
                        batch.keys.push(k);
                    }
                }
                let mut s = stats.lock().expect("stats lock");
                s.skipped = keys.skipped;
                s.ignored_changes = keys.ignored_changes;
                s.truncates = keys.truncates;
            }
            ReplicationEvent::Message {
                transactional,
                prefix,
                content,
                ..
            } => {
                keys.releases(transactional, prefix.as_bytes(), &content, &mut releases);
                let mut s = stats.lock().expect("stats lock");
                s.marker_tokens = keys.marker_tokens;
                s.bad_marker_lines = keys.bad_marker_lines;
            }
            ReplicationEvent::Begin { final_lsn, xid, .. } => {
                releases.clear();
                open = Open {
                    in_transaction: true,
                    gate: Lsn::from_u64(final_lsn.as_u64() + 1),
                    xid,
                }
            }
            ReplicationEvent::Commit {
                end_lsn,
                commit_time_micros,
                ..
            } => {
                open.in_transaction = false;
                batch.releases.append(&mut releases);
                batch.last_commit = Some(end_lsn);
                batch.xids.push(open.xid);
                batch
                    .commits
                    .push((commit_time_micros, std::time::Instant::now()));
            }
            ReplicationEvent::KeepAlive { wal_end, .. }
                if !open.in_transaction && batch.is_empty() && !holding =>
            {
                // Everything before the server's send position was received and is
                // acknowledged, so the slot may move past WAL that held no changes for us
                // (other tables, a shutdown checkpoint PostgreSQL waits on us to confirm).
                // Not while deletes wait for the replica: they are not acknowledged.
                client.update_applied_lsn(wal_end);
            }
            _ => {}
        }
        if batch.keys.len() >= config.max_batch_keys {
            settle(batch, open, gate, visible, fanout, client, stats).await?;
            resend(visible, fanout, stats).await?;
            replay(fanout, stats).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_sent_mid_transaction_waits_for_that_transaction_too() {
        let batch = Batch {
            xids: vec![5],
            ..Batch::default()
        };
        let open = Open {
            in_transaction: true,
            xid: 7,
            ..Open::default()
        };
        assert_eq!(batch.carried_xids(open), vec![5, 7]);
        let closed = Open {
            in_transaction: false,
            ..open
        };
        assert_eq!(batch.carried_xids(closed), vec![5]);
    }
}
