//! What the server changes about its own process: the open-files limit and the user it runs as.

/// Like memcached, lift the soft open-files limit so `-c` connections fit (up to the hard limit).
pub fn raise_fd_limit(conn_limit: usize) {
    let want = (conn_limit + 64) as libc::rlim_t;
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

pub fn drop_privileges(user: &str) -> Result<(), String> {
    // SAFETY: plain libc calls with a NUL-terminated name; getpwnam's result is read at once.
    unsafe {
        if libc::geteuid() != 0 {
            return Ok(());
        }
        let name = std::ffi::CString::new(user).map_err(|_| "bad user name")?;
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(format!("can't find the user {user} to switch to"));
        }
        if libc::setgid((*pw).pw_gid) < 0 || libc::setuid((*pw).pw_uid) < 0 {
            return Err(format!("failed to assume identity of user {user}"));
        }
    }
    Ok(())
}
