//! A provided-buffer ring: receive buffers the kernel picks from as data arrives, so a
//! multishot receive needs no buffer per connection (io_uring's IORING_REGISTER_PBUF_RING).
//!
//! The ring is an array of (address, length, id) entries shared with the kernel; the kernel
//! consumes from its head and we hand buffers back by writing at the tail and publishing
//! the new tail.
//!
//! Registered incremental (IOU_PBUF_RING_INC, Linux 6.12+), the kernel takes from a buffer
//! only the bytes a receive brings and leaves the rest at the head for the next receive,
//! whichever socket it is on: a few large buffers then hold many small receives. Without it
//! every receive uses up a whole buffer, so a turn in which more connections have bytes than
//! the ring has buffers ends the surplus receives with ENOBUFS, each to be armed again.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering::Release};

use io_uring::cqueue;
use io_uring::types::{BufRingEntry, IOU_PBUF_RING_INC};

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
    /// Registered incremental: buffers are shared by receives (see the module comment).
    incremental: bool,
    /// Incremental only: bytes of each buffer already handed to us; the next receive into
    /// it starts there.
    used: Vec<u32>,
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
            incremental: false,
            used: vec![0; count as usize],
        };
        for bid in 0..count {
            r.push(bid);
        }
        r.publish();
        r
    }

    /// Registers the ring as buffer group `bgid` of `submitter`'s ring, incremental or not
    /// (kernels before 6.12 refuse incremental).
    ///
    /// # Safety
    /// `self` must outlive the io_uring instance (or be unregistered first).
    pub unsafe fn register(
        &mut self,
        submitter: &io_uring::Submitter<'_>,
        bgid: u16,
        incremental: bool,
    ) -> std::io::Result<()> {
        let flags = if incremental {
            IOU_PBUF_RING_INC as u16
        } else {
            0
        };
        submitter.register_buf_ring_with_flags(
            self.ring.as_ptr() as u64,
            self.count,
            bgid,
            flags,
        )?;
        self.incremental = incremental;
        Ok(())
    }

    /// The `len` bytes a completion brought into buffer `bid`.
    pub fn filled(&self, bid: u16, len: usize) -> &[u8] {
        let from = self
            .used
            .get(bid as usize)
            .map_or(self.size, |&u| u as usize);
        assert!(from + len <= self.size);
        // SAFETY: in bounds of the data allocation; the kernel no longer writes to the bytes
        // it has completed into until the buffer is given back (`release`, &mut self).
        unsafe {
            let start = self.data.as_ptr().add(bid as usize * self.size + from);
            std::slice::from_raw_parts(start, len)
        }
    }

    /// Done with the `len` bytes a completion with `flags` brought into buffer `bid`: the
    /// buffer goes back to the kernel unless, incremental, the kernel still fills it
    /// (IORING_CQE_F_BUF_MORE).
    pub fn release(&mut self, bid: u16, len: usize, flags: u32) {
        assert!(bid < self.count);
        if self.incremental && cqueue::buffer_more(flags) {
            self.used[bid as usize] += len as u32;
            return;
        }
        self.used[bid as usize] = 0;
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
        r.release(2, 100, 0);
        assert_eq!(r.entry(0), (base + 200, 100, 2));
        // SAFETY: reading the published tail of our own ring.
        let tail = unsafe { *BufRingEntry::tail(r.ring.as_ptr()) };
        assert_eq!(tail, 5);
    }

    /// A multishot receive on a real socket pair fills ring buffers, and recycled buffers
    /// are used again.
    #[test]
    #[cfg_attr(io_uring_refused, ignore = "this kernel refuses io_uring")]
    fn multishot_receive_fills_and_reuses_buffers() {
        let mut ring = IoUring::new(8).unwrap();
        let mut bufs = BufRing::new(2, 8);
        // SAFETY: `bufs` is declared after `ring`... and dropped after it (explicit drop).
        unsafe { bufs.register(&ring.submitter(), 3, false) }.unwrap();
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
            bufs.release(bid, cqe.result() as usize, cqe.flags());
        }
        assert_eq!(got, b"helloworld!again");
        drop(ring);
        drop(bufs);
    }

    /// Incremental: receives on two sockets share one buffer, each completion's bytes
    /// follow the previous one's, and the buffer returns once the kernel has filled it.
    #[test]
    #[cfg_attr(io_uring_refused, ignore = "this kernel refuses io_uring")]
    #[cfg_attr(
        io_uring_whole_buffers,
        ignore = "a kernel before 6.12: whole buffers per receive (the test above)"
    )]
    fn incremental_receives_share_a_buffer() {
        let mut ring = IoUring::new(8).unwrap();
        let mut bufs = BufRing::new(2, 16);
        // SAFETY: `bufs` is dropped after `ring` (explicit drops below).
        unsafe { bufs.register(&ring.submitter(), 4, true) }.unwrap();
        let pairs: Vec<_> = (0..2)
            .map(|_| std::os::unix::net::UnixStream::pair().unwrap())
            .collect();
        for (i, (_, b)) in pairs.iter().enumerate() {
            let recv = opcode::RecvMulti::new(types::Fd(b.as_raw_fd()), 4).build();
            // SAFETY: the entry refers only to the registered ring.
            unsafe { ring.submission().push(&recv.user_data(i as u64)) }.unwrap();
        }
        ring.submit().unwrap();
        let mut got = [Vec::new(), Vec::new()];
        // (socket, buffer, more to come in that buffer) of each completion.
        let mut seen = Vec::new();
        let chunks = [
            (0, &b"get a\r\n"[..]),
            (1, b"get bb\r\n"),
            (0, b"get ccc\r\n"),
        ];
        for (i, chunk) in chunks {
            let mut a = &pairs[i].0;
            a.write_all(chunk).unwrap();
            let want = got[i].len() + chunk.len();
            while got[i].len() < want {
                ring.submit_and_wait(1).unwrap();
                let cqes: Vec<cqueue::Entry> = ring.completion().collect();
                for cqe in cqes {
                    let bid = cqueue::buffer_select(cqe.flags()).unwrap();
                    let n = cqe.result() as usize;
                    let s = cqe.user_data() as usize;
                    got[s].extend_from_slice(bufs.filled(bid, n));
                    bufs.release(bid, n, cqe.flags());
                    seen.push((s, bid, cqueue::buffer_more(cqe.flags())));
                }
            }
        }
        assert_eq!(got[0], b"get a\r\nget ccc\r\n");
        assert_eq!(got[1], b"get bb\r\n");
        // 7 + 8 bytes share buffer 0; the third receive takes its last byte, which hands it
        // back, and goes on in buffer 1.
        assert_eq!(
            seen,
            [(0, 0, true), (1, 0, true), (0, 0, false), (0, 1, true)]
        );
        drop(ring);
        drop(bufs);
    }
}
