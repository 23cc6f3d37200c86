//! Deletes wait until their transactions are visible on the primary. PostgreSQL hands a
//! commit to logical decoding once its record is flushed, a moment before new snapshots see
//! it (the committing backend leaves the running set just after); on a busy host that moment
//! can outlast a delete, and a reader who missed in it would refill the old row. So before a
//! batch goes out, the primary's current snapshot must see each of its transactions.

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
}

/// Longest wait for one batch: a committed transaction becomes visible within microseconds,
/// so this is only reached when something else is wrong, and deletes must not stop then.
const LIMIT: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_micros(500);

/// A plain connection to the primary that asks for its snapshot.
pub struct Visibility {
    pg: tokio_postgres::Config,
    connect_timeout: Duration,
    client: Option<Client>,
    /// Batches that had to wait (`stats`: `visibility_waits`).
    pub waits: u64,
}

impl Visibility {
    pub fn new(pg: tokio_postgres::Config, connect_timeout: Duration) -> Visibility {
        Visibility {
            pg,
            connect_timeout,
            client: None,
            waits: 0,
        }
    }

    /// Returns once the primary's snapshot sees every one of `xids`, or the database cannot
    /// say (it is down: the deletes go out rather than wait on it), or after `LIMIT`.
    pub async fn wait(&mut self, xids: &[u32]) {
        if xids.is_empty() {
            return;
        }
        let deadline = Instant::now() + LIMIT;
        let mut waited = false;
        loop {
            let Some(snap) = self.snapshot().await else {
                return;
            };
            if xids.iter().all(|&x| snap.sees(x)) {
                break;
            }
            if Instant::now() >= deadline {
                warn!("transactions {xids:?} not visible on the primary after {LIMIT:?}; their deletes go out");
                break;
            }
            waited = true;
            sleep(POLL).await;
        }
        self.waits += u64::from(waited);
    }

    async fn snapshot(&mut self) -> Option<Snapshot> {
        if self.client.is_none() {
            self.client = Some(connect_within(&self.pg, self.connect_timeout).await.ok()?);
        }
        let client = self.client.as_ref()?;
        let row = timeout(
            self.connect_timeout,
            client.query_one("SELECT pg_current_snapshot()::text", &[]),
        )
        .await;
        match row {
            Ok(Ok(row)) => Snapshot::parse(row.get(0)),
            _ => {
                // Reconnect next time.
                self.client = None;
                None
            }
        }
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
}
