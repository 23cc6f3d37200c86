//! When a busy worker steps off its CPU for a moment (both event loops).
//!
//! A worker that has found work at every wait for `BUSY_MAX` steps off its CPU for a moment,
//! if other threads compete for that CPU. Under steady load it would otherwise never block
//! and keep the CPU until the scheduler's tick preempts it, while the threads queued behind
//! it on that core (clients on the same machine, the other worker) wait: requests then see
//! multi-millisecond delays (epoll: p99 4.5 ms vs a 0.06 ms median with 64 connections on two
//! cores; io_uring: 3 of 8 workload-4 runs at a 4-8 ms p99, against 0.5 ms in the others).
//! Sleeping rather than sched_yield, which under foreign CPU load hands the core away for a
//! full slice each time.

use std::time::{Duration, Instant};

const BUSY_MAX: Duration = Duration::from_micros(300);
/// The CPU counts as contended this long after the worker was last preempted; on a core of
/// its own the worker never pauses.
const CONTENDED_FOR: Duration = Duration::from_secs(1);
/// A wait that took longer than this blocked for new events: the worker was idle (unless the
/// wait also does the worker's I/O, see `Busy::waited_working`).
const WAIT_BLOCKED: Duration = Duration::from_micros(20);

/// A worker's busy period and when it was last preempted.
pub(crate) struct Busy {
    since: Instant,
    seen_preempted: libc::c_long,
    last_preempted: Option<Instant>,
    /// Voluntary switches (sleeps) as of the last long wait of `waited_working`.
    seen_slept: libc::c_long,
}

impl Busy {
    pub fn new() -> Busy {
        let now = switches();
        Busy::at(Instant::now(), now)
    }

    fn at(now: Instant, (preempted, slept): (libc::c_long, libc::c_long)) -> Busy {
        Busy {
            since: now,
            seen_preempted: preempted,
            last_preempted: None,
            seen_slept: slept,
        }
    }

    /// Called before the worker waits for events: whether it should first step off its CPU
    /// (busy for `BUSY_MAX` on a contended CPU, and not `settled`: a worker serving only
    /// its own clients' connections, whose threads it is waiting for, see `placement`).
    pub fn should_pause(&mut self, settled: bool) -> bool {
        let now = Instant::now();
        now - self.since >= BUSY_MAX && self.check(now, switches().0, settled)
    }

    fn check(&mut self, now: Instant, preempted: libc::c_long, settled: bool) -> bool {
        if now - self.since < BUSY_MAX {
            return false;
        }
        self.since = now;
        if preempted != self.seen_preempted {
            self.seen_preempted = preempted;
            self.last_preempted = Some(now);
        }
        !settled && self.last_preempted.is_some_and(|t| now - t < CONTENDED_FOR)
    }

    /// Steps off the CPU for the shortest sleep the kernel grants (its timer slack, 50 µs by
    /// default); the busy period starts again after it.
    pub fn pause(&mut self) {
        std::thread::sleep(Duration::from_micros(1));
        self.since = Instant::now();
    }

    /// Called after a wait (an epoll poll) that began at `began`: one that found nothing or
    /// blocked ends the busy period.
    pub fn waited(&mut self, began: Instant, found_nothing: bool) {
        let now = Instant::now();
        if found_nothing || now - began > WAIT_BLOCKED {
            self.since = now;
        }
    }

    /// `waited` for a wait that also does the worker's I/O: an io_uring enter sends the turn's
    /// replies and runs its receive completions, often for longer than `WAIT_BLOCKED` without
    /// sleeping. A long one ends the busy period only if the thread slept in it.
    pub fn waited_working(&mut self, began: Instant, found_nothing: bool) {
        let now = Instant::now();
        let long = now - began > WAIT_BLOCKED;
        let slept = if long && !found_nothing {
            switches().1
        } else {
            self.seen_slept
        };
        self.after_working_wait(now, long, found_nothing, slept);
    }

    fn after_working_wait(
        &mut self,
        now: Instant,
        long: bool,
        found_nothing: bool,
        slept: libc::c_long,
    ) {
        if found_nothing {
            self.since = now;
        } else if long && slept != self.seen_slept {
            self.seen_slept = slept;
            self.since = now;
        }
    }
}

/// This thread's (involuntary, voluntary) context switches so far.
fn switches() -> (libc::c_long, libc::c_long) {
    let usage = crate::rusage::getrusage(libc::RUSAGE_THREAD);
    (usage.ru_nivcsw, usage.ru_nvcsw)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_worker_busy_on_a_contended_cpu_pauses_unless_settled() {
        let t0 = Instant::now();
        let mut b = Busy::at(t0, (0, 0));
        assert!(
            !b.check(t0 + 100 * US, 1, false),
            "busy for less than BUSY_MAX"
        );
        assert!(
            !b.check(t0 + 300 * US, 0, false),
            "never preempted: a core of its own"
        );
        assert!(
            b.check(t0 + 600 * US, 1, false),
            "preempted, busy again for BUSY_MAX"
        );
        assert!(!b.check(t0 + 900 * US, 1, true), "settled");
        assert!(
            b.check(t0 + 1200 * US, 1, false),
            "preempted within CONTENDED_FOR"
        );
        let later = t0 + 1200 * US + CONTENDED_FOR;
        assert!(!b.check(later, 1, false), "no preemption for CONTENDED_FOR");
    }

    #[test]
    fn an_io_uring_wait_that_worked_without_sleeping_keeps_the_worker_busy() {
        let t0 = Instant::now();
        let mut b = Busy::at(t0, (5, 7));
        // Long enters (sending the turn's replies) in which the thread never slept.
        b.after_working_wait(t0 + 150 * US, true, false, 7);
        b.after_working_wait(t0 + 320 * US, true, false, 7);
        assert_eq!(
            b.since, t0,
            "a long enter that did not sleep is work, not idleness"
        );
        assert!(b.check(t0 + 320 * US, 6, false));
        // One that slept ends the busy period, as does one that found nothing.
        b.after_working_wait(t0 + 400 * US, true, false, 8);
        assert_eq!(b.since, t0 + 400 * US);
        b.after_working_wait(t0 + 500 * US, false, true, 8);
        assert_eq!(b.since, t0 + 500 * US);
    }
}
