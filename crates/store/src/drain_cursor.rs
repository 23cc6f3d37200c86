//! Where a full shard's item-by-item eviction (`drain`) has got to: kept by the shard, read
//! and moved by `drain`.

/// Segments past the oldest that a write may drain when the older ones hold only kept items.
pub(crate) const WINDOW: usize = 8;

/// Where draining has got to.
#[derive(Default)]
pub(crate) struct Drain {
    pub seg: u32,
    /// The segment's layout when `off` was saved: a compaction or reuse since restarts the
    /// walk.
    pub layout: u32,
    pub off: usize,
    /// Segments (with their layouts) walked to the end that still hold items the recycle
    /// keeps: the next writes drain the segments after them.
    pub walked: Vec<(u32, u32)>,
}
