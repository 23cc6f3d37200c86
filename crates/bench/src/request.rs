//! Builds request bytes straight into a reused buffer: no allocation per request.

use crate::args::{Protocol, Ratio, SizeRange};
use crate::keys::KeyGen;
use proto::response::tally::Expect;
use rand::rngs::SmallRng;
use rand::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Set,
    Get,
}

/// What was sent, remembered until its reply arrives.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub kind: OpKind,
    pub expect: Expect,
    /// Keys asked for (gets).
    pub keys: u32,
}

/// Per-connection request source: decides set or get, picks keys, writes bytes.
pub struct RequestGen {
    protocol: Protocol,
    prefix: Vec<u8>,
    ratio: Ratio,
    /// Position in the SET:GET cycle.
    cycle: u32,
    set_keys: KeyGen,
    get_keys: KeyGen,
    multi: u32,
    size: SizeRange,
    /// Expiry of stored items, drawn uniformly from this inclusive range (seconds).
    ttl: (u32, u32),
    /// Shared value bytes; a value of length n is its first n bytes.
    value: std::sync::Arc<[u8]>,
    pub rng: SmallRng,
}

impl RequestGen {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        protocol: Protocol,
        prefix: &str,
        ratio: Ratio,
        set_keys: KeyGen,
        get_keys: KeyGen,
        multi: usize,
        size: SizeRange,
        ttl: (u32, u32),
        value: std::sync::Arc<[u8]>,
        rng: SmallRng,
    ) -> Self {
        assert!(value.len() >= size.max);
        RequestGen {
            protocol,
            prefix: prefix.as_bytes().to_vec(),
            ratio,
            cycle: 0,
            set_keys,
            get_keys,
            multi: multi as u32,
            size,
            ttl,
            value,
            rng,
        }
    }

    fn next_kind(&mut self) -> OpKind {
        let period = self.ratio.set + self.ratio.get;
        let k = if self.cycle < self.ratio.set {
            OpKind::Set
        } else {
            OpKind::Get
        };
        self.cycle += 1;
        if self.cycle >= period {
            self.cycle = 0;
        }
        k
    }

    /// Appends the next request to `out`.
    pub fn write_next(&mut self, out: &mut Vec<u8>) -> Sent {
        match self.next_kind() {
            OpKind::Set => self.write_set(out),
            OpKind::Get => self.write_get(out),
        }
    }

    fn push_key(&self, out: &mut Vec<u8>, n: u64) {
        out.extend_from_slice(&self.prefix);
        push_u64(out, n);
    }

    /// The key as a RESP bulk string.
    fn push_bulk_key(&self, out: &mut Vec<u8>, n: u64) {
        out.push(b'$');
        push_u64(out, self.prefix.len() as u64 + decimal_len(n));
        out.extend_from_slice(b"\r\n");
        self.push_key(out, n);
        out.extend_from_slice(b"\r\n");
    }

    fn write_set(&mut self, out: &mut Vec<u8>) -> Sent {
        let key = self.set_keys.next(&mut self.rng);
        let len = if self.size.min == self.size.max {
            self.size.min
        } else {
            self.rng.gen_range(self.size.min..=self.size.max)
        };
        let ttl = match self.ttl {
            (lo, hi) if lo == hi => lo,
            (lo, hi) => self.rng.gen_range(lo..=hi),
        };
        match self.protocol {
            Protocol::Text => {
                out.extend_from_slice(b"set ");
                self.push_key(out, key);
                out.extend_from_slice(b" 0 ");
                push_u64(out, u64::from(ttl));
                out.push(b' ');
                push_u64(out, len as u64);
                out.extend_from_slice(b"\r\n");
            }
            Protocol::Redis => {
                let argc = if ttl > 0 { 5 } else { 3 };
                out.push(b'*');
                push_u64(out, argc);
                out.extend_from_slice(b"\r\n$3\r\nSET\r\n");
                self.push_bulk_key(out, key);
                out.push(b'$');
                push_u64(out, len as u64);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&self.value[..len]);
                out.extend_from_slice(b"\r\n");
                if ttl > 0 {
                    out.extend_from_slice(b"$2\r\nEX\r\n$");
                    push_u64(out, decimal_len(u64::from(ttl)));
                    out.extend_from_slice(b"\r\n");
                    push_u64(out, u64::from(ttl));
                    out.extend_from_slice(b"\r\n");
                }
                return Sent {
                    kind: OpKind::Set,
                    expect: Expect::RedisStore,
                    keys: 0,
                };
            }
            Protocol::Meta => {
                out.extend_from_slice(b"ms ");
                self.push_key(out, key);
                out.push(b' ');
                push_u64(out, len as u64);
                out.extend_from_slice(b" T");
                push_u64(out, u64::from(ttl));
                out.extend_from_slice(b" F0\r\n");
            }
        }
        out.extend_from_slice(&self.value[..len]);
        out.extend_from_slice(b"\r\n");
        Sent {
            kind: OpKind::Set,
            expect: match self.protocol {
                Protocol::Text => Expect::Store,
                Protocol::Meta => Expect::MetaStore,
                Protocol::Redis => unreachable!("returned above"),
            },
            keys: 0,
        }
    }

    fn write_get(&mut self, out: &mut Vec<u8>) -> Sent {
        let expect = match self.protocol {
            Protocol::Text => {
                out.extend_from_slice(b"get");
                for _ in 0..self.multi {
                    let k = self.get_keys.next(&mut self.rng);
                    out.push(b' ');
                    self.push_key(out, k);
                }
                out.extend_from_slice(b"\r\n");
                Expect::Get
            }
            Protocol::Redis if self.multi == 1 => {
                let k = self.get_keys.next(&mut self.rng);
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                self.push_bulk_key(out, k);
                Expect::RedisGet
            }
            Protocol::Redis => {
                out.push(b'*');
                push_u64(out, u64::from(self.multi) + 1);
                out.extend_from_slice(b"\r\n$4\r\nMGET\r\n");
                for _ in 0..self.multi {
                    let k = self.get_keys.next(&mut self.rng);
                    self.push_bulk_key(out, k);
                }
                Expect::RedisMultiGet
            }
            Protocol::Meta if self.multi == 1 => {
                let k = self.get_keys.next(&mut self.rng);
                out.extend_from_slice(b"mg ");
                self.push_key(out, k);
                out.extend_from_slice(b" v f\r\n");
                Expect::MetaGet
            }
            Protocol::Meta => {
                // Quiet mode hides misses; the `mn` no-op marks the end of the batch.
                for _ in 0..self.multi {
                    let k = self.get_keys.next(&mut self.rng);
                    out.extend_from_slice(b"mg ");
                    self.push_key(out, k);
                    out.extend_from_slice(b" v f q\r\n");
                }
                out.extend_from_slice(b"mn\r\n");
                Expect::MetaMultiGet
            }
        };
        Sent {
            kind: OpKind::Get,
            expect,
            keys: self.multi,
        }
    }
}

/// Decimal formatting without going through `fmt` (which is slow and may allocate).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Digits of `n` in decimal.
fn decimal_len(n: u64) -> u64 {
    n.checked_ilog10().map_or(1, |d| u64::from(d) + 1)
}

/// Printable value bytes (memcached does not care, but humans reading dumps do).
pub fn make_value(len: usize, rng: &mut SmallRng) -> std::sync::Arc<[u8]> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..len.max(1))
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::KeyPattern;
    use crate::keys::KeySpace;
    use rand::SeedableRng;

    fn gen(protocol: Protocol, ratio: Ratio, multi: usize) -> RequestGen {
        let space = KeySpace {
            min: 5,
            max: 7,
            zipf_exp: 1.0,
            stddev: None,
            median: None,
        };
        let mut rng = SmallRng::seed_from_u64(1);
        let value = make_value(4, &mut rng);
        RequestGen::new(
            protocol,
            "k:",
            ratio,
            KeyGen::new(KeyPattern::Sequential, space, 0, 1),
            KeyGen::new(KeyPattern::Sequential, space, 0, 1),
            multi,
            SizeRange { min: 4, max: 4 },
            (30, 30),
            value,
            rng,
        )
    }

    #[test]
    fn text_requests() {
        let mut g = gen(Protocol::Text, Ratio { set: 1, get: 2 }, 1);
        let mut out = Vec::new();
        let s = g.write_next(&mut out);
        assert_eq!(s.kind, OpKind::Set);
        assert_eq!(s.expect, Expect::Store);
        let v = String::from_utf8(g.value[..4].to_vec()).unwrap();
        assert_eq!(out, format!("set k:5 0 30 4\r\n{v}\r\n").as_bytes());
        out.clear();
        let s = g.write_next(&mut out);
        assert_eq!((s.kind, s.keys), (OpKind::Get, 1));
        assert_eq!(out, b"get k:5\r\n");
        out.clear();
        g.write_next(&mut out);
        assert_eq!(out, b"get k:6\r\n");
        out.clear();
        assert_eq!(g.write_next(&mut out).kind, OpKind::Set);
    }

    #[test]
    fn expiry_range_draws_each_set_its_ttl() {
        let mut g = gen(Protocol::Text, Ratio { set: 1, get: 0 }, 1);
        g.ttl = (10, 12);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let mut out = Vec::new();
            g.write_next(&mut out);
            let line = String::from_utf8_lossy(&out).into_owned();
            let ttl: u32 = line.split(' ').nth(3).unwrap().parse().unwrap();
            seen.insert(ttl);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![10, 11, 12]);
    }

    #[test]
    fn redis_requests() {
        let mut g = gen(Protocol::Redis, Ratio { set: 1, get: 1 }, 1);
        let mut out = Vec::new();
        assert_eq!(g.write_next(&mut out).expect, Expect::RedisStore);
        let v = String::from_utf8(g.value[..4].to_vec()).unwrap();
        let set = format!("*5\r\n$3\r\nSET\r\n$3\r\nk:5\r\n$4\r\n{v}\r\n$2\r\nEX\r\n$2\r\n30\r\n");
        assert_eq!(out, set.as_bytes());
        out.clear();
        assert_eq!(g.write_next(&mut out).expect, Expect::RedisGet);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$3\r\nk:5\r\n");
        let mut g = gen(Protocol::Redis, Ratio { set: 0, get: 1 }, 2);
        g.ttl = (0, 0);
        out.clear();
        let s = g.write_next(&mut out);
        assert_eq!((s.expect, s.keys), (Expect::RedisMultiGet, 2));
        assert_eq!(out, b"*3\r\n$4\r\nMGET\r\n$3\r\nk:5\r\n$3\r\nk:6\r\n");
        assert_eq!((decimal_len(0), decimal_len(9), decimal_len(10)), (1, 1, 2));
        assert_eq!(decimal_len(u64::MAX), 20);
    }

    #[test]
    fn text_multi_get() {
        let mut g = gen(Protocol::Text, Ratio { set: 0, get: 1 }, 4);
        let mut out = Vec::new();
        let s = g.write_next(&mut out);
        assert_eq!(s.keys, 4);
        assert_eq!(out, b"get k:5 k:6 k:7 k:5\r\n");
    }

    #[test]
    fn meta_requests() {
        let mut g = gen(Protocol::Meta, Ratio { set: 1, get: 1 }, 1);
        let mut out = Vec::new();
        assert_eq!(g.write_next(&mut out).expect, Expect::MetaStore);
        assert!(out.starts_with(b"ms k:5 4 T30 F0\r\n"));
        out.clear();
        assert_eq!(g.write_next(&mut out).expect, Expect::MetaGet);
        assert_eq!(out, b"mg k:5 v f\r\n");
        let mut g = gen(Protocol::Meta, Ratio { set: 0, get: 1 }, 2);
        out.clear();
        assert_eq!(g.write_next(&mut out).expect, Expect::MetaMultiGet);
        assert_eq!(out, b"mg k:5 v f q\r\nmg k:6 v f q\r\nmn\r\n");
    }

    #[test]
    fn decimal_formatting() {
        for n in [0u64, 7, 10, 99, 12345, u64::MAX] {
            let mut v = Vec::new();
            push_u64(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }
}
