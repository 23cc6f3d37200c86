//! Gets of many client requests merged into one backend `get` / `gets` line.
//!
//! memcached answers every get command with its own `sendmsg` (it flushes after each get,
//! while it batches the replies of other commands), so a proxy that forwards 100 clients'
//! gets as 100 commands costs the backend 100 sends. Merged into one line with all their
//! keys, the backend does one lookup pass and one send, and the router splits the reply
//! back: memcached returns the hits in the order the keys were asked, so walking the key
//! list alongside the items tells whose item each one is. A reply of many large values is
//! split as it arrives: a request is answered once an item for a later key shows its keys
//! are done, so the router never holds all of such a reply at once.

use proto::response::{is_get_reply, AskedKeys, Item};

use super::reply_to::ReplyTo;

/// A merged get line may not grow past this many bytes of keys...
pub const MAX_BATCH_KEY_BYTES: usize = 8 * 1024;
/// ... nor past this many keys (one reply holds every value of the batch).
pub const MAX_BATCH_KEYS: usize = 128;
/// A merged reply is split as it arrives once this much of it is buffered. Not sooner:
/// splitting smaller replies early keeps the read buffer small, which for pipelined 100 KB
/// gets cost 0.19 more reads and 0.015 more `madvise` per request (the client buffers are
/// freed and grown more often); the pause keeps an honest client's batches under it.
pub const SPLIT_EARLY_FROM: usize = 8 * 1024 * 1024;

/// One request of a merged get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Where its reply goes.
    pub to: ReplyTo,
    /// How many consecutive keys of the batch are this request's.
    pub nkeys: u32,
}

/// The keys of one get line, in line order, and the requests it answers: one, or several
/// merged. The reply's items are checked against the keys as they are framed.
#[derive(Clone, Debug, Default)]
pub struct GetBatch {
    keys: Vec<u8>,
    key_ends: Vec<u32>,
    members: Vec<Member>,
    /// Members already answered from the first items of the reply.
    answered: usize,
}

impl GetBatch {
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The members not answered yet.
    pub fn waiting(&self) -> &[Member] {
        &self.members[self.answered..]
    }

    /// The keys of the members already answered.
    fn answered_keys(&self) -> usize {
        self.members[..self.answered]
            .iter()
            .map(|m| m.nkeys as usize)
            .sum()
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
        self.answered = 0;
    }

    /// The keys on the line, in order: what the reply's items must follow.
    pub fn asked(&self) -> AskedKeys<'_> {
        AskedKeys::new(&self.keys, &self.key_ends)
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
            for m in self.waiting() {
                each(m, reply, &[]);
            }
            return;
        }
        let mut next_item = 0;
        let mut next_key = self.answered_keys();
        for m in self.waiting() {
            let first = next_item;
            next_item = self.walk(m, next_key, reply, items, next_item);
            next_key += m.nkeys as usize;
            Self::answer(m, reply, &items[first..next_item], scratch, &mut each);
        }
    }

    /// Answers the waiting members whose replies the `items` so far of an incomplete reply
    /// settle: those followed by an item of a later key. Returns how many items and how
    /// many bytes of `partial` they used (the caller drops them), or None if none is settled.
    pub fn split_partial(
        &mut self,
        partial: &[u8],
        items: &[Item],
        scratch: &mut (Vec<u8>, Vec<Item>),
        mut each: impl FnMut(&Member, &[u8], &[Item]),
    ) -> Option<(usize, usize)> {
        let (mut next_item, mut answered, mut next_key) = (0, self.answered, self.answered_keys());
        while let Some(m) = self.members.get(answered) {
            let end = self.walk(m, next_key, partial, items, next_item);
            if end >= items.len() {
                break; // its last keys may still have items coming
            }
            Self::answer(m, partial, &items[next_item..end], scratch, &mut each);
            (next_item, answered, next_key) = (end, answered + 1, next_key + m.nkeys as usize);
        }
        if answered == self.answered {
            return None;
        }
        self.answered = answered;
        Some((next_item, items[next_item].item.start))
    }

    /// Matches member `m`'s keys, from key `first_key`, with the items from `next_item`;
    /// returns the index after its last item. memcached returns hits in the order asked.
    fn walk(
        &self,
        m: &Member,
        first_key: usize,
        buf: &[u8],
        items: &[Item],
        mut next_item: usize,
    ) -> usize {
        for k in first_key..first_key + m.nkeys as usize {
            if let Some(item) = items.get(next_item) {
                if buf[item.key.clone()] == *self.asked().get(k) {
                    next_item += 1;
                }
            }
        }
        next_item
    }

    /// Gives `m` its `items` (of `buf`) and `END`.
    fn answer(
        m: &Member,
        buf: &[u8],
        items: &[Item],
        (part, part_items): &mut (Vec<u8>, Vec<Item>),
        each: &mut impl FnMut(&Member, &[u8], &[Item]),
    ) {
        part.clear();
        part_items.clear();
        for item in items {
            part_items.push(item.moved(item.item.start, part.len()));
            part.extend_from_slice(&buf[item.item.clone()]);
        }
        part.extend_from_slice(b"END\r\n");
        each(m, part, part_items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proto::response::{AskedKeys, Expect, Frame, Framer};

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
        let items = match framer.next(reply, Expect::Get, batch.asked()) {
            Frame::Complete(_) => framer.items().to_vec(),
            other => panic!("{other:?}"),
        };
        batch.split_reply(reply, &items, &mut scratch, |m, r, r_items| {
            // Each part's items are where its bytes are.
            let mut f = Framer::new();
            assert_eq!(
                f.next(r, Expect::Any, AskedKeys::NONE),
                Frame::Complete(r.len())
            );
            assert_eq!(f.items(), r_items);
            out.push((m.to.client, r.to_vec()))
        });
        out
    }

    /// Feeds `reply` in pieces of `cuts` bytes (cycled), as the router's reads do: requests
    /// are answered from the first items when they can be, the rest once the reply ends.
    fn split_as_it_arrives(
        batch: &mut GetBatch,
        reply: &[u8],
        cuts: &[usize],
    ) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut scratch = Default::default();
        let mut framer = Framer::new();
        let mut buf = Vec::new();
        let mut sent = 0;
        for &cut in cuts.iter().cycle() {
            let end = (sent + cut.max(1)).min(reply.len());
            buf.extend_from_slice(&reply[sent..end]);
            sent = end;
            let mut record = |m: &Member, r: &[u8], r_items: &[Item]| {
                let mut f = Framer::new();
                assert_eq!(
                    f.next(r, Expect::Any, AskedKeys::NONE),
                    Frame::Complete(r.len())
                );
                assert_eq!(f.items(), r_items);
                out.push((m.to.client, r.to_vec()));
            };
            match framer.next(&buf, Expect::Get, batch.asked()) {
                Frame::Complete(n) => {
                    assert_eq!(n, buf.len());
                    batch.split_reply(&buf, framer.items(), &mut scratch, record);
                    return out;
                }
                Frame::Incomplete(_) => {
                    let items = framer.items_so_far().to_vec();
                    if let Some((k, n)) =
                        batch.split_partial(&buf, &items, &mut scratch, &mut record)
                    {
                        framer.drop_front(k, n);
                        buf.drain(..n);
                    }
                }
                Frame::Invalid => panic!("invalid"),
            }
        }
        unreachable!()
    }

    #[test]
    fn a_reply_split_as_it_arrives_answers_early_requests_first() {
        let mut b = GetBatch::default();
        b.push(member(1), [&b"a"[..]]);
        b.push(member(2), [&b"b"[..], b"c"]);
        b.push(member(3), [&b"d"[..]]);
        let (a, c, d) = (value("a", "A"), value("c", "C"), value("d", "D"));
        let reply = [a.clone(), c.clone(), d.clone(), b"END\r\n".to_vec()].concat();
        let mut scratch = Default::default();
        let mut framer = Framer::new();
        let mut got = Vec::new();
        // a's and c's items and part of d's: 1 is settled (an item of a later key follows);
        // 2 is not yet (c is its last key, and nothing after it has come).
        let partial = &reply[..a.len() + c.len() + 3];
        assert!(matches!(
            framer.next(partial, Expect::Get, b.asked()),
            Frame::Incomplete(_)
        ));
        let items = framer.items_so_far().to_vec();
        let (k, n) = b
            .split_partial(partial, &items, &mut scratch, |m, r, _| {
                got.push((m.to.client, r.to_vec()))
            })
            .expect("the first is settled");
        assert_eq!((k, n), (1, a.len()));
        assert_eq!(got, [(1, [a.clone(), b"END\r\n".to_vec()].concat())]);
        assert_eq!(b.waiting().len(), 2);
        framer.drop_front(k, n);
        let rest = &reply[n..];
        assert_eq!(
            framer.next(rest, Expect::Get, b.asked()),
            Frame::Complete(rest.len())
        );
        b.split_reply(rest, framer.items(), &mut scratch, |m, r, _| {
            got.push((m.to.client, r.to_vec()))
        });
        assert_eq!(got[1], (2, [c, b"END\r\n".to_vec()].concat()));
        assert_eq!(got[2], (3, [d, b"END\r\n".to_vec()].concat()));
    }

    #[test]
    fn a_reply_cut_short_by_an_error_splits_as_it_would_whole() {
        let err = b"SERVER_ERROR out of memory writing get response\r\n";
        let reply = [value("a", "A"), value("b", "B"), err.to_vec()].concat();
        let batch = || {
            let mut b = GetBatch::default();
            for (i, k) in ["a", "b", "c"].iter().enumerate() {
                b.push(member(i as u32 + 1), [k.as_bytes()]);
            }
            b
        };
        let whole = split(&batch(), &reply);
        for cut in 1..reply.len() {
            assert_eq!(
                split_as_it_arrives(&mut batch(), &reply, &[cut]),
                whole,
                "cut {cut}"
            );
        }
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
    fn a_merged_reply_must_follow_the_keys_of_its_line() {
        let mut b = GetBatch::default();
        b.push(member(1), [&b"a"[..]]);
        b.push(member(2), [&b"b"[..], b"c"]);
        let frame = |items: &[&str]| {
            let mut reply: Vec<u8> = items.iter().flat_map(|k| value(k, "v")).collect();
            reply.extend_from_slice(b"END\r\n");
            Framer::new().next(&reply, Expect::Get, b.asked())
        };
        assert!(matches!(frame(&["a", "c"]), Frame::Complete(_)));
        // Another request's key, one out of order, one twice: never split to anyone.
        for bad in [&["a", "z", "c"][..], &["b", "a"], &["c", "c"]] {
            assert_eq!(frame(bad), Frame::Invalid, "{bad:?}");
        }
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
        /// exactly what the backend would have answered it alone: whole, and when the reply
        /// arrives in pieces of any sizes and is split as it comes.
        #[test]
        fn split_equals_separate_gets(
            reqs in prop::collection::vec(prop::collection::vec(0u8..6, 1..5), 1..8),
            hit_mask in any::<u8>(),
            cuts in prop::collection::vec(1usize..24, 1..6),
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
            let batch = || {
                let mut b = GetBatch::default();
                for (i, keys) in reqs.iter().enumerate() {
                    let names: Vec<String> = keys.iter().map(|&k| name(k)).collect();
                    b.push(member(i as u32), names.iter().map(|n| n.as_bytes()));
                }
                b
            };
            let reply = alone(&reqs.concat());
            let whole = split(&batch(), &reply);
            let in_pieces = split_as_it_arrives(&mut batch(), &reply, &cuts);
            prop_assert_eq!(whole.len(), reqs.len());
            for (i, keys) in reqs.iter().enumerate() {
                prop_assert_eq!(&whole[i], &(i as u32, alone(keys)));
            }
            prop_assert_eq!(in_pieces, whole);
        }
    }
}
