//! CPU time used by the process or a thread (getrusage(2)).

/// getrusage(2) for `who` (`RUSAGE_SELF`, `RUSAGE_THREAD`); all zero if it fails.
pub fn getrusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: getrusage fills the zeroed struct we own (and leaves it zeroed on failure).
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut u);
        u
    }
}

/// The process's user and system CPU time.
pub fn cpu_times() -> (libc::timeval, libc::timeval) {
    let u = getrusage(libc::RUSAGE_SELF);
    (u.ru_utime, u.ru_stime)
}
