//! mcrouter's TKO ("total knockout") tracking of one destination: soft TKO after
//! `--timeouts-until-tko` consecutive timeouts, hard TKO at once when a connection cannot be
//! made. A TKO'd destination gets no requests (they fail at once with `tko`, which
//! FailoverRoute fails over on); a probe is sent after a delay that doubles from
//! `--probe-timeout-initial` up to `--probe-timeout-max`, and only a successful probe
//! brings it back. Atomics only, so every worker sees a TKO at once; time is passed in.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// TKO settings from the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TkoSettings {
    /// Consecutive timeouts that make a soft TKO (0: never).
    pub timeouts_until_tko: u32,
    /// First delay before a probe, ms.
    pub probe_initial_ms: u64,
    /// Longest delay between probes, ms.
    pub probe_max_ms: u64,
}

const UP: u8 = 0;
const SOFT: u8 = 1;
const HARD: u8 = 2;

/// One destination's TKO state.
#[derive(Debug, Default)]
pub struct Tko {
    state: AtomicU8,
    timeouts: AtomicU32,
    /// Failures in a row (timeouts, connection errors, failed probes): mcrouter's
    /// `num_failures` of `stats suspect_servers`.
    failures: AtomicU32,
    probe_at_ms: AtomicU64,
    delay_ms: AtomicU64,
    probing: AtomicBool,
}

impl Tko {
    /// Whether requests must not be sent.
    #[inline]
    pub fn is_tko(&self) -> bool {
        self.state.load(Relaxed) != UP
    }

    /// 0 up, 1 soft TKO, 2 hard TKO (the `/metrics` gauge).
    pub fn level(&self) -> u8 {
        self.state.load(Relaxed)
    }

    /// `"soft"`, `"hard"` or `"up"`, for logs.
    pub fn describe(&self) -> &'static str {
        match self.state.load(Relaxed) {
            SOFT => "soft TKO",
            HARD => "hard TKO",
            _ => "up",
        }
    }

    /// Failures in a row; while TKO, only a successful probe ends the run.
    pub fn failures(&self) -> u32 {
        self.failures.load(Relaxed)
    }

    /// A reply came back: the run of timeouts is over (a TKO is only lifted by a probe,
    /// and keeps its run of failures, as mcrouter's does).
    #[inline]
    pub fn on_success(&self) {
        // A timeout always counts as a failure too: no failures, no timeouts to reset.
        if self.failures.load(Relaxed) != 0 {
            self.timeouts.store(0, Relaxed);
            if !self.is_tko() {
                self.failures.store(0, Relaxed);
            }
        }
    }

    /// A request timed out. True when this made the destination TKO.
    pub fn on_timeout(&self, cfg: &TkoSettings, now_ms: u64) -> bool {
        self.failures.fetch_add(1, Relaxed);
        let n = self.timeouts.fetch_add(1, Relaxed) + 1;
        if cfg.timeouts_until_tko == 0 || n < cfg.timeouts_until_tko {
            return false;
        }
        self.mark(SOFT, cfg, now_ms)
    }

    /// A connection was refused or could not be made. True when this made the
    /// destination TKO (hard; a soft TKO becomes hard).
    pub fn on_connect_error(&self, cfg: &TkoSettings, now_ms: u64) -> bool {
        self.failures.fetch_add(1, Relaxed);
        self.mark(HARD, cfg, now_ms)
    }

    fn mark(&self, state: u8, cfg: &TkoSettings, now_ms: u64) -> bool {
        let old = self
            .state
            .swap(state.max(self.state.load(Relaxed)), Relaxed);
        if old != UP {
            return false;
        }
        self.delay_ms.store(cfg.probe_initial_ms, Relaxed);
        self.probe_at_ms
            .store(now_ms + cfg.probe_initial_ms, Relaxed);
        true
    }

    /// Whether a probe is due now; if so the caller owns the probe until it reports with
    /// [`Tko::probe_result`] (no second probe starts meanwhile).
    pub fn take_probe(&self, now_ms: u64) -> bool {
        self.is_tko()
            && self.probe_at_ms.load(Relaxed) <= now_ms
            && !self.probing.swap(true, Relaxed)
    }

    /// The probe's outcome: success brings the destination back; failure doubles the
    /// delay before the next one (up to the maximum).
    pub fn probe_result(&self, ok: bool, cfg: &TkoSettings, now_ms: u64) {
        if ok {
            self.timeouts.store(0, Relaxed);
            self.failures.store(0, Relaxed);
            self.state.store(UP, Relaxed);
        } else {
            self.failures.fetch_add(1, Relaxed);
            let delay = (self.delay_ms.load(Relaxed).max(1) * 2).min(cfg.probe_max_ms.max(1));
            self.delay_ms.store(delay, Relaxed);
            self.probe_at_ms.store(now_ms + delay, Relaxed);
        }
        self.probing.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: TkoSettings = TkoSettings {
        timeouts_until_tko: 3,
        probe_initial_ms: 100,
        probe_max_ms: 350,
    };

    #[test]
    fn soft_tko_after_consecutive_timeouts() {
        let t = Tko::default();
        assert!(!t.on_timeout(&CFG, 0));
        assert!(!t.on_timeout(&CFG, 0));
        t.on_success();
        assert!(!t.on_timeout(&CFG, 0));
        assert!(!t.on_timeout(&CFG, 0));
        assert!(!t.is_tko(), "a success broke the run");
        assert!(t.on_timeout(&CFG, 0));
        assert!(t.is_tko());
        assert_eq!(t.describe(), "soft TKO");
        t.on_success();
        assert!(t.is_tko(), "only a probe lifts a TKO");
    }

    #[test]
    fn hard_tko_at_once_and_probes_back_off() {
        let t = Tko::default();
        assert!(t.on_connect_error(&CFG, 1000));
        assert!(!t.on_connect_error(&CFG, 1000), "already TKO");
        assert!(!t.take_probe(1099));
        assert!(t.take_probe(1100));
        assert!(!t.take_probe(5000), "one probe at a time");
        t.probe_result(false, &CFG, 1100);
        assert!(!t.take_probe(1299), "delay doubled to 200");
        assert!(t.take_probe(1300));
        t.probe_result(false, &CFG, 1300);
        assert!(!t.take_probe(1649), "capped at 350");
        assert!(t.take_probe(1650));
        t.probe_result(true, &CFG, 1650);
        assert!(!t.is_tko());
        assert!(!t.take_probe(1_000_000));
    }

    #[test]
    fn failures_run_until_a_success_or_a_probe_ends_them() {
        let t = Tko::default();
        assert!(!t.on_timeout(&CFG, 0));
        assert_eq!(t.failures(), 1);
        t.on_success();
        assert_eq!(t.failures(), 0);
        t.on_connect_error(&CFG, 0);
        t.on_connect_error(&CFG, 0);
        assert_eq!(t.failures(), 2);
        t.on_success();
        assert_eq!(t.failures(), 2, "a late reply does not end a TKO's run");
        assert!(t.take_probe(100));
        t.probe_result(false, &CFG, 100);
        assert_eq!(t.failures(), 3, "a failed probe is a failure");
        assert!(t.take_probe(300));
        t.probe_result(true, &CFG, 300);
        assert_eq!(t.failures(), 0);
    }

    #[test]
    fn soft_becomes_hard() {
        let t = Tko::default();
        let once = TkoSettings {
            timeouts_until_tko: 1,
            ..CFG
        };
        assert!(t.on_timeout(&once, 0));
        t.on_connect_error(&once, 0);
        assert_eq!(t.describe(), "hard TKO");
    }

    #[test]
    fn zero_limit_never_soft_tkos() {
        let t = Tko::default();
        let never = TkoSettings {
            timeouts_until_tko: 0,
            ..CFG
        };
        for _ in 0..10 {
            assert!(!t.on_timeout(&never, 0));
        }
        assert!(!t.is_tko());
    }
}
