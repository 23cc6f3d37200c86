//! What a reply framer answers, shared by the memcached (`response`) and RESP (`resp`) framers.

/// A RESP reply line longer than this without `\n` means the stream is not RESP (memcached
/// lines have a tighter bound, `response::MAX_LINE`).
pub const MAX_REPLY_LINE: usize = 64 * 1024;

/// What a framer found at the head of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The first reply is this many bytes long.
    Complete(usize),
    /// More bytes are needed; the total length of the buffer needed when known.
    Incomplete(Option<usize>),
    /// Not a reply of the protocol: the connection must be dropped.
    Invalid,
}
