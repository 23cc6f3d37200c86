//! What the connection does after a request: go on, close, or write replies first.

/// What the connection does after a request.
pub enum Flow {
    Continue,
    Close,
    /// Replies must be written before the request goes on (see `retrieve`).
    Paused(Paused),
    /// The connection became a watcher (`watch`) or a near-cache listener (`track listen`):
    /// requests after it are not run.
    Watch,
    /// `track <id>`/`track off`: the connection's reads are tracked for this listener from
    /// the next request on.
    Track(Option<std::sync::Arc<crate::tracking::Listener>>),
}

/// A get or a key dump that stopped part-way.
pub struct Paused {
    /// The key (a dump: the store cursor) to resume at; None when the request is complete.
    pub next_key: Option<usize>,
    /// A large value to write after the replies in `out`, then the bytes that follow it.
    pub value: Option<(store::PinnedValue, &'static [u8])>,
}
