//! A segment's memory. Ordinary segments belong to their shard alone. A large item's segment
//! is reference counted, so a reply can go on writing the item's value after the shard lock
//! is released, even if the item is replaced, deleted or evicted meanwhile: a get of a
//! 100 KB value then no longer holds its shard through a socket write of tens of
//! microseconds (memcached keeps a reference count on an item being sent for the same reason).
//!
//! What makes sharing sound: a pinned segment's value bytes are never written, and never
//! covered by a `&mut`. The shard writes a large segment only under its lock: whole, while
//! no pin exists (storing the item; `DerefMut` checks), and afterwards only the header through
//! `header_mut`. A rewrite of the value in place (incr/decr) asks `is_pinned` first and stores
//! a new item instead.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

pub enum SegBuf {
    Owned(Box<[u8]>),
    Shared(Arc<SharedBytes>),
}

impl SegBuf {
    /// A large segment's memory, which `pin` can share.
    pub fn shared(buf: Box<[u8]>) -> SegBuf {
        SegBuf::Shared(Arc::new(SharedBytes::new(buf)))
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, SegBuf::Shared(_))
    }

    /// `len` bytes at `off`, kept readable after the caller lets go of the shard. None for
    /// an ordinary segment, whose bytes move when it is compacted or reused.
    pub fn pin(&self, off: usize, len: usize) -> Option<PinnedValue> {
        match self {
            SegBuf::Owned(_) => None,
            SegBuf::Shared(bytes) => {
                assert!(off.checked_add(len).is_some_and(|end| end <= bytes.len));
                Some(PinnedValue {
                    bytes: Arc::clone(bytes),
                    off,
                    len,
                })
            }
        }
    }

    /// Whether a reply may be reading from this segment right now.
    pub fn is_pinned(&self) -> bool {
        matches!(self, SegBuf::Shared(b) if Arc::strong_count(b) > 1)
    }
}

impl Default for SegBuf {
    fn default() -> Self {
        SegBuf::Owned(Box::default())
    }
}

impl Deref for SegBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SegBuf::Owned(b) => b,
            // SAFETY: the pointer and length come from a live boxed slice (see SharedBytes).
            SegBuf::Shared(s) => unsafe { std::slice::from_raw_parts(s.ptr.as_ptr(), s.len) },
        }
    }
}

/// The whole buffer, for writing a new item or moving items. A shared segment must not be
/// pinned then (it panics): a pinned one is written only through `header_mut`.
impl DerefMut for SegBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            SegBuf::Owned(b) => b,
            SegBuf::Shared(s) => {
                let s = Arc::get_mut(s).expect("a pinned segment is written only in headers");
                // SAFETY: the memory of a live box, and no other owner can reach it.
                unsafe { std::slice::from_raw_parts_mut(s.ptr.as_ptr(), s.len) }
            }
        }
    }
}

impl SegBuf {
    /// The header and key of the item at `off`, whose value starts at `value`: the bytes that
    /// change while a reply may be reading the value (fetched bit, access time, exptime, cas).
    pub fn header_mut(&mut self, off: usize, value: usize) -> &mut [u8] {
        match self {
            SegBuf::Owned(b) => &mut b[off..value],
            SegBuf::Shared(s) => {
                assert!(off <= value && value <= s.len);
                // SAFETY: in bounds; `&mut SegBuf` means the shard lock is held, so no other
                // thread writes here, and pins only read value bytes, which start at `value`.
                unsafe { std::slice::from_raw_parts_mut(s.ptr.as_ptr().add(off), value - off) }
            }
        }
    }
}

/// The memory of a large segment: a boxed slice taken apart so that several owners can reach
/// it, and freed when the last of them (the segment or a reply) drops it.
pub struct SharedBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: SharedBytes owns its allocation like a Box<[u8]>; the access rules are those of
// SegBuf and PinnedValue above.
unsafe impl Send for SharedBytes {}
// SAFETY: as for Send: shared readers only read bytes that nobody writes meanwhile.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    fn new(buf: Box<[u8]>) -> SharedBytes {
        let len = buf.len();
        let ptr = NonNull::from(Box::leak(buf)).cast::<u8>();
        SharedBytes { ptr, len }
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: ptr and len are those of the box leaked in `new`, and this is the last owner.
        drop(unsafe { Box::from_raw(raw) });
    }
}

/// Where a read item's value lives, so that the reader may pin it.
#[derive(Clone, Copy)]
pub struct ValueAt<'a> {
    /// None: the value is in a buffer of the reader's (read from flash), nothing to pin.
    seg: Option<&'a SegBuf>,
    off: usize,
    len: usize,
}

impl<'a> ValueAt<'a> {
    pub fn new(seg: &'a SegBuf, off: usize, len: usize) -> ValueAt<'a> {
        ValueAt {
            seg: Some(seg),
            off,
            len,
        }
    }

    /// A value that is not in a segment.
    pub fn elsewhere() -> ValueAt<'a> {
        ValueAt {
            seg: None,
            off: 0,
            len: 0,
        }
    }

    pub fn pin(&self) -> Option<PinnedValue> {
        self.seg?.pin(self.off, self.len)
    }
}

impl std::fmt::Debug for ValueAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValueAt({}..+{})", self.off, self.len)
    }
}

/// A large item's value, readable without the shard lock.
pub struct PinnedValue {
    bytes: Arc<SharedBytes>,
    off: usize,
    len: usize,
}

impl PinnedValue {
    /// The value's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `pin` checked the range; the Arc keeps the memory alive, and the shard does
        // not write these bytes while this pin exists.
        unsafe { std::slice::from_raw_parts(self.bytes.ptr.as_ptr().add(self.off), self.len) }
    }
}

impl std::fmt::Debug for PinnedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedValue({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_outlives_the_segment_and_counts_as_a_reader() {
        let mut seg = SegBuf::shared(vec![7u8; 100].into_boxed_slice());
        assert!(!seg.is_pinned());
        seg[10..20].copy_from_slice(&[1; 10]);
        let pin = seg.pin(10, 10).expect("a shared segment pins");
        assert!(seg.is_pinned());
        drop(seg);
        assert_eq!(pin.bytes(), &[1; 10]);
    }

    #[test]
    fn owned_segments_do_not_pin() {
        let seg = SegBuf::Owned(vec![0u8; 8].into_boxed_slice());
        assert!(seg.pin(0, 8).is_none());
        assert!(!seg.is_pinned());
        assert!(!seg.is_shared());
        assert!(SegBuf::shared(Box::default()).is_shared());
    }

    #[test]
    #[should_panic]
    fn a_pin_past_the_end_is_refused() {
        let seg = SegBuf::shared(vec![0u8; 8].into_boxed_slice());
        let _ = seg.pin(4, 5);
    }
}
