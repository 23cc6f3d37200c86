//! Tells the io_uring unit tests whether this machine's kernel can run them, so that where it
//! cannot they are reported as ignored rather than passing without testing anything.
//! (`serve` itself probes at run time: `engine::probe`.)

fn main() {
    println!("cargo::rustc-check-cfg=cfg(io_uring_refused)");
    println!("cargo::rustc-check-cfg=cfg(io_uring_whole_buffers)");
    println!("cargo::rerun-if-changed=build.rs");
    if !io_uring_allowed() {
        println!("cargo::rustc-cfg=io_uring_refused");
    }
    // Incremental provided-buffer rings arrived in Linux 6.12.
    if kernel_version() < (6, 12) {
        println!("cargo::rustc-cfg=io_uring_whole_buffers");
    }
}

/// Whether io_uring_setup succeeds here (it fails where the kernel lacks io_uring, where
/// `kernel.io_uring_disabled` forbids it, or under a seccomp filter).
fn io_uring_allowed() -> bool {
    // struct io_uring_params is 120 bytes; all zero asks for a default ring.
    let mut params = [0u8; 120];
    // SAFETY: the kernel writes at most the 120 bytes of `params`, which outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` is the descriptor io_uring_setup just returned, and only closed here.
    unsafe { libc::close(fd as i32) };
    true
}

fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}
