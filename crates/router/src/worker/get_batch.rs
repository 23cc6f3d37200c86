//! Gets of many client requests merged into one backend `get` / `gets` line.
//!
//! memcached answers every get command with its own `sendmsg` (it flushes after each get,
//! while it batches the replies of other commands), so a proxy that forwards 100 clients'
//! gets as 100 commands costs the backend 100 sends. Merged into one line with all their
//! keys, the backend does one lookup pass and one send, and the router splits the reply
//! back: memcached returns the hits in the order the keys were asked, so walking the key
//! list alongside the items tells whose item each one is.

use proto::response::{is_get_reply, Item};

use super::backend::ReplyTo;

/// A merged get line may not grow past this many bytes of keys...
pub const MAX_BATCH_KEY_BYTES: usize = 8 * 1024;
/// ... nor past this many keys (one reply holds every value of the batch).
pub const MAX_BATCH_KEYS: usize = 128;

/// One request of a merged get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Where its reply goes.
    pub to: ReplyTo,
    /// How many consecutive keys of the batch are this request's.
    pub nkeys: u32,
}

/// The keys and requests of one merged get, in line order.
#[derive(Clone, Debug, Default)]
pub struct GetBatch {
    keys: Vec<u8>,
    key_ends: Vec<u32>,
    members: Vec<Member>,
}

impl GetBatch {
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn key_count(&self) -> usize {
        self.key_ends.len()
    }

    /// True when a request with `nkeys` keys of `bytes` bytes in all still fits.
    pub fn fits(&self, nkeys: usize, bytes: usize) -> bool {
        self.key_count() + nkeys <= MAX_BATCH_KEYS && self.keys.len() + bytes <= MAX_BATCH_KEY_BYTES
    }

    /// Adds one request's keys (as they go on the line, in its order).
    pub fn push<'k>(&mut self, mut member: Member, keys: impl IntoIterator<Item = &'k [u8]>) {
        let before = self.key_ends.len();
        for k in keys {
            self.keys.extend_from_slice(k);
            self.key_ends.push(self.keys.len() as u32);
        }
        member.nkeys = (self.key_ends.len() - before) as u32;
        self.members.push(member);
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.key_ends.clear();
        self.members.clear();
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.key_ends[i - 1] as usize
        };
        &self.keys[start..self.key_ends[i] as usize]
    }

    /// Splits the backend's reply to the merged line (`items`: its items, from the framer):
    /// calls `each` with every member, its own reply (its items then `END`; an error reply
    /// goes to every member whole) and that reply's items. `scratch` holds the parts.
    pub fn split_reply(
        &self,
        reply: &[u8],
        items: &[Item],
        scratch: &mut (Vec<u8>, Vec<Item>),
        mut each: impl FnMut(&Member, &[u8], &[Item]),
    ) {
        if !is_get_reply(reply) {
            for m in &self.members {
                each(m, reply, &[]);
            }
            return;
        }
        let (part, part_items) = scratch;
        let mut next_item = 0;
        let mut next_key = 0;
        for m in &self.members {
            part.clear();
            part_items.clear();
            for k in next_key..next_key + m.nkeys as usize {
                if let Some(item) = items.get(next_item) {
                    if reply[item.key.clone()] == *self.key(k) {
                        part_items.push(item.moved(item.item.start, part.len()));
                        part.extend_from_slice(&reply[item.item.clone()]);
                        next_item += 1;
                    }
                }
            }
            next_key += m.nkeys as usize;
            part.extend_from_slice(b"END\r\n");
            each(m, part, part_items);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proto::response::{Frame, Framer};

    fn member(client: u32) -> Member {
        Member {
            to: ReplyTo {
                client,
                gen: 7,
                seq: u64::from(client) * 10,
                frag: 0,
            },
            nkeys: 0,
        }
    }

    fn value(key: &str, data: &str) -> Vec<u8> {
        format!("VALUE {key} 0 {}\r\n{data}\r\n", data.len()).into_bytes()
    }

    fn split(batch: &GetBatch, reply: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut scratch = Default::default();
        let mut framer = Framer::new();
        let items = match framer.next(reply) {
            Frame::Complete(_) => framer.items().to_vec(),
            other => panic!("{other:?}"),
        };
        batch.split_reply(reply, &items, &mut scratch, |m, r, r_items| {
            // Each part's items are where its bytes are.
            let mut f = Framer::new();
            assert_eq!(f.next(r), Frame::Complete(r.len()));
            assert_eq!(f.items(), r_items);
            out.push((m.to.client, r.to_vec()))
        });
        out
    }

    #[test]
    fn hits_go_to_the_request_that_asked() {
        let mut b = GetBatch::default();
        b.push(member(1), [&b"a"[..], b"b"]);
        b.push(member(2), [&b"c"[..]]);
        b.push(member(3), [&b"b"[..], b"d"]);
        assert_eq!(b.members()[0].nkeys, 2);
        assert_eq!(b.key_count(), 5);
        // a and d miss; b is asked twice and comes back twice.
        let mut reply = Vec::new();
        for (k, d) in [("b", "B"), ("c", "C"), ("b", "B")] {
            reply.extend(value(k, d));
        }
        reply.extend_from_slice(b"END\r\n");
        let got = split(&b, &reply);
        assert_eq!(
            got,
            vec![
                (1, [value("b", "B"), b"END\r\n".to_vec()].concat()),
                (2, [value("c", "C"), b"END\r\n".to_vec()].concat()),
                (3, [value("b", "B"), b"END\r\n".to_vec()].concat()),
            ]
        );
    }

    #[test]
    fn an_error_reply_goes_to_everyone() {
        let mut b = GetBatch::default();
        b.push(member(1), [&b"a"[..]]);
        b.push(member(2), [&b"b"[..]]);
        let err = b"SERVER_ERROR out of memory writing get response\r\n";
        assert_eq!(split(&b, err), vec![(1, err.to_vec()), (2, err.to_vec())]);
    }

    #[test]
    fn limits_are_enforced_by_fits() {
        let mut b = GetBatch::default();
        assert!(b.fits(MAX_BATCH_KEYS, MAX_BATCH_KEY_BYTES));
        assert!(!b.fits(MAX_BATCH_KEYS + 1, 1));
        b.push(member(1), [&[b'k'; 100][..]]);
        assert!(!b.fits(1, MAX_BATCH_KEY_BYTES - 99));
        b.clear();
        assert!(b.members().is_empty() && b.key_count() == 0);
        assert!(
            b.fits(MAX_BATCH_KEYS, MAX_BATCH_KEY_BYTES),
            "clear frees the whole budget"
        );
    }

    proptest! {
        /// Whatever subset of keys hits, splitting the merged reply gives each request
        /// exactly what the backend would have answered it alone.
        #[test]
        fn split_equals_separate_gets(
            reqs in prop::collection::vec(prop::collection::vec(0u8..6, 1..5), 1..8),
            hit_mask in any::<u8>(),
        ) {
            let hit = |k: u8| hit_mask & (1 << k) != 0;
            let name = |k: u8| format!("k{k}");
            let alone = |keys: &[u8]| {
                let mut r = Vec::new();
                for &k in keys.iter().filter(|&&k| hit(k)) {
                    r.extend(value(&name(k), &format!("v{k}")));
                }
                r.extend_from_slice(b"END\r\n");
                r
            };
            let mut b = GetBatch::default();
            for (i, keys) in reqs.iter().enumerate() {
                let names: Vec<String> = keys.iter().map(|&k| name(k)).collect();
                b.push(member(i as u32), names.iter().map(|n| n.as_bytes()));
            }
            let all: Vec<u8> = reqs.concat();
            let got = split(&b, &alone(&all));
            prop_assert_eq!(got.len(), reqs.len());
            for (i, keys) in reqs.iter().enumerate() {
                prop_assert_eq!(&got[i], &(i as u32, alone(keys)));
            }
        }
    }
}
