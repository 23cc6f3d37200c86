//! A worker thread's pool of read buffers.
//!
//! A connection holds a buffer only while it has a partial request; otherwise the buffer goes
//! back here, so thousands of idle connections cost no buffer memory (Facebook's per-thread pooling).

/// Free buffers of one worker thread. Not shared: each worker owns its pool.
pub struct BufPool {
    free: Vec<Vec<u8>>,
    buf_size: usize,
    max_free: usize,
}

impl BufPool {
    pub fn new(buf_size: usize, max_free: usize) -> Self {
        BufPool {
            free: Vec::new(),
            buf_size,
            max_free,
        }
    }

    /// An empty buffer with at least `buf_size` capacity.
    pub fn take(&mut self) -> Vec<u8> {
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.buf_size))
    }

    /// Returns a buffer. Oversized buffers (grown for a large value) are freed rather than kept,
    /// so one big request does not pin memory forever.
    pub fn give(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        if buf.capacity() > self.buf_size * 4 || self.free.len() >= self.max_free {
            return;
        }
        buf.clear();
        self.free.push(buf);
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_buffers_and_drops_oversized_ones() {
        let mut p = BufPool::new(1024, 2);
        let mut a = p.take();
        assert!(a.capacity() >= 1024);
        a.extend_from_slice(b"hello");
        let ptr = a.as_ptr();
        p.give(a);
        let b = p.take();
        assert!(b.is_empty());
        assert_eq!(b.as_ptr(), ptr);
        p.give(Vec::with_capacity(1 << 20));
        assert_eq!(p.free_count(), 0);
        p.give(b);
        p.give(Vec::with_capacity(1024));
        p.give(Vec::with_capacity(1024));
        assert_eq!(p.free_count(), 2);
    }
}
