//! Requests waiting for a server connection's `max_outstanding` room, served fairly
//! between senders as mcrouter's OutstandingLimitRoute does: each sender with waiting
//! requests has one entry in a round, holding its requests in order; when room frees, the
//! entry at the head gives up its oldest request and, if it has more, goes to the back.
//! A client pipelining many requests thus cannot make a client with one wait behind all
//! of them.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

pub(crate) struct FairQueue<K, T> {
    /// Senders in serving order; each appears once.
    round: VecDeque<K>,
    waiting: HashMap<K, VecDeque<T>>,
    len: usize,
}

impl<K: Copy + Eq + Hash, T> Default for FairQueue<K, T> {
    fn default() -> Self {
        FairQueue {
            round: VecDeque::new(),
            waiting: HashMap::new(),
            len: 0,
        }
    }
}

impl<K: Copy + Eq + Hash, T> FairQueue<K, T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `item` behind `sender`'s earlier ones; a sender with none joins the round
    /// at its back.
    pub(crate) fn push(&mut self, sender: K, item: T) {
        let q = self.waiting.entry(sender).or_default();
        if q.is_empty() {
            self.round.push_back(sender);
        }
        q.push_back(item);
        self.len += 1;
    }

    /// The next request to go: the oldest of the sender at the head of the round.
    pub(crate) fn pop(&mut self) -> Option<(K, T)> {
        let sender = self.round.pop_front()?;
        let q = self.waiting.get_mut(&sender)?;
        let item = q.pop_front()?;
        if q.is_empty() {
            self.waiting.remove(&sender);
        } else {
            self.round.push_back(sender);
        }
        self.len -= 1;
        Some((sender, item))
    }

    /// Every waiting request, emptying the queue (the connection is gone).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (K, T)> + '_ {
        self.len = 0;
        let round = std::mem::take(&mut self.round);
        let mut waiting = std::mem::take(&mut self.waiting);
        round.into_iter().flat_map(move |k| {
            let q = waiting.remove(&k).unwrap_or_default();
            q.into_iter().map(move |t| (k, t))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::FairQueue;

    fn order(q: &mut FairQueue<u32, u32>) -> Vec<(u32, u32)> {
        std::iter::from_fn(|| q.pop()).collect()
    }

    #[test]
    fn a_lone_request_goes_second_not_after_a_pipeline() {
        let mut q = FairQueue::default();
        for i in 0..10 {
            q.push(1, i);
        }
        q.push(2, 100);
        assert_eq!(q.len(), 11);
        let got = order(&mut q);
        assert_eq!(got[0], (1, 0));
        assert_eq!(got[1], (2, 100), "{got:?}");
        let rest: Vec<u32> = got[2..].iter().map(|(_, i)| *i).collect();
        assert_eq!(
            rest,
            (1..10).collect::<Vec<_>>(),
            "a sender's requests stay in order"
        );
        assert!(q.is_empty());
    }

    #[test]
    fn senders_take_turns() {
        let mut q = FairQueue::default();
        for (s, i) in [
            (1, 10),
            (1, 11),
            (1, 12),
            (2, 20),
            (3, 30),
            (3, 31),
            (2, 21),
        ] {
            q.push(s, i);
        }
        let got: Vec<u32> = order(&mut q).into_iter().map(|(_, i)| i).collect();
        assert_eq!(got, vec![10, 20, 30, 11, 21, 31, 12]);
    }

    #[test]
    fn a_sender_that_ran_out_rejoins_at_the_back() {
        let mut q = FairQueue::default();
        q.push(1, 10);
        q.push(2, 20);
        q.push(2, 21);
        assert_eq!(q.pop(), Some((1, 10)));
        q.push(1, 11);
        // 2 was already in the round, so it goes before 1 comes back.
        assert_eq!(order(&mut q), vec![(2, 20), (1, 11), (2, 21)]);
    }

    #[test]
    fn drain_gives_every_request_once() {
        let mut q = FairQueue::default();
        for (s, i) in [(1, 10), (2, 20), (1, 11)] {
            q.push(s, i);
        }
        let mut all: Vec<u32> = q.drain().map(|(_, i)| i).collect();
        all.sort();
        assert_eq!(all, vec![10, 11, 20]);
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        q.push(3, 30);
        assert_eq!(q.pop(), Some((3, 30)));
    }
}
