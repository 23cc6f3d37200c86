//! A server connection's `max_outstanding` limit and the requests waiting under it (what
//! `outstanding` queues and releases).

use proto::response::Expect;

use super::reply_to::ReplyTo;
use crate::fair_queue::FairQueue;

/// A connection's limit and the requests waiting for room under it.
pub(super) struct Limit {
    pub(super) max: u32,
    /// Keyed by the sending client (`client`, `gen`).
    pub(super) waiting: FairQueue<(u32, u32), Held>,
}

impl Limit {
    /// The limit for a connection of a pool with `max_outstanding` `max` (0: none).
    pub(super) fn new(max: u32) -> Option<Box<Limit>> {
        (max > 0).then(|| {
            Box::new(Limit {
                max,
                waiting: FairQueue::default(),
            })
        })
    }

    /// Whether a request must wait, the connection holding `queued` requests: also when
    /// others wait already, so none overtakes a request of its own client.
    #[inline]
    pub(super) fn must_wait(&self, queued: u32) -> bool {
        queued >= self.max || !self.waiting.is_empty()
    }
}

/// How a waiting request is queued once it goes.
pub(super) enum HeldKind {
    Plain,
    /// A get whose items must follow its keys.
    Keyed,
    /// A plain get/gets that may merge into the connection's open get line.
    Get {
        cas: bool,
    },
}

/// A waiting request, its bytes copied (a client's buffer does not outlive the turn).
pub(super) struct Held {
    pub(super) to: ReplyTo,
    pub(super) expect: Expect,
    pub(super) bytes: Vec<u8>,
    pub(super) keys: Vec<Box<[u8]>>,
    pub(super) kind: HeldKind,
}

impl Held {
    pub(super) fn plain(parts: &[&[u8]], to: ReplyTo, expect: Expect) -> Held {
        Held {
            to,
            expect,
            bytes: parts.concat(),
            keys: Vec::new(),
            kind: HeldKind::Plain,
        }
    }

    pub(super) fn keyed<'k>(
        parts: &[&[u8]],
        to: ReplyTo,
        expect: Expect,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Held {
        Held {
            keys: keys.into_iter().map(Box::from).collect(),
            kind: HeldKind::Keyed,
            ..Held::plain(parts, to, expect)
        }
    }

    pub(super) fn get<'k>(cas: bool, keys: impl Iterator<Item = &'k [u8]>, to: ReplyTo) -> Held {
        Held {
            keys: keys.map(Box::from).collect(),
            kind: HeldKind::Get { cas },
            ..Held::plain(&[], to, Expect::Get)
        }
    }
}
