//! The flash space as files end to end (`-o ext_path=PATH:SIZE`, repeatable): each file is
//! created if needed, sized, and locked so a second server cannot use it at the same time.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use super::options::FlashPath;

struct Part {
    file: File,
    path: String,
    start: u64,
    len: u64,
    inode: (u64, u64),
}

/// The files, each a whole number of pages long.
pub struct Files {
    parts: Vec<Part>,
    size: u64,
}

impl Files {
    /// Opens (creating) every path at its size rounded down to whole pages. Refused with a
    /// message naming the path: one that cannot be created, is locked by another server, or
    /// needs more than the free space of its file system.
    pub fn open(paths: &[FlashPath], page_size: u64) -> Result<Files, String> {
        let mut parts = Vec::new();
        let mut start = 0;
        for p in paths {
            let len = p.size / page_size * page_size;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p.path)
                .map_err(|e| format!("ext_path {}: cannot open: {e}", p.path))?;
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return Err(format!(
                    "ext_path {}: in use by another server ({})",
                    p.path,
                    io::Error::last_os_error()
                ));
            }
            let meta = file
                .metadata()
                .map_err(|e| format!("ext_path {}: {e}", p.path))?;
            let have = meta.blocks() * 512;
            let free = free_bytes(&file).map_err(|e| format!("ext_path {}: {e}", p.path))?;
            if len > have + free {
                return Err(format!(
                    "ext_path {}: {} bytes asked for, only {} free on its file system",
                    p.path,
                    len,
                    have + free
                ));
            }
            file.set_len(len)
                .map_err(|e| format!("ext_path {}: cannot size to {len} bytes: {e}", p.path))?;
            parts.push(Part {
                file,
                path: p.path.clone(),
                start,
                len,
                inode: (meta.dev(), meta.ino()),
            });
            start += len;
        }
        Ok(Files { parts, size: start })
    }

    fn part(&self, off: u64, len: usize) -> io::Result<(&Part, u64)> {
        let i = self.parts.partition_point(|p| p.start + p.len <= off);
        match self.parts.get(i) {
            Some(p) if off + len as u64 <= p.start + p.len => Ok((p, off - p.start)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "flash range crosses a file end",
            )),
        }
    }

    /// What to check that the files are still where they were opened.
    pub fn watch(&self) -> Watch {
        Watch(
            self.parts
                .iter()
                .map(|p| (p.path.clone(), p.inode))
                .collect(),
        )
    }
}

/// The files' paths and identities, checked by the maintenance thread.
pub struct Watch(Vec<(String, (u64, u64))>);

impl Watch {
    /// A file that is no longer at its path (removed or replaced): its path, if any.
    pub fn missing(&self) -> Option<&str> {
        self.0.iter().find_map(|(path, inode)| {
            let here = std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
            (here.ok().as_ref() != Some(inode)).then_some(path.as_str())
        })
    }
}

fn free_bytes(f: &File) -> io::Result<u64> {
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs fills `st` for a valid descriptor.
    if unsafe { libc::fstatvfs(f.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

impl store::Device for Files {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let (p, at) = self.part(off, buf.len())?;
        p.file.read_exact_at(buf, at)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let (p, at) = self.part(off, buf.len())?;
        p.file.write_all_at(buf, at)
    }
    fn read_at_nowait(&self, buf: &mut [u8], off: u64) -> io::Result<bool> {
        let (p, at) = self.part(off, buf.len())?;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: one iovec over `buf`, valid for the call; RWF_NOWAIT fails with EAGAIN
        // rather than wait for the disk.
        let n = unsafe {
            libc::preadv2(
                p.file.as_raw_fd(),
                &iov,
                1,
                at as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        if n == buf.len() as isize {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Not (all) in the page cache, or a kernel or file system without RWF_NOWAIT.
            _ if n >= 0 => Ok(false),
            Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) => Ok(false),
            _ => Err(e),
        }
    }
    fn size(&self) -> u64 {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::Device;

    fn path(dir: &std::path::Path, name: &str, size: u64) -> FlashPath {
        FlashPath {
            path: dir.join(name).to_string_lossy().into_owned(),
            size,
        }
    }

    #[test]
    fn files_join_end_to_end_and_are_locked() {
        let dir = std::env::temp_dir().join(format!("memfleet-flash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths = [path(&dir, "a", 3 << 20), path(&dir, "b", (2 << 20) + 5)];
        let f = Files::open(&paths, 1 << 20).unwrap();
        assert_eq!(f.size(), 5 << 20);
        f.write_at(b"hello", (3 << 20) + 10).unwrap();
        let mut buf = [0u8; 5];
        f.read_at(&mut buf, (3 << 20) + 10).unwrap();
        assert_eq!(&buf, b"hello");
        // Just written, so in the page cache: read without waiting.
        buf = [0; 5];
        assert!(f.read_at_nowait(&mut buf, (3 << 20) + 10).unwrap());
        assert_eq!(&buf, b"hello");
        assert!(f.read_at(&mut buf, (3 << 20) - 2).is_err());
        let e = Files::open(&paths[..1], 1 << 20).err().unwrap();
        assert!(e.contains("in use") && e.contains("/a"), "{e}");
        let w = f.watch();
        assert!(w.missing().is_none());
        std::fs::remove_file(&paths[1].path).unwrap();
        assert_eq!(w.missing(), Some(paths[1].path.as_str()));
        let e = Files::open(&[path(&dir, "huge", 1 << 60)], 1 << 20)
            .err()
            .unwrap();
        assert!(e.contains("free"), "{e}");
        let e = Files::open(&[path(&dir.join("no/such"), "x", 1 << 20)], 1 << 20)
            .err()
            .unwrap();
        assert!(e.contains("cannot open"), "{e}");
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
