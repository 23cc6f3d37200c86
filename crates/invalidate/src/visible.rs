//! Deletes wait until their transactions are visible on the primary. PostgreSQL hands a
//! commit to logical decoding once its record is flushed, a moment before new snapshots see
//! it (the committing backend leaves the running set just after); on a busy host that moment
//! can outlast a delete, and a reader who missed in it would refill the old row. So before a
//! batch goes out, the primary's current snapshot must see each of its transactions. When
//! that cannot be confirmed (the primary does not answer, or still shows a transaction
//! running after the wait's limit) the deletes go out anyway, and go out again once it can.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::{sleep, timeout, Instant};
use tokio_postgres::Client;

use crate::source::connect_within;

/// A snapshot as `pg_current_snapshot()` prints it: `xmin:xmax:xip,...` (64-bit ids).
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    xmin: u64,
    xmax: u64,
    running: Vec<u64>,
}

impl Snapshot {
    pub fn parse(text: &str) -> Option<Snapshot> {
        let mut parts = text.split(':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let running = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        };
        parts.next().is_none().then_some(Snapshot {
            xmin,
            xmax,
            running,
        })
    }

    /// Whether the snapshot sees committed transaction `xid` (its 32-bit id, as pgoutput
    /// sends it, from within 2^31 of the snapshot's ids).
    pub fn sees(&self, xid: u32) -> bool {
        // How far `xid` is behind xmax, modulo 2^32; at or past xmax it is not seen.
        let behind = (self.xmax as u32).wrapping_sub(xid);
        if behind == 0 || behind >= 1 << 31 {
            return false;
        }
        let full = self.xmax - u64::from(behind);
        full < self.xmin || !self.running.contains(&full)
    }

    fn sees_all(&self, xids: &[u32]) -> bool {
        xids.iter().all(|&x| self.sees(x))
    }
}

/// Deletes sent before their transactions were seen, kept to be sent again once they are:
/// a reader that missed in between may have put the old row back.
#[derive(Default)]
pub struct Unconfirmed {
    /// Each batch's transactions, keys, and when it went out.
    batches: VecDeque<(Vec<u32>, Vec<Vec<u8>>, Instant)>,
    keys: usize,
}

impl Unconfirmed {
    /// Keeps a batch's keys; past `max` keys in all, the oldest batches but the newest are
    /// given up (returns how many keys that dropped).
    pub fn push(&mut self, xids: Vec<u32>, keys: Vec<Vec<u8>>, now: Instant, max: usize) -> usize {
        self.keys += keys.len();
        self.batches.push_back((xids, keys, now));
        let mut dropped = 0;
        while self.keys > max && self.batches.len() > 1 {
            dropped += self.pop_oldest();
        }
        dropped
    }

    fn pop_oldest(&mut self) -> usize {
        let (_, old, _) = self.batches.pop_front().expect("a batch");
        self.keys -= old.len();
        old.len()
    }

    /// Gives up the batches sent before `cutoff` (returns how many keys that dropped): a
    /// transaction still not shown long after its commit was streamed is not going to be
    /// (the primary was replaced, or its ids wrapped past it).
    pub fn expire(&mut self, cutoff: Instant) -> usize {
        let mut dropped = 0;
        while self.batches.front().is_some_and(|b| b.2 < cutoff) {
            dropped += self.pop_oldest();
        }
        dropped
    }

    /// Takes out the keys of every batch whose transactions `snap` sees.
    pub fn take_seen(&mut self, snap: &Snapshot) -> Vec<Vec<u8>> {
        let mut due = Vec::new();
        self.batches.retain_mut(|(xids, keys, _)| {
            if snap.sees_all(xids) {
                due.append(keys);
                false
            } else {
                true
            }
        });
        self.keys -= due.len();
        due
    }

    pub fn keys(&self) -> usize {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

/// Longest wait for one batch, from the primary's first answer: a committed transaction
/// becomes visible within microseconds, so this is only reached when something else is
/// wrong, and deletes must not stop then.
const LIMIT: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_micros(500);
/// Keys kept to be sent again; past it the oldest are given up (with a warning).
pub const MAX_UNCONFIRMED_KEYS: usize = 262_144;
/// How long they are kept at most.
pub const MAX_UNCONFIRMED_AGE: Duration = Duration::from_secs(600);

/// Where the visibility check stands, for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VisibilityStats {
    /// Batches that had to wait before the primary's snapshot saw them.
    pub waits: u64,
    /// Batches sent before their transactions were seen.
    pub unconfirmed: u64,
    /// Their keys sent again once the transactions were seen.
    pub resent: u64,
    /// Their keys given up (more than `MAX_UNCONFIRMED_KEYS` waited, or one waited longer
    /// than `MAX_UNCONFIRMED_AGE`).
    pub dropped: u64,
    /// Their keys waiting to be sent again.
    pub pending: u64,
}

/// A plain connection to the primary that asks for its snapshot.
pub struct Visibility {
    pg: tokio_postgres::Config,
    connect_timeout: Duration,
    query_timeout: Duration,
    /// Time between a failed question and the next attempt: a primary that refuses or hangs
    /// must not slow every batch by a timeout.
    reconnect_interval: Duration,
    client: Option<Client>,
    next_attempt: Option<Instant>,
    /// Whether the last question went unanswered (warned once per outage).
    failing: bool,
    unconfirmed: Unconfirmed,
    /// The counters; `pending` is read from `unconfirmed` when asked.
    counts: VisibilityStats,
}

impl Visibility {
    pub fn new(
        pg: tokio_postgres::Config,
        connect_timeout: Duration,
        query_timeout: Duration,
        reconnect_interval: Duration,
    ) -> Visibility {
        Visibility {
            pg,
            connect_timeout,
            query_timeout,
            reconnect_interval,
            client: None,
            next_attempt: None,
            failing: false,
            unconfirmed: Unconfirmed::default(),
            counts: VisibilityStats::default(),
        }
    }

    /// Waits until the primary's snapshot sees every one of `xids` (true), or gives up
    /// (false): the database does not answer, or `LIMIT` passed since its first answer.
    pub async fn wait(&mut self, xids: &[u32]) -> bool {
        if xids.is_empty() {
            return true;
        }
        let mut deadline = None;
        let mut waited = false;
        let seen = loop {
            let Some(snap) = self.snapshot().await else {
                break false;
            };
            if snap.sees_all(xids) {
                break true;
            }
            let limit = *deadline.get_or_insert_with(|| Instant::now() + LIMIT);
            if Instant::now() >= limit {
                warn!("transactions {xids:?} not visible on the primary after {LIMIT:?}; their deletes go out, and again once they are");
                break false;
            }
            waited = true;
            sleep(POLL).await;
        };
        self.counts.waits += u64::from(waited);
        seen
    }

    /// Keeps the keys of a batch that went out unconfirmed, to be sent again.
    pub fn remember(&mut self, xids: Vec<u32>, keys: &[Vec<u8>]) {
        self.counts.unconfirmed += 1;
        if keys.is_empty() {
            return;
        }
        let dropped =
            self.unconfirmed
                .push(xids, keys.to_vec(), Instant::now(), MAX_UNCONFIRMED_KEYS);
        if dropped > 0 {
            warn!("{dropped} deletes sent before their transactions were visible will not be sent again: more than {MAX_UNCONFIRMED_KEYS} waited");
            self.counts.dropped += dropped as u64;
        }
    }

    pub fn stats(&self) -> VisibilityStats {
        VisibilityStats {
            pending: self.unconfirmed.keys() as u64,
            ..self.counts
        }
    }

    pub fn has_unconfirmed(&self) -> bool {
        !self.unconfirmed.is_empty()
    }

    /// Keys to send again: those of the unconfirmed batches the primary now shows (one
    /// question, none when nothing waits).
    pub async fn due(&mut self) -> Vec<Vec<u8>> {
        if let Some(cutoff) = Instant::now().checked_sub(MAX_UNCONFIRMED_AGE) {
            let dropped = self.unconfirmed.expire(cutoff);
            if dropped > 0 {
                warn!("{dropped} deletes sent before their transactions were visible will not be sent again: the primary has not shown those transactions for {MAX_UNCONFIRMED_AGE:?}");
                self.counts.dropped += dropped as u64;
            }
        }
        if self.unconfirmed.is_empty() {
            return Vec::new();
        }
        let Some(snap) = self.snapshot().await else {
            return Vec::new();
        };
        let due = self.unconfirmed.take_seen(&snap);
        self.counts.resent += due.len() as u64;
        due
    }

    async fn snapshot(&mut self) -> Option<Snapshot> {
        let got = self.ask().await;
        match (&got, self.failing) {
            (Err(why), false) => {
                warn!("cannot ask the primary which transactions it shows ({why}); deletes go out without waiting, and again once it answers");
                self.failing = true;
            }
            (Ok(_), true) => {
                info!("the primary answers which transactions it shows again");
                self.failing = false;
            }
            _ => {}
        }
        got.ok()
    }

    async fn ask(&mut self) -> Result<Snapshot, String> {
        if self.next_attempt.is_some_and(|t| Instant::now() < t) {
            return Err("not connected".into());
        }
        let got = self.ask_now().await;
        if got.is_err() {
            self.client = None;
            self.next_attempt = Some(Instant::now() + self.reconnect_interval);
        }
        got
    }

    async fn ask_now(&mut self) -> Result<Snapshot, String> {
        if self.client.is_none() {
            self.client = Some(connect_within(&self.pg, self.connect_timeout).await?);
        }
        let client = self.client.as_ref().expect("connected");
        let row = timeout(
            self.query_timeout,
            client.query_one("SELECT pg_current_snapshot()::text", &[]),
        )
        .await;
        let text = match row {
            Ok(Ok(row)) => row.get::<_, String>(0),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("query timed out".into()),
        };
        Snapshot::parse(&text).ok_or_else(|| format!("unreadable snapshot {text:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_read_as_postgresql_prints_them() {
        let s = Snapshot::parse("100:105:101,103").unwrap();
        assert_eq!(
            s,
            Snapshot {
                xmin: 100,
                xmax: 105,
                running: vec![101, 103]
            }
        );
        assert_eq!(Snapshot::parse("7:7:").unwrap().running, Vec::<u64>::new());
        assert!(Snapshot::parse("7:7").is_none());
        assert!(Snapshot::parse("a:7:").is_none());
        assert!(Snapshot::parse("1:2:3:4").is_none());
    }

    #[test]
    fn a_transaction_is_seen_once_it_left_the_running_set() {
        let s = Snapshot::parse("100:105:101,103").unwrap();
        assert!(s.sees(99), "before xmin");
        assert!(s.sees(100) && s.sees(102) && s.sees(104));
        assert!(!s.sees(101) && !s.sees(103), "still running");
        assert!(
            !s.sees(105) && !s.sees(106),
            "at or past xmax: not completed yet"
        );
    }

    #[test]
    fn ids_across_the_32_bit_wrap() {
        // xmax in epoch 1 just past the wrap; xid 2^32 - 2 is epoch 0's, running.
        let base = 1u64 << 32;
        let s = Snapshot {
            xmin: base - 3,
            xmax: base + 2,
            running: vec![base - 2],
        };
        assert!(!s.sees(u32::MAX - 1));
        assert!(s.sees(u32::MAX) && s.sees(0) && s.sees(1));
        assert!(!s.sees(2) && !s.sees(3));
    }

    #[test]
    fn unconfirmed_keys_come_out_once_their_transactions_are_seen() {
        let mut u = Unconfirmed::default();
        let k = |s: &str| s.as_bytes().to_vec();
        let now = Instant::now();
        assert_eq!(u.push(vec![101], vec![k("a"), k("b")], now, 10), 0);
        assert_eq!(u.push(vec![102, 103], vec![k("c")], now, 10), 0);
        assert_eq!(u.keys(), 3);
        // 101 still running, 102 done, 103 running.
        let s = Snapshot::parse("101:105:101,103").unwrap();
        assert!(u.take_seen(&s).is_empty());
        let s = Snapshot::parse("103:105:103").unwrap();
        assert_eq!(u.take_seen(&s), vec![k("a"), k("b")]);
        assert_eq!(u.keys(), 1);
        let s = Snapshot::parse("105:105:").unwrap();
        assert_eq!(u.take_seen(&s), vec![k("c")]);
        assert!(u.is_empty() && u.keys() == 0);
    }

    #[test]
    fn past_the_bound_the_oldest_unconfirmed_keys_are_given_up() {
        let mut u = Unconfirmed::default();
        let keys = |n: usize| (0..n).map(|i| vec![i as u8]).collect::<Vec<_>>();
        let now = Instant::now();
        assert_eq!(u.push(vec![1], keys(3), now, 5), 0);
        assert_eq!(u.push(vec![2], keys(2), now, 5), 0);
        assert_eq!(u.push(vec![3], keys(2), now, 5), 3);
        assert_eq!(u.keys(), 4);
        // A batch larger than the bound on its own is kept.
        assert_eq!(u.push(vec![4], keys(9), now, 5), 4);
        assert_eq!(u.keys(), 9);
        let s = Snapshot::parse("10:10:").unwrap();
        assert_eq!(u.take_seen(&s).len(), 9);
    }

    #[test]
    fn unconfirmed_keys_kept_too_long_are_given_up() {
        let mut u = Unconfirmed::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        u.push(vec![1], vec![b"a".to_vec(), b"b".to_vec()], t0, 10);
        u.push(vec![2], vec![b"c".to_vec()], later, 10);
        assert_eq!(u.expire(t0), 0);
        assert_eq!(u.expire(t0 + Duration::from_secs(1)), 2);
        assert_eq!(u.keys(), 1);
        assert_eq!(u.expire(later + Duration::from_secs(1)), 1);
        assert!(u.is_empty());
    }
}
