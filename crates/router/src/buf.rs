//! A read buffer: initialised bytes with a start and an end, so reads go straight into
//! it without zero-filling each time and consumed bytes are dropped by moving an index.

use std::io::{self, Read};

/// Read at least this much per `read` call when the buffer has room to spare.
const MIN_READ: usize = 16 * 1024;
/// An idle buffer larger than this is freed so a one-off big value does not pin memory
/// (client buffers go back to the worker pool when empty; this bounds backend buffers).
const KEEP_IDLE: usize = 1024 * 1024;
/// [`ReadBuf::reserve_total`] allocates at most twice this much (or twice what is
/// buffered): a client that sends the first line of a large set and stalls holds 128 KB,
/// not the size it announced (200 such clients held 763 MB with 4 MB values at 2 MB here).
const MAX_RESERVE_AHEAD: usize = 64 * 1024;

#[derive(Default)]
pub struct ReadBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    #[inline]
    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Drops `n` bytes from the front.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.data.len() > KEEP_IDLE {
                self.data = Vec::new();
            }
        }
    }

    /// The storage of an empty buffer, to put in a pool while the connection is idle.
    /// Only standard-size storage is handed out; anything else is simply dropped.
    pub fn take_storage(&mut self) -> Option<Vec<u8>> {
        if !self.is_empty() || self.data.is_empty() {
            return None;
        }
        let data = std::mem::take(&mut self.data);
        (data.len() == MIN_READ).then_some(data)
    }

    /// Gives an empty buffer pooled storage before a read.
    pub fn set_storage(&mut self, data: Vec<u8>) {
        if self.data.is_empty() {
            self.data = data;
            self.start = 0;
            self.end = 0;
        }
    }

    pub fn has_storage(&self) -> bool {
        !self.data.is_empty()
    }

    pub fn clear(&mut self) {
        self.consume(self.len());
    }

    /// Makes room for `total` bytes counted from the current start (a value whose size is
    /// announced), so the rest of it arrives with few reallocations. The room made ahead
    /// of the bytes actually received is capped: a 20-byte request announcing a 512 MB
    /// value must not make us allocate 512 MB; the buffer then grows as the bytes come.
    pub fn reserve_total(&mut self, total: usize) {
        if self.data.len() - self.start >= total {
            return;
        }
        self.compact();
        let total = total.min(self.end.max(MAX_RESERVE_AHEAD) * 2);
        if self.data.len() < total {
            self.data.resize(total, 0);
        }
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// One `read` into the free space, growing the buffer when it is nearly full.
    /// Returns the bytes read and whether the read filled all the space offered: a short
    /// read means the socket had nothing more, so an edge-triggered reader can stop
    /// without paying for a read that fails with `WouldBlock`.
    pub fn read_from(&mut self, src: &mut impl Read) -> io::Result<(usize, bool)> {
        if self.data.len() - self.end < MIN_READ {
            self.compact();
            if self.data.len() - self.end < MIN_READ {
                let want = (self.data.len() * 2).max(self.end + MIN_READ);
                self.data.resize(want, 0);
            }
        }
        let space = self.data.len() - self.end;
        let n = src.read(&mut self.data[self.end..])?;
        self.end += n;
        Ok((n, n == space))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_consumes_and_compacts() {
        let mut b = ReadBuf::default();
        let mut src: &[u8] = b"hello world";
        assert_eq!(b.read_from(&mut src).unwrap(), (11, false));
        assert_eq!(b.filled(), b"hello world");
        b.consume(6);
        assert_eq!(b.filled(), b"world");
        b.reserve_total(2_000_000);
        assert_eq!(b.filled(), b"world");
        let big = vec![7u8; 1_999_995];
        let mut src: &[u8] = &big;
        while !src.is_empty() {
            b.read_from(&mut src).unwrap();
        }
        assert_eq!(b.len(), 2_000_000);
        b.consume(2_000_000);
        assert!(b.is_empty());
        assert_eq!(b.data.len(), 0, "big idle buffer is freed");
        let mut src: &[u8] = b"set k 0 0 536870912\r\n";
        b.read_from(&mut src).unwrap();
        b.reserve_total(512 << 20);
        assert!(
            b.data.len() <= 2 * MAX_RESERVE_AHEAD,
            "an announced size is not trusted"
        );
        let mut b = ReadBuf::default();
        let mut src: &[u8] = b"x";
        b.read_from(&mut src).unwrap();
        assert!(b.take_storage().is_none(), "not while it holds data");
        b.consume(1);
        let storage = b.take_storage().expect("standard storage is pooled");
        assert!(!b.has_storage());
        let mut other = ReadBuf::default();
        other.set_storage(storage);
        let mut src: &[u8] = b"abc";
        assert_eq!(other.read_from(&mut src).unwrap(), (3, false));
        assert_eq!(other.filled(), b"abc");
    }
}
