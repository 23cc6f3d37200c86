//! A Redis client's open `MULTI`: the commands queued for `EXEC` and where their keys live
//! (what `transaction` fills in and sends).

/// Where every key of a transaction lives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Slot(u16),
    Server(usize),
}

/// A client's open transaction.
#[derive(Default)]
pub(super) struct Transaction {
    pub(super) cmds: Vec<Vec<u8>>,
    pub(super) bytes: usize,
    pub(super) place: Option<Place>,
    /// A command was refused while queuing: `EXEC` answers `EXECABORT`, as Redis does.
    pub(super) failed: bool,
}
