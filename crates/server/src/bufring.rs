//! A provided-buffer ring: receive buffers the kernel picks from as data arrives, so a
//! multishot receive needs no buffer per connection (io_uring's IORING_REGISTER_PBUF_RING).
//!
//! The ring is an array of (address, length, id) entries shared with the kernel; the kernel
//! consumes from its head and we hand buffers back by writing at the tail and publishing
//! the new tail.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering::Release};

use io_uring::types::BufRingEntry;

/// The kernel maps the ring by pages: its address must be page aligned.
const RING_ALIGN: usize = 4096;

pub struct BufRing {
    ring: NonNull<BufRingEntry>,
    ring_layout: Layout,
    data: NonNull<u8>,
    data_layout: Layout,
    count: u16,
    size: usize,
    /// Our copy of the tail: entries before it are the kernel's to use.
    tail: u16,
}

impl BufRing {
    /// `count` buffers (a power of two) of `size` bytes each, all given to the ring.
    pub fn new(count: u16, size: usize) -> BufRing {
        assert!(count.is_power_of_two() && size > 0);
        let entry = std::mem::size_of::<BufRingEntry>();
        let ring_layout =
            Layout::from_size_align(entry * count as usize, RING_ALIGN).expect("ring layout");
        let data_layout = Layout::from_size_align(size * count as usize, 64).expect("layout");
        // SAFETY: both layouts have a non-zero size.
        let (ring, data) = unsafe { (alloc_zeroed(ring_layout), alloc_zeroed(data_layout)) };
        let (Some(ring), Some(data)) = (NonNull::new(ring.cast()), NonNull::new(data)) else {
            std::alloc::handle_alloc_error(ring_layout);
        };
        let mut r = BufRing {
            ring,
            ring_layout,
            data,
            data_layout,
            count,
            size,
            tail: 0,
        };
        for bid in 0..count {
            r.push(bid);
        }
        r.publish();
        r
    }

    /// Registers the ring as buffer group `bgid` of `submitter`'s ring.
    ///
    /// # Safety
    /// `self` must outlive the io_uring instance (or be unregistered first).
    pub unsafe fn register(
        &self,
        submitter: &io_uring::Submitter<'_>,
        bgid: u16,
    ) -> std::io::Result<()> {
        submitter.register_buf_ring_with_flags(self.ring.as_ptr() as u64, self.count, bgid, 0)
    }

    /// The first `len` bytes of buffer `bid`, which a completion handed to us.
    pub fn filled(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < self.count && len <= self.size);
        // SAFETY: in bounds of the data allocation; the kernel no longer writes to a buffer
        // it has completed into until we give it back (`recycle`, which takes &mut self).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(bid as usize * self.size), len) }
    }

    /// Gives buffer `bid` back to the kernel.
    pub fn recycle(&mut self, bid: u16) {
        assert!(bid < self.count);
        self.push(bid);
        self.publish();
    }

    fn push(&mut self, bid: u16) {
        let slot = (self.tail & (self.count - 1)) as usize;
        // SAFETY: slot < count, inside the ring allocation; the kernel reads entries only
        // up to the published tail, and this one is past it.
        let entry = unsafe { &mut *self.ring.as_ptr().add(slot) };
        // SAFETY: in bounds of the data allocation.
        let addr = unsafe { self.data.as_ptr().add(bid as usize * self.size) };
        entry.set_addr(addr as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field lies in the first entry, which we own; the kernel reads it
        // concurrently, so it is written atomically, after the entries (Release).
        unsafe {
            let tail = BufRingEntry::tail(self.ring.as_ptr()) as *const AtomicU16;
            (*tail).store(self.tail, Release);
        }
    }

    #[cfg(test)]
    fn entry(&self, slot: usize) -> (u64, u32, u16) {
        // SAFETY: test-only read of an entry inside the allocation.
        let e = unsafe { &*self.ring.as_ptr().add(slot) };
        (e.addr(), e.len(), e.bid())
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts.
        unsafe {
            dealloc(self.ring.as_ptr().cast(), self.ring_layout);
            dealloc(self.data.as_ptr(), self.data_layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::{cqueue, opcode, types, IoUring};
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn starts_full_and_recycles_at_the_tail() {
        let mut r = BufRing::new(4, 100);
        let base = r.data.as_ptr() as u64;
        for slot in 0..4 {
            assert_eq!(r.entry(slot), (base + 100 * slot as u64, 100, slot as u16));
        }
        r.recycle(2);
        assert_eq!(r.entry(0), (base + 200, 100, 2));
        // SAFETY: reading the published tail of our own ring.
        let tail = unsafe { *BufRingEntry::tail(r.ring.as_ptr()) };
        assert_eq!(tail, 5);
    }

    /// A multishot receive on a real socket pair fills ring buffers, and recycled buffers
    /// are used again.
    #[test]
    fn multishot_receive_fills_and_reuses_buffers() {
        let Ok(mut ring) = IoUring::new(8) else {
            return; // io_uring refused here (engine::probe makes serve fall back to epoll)
        };
        let mut bufs = BufRing::new(2, 8);
        // SAFETY: `bufs` is declared after `ring`... and dropped after it (explicit drop).
        unsafe { bufs.register(&ring.submitter(), 3) }.unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let recv = opcode::RecvMulti::new(types::Fd(b.as_raw_fd()), 3).build();
        // SAFETY: the entry refers only to the registered ring.
        unsafe { ring.submission().push(&recv.user_data(7)) }.unwrap();
        let mut got = Vec::new();
        for chunk in [&b"hello"[..], b"world!", b"again"] {
            a.write_all(chunk).unwrap();
            ring.submit_and_wait(1).unwrap();
            let cqe: cqueue::Entry = ring.completion().next().unwrap();
            assert_eq!(cqe.user_data(), 7);
            assert!(cqueue::more(cqe.flags()), "multishot stays armed");
            let bid = cqueue::buffer_select(cqe.flags()).unwrap();
            got.extend_from_slice(bufs.filled(bid, cqe.result() as usize));
            bufs.recycle(bid);
        }
        assert_eq!(got, b"helloworld!again");
        drop(ring);
        drop(bufs);
    }
}
