//! Replica-gated invalidation (`source.replica_dsn`): a transaction's deletes wait until a
//! streaming standby has replayed its commit, so a reader of that standby cannot load the
//! old row back into the cache after the delete. Batches wait in a queue ordered by LSN and
//! leave it as the standby's replay position passes them; a task asks the standby for that
//! position, often while something waits and once per retry interval otherwise.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgwire_replication::Lsn;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_postgres::{Client, Statement};

use crate::config::Config;
use crate::source::{connect_within, describe, pg_error};
use crate::stats::Stats;
use crate::InvalidateError::{self, Refused};

/// Batches waiting for the standby, oldest first, each with the LSN the standby's replay
/// position must reach before it may go out. Pure: the caller says where replay is.
#[derive(Debug)]
pub struct HoldQueue<T> {
    entries: VecDeque<Held<T>>,
    keys: usize,
    transactions: usize,
}

#[derive(Debug)]
struct Held<T> {
    gate: u64,
    keys: usize,
    transactions: usize,
    item: T,
}

impl<T> Default for HoldQueue<T> {
    fn default() -> Self {
        HoldQueue {
            entries: VecDeque::new(),
            keys: 0,
            transactions: 0,
        }
    }
}

impl<T> HoldQueue<T> {
    /// Queues `item` until replay reaches `gate`. A gate below the newest one queued is
    /// raised to it: items leave in the order they came, as their deletes must.
    pub fn push(&mut self, gate: u64, keys: usize, transactions: usize, item: T) {
        let gate = gate.max(self.newest_gate().unwrap_or(0));
        self.keys += keys;
        self.transactions += transactions;
        self.entries.push_back(Held {
            gate,
            keys,
            transactions,
            item,
        });
    }

    /// Takes, oldest first, every item whose gate `replay` has reached.
    pub fn release(&mut self, replay: u64) -> Vec<T> {
        let mut out = Vec::new();
        while self.entries.front().is_some_and(|h| h.gate <= replay) {
            let h = self.entries.pop_front().expect("front checked");
            self.keys -= h.keys;
            self.transactions -= h.transactions;
            out.push(h.item);
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn keys(&self) -> usize {
        self.keys
    }

    pub fn transactions(&self) -> usize {
        self.transactions
    }

    pub fn oldest_gate(&self) -> Option<u64> {
        self.entries.front().map(|h| h.gate)
    }

    pub fn newest_gate(&self) -> Option<u64> {
        self.entries.back().map(|h| h.gate)
    }

    /// Whether `max` (keys, plus one per transaction) is held: then nothing more is read.
    pub fn full(&self, max: usize) -> bool {
        self.keys + self.transactions >= max
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.keys = 0;
        self.transactions = 0;
    }
}

/// What the standby said last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Progress {
    replay: u64,
    up: bool,
}

/// The hold queue and the task that follows the standby's replay position.
pub struct Gate<T> {
    queue: HoldQueue<T>,
    max_held: usize,
    /// The newest gate held: the poller asks often until replay reaches it.
    want: watch::Sender<u64>,
    progress: watch::Receiver<Progress>,
    stats: Arc<Mutex<Stats>>,
}

pub fn parse_dsn(dsn: &str) -> Result<tokio_postgres::Config, InvalidateError> {
    dsn.parse::<tokio_postgres::Config>()
        .map_err(InvalidateError::ReplicaDsn)
}

impl<T> Gate<T> {
    /// Starts following the standby `pg`; must run inside the runtime.
    pub fn start(pg: tokio_postgres::Config, config: &Config, stats: Arc<Mutex<Stats>>) -> Gate<T> {
        let (want, want_rx) = watch::channel(0);
        let (progress_tx, progress) = watch::channel(Progress::default());
        stats.lock().expect("stats lock").replica = Some(Default::default());
        let poller = Poller {
            label: describe(&pg),
            pg,
            poll: config.source.replica_poll,
            retry: config.retry_interval,
            connect_timeout: config.connect_timeout,
            query_timeout: config.ack_timeout,
            want: want_rx,
            progress: progress_tx,
            stats: stats.clone(),
        };
        tokio::spawn(poller.run());
        Gate {
            queue: HoldQueue::default(),
            max_held: config.source.replica_max_held_keys,
            want,
            progress,
            stats,
        }
    }

    /// Holds `item` until the standby has replayed up to `gate`.
    pub fn hold(&mut self, gate: Lsn, keys: usize, transactions: usize, item: T) {
        self.queue.push(gate.as_u64(), keys, transactions, item);
        let newest = self.queue.newest_gate().unwrap_or(0);
        self.want.send_if_modified(|w| {
            let raise = *w < newest;
            *w = newest.max(*w);
            raise
        });
    }

    /// Takes what the standby has replayed, oldest first.
    pub fn ready(&mut self) -> Vec<T> {
        let replay = self.progress.borrow_and_update().replay;
        self.queue.release(replay)
    }

    pub fn holding(&self) -> bool {
        !self.queue.is_empty()
    }

    pub fn full(&self) -> bool {
        self.queue.full(self.max_held)
    }

    /// Drops everything held (the stream restarts from the slot, which sends it again).
    pub fn clear(&mut self) {
        self.queue.clear();
        self.want.send_replace(0);
        self.publish();
    }

    /// Returns once the standby's position or state changed. Cancel-safe.
    pub async fn progressed(&mut self) {
        if self.progress.changed().await.is_err() {
            // The poller ended (it does not): nothing will move again.
            std::future::pending::<()>().await;
        }
    }

    /// Publishes what is held and how far behind the standby is for the oldest of it.
    pub fn publish(&self) {
        let replay = self.progress.borrow().replay;
        let mut s = self.stats.lock().expect("stats lock");
        let r = s.replica.get_or_insert_default();
        r.held_keys = self.queue.keys() as u64;
        r.held_transactions = self.queue.transactions() as u64;
        r.lag_bytes = self
            .queue
            .oldest_gate()
            .map_or(0, |g| g.saturating_sub(replay));
    }
}

const REPLAY_QUERY: &str = "SELECT pg_last_wal_replay_lsn()::text, pg_is_in_recovery()";

struct Poller {
    pg: tokio_postgres::Config,
    label: String,
    poll: Duration,
    retry: Duration,
    connect_timeout: Duration,
    query_timeout: Duration,
    want: watch::Receiver<u64>,
    progress: watch::Sender<Progress>,
    stats: Arc<Mutex<Stats>>,
}

async fn connect(
    pg: &tokio_postgres::Config,
    limit: Duration,
) -> Result<(Client, Statement), String> {
    let client = connect_within(pg, limit).await?;
    let stmt = timeout(limit, client.prepare(REPLAY_QUERY))
        .await
        .map_err(|_| "query timed out".to_owned())?
        .map_err(|e| pg_error(&e))?;
    Ok((client, stmt))
}

/// The standby's replay position; an error when it does not answer or is not in recovery
/// (promoted, or a primary): its position then says nothing about what it has replayed.
async fn replay_position(
    client: &Client,
    stmt: &Statement,
    limit: Duration,
) -> Result<u64, String> {
    let row = timeout(limit, client.query_one(stmt, &[]))
        .await
        .map_err(|_| "query timed out".to_owned())?
        .map_err(|e| pg_error(&e))?;
    let lsn: Option<String> = row.get(0);
    let recovering: bool = row.get(1);
    if !recovering {
        return Err("it is not in recovery (promoted, or not a standby)".into());
    }
    match lsn {
        None => Ok(0),
        Some(text) => Lsn::parse(&text).map(Lsn::as_u64).map_err(|e| e.0),
    }
}

impl Poller {
    async fn run(mut self) {
        let mut conn: Option<(Client, Statement)> = None;
        // None until the first answer or failure: the first failure is reported too.
        let mut up: Option<bool> = None;
        loop {
            if conn.is_none() {
                match connect(&self.pg, self.connect_timeout).await {
                    Ok(c) => conn = Some(c),
                    Err(why) => {
                        self.down(&mut up, &why);
                        if self.wait(self.retry).await.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            }
            let (client, stmt) = conn.as_ref().expect("connected above");
            let asked = Instant::now();
            match replay_position(client, stmt, self.query_timeout).await {
                Ok(replay) => {
                    if up == Some(false) {
                        info!(
                            "replica {} is back; held deletes follow its replay",
                            self.label
                        );
                    }
                    up = Some(true);
                    self.publish(Progress { replay, up: true }, false);
                }
                Err(why) => {
                    conn = None;
                    self.down(&mut up, &why);
                    if self.wait(self.retry).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
            let replay = self.progress.borrow().replay;
            if *self.want.borrow_and_update() > replay {
                sleep_until(asked + self.poll).await;
                continue;
            }
            // Nothing waits: ask again when something does (no sooner than `poll` after
            // this answer), or after the retry interval, to notice an outage.
            match timeout(self.retry, self.want.changed()).await {
                Ok(Err(_)) => return,
                Ok(Ok(())) => sleep_until(asked + self.poll).await,
                Err(_) => {}
            }
        }
    }

    /// Sleeps `d`; an error once the gate is gone.
    async fn wait(&mut self, d: Duration) -> Result<(), ()> {
        tokio::select! {
            _ = sleep(d) => Ok(()),
            _ = self.progress.closed() => Err(()),
        }
    }

    fn down(&self, up: &mut Option<bool>, why: &str) {
        if *up != Some(false) {
            warn!(
                "replica {} (source.replica_dsn): {why}; deletes are held until it answers",
                self.label
            );
        }
        *up = Some(false);
        let replay = self.progress.borrow().replay;
        self.publish(Progress { replay, up: false }, true);
    }

    fn publish(&self, p: Progress, error: bool) {
        self.progress.send_if_modified(|old| {
            let changed = *old != p;
            *old = p;
            changed
        });
        let mut s = self.stats.lock().expect("stats lock");
        let r = s.replica.get_or_insert_default();
        r.replay_lsn = p.replay;
        r.up = p.up;
        r.errors += u64::from(error);
    }
}

/// Checks `source.replica_dsn` before streaming: a standby in recovery, of the same
/// cluster as the source when both tell. `Ok(Some(why))` when it cannot be reached.
pub async fn verify(
    replica: &tokio_postgres::Config,
    primary: &tokio_postgres::Config,
    config: &Config,
) -> Result<Option<String>, InvalidateError> {
    let label = describe(replica);
    let (client, stmt) = match connect(replica, config.connect_timeout).await {
        Ok(c) => c,
        Err(why) => {
            return Ok(Some(format!(
                "cannot connect to the replica (source.replica_dsn) at {label}: {why}"
            )))
        }
    };
    let recovering = match timeout(config.ack_timeout, client.query_one(&stmt, &[])).await {
        Ok(Ok(row)) => row.get::<_, bool>(1),
        Ok(Err(e)) => return Ok(Some(format!("replica at {label}: {}", pg_error(&e)))),
        Err(_) => return Ok(Some(format!("replica at {label}: query timed out"))),
    };
    if !recovering {
        return Err(Refused(format!(
            "source.replica_dsn points at {label}, which is not in recovery (a primary, not a \
             streaming standby); replica-gated invalidation waits for a standby's replay position"
        )));
    }
    // Best effort: reading the system identifier may need more rights than the role has.
    if let (Some(ours), Ok(Some(theirs))) = (
        system_identifier(&client).await,
        primary_identifier(primary, config.connect_timeout).await,
    ) {
        if ours != theirs {
            return Err(Refused(format!(
                "source.replica_dsn points at {label}, a standby of another cluster (system \
                 identifier {ours}, the source's is {theirs})"
            )));
        }
    }
    Ok(None)
}

async fn system_identifier(client: &Client) -> Option<String> {
    client
        .query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        )
        .await
        .ok()
        .map(|r| r.get(0))
}

async fn primary_identifier(
    pg: &tokio_postgres::Config,
    limit: Duration,
) -> Result<Option<String>, String> {
    let (client, _) = connect(pg, limit).await?;
    Ok(system_identifier(&client).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn releases_in_order_as_replay_passes() {
        let mut q = HoldQueue::default();
        q.push(100, 3, 1, "a");
        q.push(200, 0, 1, "b");
        q.push(300, 5, 2, "c");
        assert_eq!((q.keys(), q.transactions()), (8, 4));
        assert!(q.release(99).is_empty());
        assert_eq!(q.release(100), vec!["a"]);
        assert_eq!(q.oldest_gate(), Some(200));
        // Replay past two gates at once: both, oldest first.
        assert_eq!(q.release(1000), vec!["b", "c"]);
        assert!(q.is_empty());
        assert_eq!((q.keys(), q.transactions()), (0, 0));
    }

    #[test]
    fn a_lower_gate_waits_behind_a_higher_one() {
        let mut q = HoldQueue::default();
        q.push(500, 1, 1, 1);
        q.push(400, 1, 1, 2);
        assert!(q.release(450).is_empty());
        assert_eq!(q.release(500), vec![1, 2]);
    }

    #[test]
    fn full_counts_keys_and_transactions() {
        let mut q = HoldQueue::default();
        q.push(1, 8, 1, ());
        assert!(!q.full(10));
        q.push(2, 0, 1, ());
        assert!(q.full(10));
        q.release(1);
        assert!(!q.full(10));
        q.clear();
        assert!(q.is_empty() && q.keys() == 0 && q.oldest_gate().is_none());
    }

    proptest! {
        /// Whatever the gates and replay positions: everything comes out exactly once, in
        /// the order it went in, and nothing before replay reached its gate.
        #[test]
        fn never_early_never_reordered(
            gates in prop::collection::vec(0u64..1000, 0..50),
            replays in prop::collection::vec(0u64..1100, 0..50),
        ) {
            let mut q = HoldQueue::default();
            for (i, g) in gates.iter().enumerate() {
                q.push(*g, 1, 1, (i, *g));
            }
            let mut out = Vec::new();
            for r in replays.iter().copied().chain([u64::MAX]) {
                for (i, g) in q.release(r) {
                    prop_assert!(g <= r, "item {i} (gate {g}) released at {r}");
                    out.push(i);
                }
            }
            prop_assert_eq!(out, (0..gates.len()).collect::<Vec<_>>());
            prop_assert_eq!(q.keys(), 0);
        }
    }
}
