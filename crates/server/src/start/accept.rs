//! The acceptor thread: takes connections from the listeners and hands each to a worker.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};

use super::listen::Listener;
use crate::event::handoff::{self, Incoming};
use crate::placement;
use crate::shared::Shared;

pub fn accept_loop(
    shared: &Shared,
    mut poll: Poll,
    mut listeners: Vec<Listener>,
    senders: &[mpsc::Sender<Incoming>],
    wakers: &[Arc<Waker>],
) {
    for (i, l) in listeners.iter_mut().enumerate() {
        let src: &mut dyn mio::event::Source = match l {
            Listener::Tcp(l, _, _) => l,
            Listener::Unix(l, _) => l,
        };
        if let Err(e) = poll.registry().register(src, Token(i), Interest::READABLE) {
            stderr_line!("failed to register listener: {e}");
        }
    }
    let mut events = Events::with_capacity(64);
    let mut rr = 0usize;
    let mut open = vec![0usize; senders.len()];
    let limit = shared.settings.conn_limit;
    while !shared.shutdown.load(SeqCst) {
        if poll
            .poll(&mut events, Some(Duration::from_millis(500)))
            .is_err()
        {
            continue;
        }
        for ev in events.iter() {
            let Some(l) = listeners.get(ev.token().0) else {
                continue;
            };
            loop {
                let incoming = match l {
                    Listener::Tcp(l, listen, tls) => match l.accept() {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            if *tls {
                                Incoming::Tls(s, listen.clone())
                            } else {
                                Incoming::Tcp(s, listen.clone())
                            }
                        }
                        Err(_) => break,
                    },
                    Listener::Unix(l, path) => match l.accept() {
                        Ok((s, _)) => Incoming::Unix(s, path.clone()),
                        Err(_) => break,
                    },
                };
                if shared.curr_conns.fetch_add(1, SeqCst) >= limit {
                    shared.curr_conns.fetch_sub(1, SeqCst);
                    reject(shared, incoming);
                    continue;
                }
                for (o, c) in open.iter_mut().zip(&shared.worker_conns) {
                    *o = c.load(SeqCst);
                }
                let cpu = match &incoming {
                    Incoming::Tcp(s, _) | Incoming::Tls(s, _) => {
                        placement::incoming_cpu(s.as_raw_fd())
                    }
                    _ => None,
                };
                let w = placement::choose(cpu, &open, &mut rr);
                shared.worker_conns[w].fetch_add(1, SeqCst);
                if senders[w].send(incoming).is_ok() {
                    handoff::wake(&wakers[w]);
                } else {
                    shared.worker_conns[w].fetch_sub(1, SeqCst);
                    shared.curr_conns.fetch_sub(1, SeqCst);
                }
            }
        }
    }
}

/// Over `-c`: tell the client as memcached does, then close.
fn reject(shared: &Shared, incoming: Incoming) {
    // Counters need a single writer per field: workers never touch this one, the acceptor owns it.
    shared.stats[0].rejected_connections.incr();
    if shared.verbose() > 0 {
        stderr_line!("Too many open connections");
    }
    const MSG: &[u8] = b"ERROR Too many open connections\r\n";
    match incoming {
        Incoming::Tcp(mut s, _) => {
            let _ = s.write(MSG);
        }
        Incoming::Unix(mut s, _) => {
            let _ = s.write(MSG);
        }
        // A TLS client could not read a plaintext reply: it just sees the connection close.
        Incoming::Tls(..) => {}
        // Only workers hand these to each other; they were admitted already.
        Incoming::Moved(_) => {}
    }
}
