//! memcached's UDP protocol: requests in datagrams, each request's reply split into framed
//! datagrams.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use mio::net::UdpSocket;
use mio::{Interest, Poll, Token};
use socket2::{SockAddr, SockRef};

use crate::clock::unix_now;
use crate::exec::binary;
use crate::exec::env::ExecEnv;
use crate::exec::execute;
use crate::exec::flash_wait;
use crate::shared::Shared;
use crate::stats::ThreadStats;

/// memcached's UDP frame header: request id, sequence number, datagram count, reserved.
const UDP_HEADER: usize = 8;
const UDP_MAX_PAYLOAD: usize = 1400;
/// The largest datagram UDP carries.
const MAX_DATAGRAM: usize = 64 * 1024;

/// The tokens of the epoll loop's UDP sockets in its mio poll: the 1,024 below the waker's
/// (`usize::MAX`), far above any connection's slab index.
pub const TOKEN_BASE: usize = usize::MAX - 1024;

/// A worker's share of the UDP sockets (one per `-U` address, `SO_REUSEPORT`). The epoll loop
/// registers them in its mio poll; the io_uring loop polls each on its ring.
pub struct UdpSockets {
    sockets: Vec<UdpSocket>,
    /// Each socket's handle for the I/O threads, made when one first answers on it (a
    /// request on flash keys, `flash::reads`).
    shared_handles: Vec<Option<Arc<std::net::UdpSocket>>>,
    /// One datagram's receive buffer, allocated (and zeroed) once, if there are sockets.
    dgram: Vec<u8>,
    /// Where each request's reply ends in the reply buffer.
    ends: Vec<usize>,
}

impl UdpSockets {
    pub fn new(sockets: Vec<std::net::UdpSocket>) -> io::Result<UdpSockets> {
        let mut out = Vec::with_capacity(sockets.len());
        for s in sockets {
            s.set_nonblocking(true)?;
            out.push(UdpSocket::from_std(s));
        }
        let dgram = if out.is_empty() {
            Vec::new()
        } else {
            vec![0; MAX_DATAGRAM]
        };
        Ok(UdpSockets {
            shared_handles: out.iter().map(|_| None).collect(),
            sockets: out,
            dgram,
            ends: Vec::new(),
        })
    }

    /// Registers socket `i` as token `TOKEN_BASE + i`.
    pub fn register(&mut self, poll: &Poll) -> io::Result<()> {
        for (i, s) in self.sockets.iter_mut().enumerate() {
            poll.registry()
                .register(s, Token(TOKEN_BASE + i), Interest::READABLE)?;
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    pub fn fd(&self, i: usize) -> RawFd {
        self.sockets[i].as_raw_fd()
    }

    /// Answers the datagrams waiting on socket `i`, up to `-R` of them (memcached answers one
    /// per event, so a flood cannot hold up the worker's other clients). True if it stopped
    /// there: more may wait, and the caller comes back to the socket after its other work.
    pub fn serve(
        &mut self,
        i: usize,
        shared: &Arc<Shared>,
        stats: &ThreadStats,
        now: u32,
        out: &mut Vec<u8>,
    ) -> bool {
        let budget = shared.settings.max_reqs_per_event as usize;
        let env = ExecEnv::datagram(shared, stats, now);
        let Self {
            sockets,
            shared_handles,
            dgram,
            ends,
        } = self;
        let socket = Socket {
            socket: &sockets[i],
            handle: &mut shared_handles[i],
            shared,
        };
        answer_datagrams(socket, dgram, ends, &env, out, budget)
    }
}

/// A UDP socket, and its handle for the I/O threads once made (with the shared state, for
/// them to answer with).
struct Socket<'a> {
    socket: &'a UdpSocket,
    handle: &'a mut Option<Arc<std::net::UdpSocket>>,
    shared: &'a Arc<Shared>,
}

impl Socket<'_> {
    fn handle(&mut self) -> Option<Arc<std::net::UdpSocket>> {
        if self.handle.is_none() {
            let dup = SockRef::from(self.socket).try_clone().ok()?;
            *self.handle = Some(Arc::new(dup.into()));
        }
        self.handle.clone()
    }
}

/// Answers up to `budget` datagrams waiting on `socket`, true if it answered that many;
/// replies are split into frames of at most 1400 bytes, as memcached does.
fn answer_datagrams(
    mut socket: Socket<'_>,
    dgram: &mut [u8],
    ends: &mut Vec<usize>,
    env: &ExecEnv<'_>,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let mut answered = 0;
    while answered < budget {
        let Ok((n, peer)) = socket.socket.recv_from(dgram) else {
            break;
        };
        answered += 1;
        env.stats.bytes_read.add(n as u64);
        env.stats.udp_requests.incr();
        if n < UDP_HEADER {
            continue;
        }
        let datagram = &dgram[..n];
        if let Some(io) = &env.shared.flash_io {
            if reads_flash(env, &datagram[UDP_HEADER..]) {
                // Dropped when the I/O threads are at their bounds (`flash::reads`).
                if let Some(handle) = socket.handle() {
                    let datagram = datagram.to_vec();
                    let bytes = datagram.len() + MAX_DATAGRAM;
                    let shared = socket.shared.clone();
                    let job = Box::new(move |stats: &ThreadStats| {
                        let env = ExecEnv::datagram(&shared, stats, unix_now());
                        let mut out = Vec::new();
                        answer(
                            SockRef::from(&*handle),
                            &env,
                            &datagram,
                            peer,
                            &mut out,
                            &mut Vec::new(),
                        );
                    });
                    io.submit_datagram(job, bytes);
                }
                continue;
            }
        }
        answer(SockRef::from(socket.socket), env, datagram, peer, out, ends);
    }
    out.clear();
    answered == budget
}

/// Answers one datagram (its frame header and requests), to `peer`.
fn answer(
    socket: SockRef<'_>,
    env: &ExecEnv<'_>,
    dgram: &[u8],
    peer: std::net::SocketAddr,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) {
    let header = &dgram[..UDP_HEADER];
    let req_id = [header[0], header[1]];
    let total = u16::from_be_bytes([header[4], header[5]]);
    out.clear();
    ends.clear();
    if total != 1 {
        out.extend_from_slice(b"SERVER_ERROR multi-packet request not supported\r\n");
        ends.push(out.len());
    } else {
        run_datagram(env, &dgram[UDP_HEADER..], out, ends);
    }
    // As memcached: each request's reply is a message of its own.
    let mut from = 0;
    for &end in ends.iter() {
        send_framed(&socket, env, peer, req_id, &out[from..end]);
        from = end;
    }
}

/// Whether answering the datagram's requests would read flash (binary ones are assumed to).
fn reads_flash(env: &ExecEnv<'_>, payload: &[u8]) -> bool {
    if let Some(&first) = payload.first() {
        if binary::datagram_is_binary(env, first) {
            return true;
        }
    }
    let mut pos = 0;
    while pos < payload.len() {
        match proto::parse(&payload[pos..], &env.shared.limits) {
            proto::Parse::Request(req, used) => {
                if flash_wait::reads_flash(env, &req) {
                    return true;
                }
                pos += used;
            }
            proto::Parse::Incomplete { .. } => return false,
            proto::Parse::Error {
                consumed, swallow, ..
            } => pos += consumed + swallow,
        }
    }
    false
}

/// Sends one reply in frames of at most 1400 bytes, each with the frame header (request id,
/// sequence number, frame count); nothing for an empty reply.
fn send_framed(
    sock: &SockRef<'_>,
    env: &ExecEnv<'_>,
    peer: std::net::SocketAddr,
    req_id: [u8; 2],
    reply: &[u8],
) {
    if reply.is_empty() {
        return;
    }
    let frames = reply.len().div_ceil(UDP_MAX_PAYLOAD).min(u16::MAX as usize);
    let to = SockAddr::from(peer);
    for (seq, chunk) in reply.chunks(UDP_MAX_PAYLOAD).take(frames).enumerate() {
        let mut header = [0u8; UDP_HEADER];
        header[..2].copy_from_slice(&req_id);
        header[2..4].copy_from_slice(&(seq as u16).to_be_bytes());
        header[4..6].copy_from_slice(&(frames as u16).to_be_bytes());
        // Header and payload gathered by the kernel: the reply is not copied into a frame.
        let frame = [IoSlice::new(&header), IoSlice::new(chunk)];
        if let Ok(sent) = sock.send_to_vectored(&frame, &to) {
            env.stats.bytes_written.add(sent as u64);
        }
    }
}

/// A UDP datagram holds whole requests; `ends` gets the end of each request's reply in `out`
/// (memcached sends each as a message of its own). Binary requests (`-B binary`, or a first
/// byte of 0x80 under `-B auto`) go to `binary`.
fn run_datagram(env: &ExecEnv<'_>, payload: &[u8], out: &mut Vec<u8>, ends: &mut Vec<usize>) {
    if let Some(&first) = payload.first() {
        if binary::datagram_is_binary(env, first) {
            return binary::run_datagram(env, payload, out, ends);
        }
    }
    let mut pos = 0;
    while pos < payload.len() {
        match proto::parse(&payload[pos..], &env.shared.limits) {
            proto::Parse::Request(req, used) => {
                pos += used;
                let flow = execute::run(env, req, 0, &mut None, out);
                ends.push(out.len());
                if let execute::Flow::Close = flow {
                    return;
                }
            }
            proto::Parse::Incomplete { .. } => return,
            proto::Parse::Error {
                reply,
                consumed,
                swallow,
                close,
                ..
            } => {
                out.extend_from_slice(reply);
                ends.push(out.len());
                pos += consumed + swallow;
                if close {
                    return;
                }
            }
        }
    }
}
