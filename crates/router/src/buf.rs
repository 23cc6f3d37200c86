//! A read buffer: initialised bytes with a start and an end, so reads go straight into
//! it without zero-filling each time and consumed bytes are dropped by moving an index.

use std::io::{self, Read};

/// Read at least this much per `read` call when the buffer has room to spare.
const MIN_READ: usize = 16 * 1024;
/// An idle buffer larger than this is freed so a one-off big value does not pin memory.
const KEEP_IDLE: usize = 64 * 1024;

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

    pub fn clear(&mut self) {
        self.consume(self.len());
    }

    /// Makes room for `total` bytes counted from the current start (a value whose size is
    /// announced), so the rest of it arrives without reallocations.
    pub fn reserve_total(&mut self, total: usize) {
        if self.data.len() - self.start >= total {
            return;
        }
        self.compact();
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
    pub fn read_from(&mut self, src: &mut impl Read) -> io::Result<usize> {
        if self.data.len() - self.end < MIN_READ {
            self.compact();
            if self.data.len() - self.end < MIN_READ {
                let want = (self.data.len() * 2).max(self.end + MIN_READ);
                self.data.resize(want, 0);
            }
        }
        let n = src.read(&mut self.data[self.end..])?;
        self.end += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_consumes_and_compacts() {
        let mut b = ReadBuf::default();
        let mut src: &[u8] = b"hello world";
        assert_eq!(b.read_from(&mut src).unwrap(), 11);
        assert_eq!(b.filled(), b"hello world");
        b.consume(6);
        assert_eq!(b.filled(), b"world");
        b.reserve_total(100_000);
        assert_eq!(b.filled(), b"world");
        let big = vec![7u8; 99_995];
        let mut src: &[u8] = &big;
        while !src.is_empty() {
            b.read_from(&mut src).unwrap();
        }
        assert_eq!(b.len(), 100_000);
        b.consume(100_000);
        assert!(b.is_empty());
        assert_eq!(b.data.len(), 0, "big idle buffer is freed");
    }
}
