//! Lease pairing: which child of a FailoverRoute handed out a lease token, so that the
//! request that spends the token (mcrouter's `lease-set`, a meta `ms`/`md` with `C<token>`,
//! a `cas`) goes back to that child even after a failover, or after the primary came back.
//!
//! Tokens are not rewritten (mcrouter swaps in tokens of its own): the book is keyed by
//! (FailoverRoute, key, token), and holds at most [`MAX_TOKENS`] entries, each for the lease's
//! time (`mg`'s `N<ttl>`, else [`DEFAULT_TTL`], mcrouter's lease token lifetime). Past the
//! cap the oldest entries go first. Pure but for its lock: the caller passes the time.

use std::collections::hash_map::{HashMap, RandomState};
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::RouteId;

use crate::reply::Reply;
use crate::request::ReqSpec;

/// Most tokens remembered per config generation (about 100 bytes each).
pub const MAX_TOKENS: usize = 65_536;
/// How long a token is remembered when the request names no lease time (`lease-get`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// The longest a token is remembered, whatever `N<ttl>` says.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// A lease a FailoverRoute's child handed out, for [`LeaseBook::record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// The FailoverRoute.
    pub route: RouteId,
    /// The key as the client sent it.
    pub key: Vec<u8>,
    /// The lease token.
    pub token: u64,
    /// Which of the route's children (in config order) answered.
    pub child: usize,
    /// How long the lease lasts.
    pub ttl: Duration,
}

type Slot = (RouteId, u64, u64);

struct Entry {
    child: usize,
    expires: Instant,
    /// Tells this entry apart from an older one of the same slot still queued.
    seq: u64,
}

#[derive(Default)]
struct Book {
    map: HashMap<Slot, Entry>,
    /// Insertion order, for dropping the oldest.
    order: VecDeque<(Slot, u64)>,
    seq: u64,
}

/// Lease tokens -> the child that issued them, shared by the workers of one generation.
pub struct LeaseBook {
    book: Mutex<Book>,
    hasher: RandomState,
    cap: usize,
}

impl Default for LeaseBook {
    fn default() -> Self {
        LeaseBook::with_capacity(MAX_TOKENS)
    }
}

impl LeaseBook {
    /// A book holding at most `cap` tokens.
    pub fn with_capacity(cap: usize) -> LeaseBook {
        LeaseBook {
            book: Mutex::new(Book::default()),
            hasher: RandomState::new(),
            cap: cap.max(1),
        }
    }

    fn slot(&self, route: RouteId, key: &[u8], token: u64) -> Slot {
        (route, self.hasher.hash_one(key), token)
    }

    /// Remembers who issued a lease.
    pub fn record(&self, issued: &Issued, now: Instant) {
        let slot = self.slot(issued.route, &issued.key, issued.token);
        let mut b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        b.seq += 1;
        let seq = b.seq;
        b.map.insert(
            slot,
            Entry {
                child: issued.child,
                expires: now + issued.ttl.min(MAX_TTL),
                seq,
            },
        );
        b.order.push_back((slot, seq));
        // Drop the oldest while over the cap, and expired entries at the front.
        while let Some(&(front, front_seq)) = b.order.front() {
            let current = b.map.get(&front).map(|e| (e.seq, e.expires));
            let stale = current.is_none_or(|(s, _)| s != front_seq);
            let expired = current.is_some_and(|(_, t)| t <= now);
            if !(stale || expired || b.map.len() > self.cap) {
                break;
            }
            b.order.pop_front();
            if !stale {
                b.map.remove(&front);
            }
        }
    }

    /// The child that issued `token` for `key` through `route`, while the lease lasts.
    pub fn child(&self, route: RouteId, key: &[u8], token: u64, now: Instant) -> Option<usize> {
        let slot = self.slot(route, key, token);
        let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        b.map
            .get(&slot)
            .filter(|e| e.expires > now)
            .map(|e| e.child)
    }

    /// How many tokens are remembered (expired ones may still count until pushed out).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.book
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .len()
    }
}

/// The lease token a request spends: `lease-set`'s, the `C<token>` of `ms`/`md`, a `cas`'s
/// unique.
pub fn spent(req: &ReqSpec) -> Option<u64> {
    match req {
        ReqSpec::LeaseSet { token, .. } => Some(*token),
        ReqSpec::Store {
            cmd: proto::StoreCmd::Cas,
            cas,
            ..
        } => Some(*cas),
        ReqSpec::Meta { cmd, flags, .. } if cmd == b"ms" || cmd == b"md" => meta_flag(flags, b'C'),
        _ => None,
    }
}

/// The lease a reply to `req` hands out, and how long it lasts: a `lease-get` miss's
/// `LVALUE` token (tokens 0 and 1 are not leases, as in mcrouter), or the `c<cas>` of an
/// `mg` reply that won the lease (`W`).
pub fn handed_out(req: &ReqSpec, reply: &Reply) -> Option<(u64, Duration)> {
    let end = memchr::memchr(b'\n', &reply.bytes)?;
    let line = reply.bytes[..end].strip_suffix(b"\r")?;
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    match req {
        ReqSpec::LeaseGet { .. } => {
            if tokens.next()? != b"LVALUE" {
                return None;
            }
            let token = number(tokens.nth(1)?)?;
            (token > 1).then_some((token, DEFAULT_TTL))
        }
        ReqSpec::Meta {
            cmd: [b'm', b'g'],
            flags,
            ..
        } => {
            if !matches!(tokens.next()?, b"VA" | b"HD") {
                return None;
            }
            let mut won = false;
            let mut cas = None;
            for t in tokens {
                match t {
                    b"W" => won = true,
                    [b'c', digits @ ..] => cas = number(digits),
                    _ => {}
                }
            }
            let ttl = meta_flag(flags, b'N')
                .filter(|&n| n > 0)
                .map_or(DEFAULT_TTL, Duration::from_secs);
            cas.filter(|_| won).map(|c| (c, ttl))
        }
        _ => None,
    }
}

/// The number after flag `f` among a meta request's flag tokens.
fn meta_flag(flags: &[u8], f: u8) -> Option<u64> {
    flags
        .split(|&b| b == b' ')
        .find_map(|t| t.strip_prefix(&[f]))
        .and_then(number)
}

fn number(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(route: RouteId, key: &str, token: u64, child: usize, secs: u64) -> Issued {
        Issued {
            route,
            key: key.as_bytes().to_vec(),
            token,
            child,
            ttl: Duration::from_secs(secs),
        }
    }

    #[test]
    fn remembers_per_route_key_and_token_until_the_lease_ends() {
        let book = LeaseBook::default();
        let t0 = Instant::now();
        book.record(&issued(3, "k", 77, 1, 10), t0);
        assert_eq!(book.child(3, b"k", 77, t0), Some(1));
        assert_eq!(book.child(3, b"k", 78, t0), None, "another token");
        assert_eq!(book.child(3, b"j", 77, t0), None, "another key");
        assert_eq!(book.child(4, b"k", 77, t0), None, "another route");
        assert_eq!(
            book.child(3, b"k", 77, t0 + Duration::from_secs(9)),
            Some(1)
        );
        assert_eq!(book.child(3, b"k", 77, t0 + Duration::from_secs(10)), None);
        // A newer lease of the same slot replaces the older.
        book.record(&issued(3, "k", 77, 0, 10), t0 + Duration::from_secs(1));
        assert_eq!(book.child(3, b"k", 77, t0), Some(0));
    }

    #[test]
    fn holds_at_most_its_capacity_oldest_out_first() {
        let book = LeaseBook::with_capacity(100);
        let t0 = Instant::now();
        for token in 0..1000 {
            book.record(&issued(0, "k", token, 1, 3600), t0);
            assert!(book.len() <= 100);
        }
        assert_eq!(book.child(0, b"k", 899, t0), None);
        assert_eq!(book.child(0, b"k", 900, t0), Some(1));
        assert_eq!(book.child(0, b"k", 999, t0), Some(1));
        // Expired entries leave as new ones come in.
        let later = t0 + MAX_TTL + Duration::from_secs(1);
        book.record(&issued(0, "k", 5000, 1, 1), later);
        assert_eq!(book.len(), 1);
    }

    fn mg(flags: &str) -> ReqSpec {
        ReqSpec::Meta {
            cmd: *b"mg",
            key: b"k".to_vec(),
            flags: flags.as_bytes().to_vec(),
            data: None,
            binary: false,
            exptime: None,
        }
    }

    #[test]
    fn finds_the_tokens_of_leases() {
        let r = |b: &[u8]| Reply::from_server(b);
        let lease_get = ReqSpec::LeaseGet { key: b"k".to_vec() };
        assert_eq!(
            handed_out(&lease_get, &r(b"LVALUE k 12345 0 0\r\n\r\nEND\r\n")),
            Some((12345, DEFAULT_TTL))
        );
        assert_eq!(
            handed_out(&lease_get, &r(b"LVALUE k 1 0 0\r\n\r\nEND\r\n")),
            None,
            "a hot miss hands out nothing"
        );
        assert_eq!(
            handed_out(&lease_get, &r(b"VALUE k 0 1\r\nx\r\nEND\r\n")),
            None
        );
        let won = r(b"VA 0 t30 c9 W\r\n\r\n");
        assert_eq!(
            handed_out(&mg("f v c N30"), &won),
            Some((9, Duration::from_secs(30)))
        );
        assert_eq!(
            handed_out(&mg("c R5"), &r(b"HD c4 W X\r\n")),
            Some((4, DEFAULT_TTL))
        );
        assert_eq!(handed_out(&mg("c N30"), &r(b"VA 0 c9 Z\r\n\r\n")), None);
        assert_eq!(handed_out(&mg("N30"), &r(b"HD W\r\n")), None, "no token");
        assert_eq!(handed_out(&mg("c N30"), &r(b"EN\r\n")), None);
        let set = ReqSpec::LeaseSet {
            key: b"k".to_vec(),
            token: 12345,
            flags: 0,
            exptime: 0,
            data: b"v".to_vec(),
        };
        assert_eq!(spent(&set), Some(12345));
        let ms = ReqSpec::Meta {
            cmd: *b"ms",
            key: b"k".to_vec(),
            flags: b"T30 C9 I".to_vec(),
            data: Some(b"v".to_vec()),
            binary: false,
            exptime: Some(30),
        };
        assert_eq!(spent(&ms), Some(9));
        assert_eq!(spent(&mg("c N30")), None);
    }
}
