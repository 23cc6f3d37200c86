//! A client connection: its reply queue (one slot per request, answered in request order
//! whichever servers replied first), reading it and writing its replies.

use std::collections::VecDeque;
use std::io::{self, Write};

use proto::binary::bridge::Pending;
use proto::redis_cmd::{self, Kind};
use proto::resp;
use proto::resp::resp3::{write_resp3, Shape};
use proto::response::{self, Fragment, Item};
use slab::Slab;

use super::reply_to::ReplyTo;
use super::{Worker, MAX_READS_PER_TURN, MAX_UNREAD, MAX_UNSENT, READ_POOL_MAX};
use crate::buf::ReadBuf;
use crate::net::Stream;
use crate::shared::PoolRt;
use std::sync::Arc;

/// What a queued reply is waiting for and how it is written out.
pub(super) enum SlotKind {
    /// The reply is complete in `buf`.
    Ready,
    /// One backend reply (or, for quiet meta, everything before `MN`).
    Single,
    /// A `noreply` request: the backend's reply is dropped unless it is an error.
    NoReply,
    /// A get split over servers: merged in the client's key order.
    Multi(Box<MultiGet>),
    /// flush_all sent to every server.
    Broadcast { frags: Vec<Vec<u8>>, noreply: bool },
    /// A Redis multi-key command split over servers.
    RedisMulti(Box<RedisMulti>),
    /// One backend reply, converted for a client that asked for RESP3.
    Resp3(Shape),
}

/// A Redis multi-key command split over servers.
pub(super) struct RedisMulti {
    pub(super) kind: Kind,
    pub(super) nkeys: usize,
    /// Per fragment: positions of its keys among the command's keys.
    pub(super) positions: Vec<Vec<usize>>,
    pub(super) frags: Vec<Vec<u8>>,
    /// The client asked for RESP3: the merged reply is converted.
    pub(super) resp3: bool,
}

impl RedisMulti {
    /// The merge state of a command split into `parts`, and each part's server and frame.
    pub(super) fn of_parts(
        kind: Kind,
        nkeys: usize,
        resp3: bool,
        parts: Vec<proto::redis_cmd::SubRequest>,
    ) -> (RedisMulti, Vec<(usize, Vec<u8>)>) {
        let mut m = RedisMulti {
            kind,
            nkeys,
            positions: Vec::with_capacity(parts.len()),
            frags: vec![Vec::new(); parts.len()],
            resp3,
        };
        let frames = parts
            .into_iter()
            .map(|part| {
                m.positions.push(part.positions);
                (part.server, part.bytes)
            })
            .collect();
        (m, frames)
    }
}

/// The reply to one request, in the client's queue.
pub(super) struct Slot {
    pub(super) remaining: u32,
    pub(super) kind: SlotKind,
    pub(super) buf: Vec<u8>,
    /// A binary client's request sent as text: its finished text reply is translated.
    pub(super) bin: Option<Box<Pending>>,
    /// A get through a pool that splits big values: its finished reply is looked at for
    /// index items before it goes out.
    pub(super) big: bool,
    /// What the hot-key cache is owed when the reply is complete.
    pub(super) hot: Option<Box<crate::hot::HotTag>>,
}

/// A get split over servers: the keys in the client's order and each server's reply.
pub(super) struct MultiGet {
    pub(super) keys: Vec<u8>,
    /// (start in `keys`, length, fragment) per requested key, in request order.
    pub(super) spans: Vec<(u32, u32, u16)>,
    pub(super) frags: Vec<Vec<u8>>,
    /// The items of each fragment's reply (from the backend's framer).
    pub(super) items: Vec<Vec<Item>>,
}

/// One client connection of a pool.
pub(super) struct Client {
    pub(super) stream: Stream,
    pub(super) gen: u32,
    pub(super) pool: usize,
    pub(super) rt: Arc<PoolRt>,
    pub(super) rbuf: ReadBuf,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    pub(super) slots: VecDeque<Slot>,
    pub(super) head_seq: u64,
    pub(super) swallow: usize,
    /// Close once every reply is written (quit, EOF, fatal parse error).
    pub(super) closing: bool,
    pub(super) eof: bool,
    pub(super) paused: bool,
    /// It has `MAX_UNREAD` bytes of replies it does not read: later ones are dropped, and it
    /// is closed at its next flush.
    pub(super) overflowed: bool,
    /// The size of this client's replies, as far as the recent ones tell: it rises at once
    /// to a larger reply and falls by a quarter with each smaller one.
    pub(super) reply_estimate: u32,
    pub(super) dirty: bool,
    /// False until the client sent the pool's password (`client_auth`, or for a Redis pool
    /// also `redis_auth`).
    pub(super) authed: bool,
    /// Where parsing of a partly received RESP command stopped.
    pub(super) progress: resp::Progress,
    /// The Redis client switched to RESP3 with `HELLO 3`: its replies are converted.
    pub(super) resp3: bool,
    /// Finished get replies (by request number) that name big values: their chunks are
    /// being fetched and the slot stays at the head of the queue until they are.
    pub(super) big_wait: Vec<(u64, Vec<u8>)>,
    /// A big-value helper of this router sending the chunks of a BigValueRoute's split:
    /// the client request's operation, which the chunks are planned along (see
    /// `bigvalue::CHUNKS_COMMAND`).
    pub(super) chunks_of: Option<&'static str>,
    /// Unanswered requests at which the client is no longer read: `MAX_SLOTS`, or less
    /// with `--max-client-outstanding-reqs`.
    pub(super) max_slots: usize,
    /// A Redis client's open `MULTI`.
    pub(super) tx: Option<Box<super::queued_tx::Transaction>>,
    /// Emptied buffers of written slots, for the next replies that arrive before their
    /// turn (pipelined commands spread over servers: most of them), so those cost no
    /// allocation.
    pub(super) spare: Vec<Vec<u8>>,
}

/// Buffers a client keeps in [`Client::spare`], and the largest one kept.
const SPARE_BUFS: usize = 16;
const SPARE_BUF_MAX: usize = 16 * 1024;

impl Client {
    pub(super) fn unsent(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Whether the next request in `rbuf` may be parsed now: not once the client is closing
    /// (the rest is dropped), nor while it is too far behind reading its replies (paused
    /// until it catches up).
    pub(super) fn may_parse(&mut self, rbuf: &mut ReadBuf) -> bool {
        if self.closing {
            rbuf.clear();
            return false;
        }
        if self.over_limits(1) {
            self.paused = true;
            return false;
        }
        true
    }

    /// Whether the client is over `1/div` of the limits on requests in flight and on reply
    /// bytes unread or expected (pause at 1, resume under 2: not on and off with each reply).
    pub(super) fn over_limits(&self, div: usize) -> bool {
        let expected = self.slots.len() * self.reply_estimate as usize;
        // At least one: a limit of 1 resumes once its request is answered.
        self.slots.len() >= (self.max_slots / div).max(1)
            || self.unsent() >= MAX_UNSENT / div
            || expected >= MAX_UNSENT / div
    }

    fn note_reply(&mut self, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.reply_estimate = len.max(self.reply_estimate - self.reply_estimate / 4);
    }

    /// Queues client `ci` (this one) for a flush at the end of the turn, once.
    fn mark_dirty(&mut self, ci: usize, dirty: &mut Vec<usize>) {
        if !self.dirty {
            self.dirty = true;
            dirty.push(ci);
        }
    }

    /// Moves finished replies at the head of the queue to the write buffer.
    pub(super) fn drain_ready(&mut self) {
        while let Some(front) = self.slots.front() {
            if front.remaining > 0 {
                break;
            }
            let mut slot = self.slots.pop_front().expect("front exists");
            if slot.big {
                let bin = slot.bin.take();
                let mut text = Vec::new();
                finish_slot(slot, &mut text);
                let waits = proto::bigvalue::has_index(&text);
                slot = Slot {
                    remaining: u32::from(waits),
                    kind: SlotKind::Ready,
                    buf: Vec::new(),
                    bin,
                    big: false,
                    hot: None,
                };
                if waits {
                    self.big_wait.push((self.head_seq, text));
                    self.slots.push_front(slot);
                    break;
                }
                slot.buf = text;
            }
            self.head_seq += 1;
            let mut buf = finish_slot(slot, &mut self.wbuf);
            if (1..=SPARE_BUF_MAX).contains(&buf.capacity()) && self.spare.len() < SPARE_BUFS {
                buf.clear();
                self.spare.push(buf);
            }
        }
    }

    /// Queues a reply made here (nothing to wait for).
    pub(super) fn reply(&mut self, bytes: &[u8]) {
        if self.slots.is_empty() {
            self.wbuf.extend_from_slice(bytes);
        } else {
            self.slots.push_back(Slot {
                remaining: 0,
                kind: SlotKind::Ready,
                buf: bytes.to_vec(),
                bin: None,
                big: false,
                hot: None,
            });
        }
    }

    /// Queues a slot for a request that `remaining` backend replies answer; returns where
    /// they go (`ci`: this client's index), as fragment 0.
    pub(super) fn push(&mut self, ci: usize, remaining: u32, kind: SlotKind) -> ReplyTo {
        let seq = self.head_seq + self.slots.len() as u64;
        self.slots.push_back(Slot {
            remaining,
            kind,
            buf: Vec::new(),
            bin: None,
            big: false,
            hot: None,
        });
        ReplyTo {
            client: ci as u32,
            gen: self.gen,
            seq,
            frag: 0,
        }
    }
}

/// Writes a finished slot's reply to `out`; gives back its buffer (empty when it had
/// none to give).
fn finish_slot(mut slot: Slot, out: &mut Vec<u8>) -> Vec<u8> {
    if let Some(pending) = slot.bin.take() {
        let mut text = Vec::new();
        finish_slot(slot, &mut text);
        pending.write_reply(&text, out);
        return Vec::new();
    }
    if let Some(tag) = slot.hot.take() {
        tag.finish(&slot.buf);
    }
    match slot.kind {
        SlotKind::Ready | SlotKind::Single | SlotKind::NoReply => out.extend_from_slice(&slot.buf),
        SlotKind::Multi(m) => {
            let keys = m.spans.iter().map(|&(start, len, f)| {
                let key = &m.keys[start as usize..(start + len) as usize];
                (key, usize::from(f))
            });
            let frags: Vec<Fragment> = m
                .frags
                .iter()
                .zip(&m.items)
                .map(|(reply, items)| Fragment { reply, items })
                .collect();
            response::merge_get(keys, &frags, out);
        }
        SlotKind::RedisMulti(m) => {
            let parts: Vec<(&[usize], &[u8])> = m
                .positions
                .iter()
                .zip(&m.frags)
                .map(|(p, f)| (&p[..], &f[..]))
                .collect();
            let mark = out.len();
            if redis_cmd::merge(m.kind, m.nkeys, &parts, out).is_err() {
                out.truncate(mark);
                out.extend_from_slice(b"-ERR invalid reply from server\r\n");
            } else if m.resp3 {
                let merged = out.split_off(mark);
                write_resp3_or_error(&merged, Shape::Plain, out);
            }
        }
        SlotKind::Resp3(shape) => write_resp3_or_error(&slot.buf, shape, out),
        SlotKind::Broadcast { frags, noreply } => {
            match frags.iter().find(|f| f.as_slice() != b"OK\r\n") {
                Some(bad) if !noreply || response::is_error_reply(bad) => {
                    out.extend_from_slice(bad)
                }
                Some(_) => {}
                None if noreply => {}
                None => out.extend_from_slice(b"OK\r\n"),
            }
        }
    }
    slot.buf
}

/// A backend reply in RESP3 (see `proto::resp::resp3`); one that is not valid RESP2 cannot
/// be converted and becomes an error reply, as a bad merged reply does.
pub(super) fn write_resp3_or_error(reply: &[u8], shape: Shape, out: &mut Vec<u8>) {
    if write_resp3(reply, shape, out).is_err() {
        out.extend_from_slice(b"-ERR invalid reply from server\r\n");
    }
}

/// Gives one backend reply (or part of a quiet one) to the client waiting for it. `items`:
/// the reply's items when it is a get reply.
pub(super) fn deliver(
    clients: &mut Slab<Client>,
    dirty: &mut Vec<usize>,
    to: ReplyTo,
    reply: &[u8],
    items: &[Item],
    done: bool,
) {
    let ci = to.client as usize;
    let Some(c) = clients.get_mut(ci) else { return };
    if c.gen != to.gen {
        return;
    }
    // Checked per reply: one turn may read hundreds of MB from a fast server.
    c.overflowed |= c.unsent() >= MAX_UNREAD;
    if c.overflowed {
        c.mark_dirty(ci, dirty);
        return;
    }
    let i = to.seq.wrapping_sub(c.head_seq) as usize;
    c.note_reply(reply.len());
    let Some(slot) = c.slots.get_mut(i) else {
        return;
    };
    if i == 0
        && done
        && slot.remaining == 1
        && slot.buf.is_empty()
        && matches!(slot.kind, SlotKind::Single)
        && slot.bin.is_none()
        && !slot.big
        && slot.hot.is_none()
    {
        // The common case: the reply the client waits for next, in one piece.
        c.wbuf.extend_from_slice(reply);
        c.slots.pop_front();
        c.head_seq += 1;
    } else {
        match &mut slot.kind {
            SlotKind::Single | SlotKind::Ready | SlotKind::Resp3(_) => {
                if slot.buf.capacity() == 0 {
                    if let Some(spare) = c.spare.pop() {
                        slot.buf = spare;
                    }
                }
                slot.buf.extend_from_slice(reply)
            }
            SlotKind::NoReply => {
                if response::is_error_reply(reply) {
                    slot.buf.extend_from_slice(reply)
                }
            }
            SlotKind::Multi(m) => {
                let f = usize::from(to.frag);
                let at = m.frags[f].len();
                m.items[f].extend(items.iter().map(|it| it.moved(0, at)));
                m.frags[f].extend_from_slice(reply);
            }
            SlotKind::Broadcast { frags, .. } => {
                frags[usize::from(to.frag)].extend_from_slice(reply)
            }
            SlotKind::RedisMulti(m) => m.frags[usize::from(to.frag)].extend_from_slice(reply),
        }
        if done {
            slot.remaining = slot.remaining.saturating_sub(1);
        }
    }
    c.drain_ready();
    c.mark_dirty(ci, dirty);
}

impl Worker {
    pub(super) fn mark_client(&mut self, ci: usize) {
        if let Some(c) = self.clients.get_mut(ci) {
            c.mark_dirty(ci, &mut self.dirty_clients);
        }
    }

    /// Reads and parses until the socket is empty. `drain`: keep reading until `WouldBlock`
    /// or EOF even after a short read (the peer closed, or events were skipped while paused).
    pub(super) fn client_readable(&mut self, ci: usize, drain: bool) {
        for _ in 0..MAX_READS_PER_TURN {
            let Some(c) = self.clients.get_mut(ci) else {
                return;
            };
            if c.paused || c.closing {
                return;
            }
            if !c.rbuf.has_storage() {
                if let Some(storage) = self.read_pool.pop() {
                    c.rbuf.set_storage(storage);
                }
            }
            match c.rbuf.read_from(&mut c.stream) {
                Ok((0, _)) => {
                    c.eof = true;
                    c.closing = true;
                    self.mark_client(ci);
                    return;
                }
                Ok((_, more)) => {
                    self.parse_client(ci);
                    // Idle connections hold no read buffer: it goes back to the pool.
                    if let Some(c) = self.clients.get_mut(ci) {
                        if let Some(storage) = c.rbuf.take_storage() {
                            if self.read_pool.len() < READ_POOL_MAX {
                                self.read_pool.push(storage);
                            }
                        }
                    }
                    if !more && !drain {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_client(ci, true);
                    return;
                }
            }
        }
        // A client that keeps its socket full gets another turn after everyone else.
        self.read_again.push((ci, drain));
    }

    pub(super) fn flush_client(&mut self, ci: usize) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if !c.big_wait.is_empty() {
            self.big_gets(ci);
        }
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.dirty = false;
        while c.wpos < c.wbuf.len() {
            match c.stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => {
                    self.close_client(ci, true);
                    return;
                }
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_client(ci, true);
                    return;
                }
            }
        }
        // TLS: records the socket refused earlier; the connection may close once they are out.
        let held_back = match c.stream.flush() {
            Ok(()) => false,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Err(_) => {
                self.close_client(ci, true);
                return;
            }
        };
        if c.overflowed {
            crate::log::warn(&format!(
                "client closed: {} MB of replies it does not read",
                c.unsent() >> 20
            ));
            self.close_client(ci, true);
            return;
        }
        if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            c.wpos = 0;
            if c.wbuf.capacity() > 16 * 1024 {
                c.wbuf = Vec::new();
            }
            if c.closing && c.slots.is_empty() && !held_back {
                self.close_client(ci, false);
                return;
            }
        }
        if c.paused && !c.over_limits(2) {
            c.paused = false;
            // Parsed in the next turn's read phase: requests are not taken in while replies
            // go out (a delete spooled now would be appended between a sync and the replies
            // it released).
            self.resumed.push(ci);
        }
    }

    pub(super) fn close_client(&mut self, ci: usize, error: bool) {
        if !self.clients.contains(ci) {
            return;
        }
        // Closing the socket removes it from epoll: no deregister call needed.
        let mut c = self.clients.remove(ci);
        // The read buffer goes back to the pool: freeing 16 KB per short-lived connection
        // makes the allocator hand memory back to the kernel (madvise, TLB shootdowns).
        c.rbuf.clear();
        if let Some(storage) = c.rbuf.take_storage() {
            if self.read_pool.len() < READ_POOL_MAX {
                self.read_pool.push(storage);
            }
        }
        let counters = &c.rt.counters[self.id].pool;
        counters.client_connections.add(-1);
        if error {
            counters.client_err.add(1);
        } else if c.eof {
            counters.client_eof.add(1);
        }
        c.rt.clients
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.globals.per_worker[self.id].curr_connections.add(-1);
    }

    /// Fills the slot `to` waits at with the whole of `reply` (a request that was given a
    /// place in its client's queue and then could not be sent, or no longer can).
    pub(super) fn answer_slot(&mut self, to: ReplyTo, reply: &[u8]) {
        deliver(
            &mut self.clients,
            &mut self.dirty_clients,
            to,
            reply,
            &[],
            true,
        );
    }

    pub(super) fn local_reply(&mut self, ci: usize, bytes: &[u8]) {
        if let Some(c) = self.clients.get_mut(ci) {
            c.reply(bytes);
        }
        self.mark_client(ci);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_multi_merges_or_answers_an_error() {
        let slot3 = |kind, frags: Vec<&[u8]>, resp3| Slot {
            remaining: 0,
            kind: SlotKind::RedisMulti(Box::new(RedisMulti {
                kind,
                nkeys: 3,
                positions: vec![vec![0, 2], vec![1]],
                frags: frags.into_iter().map(|f| f.to_vec()).collect(),
                resp3,
            })),
            buf: Vec::new(),
            bin: None,
            big: false,
            hot: None,
        };
        let slot = |kind, frags| slot3(kind, frags, false);
        let mut out = Vec::new();
        finish_slot(
            slot(
                Kind::MultiGet,
                vec![b"*2\r\n$1\r\na\r\n$-1\r\n", b"*1\r\n$1\r\nb\r\n"],
            ),
            &mut out,
        );
        assert_eq!(out, b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
        out.clear();
        // A RESP3 client gets the merged nils as nulls.
        finish_slot(
            slot3(
                Kind::MultiGet,
                vec![b"*2\r\n$1\r\na\r\n$-1\r\n", b"*1\r\n$1\r\nb\r\n"],
                true,
            ),
            &mut out,
        );
        assert_eq!(out, b"*3\r\n$1\r\na\r\n$1\r\nb\r\n_\r\n");
        out.clear();
        finish_slot(slot(Kind::MultiSum, vec![b":2\r\n", b":1\r\n"]), &mut out);
        assert_eq!(out, b":3\r\n");
        out.clear();
        let down: &[u8] = b"-ERR Connection refused\r\n";
        finish_slot(slot(Kind::MultiSet, vec![b"+OK\r\n", down]), &mut out);
        assert_eq!(out, down);
        out.clear();
        // A reply of the wrong shape never reaches the client half-merged.
        finish_slot(
            slot(Kind::MultiGet, vec![b"*1\r\n:1\r\n", b"+OK\r\n"]),
            &mut out,
        );
        assert_eq!(out, b"-ERR invalid reply from server\r\n");
    }

    #[test]
    fn broadcast_needs_every_ok() {
        let mut out = Vec::new();
        let slot = |frags: Vec<&[u8]>, noreply| Slot {
            remaining: 0,
            kind: SlotKind::Broadcast {
                frags: frags.into_iter().map(|f| f.to_vec()).collect(),
                noreply,
            },
            buf: Vec::new(),
            bin: None,
            big: false,
            hot: None,
        };
        finish_slot(slot(vec![b"OK\r\n", b"OK\r\n"], false), &mut out);
        assert_eq!(out, b"OK\r\n");
        out.clear();
        finish_slot(
            slot(vec![b"OK\r\n", b"SERVER_ERROR x\r\n"], false),
            &mut out,
        );
        assert_eq!(out, b"SERVER_ERROR x\r\n");
        out.clear();
        finish_slot(slot(vec![b"OK\r\n", b"OK\r\n"], true), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn noreply_drops_all_but_errors() {
        let mut out = Vec::new();
        let slot = |buf: &[u8]| Slot {
            remaining: 0,
            kind: SlotKind::Broadcast {
                frags: vec![b"OK\r\n".to_vec(), buf.to_vec()],
                noreply: true,
            },
            buf: Vec::new(),
            bin: None,
            big: false,
            hot: None,
        };
        finish_slot(slot(b"ERRORX\r\n"), &mut out);
        assert!(out.is_empty(), "not an error line: dropped");
        finish_slot(slot(b"ERROR\r\n"), &mut out);
        assert_eq!(out, b"ERROR\r\n");
    }
}
