//! A connection's request queue: what is sent and awaited on it, merged get lines, and
//! its `stats servers` state.

use std::time::Instant;

use proto::response::Expect;
use routetree::server_stats::ConnState;

use super::super::get_batch::{GetBatch, Member};
use super::super::reply_to::ReplyTo;
use super::{Backend, OpenGet, Pending};

impl Backend {
    pub(in crate::worker) fn counters(&self) -> &crate::counters::ServerCounters {
        &self.rt.counters[self.worker].servers[self.server]
    }

    /// The `stats servers` figures of its server, when an mcrouter pool's.
    pub(super) fn mc(&self) -> Option<&crate::counters::DestCounters> {
        self.rt.counters[self.worker].mc.get(self.server)
    }

    /// The connection is made: the requests queued meanwhile are no longer pending.
    pub(super) fn connected(&mut self) {
        self.connecting = false;
        if let Some(d) = self.mc() {
            d.pending.add(-i64::from(self.queued));
            d.set_state(ConnState::Up);
        }
    }

    /// The connection is gone (`Down`: dropped by an error or the server; `Closed`: by
    /// the router).
    pub(super) fn disconnected(&self, state: ConnState) {
        if let Some(d) = self.mc() {
            if self.connecting {
                d.pending.add(-i64::from(self.queued));
            }
            d.set_state(state);
        }
    }

    /// Appends a request to the write buffer and its entry to the queue.
    pub(in crate::worker) fn enqueue(
        &mut self,
        parts: &[&[u8]],
        to: ReplyTo,
        expect: Expect,
        batch: Option<Box<GetBatch>>,
        now: Instant,
    ) {
        let bytes: usize = parts.iter().map(|p| p.len()).sum();
        for part in parts {
            self.wbuf.extend_from_slice(part);
        }
        if let Some(open) = &mut self.open_get {
            open.wbuf_after += bytes;
            open.pending_after += 1;
            if !open.barred.contains(&(to.client, to.gen)) {
                open.barred.push((to.client, to.gen));
            }
        }
        self.pending.push_back(Pending {
            to,
            expect,
            at: now,
            bytes: bytes as u32,
            reqs: 1,
            batch,
            resend: None,
        });
        self.queued += 1;
        self.count_pending();
        let c = self.counters();
        c.requests.add(1);
        c.request_bytes.add(bytes as i64);
        c.out_queue.add(1);
        c.out_queue_bytes.add(bytes as i64);
    }

    /// Queues a get that is not merged, asking `keys`, which its reply's items must follow.
    pub(in crate::worker) fn enqueue_keyed<'k>(
        &mut self,
        parts: &[&[u8]],
        to: ReplyTo,
        expect: Expect,
        keys: impl IntoIterator<Item = &'k [u8]>,
        now: Instant,
    ) {
        let mut batch = self.spare.pop().unwrap_or_default();
        batch.push(Member { to, nkeys: 0 }, keys);
        self.enqueue(parts, to, expect, Some(batch), now);
    }

    /// A request of client (`client`, `gen`) was queued under another identity (an mcrouter
    /// execution's send): the client's later gets may not join the open get line either,
    /// or they would overtake it.
    pub(in crate::worker) fn bar(&mut self, client: u32, gen: u32) {
        if let Some(open) = &mut self.open_get {
            if !open.barred.contains(&(client, gen)) {
                open.barred.push((client, gen));
            }
        }
    }

    /// Queues a plain get/gets, merged into the open get line when it may join (see
    /// get_batch.rs and [`OpenGet`]).
    pub(in crate::worker) fn enqueue_get<'k>(
        &mut self,
        cas: bool,
        keys: impl Iterator<Item = &'k [u8]> + Clone,
        to: ReplyTo,
        now: Instant,
    ) {
        let (nkeys, bytes) = keys
            .clone()
            .fold((0, 0), |(n, len), k| (n + 1, len + 1 + k.len()));
        let joins = match &self.open_get {
            Some(o) => {
                o.cas == cas
                    && self.batch.fits(nkeys, bytes)
                    && !o.barred.contains(&(to.client, to.gen))
            }
            None => false,
        };
        if !joins {
            self.close_get();
            self.get_line
                .extend_from_slice(if cas { b"gets" } else { b"get" });
            self.open_get = Some(OpenGet {
                cas,
                at: now,
                wbuf_after: 0,
                pending_after: 0,
                barred: Vec::new(),
            });
        }
        for k in keys.clone() {
            self.get_line.push(b' ');
            self.get_line.extend_from_slice(k);
        }
        self.batch.push(Member { to, nkeys: 0 }, keys);
        self.queued += 1;
        self.count_pending();
        let c = self.counters();
        c.requests.add(1);
        c.request_bytes.add(bytes as i64);
    }

    /// A request queued while the connection is being made waits for it (mcrouter's
    /// pending request).
    #[inline]
    pub(super) fn count_pending(&self) {
        if self.connecting {
            if let Some(d) = self.mc() {
                d.pending.add(1);
            }
        }
    }

    /// Ends the open get line, if any, and puts it and its queue entry where the line
    /// opened.
    pub(in crate::worker) fn close_get(&mut self) {
        let Some(open) = self.open_get.take() else {
            return;
        };
        self.get_line.extend_from_slice(b"\r\n");
        let at = self.wbuf.len() - open.wbuf_after;
        self.wbuf.splice(at..at, self.get_line.drain(..));
        let bytes = (self.wbuf.len() - at - open.wbuf_after) as u32;
        let first = self.batch.members()[0];
        let reqs = self.batch.members().len() as u32;
        let next = self.spare.pop().unwrap_or_default();
        let entry = Pending {
            to: first.to,
            expect: Expect::Get,
            at: open.at,
            bytes,
            reqs,
            batch: Some(std::mem::replace(&mut self.batch, next)),
            resend: None,
        };
        let at = self.pending.len() - open.pending_after;
        self.pending.insert(at, entry);
        let c = self.counters();
        c.out_queue.add(1);
        c.out_queue_bytes.add(i64::from(bytes));
    }

    /// The request just queued (`frame`, for `to`) may be sent again elsewhere (a Redis
    /// Cluster redirection): its bytes are kept until its reply is read.
    pub(in crate::worker) fn keep_for_resend(
        &mut self,
        to: ReplyTo,
        meta: super::super::cluster::ResendMeta,
        frame: &[u8],
    ) {
        if let Some(p) = self.pending.back_mut().filter(|p| p.to == to) {
            p.resend = Some(meta);
            self.resend_bytes.push(frame);
        }
    }
}
