//! Which event loop the workers run: io_uring (`uring`) where the kernel offers what it
//! needs, else epoll (`worker`).
//!
//! The io_uring loop serves plain TCP, unix-socket and UDP (`-U`) clients; TLS (`-Z`) stays
//! with the epoll loop, so a server with it runs epoll throughout.

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::io::bufring::BufRing;

/// `-o io_engine=`: what was asked for, and after `resolve` what runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring if the kernel allows it and the listeners are ones it serves, else epoll
    /// (the default: io_uring made ~18x fewer system calls per request and was not slower;
    /// bench/RESULTS.md).
    #[default]
    Auto,
    Uring,
    Epoll,
}

impl IoEngine {
    pub fn parse(value: &str) -> Result<IoEngine, String> {
        match value {
            "auto" => Ok(IoEngine::Auto),
            "uring" | "io_uring" => Ok(IoEngine::Uring),
            "epoll" => Ok(IoEngine::Epoll),
            _ => Err(format!(
                "invalid io_engine '{value}' (auto, uring or epoll)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::Uring => "uring",
            IoEngine::Epoll => "epoll",
        }
    }
}

/// The engine to run when `asked` for (`tls`: with `-Z`), what the io_uring loop may use of
/// the kernel, and the line to log when either is less than asked for.
pub fn resolve(asked: IoEngine, tls: bool) -> (IoEngine, UringKernel, Option<String>) {
    match pick(asked, tls) {
        (None, line) => (IoEngine::Epoll, UringKernel::default(), line),
        (Some(kernel), line) => (IoEngine::Uring, kernel, line),
    }
}

/// What the kernel offers when io_uring runs, None for epoll; and the line to log.
fn pick(asked: IoEngine, tls: bool) -> (Option<UringKernel>, Option<String>) {
    if asked == IoEngine::Epoll {
        return (None, None);
    }
    if tls {
        let line = "io_engine: epoll (the io_uring loop does not serve TLS (-Z) yet)";
        return (None, Some(line.into()));
    }
    if asked == IoEngine::Auto && under_valgrind(std::env::var_os("LD_PRELOAD")) {
        let line = "io_engine: epoll (under valgrind, where the io_uring loop stalls; \
                    -o io_engine=uring forces it)";
        return (None, Some(line.into()));
    }
    match probe() {
        Ok(kernel) => {
            let kernel = if std::env::var_os(AS_OLDER_KERNEL).is_some() {
                UringKernel::BEFORE_6_12
            } else {
                kernel
            };
            let line = (!kernel.recv_cap).then(|| {
                "io_engine: uring (without a byte cap per receive, Linux < 6.17: a client \
                 that never reads may hold up to one turn of receives more)"
                    .to_string()
            });
            (Some(kernel), line)
        }
        Err(why) => (
            None,
            Some(format!("io_engine: epoll (io_uring unavailable: {why})")),
        ),
    }
}

/// Set (to anything), the io_uring loop uses only what Linux 6.0-6.11 offer: no byte cap per
/// receive, no incremental buffer ring. For tests of those paths on a newer kernel.
pub const AS_OLDER_KERNEL: &str = "MEMFLEET_URING_AS_OLDER_KERNEL";

/// What the kernel's io_uring offers beyond the loop's minimum (a multishot receive into a
/// provided-buffer ring, Linux 6.0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringKernel {
    /// A multishot receive takes a cap on the bytes one arming brings (Linux 6.17). Before,
    /// the field the cap goes in must be zero: a receive with it set fails with EINVAL.
    pub recv_cap: bool,
    /// An incremental buffer ring may be tried (registering it says whether the kernel has
    /// it, Linux 6.12).
    pub incremental_bufs: bool,
}

impl UringKernel {
    const BEFORE_6_12: UringKernel = UringKernel {
        recv_cap: false,
        incremental_bufs: false,
    };
}

/// Whether valgrind runs us: it preloads its `vgpreload_*.so`. Its serialised threads do
/// not see the kernel's ring writes in time, and the server never answers.
fn under_valgrind(ld_preload: Option<std::ffi::OsString>) -> bool {
    ld_preload.is_some_and(|p| p.to_string_lossy().contains("vgpreload"))
}

/// Tries what the io_uring loop uses on a socket pair: ring setup (refused on old kernels,
/// with kernel.io_uring_disabled or under seccomp), the opcodes, a provided-buffer ring and
/// a multishot receive into it (Linux 6.0).
pub fn probe() -> Result<UringKernel, String> {
    let ring: IoUring = IoUring::new(8).map_err(|e| format!("io_uring_setup: {e}"))?;
    let mut codes = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut codes)
        .map_err(|e| format!("opcode probe: {e}"))?;
    let needed = [
        ("recv", opcode::RecvMulti::CODE),
        ("send", opcode::Send::CODE),
        ("sendmsg", opcode::SendMsg::CODE),
        ("poll_add", opcode::PollAdd::CODE),
        ("async_cancel", opcode::AsyncCancel::CODE),
    ];
    if let Some((name, _)) = needed.iter().find(|(_, c)| !codes.is_supported(*c)) {
        return Err(format!("no {name} opcode"));
    }
    let recv_cap = match probe_multishot_recv(ring, Some(1024)) {
        Ok(()) => true,
        Err(RecvProbe::Refused(libc::EINVAL)) => {
            let ring = IoUring::new(8).map_err(|e| format!("io_uring_setup: {e}"))?;
            probe_multishot_recv(ring, None).map_err(|e| e.to_string())?;
            false
        }
        Err(e) => return Err(e.to_string()),
    };
    Ok(UringKernel {
        recv_cap,
        incremental_bufs: true,
    })
}

/// Why a probe's multishot receive did not work.
#[derive(Debug)]
enum RecvProbe {
    /// The receive completed with this errno.
    Refused(i32),
    /// It completed otherwise than a multishot receive does.
    NotMultishot,
    /// Setting it up failed.
    Setup(String),
}

impl std::fmt::Display for RecvProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvProbe::Refused(e) => {
                let e = std::io::Error::from_raw_os_error(*e);
                write!(f, "multishot recv: {e}")
            }
            RecvProbe::NotMultishot => write!(f, "multishot recv not supported"),
            RecvProbe::Setup(why) => write!(f, "{why}"),
        }
    }
}

/// Arms a multishot receive (with `cap` bytes per arming, if given) on a socket pair and
/// checks its first completion.
fn probe_multishot_recv(mut ring: IoUring, cap: Option<u32>) -> Result<(), RecvProbe> {
    let setup = |what: &str, e: &dyn std::fmt::Display| RecvProbe::Setup(format!("{what}: {e}"));
    let (a, b) = std::os::unix::net::UnixStream::pair().map_err(|e| setup("socketpair", &e))?;
    let mut bufs = BufRing::new(2, 64);
    // SAFETY: `bufs` outlives the ring, which is dropped first at the end of this function.
    unsafe { bufs.register(&ring.submitter(), 0, false) }
        .map_err(|e| setup("provided buffer ring", &e))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&b);
    let recv = opcode::RecvMulti::new(types::Fd(fd), 0).build();
    let recv = match cap {
        Some(cap) => with_total_cap(recv, cap),
        None => recv,
    };
    // SAFETY: the entry refers to no memory of ours but the registered buffer ring.
    unsafe { ring.submission().push(&recv.user_data(1)) }.map_err(|e| setup("push", &e))?;
    std::io::Write::write_all(&mut &a, b"x").map_err(|e| setup("write", &e))?;
    ring.submit_and_wait(1)
        .map_err(|e| setup("io_uring_enter", &e))?;
    let cqe: cqueue::Entry = ring
        .completion()
        .next()
        .ok_or_else(|| setup("io_uring_enter", &"no completion"))?;
    let more = cqueue::more(cqe.flags());
    let res = cqe.result();
    let cancel = opcode::AsyncCancel::new(1).build().user_data(2);
    // SAFETY: a cancel refers to no memory.
    let _ = unsafe {
        ring.submission()
            .push(&cancel.flags(squeue::Flags::SKIP_SUCCESS))
    };
    let _ = ring.submit();
    drop(ring);
    match (res, cqueue::buffer_select(cqe.flags()), more) {
        (1, Some(_), true) => Ok(()),
        (r, _, _) if r < 0 => Err(RecvProbe::Refused(-r)),
        _ => Err(RecvProbe::NotMultishot),
    }
}

/// Caps the bytes a multishot receive brings in before it ends (the SQE's `optlen`, which
/// the io-uring crate does not expose yet). Kernels before 6.17 read the same bytes as
/// `file_index` and fail the receive with EINVAL unless they are zero: `engine::probe`.
pub fn with_total_cap(entry: squeue::Entry, cap: u32) -> squeue::Entry {
    const OPTLEN_AT: usize = 44;
    const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
    // SAFETY: `Entry` is a #[repr(C)] wrapper of the 64-byte, plain-data `io_uring_sqe`, whose
    // `optlen` (a union with `file_index`) is the u32 at byte 44.
    let mut raw: [u8; 64] = unsafe { std::mem::transmute(entry) };
    raw[OPTLEN_AT..OPTLEN_AT + 4].copy_from_slice(&cap.to_ne_bytes());
    // SAFETY: as above; any bytes are a valid sqe for the type.
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valgrind_is_told_by_its_preload() {
        let preload = |s: &str| Some(std::ffi::OsString::from(s));
        let vg = "/usr/libexec/valgrind/vgpreload_core-amd64-linux.so";
        assert!(under_valgrind(preload(vg)));
        assert!(!under_valgrind(preload("/usr/lib/libjemalloc.so")));
        assert!(!under_valgrind(None));
    }

    #[test]
    fn engine_names_round_trip() {
        for e in [IoEngine::Auto, IoEngine::Uring, IoEngine::Epoll] {
            assert_eq!(IoEngine::parse(e.name()).unwrap(), e);
        }
        assert!(IoEngine::parse("kqueue").is_err());
    }

    #[test]
    fn probe_agrees_with_the_kernel() {
        // This machine's kernel (6.x, io_uring enabled) has everything the loop needs;
        // where io_uring is disabled the probe must say so rather than pass.
        let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .is_ok_and(|v| v.trim() == "2");
        assert_eq!(probe().is_ok(), !disabled, "{:?}", probe());
    }

    #[test]
    #[cfg_attr(io_uring_refused, ignore = "this kernel refuses io_uring")]
    fn probe_finds_the_receive_cap_from_linux_6_17() {
        let kernel = probe().unwrap();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.trim().split(['.', '-']);
        let mut next = || {
            parts
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .unwrap_or(0)
        };
        let version = (next(), next());
        assert_eq!(kernel.recv_cap, version >= (6, 17), "kernel {release}");
        assert_eq!(
            kernel.incremental_bufs,
            version >= (6, 12),
            "kernel {release}"
        );
    }
}
