//! Where a backend reply goes, the one type the client, backend and merged-get modules all
//! name (kept apart so none of them imports another for it).

/// Where a backend reply goes: request `seq` of client `client` (slab index, and `gen` to
/// tell a reused index from the client that sent the request), part `frag` of it when the
/// request was split over servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyTo {
    pub client: u32,
    pub gen: u32,
    pub seq: u64,
    pub frag: u16,
}

impl ReplyTo {
    /// The AUTH / SELECT a Redis backend connection starts with: no client waits for it.
    pub(super) const HANDSHAKE: ReplyTo = ReplyTo {
        client: u32::MAX,
        gen: 0,
        seq: 0,
        frag: 0,
    };

    /// A command whose reply no client waits for: the `ASKING` before a command a Redis
    /// Cluster redirected with `ASK`, and the `MULTI` and queued commands before an `EXEC`.
    pub(super) const DISCARD: ReplyTo = ReplyTo {
        client: u32::MAX - 2,
        gen: 0,
        seq: 0,
        frag: 0,
    };
}

/// `ReplyTo::client` of a send an mcrouter execution made (`seq`: its slab index << 32 |
/// node; see `worker/mcrouter.rs`).
pub(super) const EXEC_CLIENT: u32 = u32::MAX - 1;
