//! What both event loops do with the flash reads the I/O threads hand back and with the
//! connections that waited for room to ask for them: one code path, so the loops agree.

use std::sync::Arc;
use std::time::Duration;

use crate::flash::reads::FlashWait;
use crate::shared::Shared;

/// The wait while connections wait for room to ask for flash reads: room is made by other
/// workers, which do not wake this one.
pub const STARVED_WAIT: Duration = Duration::from_millis(1);

/// A worker's connections as the flash hand-back sees them.
pub trait FlashConns {
    /// The worker's id and the server's state.
    fn flash_worker(&self) -> (usize, &Arc<Shared>);

    /// The flash wait of open connection `token`, if it has one.
    fn flash_wait(&mut self, token: usize) -> Option<&mut FlashWait>;

    /// Connection `token` is to run its request again.
    fn ready(&mut self, token: usize);

    /// Hands the flash reads made for this worker's connections to them: a connection whose
    /// reads are all back runs its request again.
    fn take_flash_reads(&mut self) {
        let (worker, shared) = self.flash_worker();
        if shared.flash_io.is_none() {
            return;
        }
        // Held apart from `self`, whose connections take the reads.
        let shared = shared.clone();
        let Some(io) = &shared.flash_io else {
            return;
        };
        for (to, read) in io.take_done(worker) {
            if io.deliver(self.flash_wait(to.token), to, read) {
                self.ready(to.token);
            }
        }
    }

    /// Whether connections wait for room to ask for flash reads.
    fn starved(&self) -> bool {
        let (worker, shared) = self.flash_worker();
        shared
            .flash_io
            .as_ref()
            .is_some_and(|io| io.has_starved(worker))
    }

    /// Runs again the connections that waited for room to ask for flash reads, once there
    /// is some: each asks again (and waits again if others took the room first).
    fn retry_starved(&mut self) {
        let (worker, shared) = self.flash_worker();
        if shared.flash_io.is_none() {
            return;
        }
        let shared = shared.clone();
        let Some(io) = &shared.flash_io else {
            return;
        };
        for to in io.room_for_starved(worker) {
            if io.end_starved(self.flash_wait(to.token), to) {
                self.ready(to.token);
            }
        }
    }
}
