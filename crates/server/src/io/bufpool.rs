//! A worker thread's pool of read buffers.
//!
//! A connection holds a buffer only while it has a partial request; otherwise the buffer goes
//! back here, so thousands of idle connections cost no buffer memory (Facebook's per-thread pooling).

/// Free buffers of one worker thread. Not shared: each worker owns its pool.
pub struct BufPool {
    free: Vec<Vec<u8>>,
    /// Buffers that grew for a large value; a few are kept so large requests do not pay
    /// an allocation (and page faults) each time.
    large: Vec<Vec<u8>>,
    large_bytes: usize,
    buf_size: usize,
    max_free: usize,
    /// Whether buffers were asked for since the last `trim_idle`.
    took: bool,
    took_large: bool,
}

/// Bytes of large buffers kept per thread, and the largest buffer kept (bigger ones are freed).
const MAX_LARGE_TOTAL: usize = 8 << 20;
const MAX_LARGE_BYTES: usize = 2 << 20;
/// Free buffers kept by a thread that took none for a second.
const IDLE_FREE: usize = 4;

impl BufPool {
    pub fn new(buf_size: usize, max_free: usize) -> Self {
        BufPool {
            free: Vec::new(),
            large: Vec::new(),
            large_bytes: 0,
            buf_size,
            max_free,
            took: false,
            took_large: false,
        }
    }

    /// The capacity of the buffers `take` hands out.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// An empty buffer with at least `buf_size` capacity.
    pub fn take(&mut self) -> Vec<u8> {
        self.took = true;
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.buf_size))
    }

    /// An empty buffer with at least `size` capacity: a kept large one when one fits.
    pub fn take_large(&mut self, size: usize) -> Option<Vec<u8>> {
        self.took_large = true;
        let i = self.large.iter().position(|b| b.capacity() >= size)?;
        let buf = self.large.swap_remove(i);
        self.large_bytes -= buf.capacity();
        Some(buf)
    }

    /// Returns a buffer. Very large buffers are freed rather than kept, so one huge request
    /// does not pin memory forever; so are ones smaller than `buf_size` (a small reply's own
    /// buffer), which `take` could not hand out.
    pub fn give(&mut self, mut buf: Vec<u8>) {
        let cap = buf.capacity();
        buf.clear();
        if cap < self.buf_size {
            return;
        }
        if cap <= self.buf_size * 4 {
            if self.free.len() < self.max_free {
                self.free.push(buf);
            }
        } else if cap <= MAX_LARGE_BYTES && self.large_bytes + cap <= MAX_LARGE_TOTAL {
            self.large_bytes += cap;
            self.large.push(buf);
        }
    }

    /// Called about once a second: the buffers of a burst that is over go back to the system
    /// (all large ones, and the free ones past `IDLE_FREE`) rather than staying resident.
    pub fn trim_idle(&mut self) {
        if !std::mem::take(&mut self.took_large) {
            self.large = Vec::new();
            self.large_bytes = 0;
        }
        if !std::mem::take(&mut self.took) {
            self.free.truncate(IDLE_FREE);
            self.free.shrink_to(IDLE_FREE);
        }
    }

    #[cfg(test)]
    pub fn free_count(&self) -> usize {
        self.free.len() + self.large.len()
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
        p.give(Vec::with_capacity(4 << 20));
        assert_eq!(p.free_count(), 0);
        p.give(Vec::with_capacity(100));
        assert_eq!(p.free_count(), 0);
        p.give(b);
        p.give(Vec::with_capacity(1024));
        p.give(Vec::with_capacity(1024));
        assert_eq!(p.free_count(), 2);
    }

    #[test]
    fn keeps_a_few_large_buffers_for_large_values() {
        let mut p = BufPool::new(1024, 2);
        assert!(p.take_large(100_000).is_none());
        p.give(Vec::with_capacity(200_000));
        assert!(p.take_large(300_000).is_none());
        let b = p.take_large(150_000).expect("kept");
        assert!(b.capacity() >= 200_000 && b.is_empty());
        for _ in 0..200 {
            p.give(Vec::with_capacity(100_000));
        }
        assert_eq!(p.free_count(), MAX_LARGE_TOTAL / 100_000);
    }

    #[test]
    fn a_second_without_takes_gives_back_what_a_burst_left() {
        let mut p = BufPool::new(1024, 64);
        let burst: Vec<Vec<u8>> = (0..32).map(|_| p.take()).collect();
        assert!(p.take_large(100_000).is_none());
        burst.into_iter().for_each(|b| p.give(b));
        p.give(Vec::with_capacity(200_000));
        // The burst's own second keeps them.
        p.trim_idle();
        assert_eq!(p.free_count(), 33);
        // Still in use: kept.
        let b = p.take();
        assert!(p.take_large(150_000).is_some());
        p.give(b);
        p.trim_idle();
        assert_eq!(p.free_count(), 32);
        // A quiet second: the large ones go, and the free ones but a few.
        p.trim_idle();
        assert_eq!(p.free_count(), IDLE_FREE);
        assert_eq!(p.large_bytes, 0);
    }
}
