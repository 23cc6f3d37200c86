//! One connection's request loop.

use crate::error::ConnError;
use crate::request::{OpKind, RequestGen, Sent};
use crate::stats::{record, Stats};
use proto::response::tally::ReplyParser;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Read buffer size; it only has to hold a partial line plus whatever arrived with it.
const READ_BUF: usize = 64 * 1024;

/// When and how much one connection sends.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub pipeline: usize,
    pub max_requests: Option<u64>,
    pub deadline: Option<Instant>,
    /// Fixed-rate mode: request k is due at `first_due + k * interval`.
    pub interval: Option<Duration>,
    pub first_due: Instant,
}

/// Runs until the plan is exhausted and every reply is in. Counts into `stats`
/// (the thread's current interval); an `Err` means the connection broke.
pub async fn drive<S>(
    mut sock: S,
    mut gen: RequestGen,
    plan: Plan,
    stats: Rc<RefCell<Stats>>,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut wbuf: Vec<u8> = Vec::with_capacity(4096);
    let mut rbuf = vec![0u8; READ_BUF];
    let (mut rstart, mut rend) = (0usize, 0usize);
    let mut inflight: VecDeque<(Sent, Instant)> = VecDeque::with_capacity(plan.pipeline);
    let mut parser = ReplyParser::new();
    let mut sent: u64 = 0;
    let mut now = Instant::now();
    let interval_ns = plan.interval.map(|d| d.as_nanos() as u64);
    // Rate mode: (asleep since, woke at) after the pacing timer fired. Requests that came
    // due while we slept on our own (1 ms granular) timer are timed from the wake-up:
    // the timer's lateness is ours, not the server's.
    let mut timer_wake: Option<(Instant, Instant)> = None;
    loop {
        // Fill the pipeline; every request goes into one buffer and one write.
        let mut exhausted = false;
        let mut next_due = None;
        while inflight.len() < plan.pipeline {
            if plan.max_requests.is_some_and(|m| sent >= m) {
                exhausted = true;
                break;
            }
            let t0 = match interval_ns {
                Some(iv) => {
                    let due = plan.first_due + Duration::from_nanos(iv.saturating_mul(sent));
                    if due > now {
                        next_due = Some(due);
                        break;
                    }
                    // Requests held back by a slow server are timed from when they were
                    // due, so stalls are not hidden (no coordinated omission).
                    match timer_wake {
                        Some((asleep, woke)) if due > asleep => woke,
                        _ => due,
                    }
                }
                None => now,
            };
            if plan.deadline.is_some_and(|d| t0 >= d) {
                exhausted = true;
                next_due = None;
                break;
            }
            let s = gen.write_next(&mut wbuf);
            inflight.push_back((s, t0));
            sent += 1;
        }
        timer_wake = None;
        if !wbuf.is_empty() {
            sock.write_all(&wbuf).await.map_err(ConnError::Write)?;
            // TLS may hold encrypted records back until flushed; a no-op on a plain socket.
            sock.flush().await.map_err(ConnError::Write)?;
            stats.borrow_mut().bytes_sent += wbuf.len() as u64;
            // Values of 100 KB+ should not pin that much memory per idle connection.
            if wbuf.capacity() > 1 << 20 {
                wbuf = Vec::with_capacity(4096);
            } else {
                wbuf.clear();
            }
        }
        if inflight.is_empty() {
            if exhausted {
                return Ok(());
            }
            if let Some(due) = next_due {
                tokio::time::sleep_until(due.into()).await;
                let woke = Instant::now();
                timer_wake = Some((now, woke));
                now = woke;
            } else {
                now = Instant::now();
            }
            continue;
        }

        if rstart == rend {
            rstart = 0;
            rend = 0;
        } else if rend == rbuf.len() {
            rbuf.copy_within(rstart..rend, 0);
            rend -= rstart;
            rstart = 0;
        }
        let n = match next_due {
            // Rate mode with room in the pipeline: wake for a reply or the next due time.
            Some(due) => {
                tokio::select! {
                    r = sock.read(&mut rbuf[rend..]) => r,
                    _ = tokio::time::sleep_until(due.into()) => {
                        let woke = Instant::now();
                        timer_wake = Some((now, woke));
                        now = woke;
                        continue;
                    }
                }
            }
            None => sock.read(&mut rbuf[rend..]).await,
        }
        .map_err(ConnError::Read)?;
        if n == 0 {
            return Err(ConnError::Closed);
        }
        rend += n;
        now = Instant::now();

        let mut st = stats.borrow_mut();
        st.bytes_received += n as u64;
        while let Some(&(sent_req, t0)) = inflight.front() {
            let (used, reply) = parser
                .parse(sent_req.expect, &rbuf[rstart..rend])
                .map_err(ConnError::Reply)?;
            rstart += used;
            let Some(reply) = reply else { break };
            inflight.pop_front();
            let us = now.saturating_duration_since(t0).as_micros() as u64;
            let op = match sent_req.kind {
                OpKind::Set => &mut st.sets,
                OpKind::Get => &mut st.gets,
            };
            op.ops += 1;
            record(&mut op.hist, us);
            if reply.error {
                st.errors += 1;
                if let Some(line) = parser.take_error_line() {
                    st.note_error_reply(&line);
                }
            }
            if sent_req.kind == OpKind::Get {
                st.hits += reply.hits as u64;
                if !reply.error {
                    st.misses += sent_req.keys.saturating_sub(reply.hits) as u64;
                }
            }
        }
        if inflight.is_empty() && rstart != rend {
            return Err(ConnError::Unasked);
        }
    }
}
