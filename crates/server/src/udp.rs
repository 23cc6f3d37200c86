//! memcached's UDP protocol: requests in datagrams, each request's reply split into framed
//! datagrams.

use mio::net::UdpSocket;

use crate::bufpool::BufPool;
use crate::env::ExecEnv;
use crate::execute;

/// memcached's UDP frame header: request id, sequence number, datagram count, reserved.
const UDP_HEADER: usize = 8;
const UDP_MAX_PAYLOAD: usize = 1400;

/// Answers every datagram waiting on `socket`; replies are split into frames of at most
/// 1400 bytes, as memcached does.
pub fn serve(socket: &UdpSocket, env: &ExecEnv<'_>, pool: &mut BufPool, out: &mut Vec<u8>) {
    let mut dgram = pool.take();
    dgram.resize(64 * 1024, 0);
    let mut ends = Vec::new();
    while let Ok((n, peer)) = socket.recv_from(&mut dgram) {
        env.stats.bytes_read.add(n as u64);
        env.stats.udp_requests.incr();
        if n < UDP_HEADER {
            continue;
        }
        let header = &dgram[..UDP_HEADER];
        let req_id = [header[0], header[1]];
        let total = u16::from_be_bytes([header[4], header[5]]);
        out.clear();
        ends.clear();
        if total != 1 {
            out.extend_from_slice(b"SERVER_ERROR multi-packet request not supported\r\n");
            ends.push(out.len());
        } else {
            execute::run_datagram(env, &dgram[UDP_HEADER..n], out, &mut ends);
        }
        // As memcached: each request's reply is a message of its own.
        let mut from = 0;
        for &end in &ends {
            send_framed(socket, env, peer, req_id, &out[from..end]);
            from = end;
        }
    }
    out.clear();
    dgram.clear();
    pool.give(dgram);
}

/// Sends one reply in frames of at most 1400 bytes, each with the frame header (request id,
/// sequence number, frame count); nothing for an empty reply.
fn send_framed(
    socket: &UdpSocket,
    env: &ExecEnv<'_>,
    peer: std::net::SocketAddr,
    req_id: [u8; 2],
    reply: &[u8],
) {
    if reply.is_empty() {
        return;
    }
    let frames = reply.len().div_ceil(UDP_MAX_PAYLOAD).min(u16::MAX as usize);
    let mut frame = Vec::with_capacity(UDP_HEADER + UDP_MAX_PAYLOAD);
    for (seq, chunk) in reply.chunks(UDP_MAX_PAYLOAD).take(frames).enumerate() {
        frame.clear();
        frame.extend_from_slice(&req_id);
        frame.extend_from_slice(&(seq as u16).to_be_bytes());
        frame.extend_from_slice(&(frames as u16).to_be_bytes());
        frame.extend_from_slice(&[0, 0]);
        frame.extend_from_slice(chunk);
        if let Ok(sent) = socket.send_to(&frame, peer) {
            env.stats.bytes_written.add(sent as u64);
        }
    }
}
