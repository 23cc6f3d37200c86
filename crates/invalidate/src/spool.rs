//! A target's durable backlog: keys whose deletes could not be acknowledged, one per line,
//! appended and fsync'ed before the transactions they belong to are confirmed to
//! PostgreSQL, and replayed in order once the target answers again.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub struct Spool {
    path: PathBuf,
    file: File,
    len: u64,
}

impl Spool {
    /// Opens (creating if needed) the spool named `name` in `dir`. A last line without its
    /// newline is a write cut short by a crash; its transaction was never confirmed, so it
    /// will come again from the slot, and the fragment is dropped.
    pub fn open(dir: &Path, name: &str) -> io::Result<Spool> {
        fs::create_dir_all(dir)?;
        let path = dir.join(format!("{name}.keys"));
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut text = Vec::new();
        file.read_to_end(&mut text)?;
        let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < text.len() {
            file.set_len(whole as u64)?;
            file.sync_data()?;
        }
        Ok(Spool {
            path,
            file,
            len: whole as u64,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the keys and waits until they are on disk.
    pub fn append(&mut self, keys: &[&[u8]]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(keys.iter().map(|k| k.len() + 1).sum());
        for k in keys {
            buf.extend_from_slice(k);
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Every spooled key, oldest first.
    pub fn read_all(&mut self) -> io::Result<Vec<Vec<u8>>> {
        let mut text = Vec::with_capacity(self.len as usize);
        self.file.seek(SeekFrom::Start(0))?;
        (&mut self.file).take(self.len).read_to_end(&mut text)?;
        Ok(text
            .split(|&b| b == b'\n')
            .filter(|k| !k.is_empty())
            .map(<[u8]>::to_vec)
            .collect())
    }

    /// Empties the spool once everything in it was acknowledged.
    pub fn clear(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_data()?;
        self.len = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("memfleet-spool-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn append_reopen_replay_clear() {
        let dir = tmpdir("basic");
        let mut s = Spool::open(&dir, "t").unwrap();
        assert!(s.is_empty());
        s.append(&[b"a", b"b"]).unwrap();
        s.append(&[b"c"]).unwrap();
        drop(s);
        let mut s = Spool::open(&dir, "t").unwrap();
        assert!(!s.is_empty());
        assert_eq!(
            s.read_all().unwrap(),
            [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        s.clear().unwrap();
        assert!(s.is_empty());
        s.append(&[b"d"]).unwrap();
        assert_eq!(s.read_all().unwrap(), [b"d".to_vec()]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn torn_tail_is_dropped() {
        let dir = tmpdir("torn");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("t.keys"), b"a\nb\npartial").unwrap();
        let mut s = Spool::open(&dir, "t").unwrap();
        assert_eq!(s.read_all().unwrap(), [b"a".to_vec(), b"b".to_vec()]);
        s.append(&[b"c"]).unwrap();
        assert_eq!(fs::read(dir.join("t.keys")).unwrap(), b"a\nb\nc\n");
        fs::remove_dir_all(&dir).unwrap();
    }
}
