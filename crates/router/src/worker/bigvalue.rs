//! Big values (mcrouter's BigValueRoute; the format is `proto::bigvalue`'s). A store over
//! the pool's split threshold, and a get whose finished reply holds an index item, are
//! carried out by a short-lived thread that is a client of this very listener: its chunk
//! sets and gets are ordinary small requests, so they are routed (hashing, route trees,
//! replication, failover) exactly as any client's. The thread hands the client's reply
//! back with [`Control::BigDone`]; the client's slot waits at its place in the queue.
//! Requests under the threshold pay one length compare.
//!
//! Settings come from the pool (`--big-value-split-threshold`) and, in an mcrouter config,
//! from the BigValueRoute the request meets in the route tree. A store over the pool's
//! threshold is split by it, as mcrouter's global BigValueRoute at the root would; its
//! chunks come back through here as any key and the key's BigValueRoute may split them
//! again. Otherwise the key's BigValueRoute splits by its own threshold, and its helper marks
//! its connection first ([`CHUNKS_COMMAND`]): its chunks are then planned along the client's
//! key down to that BigValueRoute and by their own key below it, as mcrouter's BigValueRoute
//! sends chunks to its target. Reads go by the key's BigValueRoute, else the pool's
//! settings; with neither, an index item is returned as it is.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use proto::bigvalue::{self, Index, Part, Settings};
use proto::Keys;
use proto::Request;

use crate::shared::McRoutes;

use super::client::SlotKind;
use super::reply_to::ReplyTo;
use super::{Control, Worker};

/// Big values being written or read at a time, over the whole router.
static BIG_UNDER_WAY: AtomicUsize = AtomicUsize::new(0);
const MAX_BIG_UNDER_WAY: usize = 16;

/// How long the helper waits on the listener for one reply.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// What a helper thread does.
enum Job {
    /// Chunk sets, then the index store whose reply is the client's.
    Store {
        key: Vec<u8>,
        flags: u32,
        exptime: i64,
        value: Vec<u8>,
        index: Index,
        index_store: Vec<u8>,
        /// A quiet meta set: an `HD` answer is dropped.
        quiet: bool,
        meta: bool,
        /// Split by the BigValueRoute this operation's request meets: its chunks are planned
        /// along the client's key.
        chunks_of: Option<&'static str>,
    },
    /// A finished get reply with index items: fetch their chunks.
    Get { reply: Vec<u8> },
}

/// The service-info get a helper sends to have its connection's chunk requests planned as
/// a BigValueRoute's (`__mcrouter__.memfleet_chunks(<token>,<op>)`, `<op>` the client
/// request's operation, or `off`). The token is this process's: no other client can ask.
pub(super) const CHUNKS_COMMAND: &str = "memfleet_chunks";

fn chunks_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| format!("{:016x}{:016x}", suffix(), suffix()))
}

/// What `command` sets the connection's chunk planning to, if it is a helper's mark.
pub(super) fn chunks_mode(
    command: &routetree::admin::AdminCommand<'_>,
) -> Option<Option<&'static str>> {
    match command.args[..] {
        [token, op] if command.name == CHUNKS_COMMAND && token == chunks_token() => Some(
            routetree::OPERATIONS
                .iter()
                .find(|name| **name == op)
                .copied(),
        ),
        _ => None,
    }
}

/// Sends the mark that plans this connection's requests as chunks of a `op` request (None:
/// as any).
fn mark_chunks(r: &mut BufReader<Box<dyn Conn>>, op: Option<&str>) -> io::Result<()> {
    let line = format!(
        "get __mcrouter__.{CHUNKS_COMMAND}({},{})\r\n",
        chunks_token(),
        op.unwrap_or("off")
    );
    r.get_mut().write_all(line.as_bytes())?;
    read_get(r).map(drop)
}

/// Where the helper connects: the pool's own listener.
enum Target {
    Tcp(String, u16),
    Unix(String),
}

impl Worker {
    /// Handles `req` when it is a store over a threshold; false for anything else.
    pub(super) fn big_store(&mut self, ci: usize, req: &Request<'_>) -> bool {
        let (key, len) = match *req {
            Request::Store { key, data, .. } => (key, data.len()),
            Request::MetaSet { ref key, data, .. } => (key.wire(), data.len()),
            _ => return false,
        };
        // A helper's chunks: already split (mcrouter's BigValueRoute passes its chunks to
        // its target whole).
        if self.clients[ci].chunks_of.is_some() {
            return false;
        }
        let pool = self.pool_settings(ci);
        let op = routetree::request::single_key(req).map_or("set", |(op, _)| op);
        let (split, chunks_of) = match pool {
            Some(s) if len > s.threshold => (s, None),
            _ => match route_settings(self.shared.mcrouter.as_deref(), op, key) {
                Some(s) if s.threshold > 0 && len > s.threshold => (s, Some(op)),
                _ => return false,
            },
        };
        let threshold = split.threshold;
        let job = match *req {
            Request::Store {
                cmd,
                key,
                flags,
                exptime,
                data,
                cas_unique,
                noreply,
            } if data.len() > threshold => {
                let index = Index::for_value(data.len(), threshold, suffix());
                match bigvalue::text_index_store(cmd, key, flags, exptime, cas_unique, &index) {
                    Ok(index_store) => (
                        Job::Store {
                            key: key.to_vec(),
                            flags,
                            exptime,
                            value: data.to_vec(),
                            index,
                            index_store,
                            quiet: false,
                            meta: false,
                            chunks_of,
                        },
                        if noreply {
                            SlotKind::NoReply
                        } else {
                            SlotKind::Single
                        },
                    ),
                    Err(e) => return self.big_refuse(ci, e),
                }
            }
            Request::MetaSet {
                ref key,
                ref flags,
                cmd,
                data,
            } if data.len() > threshold => {
                let index = Index::for_value(data.len(), threshold, suffix());
                match bigvalue::meta_index_store(key.wire(), flags, cmd, &index) {
                    Ok(m) => (
                        Job::Store {
                            key: key.wire().to_vec(),
                            flags: m.flags,
                            exptime: m.exptime,
                            value: data.to_vec(),
                            index,
                            index_store: m.index_store,
                            quiet: m.quiet,
                            meta: true,
                            chunks_of,
                        },
                        SlotKind::Single,
                    ),
                    Err(e) => return self.big_refuse(ci, e),
                }
            }
            _ => return false,
        };
        let (job, kind) = job;
        let to = self.clients[ci].push(ci, 1, kind);
        self.big_spawn(ci, to, job, split);
        true
    }

    /// The pool's own splitting (`--big-value-split-threshold`), if on.
    fn pool_settings(&self, ci: usize) -> Option<Settings> {
        let cfg = &self.clients[ci].rt.cfg;
        (cfg.big_value_split_threshold > 0).then_some(Settings {
            threshold: cfg.big_value_split_threshold as usize,
            batch: cfg.big_value_batch_size as usize,
            hide_flag: cfg.big_value_hide_reply_flag,
        })
    }

    /// Whether a get of `keys` may meet index items to follow.
    pub(super) fn big_reads(&self, ci: usize, keys: Keys<'_>) -> bool {
        if self.clients[ci].chunks_of.is_some() {
            return false;
        }
        if self.clients[ci].rt.cfg.big_value_split_threshold > 0 {
            return true;
        }
        let routes = self.shared.mcrouter.as_deref();
        keys.flatten()
            .any(|k| route_settings(routes, "get", k).is_some())
    }

    fn big_refuse(&mut self, ci: usize, reply: &str) -> bool {
        self.local_reply(ci, reply.as_bytes());
        true
    }

    /// Starts a helper for each get reply of client `ci` that waits for its chunks.
    pub(super) fn big_gets(&mut self, ci: usize) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let gen = c.gen;
        for (seq, reply) in std::mem::take(&mut c.big_wait) {
            let to = ReplyTo {
                client: ci as u32,
                gen,
                seq,
                frag: 0,
            };
            let pool = self.pool_settings(ci).unwrap_or_default();
            self.big_spawn(ci, to, Job::Get { reply }, pool);
        }
    }

    /// `settings`: the store's, or for a get the pool's (keys with a BigValueRoute use its).
    fn big_spawn(&mut self, ci: usize, to: ReplyTo, job: Job, settings: Settings) {
        // Each one holds a whole value (and its chunks) and a thread: bounded, so a flood of
        // big requests is refused rather than taking the router's memory.
        if BIG_UNDER_WAY.fetch_add(1, Relaxed) >= MAX_BIG_UNDER_WAY {
            BIG_UNDER_WAY.fetch_sub(1, Relaxed);
            self.answer_slot(to, b"SERVER_ERROR big value: too many under way\r\n");
            return;
        }
        let routes = self.shared.mcrouter.clone();
        let cfg = &self.clients[ci].rt.cfg;
        let target = match &cfg.listen {
            _ if cfg.tls.listen_cert_file.is_some() => None,
            nutconf::Listen::Tcp { host, port } => {
                let host = match host.as_str() {
                    "" | "0.0.0.0" | "*" => "127.0.0.1",
                    "::" | "[::]" => "::1",
                    h => h.trim_start_matches('[').trim_end_matches(']'),
                };
                Some(Target::Tcp(host.to_owned(), *port))
            }
            nutconf::Listen::Unix { path, .. } => Some(Target::Unix(path.clone())),
        };
        let auth = cfg.client_auth.clone();
        let (tx, waker) = self.peers[self.id].clone();
        let run = move || {
            let reply = match target {
                None => b"SERVER_ERROR big values need a listener without TLS\r\n".to_vec(),
                Some(t) => run(&t, auth.as_deref(), &settings, routes.as_deref(), job)
                    .unwrap_or_else(|e| format!("SERVER_ERROR big value: {e}\r\n").into_bytes()),
            };
            BIG_UNDER_WAY.fetch_sub(1, Relaxed);
            if tx.send(Control::BigDone { to, reply }).is_ok() {
                let _ = waker.wake();
            }
        };
        if std::thread::Builder::new()
            .name("big-value".into())
            .spawn(run)
            .is_err()
        {
            BIG_UNDER_WAY.fetch_sub(1, Relaxed);
            self.answer_slot(to, b"SERVER_ERROR big value: no thread\r\n");
        }
    }

    /// A helper's reply for the client's waiting slot.
    pub(super) fn big_done(&mut self, to: ReplyTo, reply: &[u8]) {
        self.answer_slot(to, reply);
        self.big_gets(to.client as usize);
    }
}

/// The settings of the BigValueRoute an `op` request for `key` meets in an mcrouter config,
/// if any.
fn route_settings(routes: Option<&McRoutes>, op: &str, key: &[u8]) -> Option<Settings> {
    let routes = routes.filter(|r| r.big_values)?;
    let s = routes.config.big_value_for(op, key, &routes.prefix)?;
    Some(Settings {
        threshold: s.threshold,
        batch: s.batch,
        hide_flag: s.hide_reply_flag,
    })
}

/// A fresh suffix per write: two writes of one key never share chunk keys.
fn suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

fn connect(target: &Target) -> io::Result<Box<dyn Conn>> {
    Ok(match target {
        Target::Tcp(host, port) => {
            let s = std::net::TcpStream::connect((host.as_str(), *port))?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            s.set_nodelay(true)?;
            Box::new(s)
        }
        Target::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path)?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            Box::new(s)
        }
    })
}

/// Reads one line reply (with its CRLF).
fn read_line(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(line)
}

/// Reads a get reply: `VALUE`s up to `END`, or one error line.
fn read_get(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = read_line(r)?;
        out.extend_from_slice(&line);
        if line == b"END\r\n" || !line.starts_with(b"VALUE ") {
            return Ok(out);
        }
        let len: usize = line[..line.len() - 2]
            .split(|&b| b == b' ')
            .nth(3)
            .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad VALUE line"))?;
        let at = out.len();
        out.resize(at + len + 2, 0);
        r.read_exact(&mut out[at..])?;
    }
}

fn run(
    target: &Target,
    auth: Option<&str>,
    s: &Settings,
    routes: Option<&McRoutes>,
    job: Job,
) -> io::Result<Vec<u8>> {
    let conn = connect(target)?;
    let mut r = BufReader::with_capacity(256 * 1024, conn);
    if let Some(pw) = auth {
        let token = format!("big-value {pw}");
        let login = format!("set auth 0 0 {}\r\n{token}\r\n", token.len());
        r.get_mut().write_all(login.as_bytes())?;
        let line = read_line(&mut r)?;
        if line != proto::reply::STORED {
            return Ok(line);
        }
    }
    let batch = |s: &Settings| if s.batch == 0 { usize::MAX } else { s.batch };
    match job {
        Job::Store {
            key,
            flags,
            exptime,
            value,
            index,
            index_store,
            quiet,
            meta,
            chunks_of,
        } => {
            if chunks_of.is_some() {
                mark_chunks(&mut r, chunks_of)?;
            }
            let parts: Vec<&[u8]> = bigvalue::chunks(&value, s.threshold).collect();
            let mut i = 0u32;
            for group in parts.chunks(batch(s)) {
                let mut out = Vec::new();
                for part in group {
                    bigvalue::chunk_set(&index.chunk_key(&key, i), flags, exptime, part, &mut out);
                    i += 1;
                }
                r.get_mut().write_all(&out)?;
                for _ in group {
                    let line = read_line(&mut r)?;
                    if line != proto::reply::STORED {
                        // The worst chunk reply is the client's, as mcrouter's; a meta
                        // client gets the meta form of a refusal.
                        return Ok(match (meta, line.starts_with(b"NOT_STORED")) {
                            (true, true) => b"NS\r\n".to_vec(),
                            _ => line,
                        });
                    }
                }
            }
            if chunks_of.is_some() {
                mark_chunks(&mut r, None)?;
            }
            r.get_mut().write_all(&index_store)?;
            let line = read_line(&mut r)?;
            Ok(if quiet && line.starts_with(b"HD") {
                Vec::new()
            } else {
                line
            })
        }
        Job::Get { reply } => {
            let Some((values, _)) = bigvalue::parse_get_reply(&reply) else {
                return Ok(reply);
            };
            let mut parts: Vec<Part> = Vec::with_capacity(values.len());
            for v in &values {
                let key = &reply[v.key.clone()];
                let by_route = route_settings(routes, "get", key);
                let on = by_route.or((s.threshold > 0).then_some(*s));
                let (Some(on), true) = (on, v.flags & bigvalue::BIG_VALUE_FLAG != 0) else {
                    parts.push(Part::Keep);
                    continue;
                };
                let data = match Index::parse(&reply[v.data.clone()]) {
                    Some(index) if by_route.is_some() => {
                        mark_chunks(&mut r, Some("get"))?;
                        let data = fetch(&mut r, key, &index, batch(&on))?;
                        mark_chunks(&mut r, None)?;
                        data
                    }
                    Some(index) => fetch(&mut r, key, &index, batch(&on))?,
                    None => None,
                };
                parts.push(match data {
                    Some(data) => Part::Whole {
                        data,
                        hide_flag: on.hide_flag,
                    },
                    None => Part::Miss,
                });
            }
            Ok(bigvalue::reassemble_parts(&reply, |i| {
                std::mem::replace(&mut parts[i], Part::Miss)
            }))
        }
    }
}

/// The chunks behind `index`, fetched `batch` keys per get; `None` if one is missing.
fn fetch(
    r: &mut BufReader<Box<dyn Conn>>,
    key: &[u8],
    index: &Index,
    batch: usize,
) -> io::Result<Option<Vec<u8>>> {
    let keys: Vec<Vec<u8>> = (0..index.chunks).map(|i| index.chunk_key(key, i)).collect();
    let mut replies = Vec::new();
    for group in keys.chunks(batch) {
        let mut line = b"get".to_vec();
        for k in group {
            line.push(b' ');
            line.extend_from_slice(k);
        }
        line.extend_from_slice(b"\r\n");
        r.get_mut().write_all(&line)?;
        let reply = read_get(r)?;
        if !reply.ends_with(b"END\r\n") {
            return Ok(None);
        }
        replies.extend_from_slice(&reply);
    }
    Ok(bigvalue::join_chunks(&keys, &replies))
}
