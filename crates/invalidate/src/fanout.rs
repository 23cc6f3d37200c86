//! Delivery of a batch of keys to every target: a plain target gets every key, a pool gets
//! each key on the server its ring picks. Each server ("sink") has one reused connection
//! and a spool; `deliver` returns only once every key is acknowledged or spooled.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use futures_util::future::join_all;
use ring::Ring;
use tokio::time::Instant;

use crate::config::{Addr, Config, InvalidateWith, TargetSpec};
use crate::keys::Release;
use crate::memcache::{Command, Conn, Reply};
use spool::Spool;

#[derive(Clone, Copy, Debug, Default)]
pub struct SinkStats {
    /// Keys (not markers) deleted, or marked stale (`HD`).
    pub deleted: u64,
    pub not_found: u64,
    /// Of `deleted`: marked stale.
    pub marked_stale: u64,
    /// Mark-stales answered `ERROR` (no meta commands) and sent again as deletes.
    pub stale_as_delete: u64,
    /// Remote marker deletes acknowledged (`DELETED` or `NOT_FOUND`), and of them `DELETED`.
    pub markers_sent: u64,
    pub markers_deleted: u64,
    /// `remote_markers_release: message`: markers removed because they still held their
    /// transaction's token; found holding another token (set again by a later write: left
    /// alone); already gone; not released because the target failed (they expire by TTL);
    /// deleted without comparing, the target lacking meta commands.
    pub markers_released: u64,
    pub markers_superseded: u64,
    pub markers_gone: u64,
    pub markers_release_dropped: u64,
    pub markers_release_as_delete: u64,
    /// CLIENT_ERROR replies: keys the server refuses outright.
    pub refused: u64,
    pub spooled: u64,
    pub replayed: u64,
    pub failures: u64,
}

pub struct Sink {
    pub label: String,
    addr: Addr,
    conn: Option<Conn>,
    spool: Spool,
    next_retry: Instant,
    pub stats: SinkStats,
    mode: InvalidateWith,
    /// The remote marker prefix: keys that start with it are always deleted.
    markers: Option<Vec<u8>>,
    /// The connection answered `ERROR` to a mark-stale: deletes until it is reconnected.
    no_meta: bool,
    /// Warned that the target deletes markers without comparing their tokens.
    warned_release_as_delete: bool,
}

/// The released tokens of one marker.
struct Group<'a> {
    marker: &'a [u8],
    tokens: Vec<&'a [u8]>,
}

/// Looks at a marker whose release found it changed in between, before leaving it to its TTL.
const RELEASE_ATTEMPTS: usize = 4;

#[derive(Clone, Copy)]
pub struct Limits {
    pub max_batch_keys: usize,
    pub ack_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry_interval: Duration,
}

/// How many keys of a chunk were settled before a failure, and the failure.
struct Partial {
    settled_prefix: usize,
    /// Keys after the prefix whose replies said "retry" (SERVER_ERROR).
    failed: Vec<usize>,
    error: Option<io::Error>,
}

impl Sink {
    fn is_marker(&self, key: &[u8]) -> bool {
        self.markers.as_deref().is_some_and(|p| key.starts_with(p))
    }

    /// What `key` gets: markers are deleted (a stale marker would still redirect reads to
    /// the master), other keys as configured.
    fn command(&self, key: &[u8]) -> Command<'static> {
        match self.mode {
            InvalidateWith::Stale { ttl } if !self.no_meta && !self.is_marker(key) => {
                Command::MarkStale { ttl }
            }
            _ => Command::Delete,
        }
    }

    fn count(&mut self, key: &[u8], cmd: Command<'_>, reply: Reply) {
        let marker = self.is_marker(key);
        let s = &mut self.stats;
        match (reply, marker) {
            (Reply::Deleted, true) => {
                s.markers_sent += 1;
                s.markers_deleted += 1;
            }
            (Reply::NotFound, true) => s.markers_sent += 1,
            (Reply::Deleted, false) => {
                s.deleted += 1;
                if matches!(cmd, Command::MarkStale { .. }) {
                    s.marked_stale += 1;
                }
            }
            (Reply::NotFound, false) => s.not_found += 1,
            (Reply::ClientError, _) => s.refused += 1,
            (Reply::Failed | Reply::NoMeta | Reply::Holds { .. } | Reply::Changed, _) => {}
        }
    }

    async fn send(&mut self, keys: &[&[u8]], limits: Limits) -> Result<(), Partial> {
        if self.conn.is_none() {
            match Conn::connect(&self.addr, limits.connect_timeout).await {
                Ok(c) => {
                    self.conn = Some(c);
                    // The server may have been upgraded: mark-stale is tried again.
                    self.no_meta = false;
                }
                Err(e) => {
                    return Err(Partial {
                        settled_prefix: 0,
                        failed: Vec::new(),
                        error: Some(e),
                    })
                }
            }
        }
        let cmds: Vec<(&[u8], Command)> = keys.iter().map(|&k| (k, self.command(k))).collect();
        let mut conn = self.conn.take().expect("connected above");
        let (replies, mut error) = conn.send_all(&cmds, limits.ack_timeout).await;
        let mut failed = Vec::new();
        let mut no_meta = Vec::new();
        for (i, r) in replies.iter().enumerate() {
            match r {
                Reply::Failed => failed.push(i),
                Reply::NoMeta => no_meta.push(i),
                _ => self.count(cmds[i].0, cmds[i].1, r.clone()),
            }
        }
        if !no_meta.is_empty() && error.is_none() {
            if !self.no_meta {
                warn!(
                    "target {}: answers ERROR to meta commands (memcached before 1.6?); \
                     sending deletes instead of mark-stale",
                    self.label
                );
            }
            self.no_meta = true;
            let again: Vec<(&[u8], Command)> = no_meta
                .iter()
                .map(|&i| (keys[i], Command::Delete))
                .collect();
            let (replies, e) = conn.send_all(&again, limits.ack_timeout).await;
            for (j, &i) in no_meta.iter().enumerate() {
                match replies.get(j) {
                    Some(r) if r.settled() => {
                        self.stats.stale_as_delete += 1;
                        self.count(keys[i], Command::Delete, r.clone());
                    }
                    _ => failed.push(i),
                }
            }
            error = e;
        } else {
            failed.extend(no_meta);
        }
        failed.sort_unstable();
        if error.is_none() {
            self.conn = Some(conn);
        }
        if error.is_none() && failed.is_empty() {
            return Ok(());
        }
        Err(Partial {
            settled_prefix: replies.len(),
            failed,
            error,
        })
    }

    fn note_failure(&mut self, p: &Partial, limits: Limits) {
        self.stats.failures += 1;
        self.next_retry = Instant::now() + limits.retry_interval;
        match &p.error {
            Some(e) => warn!("target {}: {e}; spooling its deletes", self.label),
            None => warn!(
                "target {}: {} deletes failed (SERVER_ERROR); spooling them",
                self.label,
                p.failed.len()
            ),
        }
    }

    /// Delivers `keys` (in order), spooling whatever is not acknowledged. Only a spool
    /// that cannot be written is an error: then nothing may be confirmed.
    async fn deliver(&mut self, keys: Vec<&[u8]>, limits: Limits) -> io::Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        if !self.spool.is_empty() {
            // Older deletes are waiting: these go behind them, to keep the order.
            self.spool.append_all(&keys)?;
            self.stats.spooled += keys.len() as u64;
            return Ok(());
        }
        for (n, chunk) in keys.chunks(limits.max_batch_keys).enumerate() {
            if let Err(p) = self.send(chunk, limits).await {
                self.note_failure(&p, limits);
                let mut rest: Vec<&[u8]> = p.failed.iter().map(|&i| chunk[i]).collect();
                rest.extend_from_slice(&chunk[p.settled_prefix..]);
                rest.extend_from_slice(&keys[((n + 1) * limits.max_batch_keys).min(keys.len())..]);
                self.spool.append_all(&rest)?;
                self.stats.spooled += rest.len() as u64;
                return Ok(());
            }
        }
        Ok(())
    }

    /// Removes each remote marker that still holds its token: `mg <marker> v c`, then
    /// `md <marker> C<cas>` for those that do, so a marker set again meanwhile (its CAS value
    /// changes) stays. Never spooled: a marker not released expires by its TTL, sending reads
    /// of its key to the master until then, which is safe. So releases are dropped while
    /// the target's deletes are spooled (they would overtake them) or when it fails.
    async fn release(&mut self, releases: Vec<&Release>, limits: Limits) {
        if releases.is_empty() {
            return;
        }
        if !self.spool.is_empty() {
            self.stats.markers_release_dropped += releases.len() as u64;
            return;
        }
        // One look and one change per marker, however many of its writes are released
        // together (after a replica pause, many): one at a time they would only race.
        let mut groups: Vec<Group> = Vec::new();
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        for r in &releases {
            let i = *index.entry(r.marker.as_slice()).or_insert_with(|| {
                groups.push(Group {
                    marker: &r.marker,
                    tokens: Vec::new(),
                });
                groups.len() - 1
            });
            groups[i].tokens.push(&r.token);
        }
        for chunk in groups.chunks(limits.max_batch_keys) {
            if let Err(e) = self.release_chunk(chunk, limits).await {
                warn!(
                    "target {}: {e}; remote markers not released (they expire by their TTL)",
                    self.label
                );
                self.conn = None;
                return;
            }
        }
    }

    /// One chunk of [`Sink::release`]; counts what it settled, including on an error. A
    /// marker holds the tokens of every write in flight; the released writes' tokens are taken
    /// out of it (`ms C<cas>` with the others), and the marker deleted (`md C<cas>`) when none
    /// is left. A marker that changed between the look and the change is looked at again.
    async fn release_chunk(&mut self, chunk: &[Group<'_>], limits: Limits) -> io::Result<()> {
        let dropped = |s: &mut SinkStats, n: usize| s.markers_release_dropped += n as u64;
        let tokens = |gs: &[&Group]| gs.iter().map(|g| g.tokens.len()).sum::<usize>();
        let mut pending: Vec<&Group> = chunk.iter().collect();
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => match Conn::connect(&self.addr, limits.connect_timeout).await {
                Ok(c) => {
                    self.no_meta = false;
                    c
                }
                Err(e) => {
                    dropped(&mut self.stats, tokens(&pending));
                    return Err(e);
                }
            },
        };
        for _ in 0..RELEASE_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            let check: Vec<(&[u8], Command)> = pending
                .iter()
                .map(|g| {
                    let tokens = g.tokens.as_slice();
                    (g.marker, Command::CheckToken { tokens })
                })
                .collect();
            let (replies, error) = conn.send_all(&check, limits.ack_timeout).await;
            // Each change with the number of the group's tokens it takes out.
            let mut writes: Vec<(&Group, Command, usize)> = Vec::new();
            let mut plain = 0;
            for (&g, reply) in pending.iter().zip(&replies) {
                let n = g.tokens.len();
                let s = &mut self.stats;
                match reply {
                    Reply::Holds {
                        cas,
                        ttl,
                        others,
                        found,
                    } => {
                        s.markers_superseded += (n - found) as u64;
                        let cmd = if others.is_empty() {
                            Command::CasDelete { cas: *cas }
                        } else {
                            Command::CasStore {
                                cas: *cas,
                                ttl: *ttl,
                                value: others,
                            }
                        };
                        writes.push((g, cmd, *found));
                    }
                    Reply::Changed => s.markers_superseded += n as u64,
                    Reply::NotFound => s.markers_gone += n as u64,
                    Reply::NoMeta => {
                        plain += 1;
                        writes.push((g, Command::Delete, n));
                    }
                    Reply::ClientError => s.refused += 1,
                    Reply::Deleted | Reply::Failed => dropped(s, n),
                }
            }
            if let Some(e) = error {
                dropped(&mut self.stats, tokens(&pending[replies.len()..]));
                return Err(e);
            }
            if plain > 0 && !self.warned_release_as_delete {
                warn!(
                    "target {}: answers ERROR to meta commands (memcached before 1.6?); deleting \
                     remote markers without comparing their tokens",
                    self.label
                );
                self.warned_release_as_delete = true;
            }
            let cmds: Vec<(&[u8], Command)> =
                writes.iter().map(|(g, c, _)| (g.marker, *c)).collect();
            let (replies, error) = conn.send_all(&cmds, limits.ack_timeout).await;
            let mut again = Vec::new();
            for ((g, cmd, found), reply) in writes.iter().zip(&replies) {
                let s = &mut self.stats;
                match (cmd, reply) {
                    (Command::Delete, Reply::Deleted | Reply::NotFound) => {
                        s.markers_release_as_delete += *found as u64
                    }
                    (_, Reply::Deleted) => s.markers_released += *found as u64,
                    // Another write added its token, or another release took one out.
                    (_, Reply::Changed) => again.push(*g),
                    (_, Reply::NotFound) => s.markers_gone += *found as u64,
                    (_, Reply::ClientError) => s.refused += 1,
                    _ => dropped(s, *found),
                }
            }
            if let Some(e) = error {
                let rest: usize = writes[replies.len()..].iter().map(|w| w.2).sum();
                dropped(&mut self.stats, rest);
                return Err(e);
            }
            pending = again;
        }
        // Still changing under us: left to their TTL.
        dropped(&mut self.stats, tokens(&pending));
        self.conn = Some(conn);
        Ok(())
    }

    /// Replays the spool if it is time to try the target again.
    async fn replay(&mut self, limits: Limits) -> io::Result<()> {
        if self.spool.is_empty() || Instant::now() < self.next_retry {
            return Ok(());
        }
        let (seq, keys) = self.spool.oldest(usize::MAX);
        for chunk in keys.chunks(limits.max_batch_keys) {
            let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            if self.send(&refs, limits).await.is_err() {
                // Whatever was sent stays in the spool: deletes are idempotent, so sending
                // a prefix twice is harmless, while rewriting the file could lose keys.
                self.stats.failures += 1;
                self.next_retry = Instant::now() + limits.retry_interval;
                return Ok(());
            }
            self.stats.replayed += chunk.len() as u64;
        }
        self.spool.ack(seq, keys.len())?;
        info!(
            "target {}: back; {} spooled deletes replayed",
            self.label,
            keys.len()
        );
        Ok(())
    }
}

enum Route {
    All(usize),
    Pool { ring: Ring, sinks: Vec<usize> },
}

pub struct Fanout {
    pub sinks: Vec<Sink>,
    routes: Vec<Route>,
    limits: Limits,
}

/// A file name for a sink's spool: its address with anything but `[A-Za-z0-9.-]` as `_`.
fn spool_name(index: usize, addr: &Addr) -> String {
    let text: String = addr
        .to_string()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{index}-{text}")
}

/// Opens (creating the directory if needed) the spool `name` in `dir`: `NAME.keys`, unbounded.
fn open_spool(dir: &Path, name: &str) -> io::Result<Spool> {
    std::fs::create_dir_all(dir)?;
    Spool::open(&dir.join(format!("{name}.keys")), spool::UNBOUNDED)
}

impl Fanout {
    pub fn new(config: &Config) -> io::Result<Fanout> {
        let limits = Limits {
            max_batch_keys: config.max_batch_keys,
            ack_timeout: config.ack_timeout,
            connect_timeout: config.connect_timeout,
            retry_interval: config.retry_interval,
        };
        let mut sinks = Vec::new();
        let mut add = |label: String, addr: Addr| -> io::Result<usize> {
            let spool = open_spool(&config.spool_dir, &spool_name(sinks.len(), &addr))?;
            if !spool.is_empty() {
                info!(
                    "target {label}: spool {} has deletes to replay",
                    spool.path().display()
                );
            }
            sinks.push(Sink {
                label,
                addr,
                conn: None,
                spool,
                next_retry: Instant::now(),
                stats: SinkStats::default(),
                mode: config.invalidate_with,
                markers: config.remote_markers.clone(),
                no_meta: false,
                warned_release_as_delete: false,
            });
            Ok(sinks.len() - 1)
        };
        let mut routes = Vec::new();
        for t in &config.targets {
            routes.push(match t {
                TargetSpec::Memcached(addr) => Route::All(add(addr.to_string(), addr.clone())?),
                TargetSpec::Pool {
                    servers,
                    hash,
                    distribution,
                    hash_tag,
                } => {
                    let ids = servers
                        .iter()
                        .map(|s| add(format!("pool server {}", s.addr), s.addr.clone()))
                        .collect::<io::Result<Vec<_>>>()?;
                    let ring = Ring::new(
                        servers.iter().map(|s| s.ring.clone()).collect(),
                        *distribution,
                        *hash,
                    )
                    .with_hash_tag(*hash_tag);
                    Route::Pool { ring, sinks: ids }
                }
            });
        }
        Ok(Fanout {
            sinks,
            routes,
            limits,
        })
    }

    /// Sends every key to every target (its pool server for a pool), all sinks at once,
    /// then each marker release to where its marker lives. Returns when each key is
    /// acknowledged or spooled.
    pub async fn deliver(&mut self, keys: &[Vec<u8>], releases: &[Release]) -> io::Result<()> {
        let mut per_sink: Vec<Vec<&[u8]>> = vec![Vec::new(); self.sinks.len()];
        let mut per_sink_releases: Vec<Vec<&Release>> = vec![Vec::new(); self.sinks.len()];
        for route in &self.routes {
            match route {
                Route::All(s) => {
                    per_sink[*s].extend(keys.iter().map(Vec::as_slice));
                    per_sink_releases[*s].extend(releases);
                }
                Route::Pool { ring, sinks } => {
                    for k in keys {
                        if let Some(i) = ring.server_for(k) {
                            per_sink[sinks[i]].push(k);
                        }
                    }
                    for r in releases {
                        if let Some(i) = ring.server_for(&r.marker) {
                            per_sink_releases[sinks[i]].push(r);
                        }
                    }
                }
            }
        }
        let limits = self.limits;
        let results = join_all(
            self.sinks
                .iter_mut()
                .zip(per_sink)
                .zip(per_sink_releases)
                .map(|((sink, keys), releases)| async move {
                    sink.deliver(keys, limits).await?;
                    sink.release(releases, limits).await;
                    Ok(())
                }),
        )
        .await;
        results.into_iter().collect()
    }

    /// Tries the targets with spooled deletes again (at most once per retry interval each).
    pub async fn replay_spools(&mut self) -> io::Result<()> {
        let limits = self.limits;
        let results = join_all(self.sinks.iter_mut().map(|s| s.replay(limits))).await;
        results.into_iter().collect()
    }

    pub fn spooling(&self) -> bool {
        self.sinks.iter().any(|s| !s.spool.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A server of the text protocol only, as memcached before 1.6: `ERROR` to `md`,
    /// `DELETED` to `delete`. Returns the lines it was sent, once the client hangs up.
    async fn text_only_peer(listener: tokio::net::UnixListener) -> Vec<String> {
        let (s, _) = listener.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        let mut lines = BufReader::new(r).lines();
        let mut seen = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            let reply: &[u8] = if line.starts_with("delete ") {
                b"DELETED\r\n"
            } else {
                b"ERROR\r\n"
            };
            w.write_all(reply).await.unwrap();
            seen.push(line);
        }
        seen
    }

    #[tokio::test]
    async fn a_target_without_meta_gets_deletes_instead() {
        let dir = std::env::temp_dir().join(format!("memfleet-fanout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mc.sock");
        let peer = tokio::spawn(text_only_peer(
            tokio::net::UnixListener::bind(&path).unwrap(),
        ));
        let addr = Addr::Unix(path.clone());
        let mut sink = Sink {
            label: "t".into(),
            spool: open_spool(&dir, &spool_name(0, &addr)).unwrap(),
            addr,
            conn: None,
            next_retry: Instant::now(),
            stats: SinkStats::default(),
            mode: InvalidateWith::Stale { ttl: 7 },
            markers: Some(b"rm:".to_vec()),
            no_meta: false,
            warned_release_as_delete: false,
        };
        let limits = Limits {
            max_batch_keys: 100,
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            retry_interval: Duration::from_secs(1),
        };
        assert!(sink.send(&[b"a", b"rm:a", b"b"], limits).await.is_ok());
        assert!(sink.send(&[b"c"], limits).await.is_ok());
        sink.conn = None;
        let seen = peer.await.unwrap();
        assert_eq!(
            seen,
            [
                "md a I T7",
                "delete rm:a",
                "md b I T7",
                "delete a",
                "delete b",
                "delete c"
            ]
        );
        let s = sink.stats;
        assert_eq!((s.deleted, s.marked_stale, s.stale_as_delete), (3, 0, 2));
        assert_eq!((s.markers_sent, s.markers_deleted), (1, 1));
        assert!(sink.spool.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_target_without_meta_gets_marker_deletes_instead() {
        let dir = std::env::temp_dir().join(format!("memfleet-release-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mc.sock");
        let peer = tokio::spawn(text_only_peer(
            tokio::net::UnixListener::bind(&path).unwrap(),
        ));
        let addr = Addr::Unix(path.clone());
        let mut sink = Sink {
            label: "t".into(),
            spool: open_spool(&dir, &spool_name(0, &addr)).unwrap(),
            addr,
            conn: None,
            next_retry: Instant::now(),
            stats: SinkStats::default(),
            mode: InvalidateWith::Delete,
            markers: Some(b"rm:".to_vec()),
            no_meta: false,
            warned_release_as_delete: false,
        };
        let limits = Limits {
            max_batch_keys: 100,
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            retry_interval: Duration::from_secs(1),
        };
        let r = |m: &[u8], t: &[u8]| Release {
            marker: m.to_vec(),
            token: t.to_vec(),
        };
        let releases = [r(b"rm:a", b"t1"), r(b"rm:b", b"t2"), r(b"rm:a", b"t3")];
        sink.release(releases.iter().collect(), limits).await;
        sink.conn = None;
        let seen = peer.await.unwrap();
        // One look per marker, both tokens of rm:a together.
        assert_eq!(
            seen,
            [
                "mg rm:a v c t",
                "mg rm:b v c t",
                "delete rm:a",
                "delete rm:b"
            ]
        );
        let s = sink.stats;
        assert_eq!(s.markers_release_as_delete, 3);
        assert_eq!((s.markers_released, s.markers_release_dropped), (0, 0));
        assert!(sink.warned_release_as_delete);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
