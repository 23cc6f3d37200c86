//! A delete spool: keys whose deletes could not be delivered, one per line (`KEY\n`), oldest
//! first, kept in memory and in a file. Appends are written at once and fsync'ed in groups
//! ([`Spool::append`], then one [`Spool::sync`] for all of them, or [`Spool::append_all`]);
//! replayed entries leave the file only once acknowledged ([`Spool::oldest`], [`Spool::ack`]).
//! A spool may be bounded: when an append would pass `max_bytes`, the oldest entries are
//! dropped until the spool is at three quarters of the limit (so a full spool is not
//! rewritten on every append).
//!
//! Used by the router's asynclog (`HOST:PORT.asynclog`, bounded by `--asynclog-max-bytes`)
//! and the invalidator's per-server backlog (`N-ADDR.keys`, unbounded). Pure but for the
//! file: the sending and replaying are the callers'.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use proto::KEY_MAX_LENGTH;

/// Whether `key` can be a spooled key: what memcached accepts (no space or control byte),
/// by the rule the invalidator's templates check their keys with.
pub fn valid_key(key: &[u8]) -> bool {
    proto::check_key(key).is_ok()
}

/// The keys in a spool file's bytes, and whether the file was clean. A last line without
/// its newline is an append cut short by a crash (its client was never answered); a line
/// that is not a valid key is damage. Both are left out.
pub fn decode(bytes: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut clean = whole == bytes.len();
    let mut keys = Vec::new();
    for line in bytes[..whole].split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        if valid_key(line) {
            keys.push(line.to_vec());
        } else {
            clean = false;
        }
    }
    (keys, clean)
}

/// `max_bytes` for a spool that never drops entries.
pub const UNBOUNDED: u64 = u64::MAX;

fn entry_bytes(key: &[u8]) -> u64 {
    key.len() as u64 + 1
}

/// One destination's spool: the file, and its entries in memory.
pub struct Spool {
    path: PathBuf,
    file: File,
    entries: VecDeque<Vec<u8>>,
    /// The sequence number of `entries[0]`; it grows as entries leave.
    first_seq: u64,
    bytes: u64,
    max_bytes: u64,
    dropped: u64,
    /// Lines were appended since the last sync (or rewrite): not yet known to be on disk.
    unsynced: bool,
    /// fsyncs of appends done, for tests.
    syncs: u64,
}

impl Spool {
    /// Opens (creating if needed) the spool at `path`; a damaged file (a torn last line, a
    /// line that is not a key) is rewritten with its valid entries.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<Spool> {
        let mut text = Vec::new();
        if let Ok(mut f) = File::open(path) {
            f.read_to_end(&mut text)?;
        }
        let (keys, clean) = decode(&text);
        let mut spool = Spool {
            path: path.to_owned(),
            file: append_file(path)?,
            bytes: keys.iter().map(|k| entry_bytes(k)).sum(),
            entries: keys.into(),
            first_seq: 0,
            max_bytes: max_bytes.max(KEY_MAX_LENGTH as u64 + 1),
            dropped: 0,
            unsynced: false,
            syncs: 0,
        };
        if !clean {
            spool.rewrite()?;
        }
        Ok(spool)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes the entries take in the file.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Entries dropped for room since the spool was opened.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// fsyncs [`Spool::sync`] made since the spool was opened.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Appends `key` to the file without waiting for the disk: it is durable once
    /// [`Spool::sync`] returned `Ok` (one sync serves every append before it). Returns how
    /// many of the oldest entries were dropped to make room; dropping rewrites the file,
    /// which is synced at once.
    pub fn append(&mut self, key: &[u8]) -> io::Result<u64> {
        if !valid_key(key) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a key"));
        }
        let need = entry_bytes(key);
        if self.bytes.saturating_add(need) <= self.max_bytes {
            self.write_lines(&[key])?;
            return Ok(0);
        }
        let target = self.max_bytes / 4 * 3;
        let mut dropped = 0;
        while self.bytes + need > target {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= entry_bytes(&old);
            self.first_seq += 1;
            dropped += 1;
        }
        self.entries.push_back(key.to_vec());
        self.bytes += need;
        self.dropped += dropped;
        self.rewrite()?;
        Ok(dropped)
    }

    /// Appends `keys` in order and waits until they are on disk. Returns how many of the
    /// oldest entries were dropped to make room.
    pub fn append_all(&mut self, keys: &[&[u8]]) -> io::Result<u64> {
        let need: u64 = keys.iter().map(|k| entry_bytes(k)).sum();
        let mut dropped = 0;
        if keys.iter().all(|k| valid_key(k)) && self.bytes.saturating_add(need) <= self.max_bytes {
            // The common case in one write.
            self.write_lines(keys)?;
        } else {
            for k in keys {
                dropped += self.append(k)?;
            }
        }
        self.sync()?;
        Ok(dropped)
    }

    /// Writes `keys` (valid, with room) at the end of the file, unsynced.
    fn write_lines(&mut self, keys: &[&[u8]]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(keys.iter().map(|k| k.len() + 1).sum());
        for k in keys {
            buf.extend_from_slice(k);
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        self.unsynced = true;
        self.entries.extend(keys.iter().map(|k| k.to_vec()));
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// Puts every append so far on disk (one `fdatasync` for all; none when there is
    /// nothing new).
    pub fn sync(&mut self) -> io::Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        self.file.sync_data()?;
        self.unsynced = false;
        self.syncs += 1;
        Ok(())
    }

    /// Up to `n` of the oldest entries, and the sequence number of the first, for
    /// [`Spool::ack`].
    pub fn oldest(&self, n: usize) -> (u64, Vec<Vec<u8>>) {
        (
            self.first_seq,
            self.entries.iter().take(n).cloned().collect(),
        )
    }

    /// The `n` entries from sequence `seq` on were acknowledged: they leave the spool
    /// (those already dropped meanwhile are skipped).
    pub fn ack(&mut self, seq: u64, n: usize) -> io::Result<()> {
        let end = seq + n as u64;
        let mut removed = false;
        while self.first_seq < end {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= entry_bytes(&old);
            self.first_seq += 1;
            removed = true;
        }
        if removed {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Replaces the file with the entries in memory (write aside, fsync, rename).
    fn rewrite(&mut self) -> io::Result<()> {
        if self.entries.is_empty() {
            self.file.set_len(0)?;
            self.file.sync_data()?;
            self.unsynced = false;
            return Ok(());
        }
        let mut tmp_name = self.path.clone().into_os_string();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        let mut out = Vec::with_capacity(self.bytes as usize);
        for k in &self.entries {
            out.extend_from_slice(k);
            out.push(b'\n');
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_data()?;
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = append_file(&self.path)?;
        self.unsynced = false;
        Ok(())
    }
}

fn append_file(path: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).create(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("memfleet-spool-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// Appends `key` and syncs, as one delete alone in its loop turn.
    fn push(s: &mut Spool, key: &[u8]) -> u64 {
        let dropped = s.append(key).unwrap();
        s.sync().unwrap();
        dropped
    }

    fn keys(s: &Spool) -> Vec<Vec<u8>> {
        s.oldest(usize::MAX).1
    }

    /// A spool of 1000 bytes holding 100 keys of 10 bytes a line: full.
    fn full(name: &str) -> (PathBuf, Spool) {
        let dir = tmpdir(name);
        let mut s = Spool::open(&dir.join("h:1.asynclog"), 1000).unwrap();
        for i in 0..100 {
            assert_eq!(push(&mut s, format!("key{i:06}").as_bytes()), 0);
        }
        (dir, s)
    }

    #[test]
    fn push_reopen_ack() {
        let dir = tmpdir("basic");
        let path = dir.join("h:1.asynclog");
        let mut s = Spool::open(&path, 1 << 20).unwrap();
        assert!(s.is_empty());
        for k in [&b"a"[..], b"b", b"c"] {
            assert_eq!(push(&mut s, k), 0);
        }
        drop(s);
        let mut s = Spool::open(&path, 1 << 20).unwrap();
        assert_eq!(keys(&s), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        let (seq, first) = s.oldest(2);
        assert_eq!(first.len(), 2);
        push(&mut s, b"d");
        s.ack(seq, 2).unwrap();
        assert_eq!(keys(&s), [b"c".to_vec(), b"d".to_vec()]);
        assert_eq!(fs::read(&path).unwrap(), b"c\nd\n");
        let (seq, _) = s.oldest(10);
        s.ack(seq, 2).unwrap();
        assert!(s.is_empty());
        assert_eq!(fs::read(&path).unwrap(), b"");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn appends_share_one_sync_and_survive_reopen_in_order() {
        let dir = tmpdir("group");
        let path = dir.join("h:1.asynclog");
        let mut s = Spool::open(&path, 1 << 20).unwrap();
        s.sync().unwrap();
        assert_eq!(s.syncs(), 0, "nothing appended, nothing to sync");
        let batch: Vec<Vec<u8>> = (0..50).map(|i| format!("k{i}").into_bytes()).collect();
        for k in &batch {
            assert_eq!(s.append(k).unwrap(), 0);
        }
        assert_eq!(s.syncs(), 0, "appends do not sync");
        s.sync().unwrap();
        s.sync().unwrap();
        assert_eq!(s.syncs(), 1, "one sync for the whole group");
        s.append(b"late").unwrap();
        s.sync().unwrap();
        assert_eq!(s.syncs(), 2);
        drop(s);
        let s = Spool::open(&path, 1 << 20).unwrap();
        let mut want = batch.clone();
        want.push(b"late".to_vec());
        assert_eq!(keys(&s), want);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rewrite_leaves_nothing_to_sync() {
        let (dir, mut s) = full("rewrite");
        s.append(b"key000100").unwrap();
        let syncs = s.syncs();
        s.sync().unwrap();
        assert_eq!(s.syncs(), syncs, "the drop rewrote and synced the file");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn torn_tail_and_garbage_are_not_replayed() {
        let dir = tmpdir("torn");
        let path = dir.join("h:1.asynclog");
        let long = vec![b'x'; 300];
        let mut text = b"a\nbad key\n\x01\n".to_vec();
        text.extend_from_slice(&long);
        text.extend_from_slice(b"\nb\npartial");
        fs::write(&path, &text).unwrap();
        let mut s = Spool::open(&path, 1 << 20).unwrap();
        assert_eq!(keys(&s), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(fs::read(&path).unwrap(), b"a\nb\n");
        push(&mut s, b"c");
        assert_eq!(fs::read(&path).unwrap(), b"a\nb\nc\n");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn full_spool_drops_oldest_and_counts() {
        let (dir, mut s) = full("full");
        let path = s.path().to_owned();
        let dropped = push(&mut s, b"key000100");
        assert!(dropped > 0);
        assert_eq!(s.dropped(), dropped);
        assert!(s.bytes() <= 750);
        let k = keys(&s);
        assert_eq!(k.last().unwrap(), b"key000100");
        assert_eq!(k[0], format!("key{:06}", dropped).as_bytes());
        drop(s);
        let s = Spool::open(&path, 1000).unwrap();
        assert_eq!(keys(&s), k);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ack_after_drop_skips_what_left() {
        let (dir, mut s) = full("race");
        let (seq, batch) = s.oldest(10);
        let dropped = push(&mut s, b"key000100");
        assert!(dropped > 10);
        let before = keys(&s);
        s.ack(seq, batch.len()).unwrap();
        assert_eq!(keys(&s), before, "entries newer than the batch stay");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Any byte string decodes to valid keys only, and every whole valid line survives.
    #[test]
    fn decode_never_yields_garbage() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        for _ in 0..2000 {
            let mut bytes = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 64) as usize;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(match x % 5 {
                    0 => b'\n',
                    1 => b' ',
                    _ => b'a' + (x % 26) as u8,
                });
            }
            let (keys, clean) = decode(&bytes);
            assert!(keys.iter().all(|k| valid_key(k)));
            let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let expect: Vec<Vec<u8>> = bytes[..whole]
                .split(|&b| b == b'\n')
                .filter(|l| valid_key(l))
                .map(<[u8]>::to_vec)
                .collect();
            assert_eq!(keys, expect);
            if clean {
                let mut again = Vec::new();
                for k in &keys {
                    again.extend_from_slice(k);
                    again.push(b'\n');
                }
                let stripped: Vec<u8> = bytes
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .flat_map(|l| l.iter().copied().chain([b'\n']))
                    .collect();
                assert_eq!(again, stripped);
            }
        }
    }

    /// The invalidator's use: batches appended and synced, everything replayed then acked.
    #[test]
    fn append_all_reopen_replay_all() {
        let dir = tmpdir("batches");
        let path = dir.join("0-h_1.keys");
        let mut s = Spool::open(&path, UNBOUNDED).unwrap();
        assert!(s.is_empty());
        assert_eq!(s.append_all(&[b"a", b"b"]).unwrap(), 0);
        s.append_all(&[b"c"]).unwrap();
        assert_eq!(s.syncs(), 2);
        drop(s);
        let mut s = Spool::open(&path, UNBOUNDED).unwrap();
        let (seq, all) = s.oldest(usize::MAX);
        assert_eq!(all, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        s.ack(seq, all.len()).unwrap();
        assert!(s.is_empty());
        assert_eq!(fs::read(&path).unwrap(), b"");
        s.append_all(&[b"d"]).unwrap();
        assert_eq!(keys(&s), [b"d".to_vec()]);
        assert_eq!(fs::read(&path).unwrap(), b"d\n");
        fs::remove_dir_all(&dir).unwrap();
    }
}
