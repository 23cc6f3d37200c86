//! Hot keys in the request path: gets feed the sampler; a plain one-key `get` of a hot key
//! is answered from the pool's hot-key cache, or routed with a tag that offers its reply to
//! the cache; a write moves its keys' generations when it is routed and again when its
//! reply is in (`crate::hot`). Everything else is routed as usual.

use hotkeys::Lookup;
use proto::Request;

use super::Worker;
use crate::hot::{HotShared, HotTag, Slots};

impl Worker {
    /// Routes a request of a pool with hot-key handling on.
    #[inline(never)]
    pub(super) fn route_hot(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        // Taken out for the request and put back: no reference count traffic per get.
        let Some(hot) = self.pools[p].hot.take() else {
            return self.route_cold(ci, p, req, raw);
        };
        let tag = self.hot_request(ci, p, &hot, &req);
        self.pools[p].hot = Some(hot);
        let tag = match tag {
            Hot::Answered => return,
            Hot::Route(tag) => tag,
        };
        let Some(tag) = tag else {
            return self.route_cold(ci, p, req, raw);
        };
        let c = &self.clients[ci];
        let seq = c.head_seq + c.slots.len() as u64;
        self.route_cold(ci, p, req, raw);
        // No slot: answered at once (an error); a write's tag bumps as it is dropped.
        if let Some(c) = self.clients.get_mut(ci) {
            if let Some(slot) = c.slots.get_mut(seq.wrapping_sub(c.head_seq) as usize) {
                slot.hot = Some(Box::new(tag));
            }
        }
    }

    fn hot_request(
        &mut self,
        ci: usize,
        p: usize,
        hot: &std::sync::Arc<HotShared>,
        req: &Request<'_>,
    ) -> Hot {
        let write = |key: &[u8]| {
            let slot = hot.gens.slot(key);
            hot.gens.bump(slot);
            Hot::Route(Some(HotTag::Write {
                hot: hot.clone(),
                slots: Slots::One(slot),
            }))
        };
        match req {
            Request::Get { keys, cas } => {
                let mut n = 0;
                let mut only: &[u8] = b"";
                let mut now_ms = None;
                for k in keys.flatten() {
                    n += 1;
                    only = k;
                    if self.pools[p].sampler.tick() {
                        let now = *now_ms.get_or_insert_with(|| hot.now_ms(self.now));
                        self.sample(p, hot, k, now);
                    }
                }
                // gets needs the CAS unique of the item in the server: never from here.
                if *cas || n != 1 || hot.hot_keys() == 0 {
                    return Hot::Route(None);
                }
                let now_ms = now_ms.unwrap_or_else(|| hot.now_ms(self.now));
                let sent = hot.gens.stamp(hot.gens.slot(only));
                match hot.lookup(only, now_ms, sent) {
                    Lookup::Cold => Hot::Route(None),
                    Lookup::Hit(reply) => {
                        hot.hits[self.id].add(1);
                        self.local_reply(ci, &reply);
                        Hot::Answered
                    }
                    Lookup::Miss => Hot::Route(Some(HotTag::Fill {
                        hot: hot.clone(),
                        key: only.into(),
                        sent,
                        expires_ms: now_ms + u64::from(hot.cfg.ttl_ms),
                    })),
                }
            }
            Request::Store { key, .. }
            | Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. }
            | Request::LeaseSet { key, .. } => write(key),
            Request::MetaSet { key, .. }
            | Request::MetaDelete { key, .. }
            | Request::MetaArithmetic { key, .. } => write(key.as_bytes()),
            // mg is never answered from here; it writes when it creates (N), marks stale
            // (I) or touches (T).
            Request::MetaGet { key, flags, .. }
                if flags.has(b'N') || flags.has(b'I') || flags.has(b'T') =>
            {
                write(key.as_bytes())
            }
            // gat touches its keys: a write of each.
            Request::Gat { keys, .. } => {
                let slots: Box<[u32]> = keys.flatten().map(|k| hot.gens.slot(k)).collect();
                let slots = Slots::Many(slots);
                slots.bump(&hot.gens);
                Hot::Route(Some(HotTag::Write {
                    hot: hot.clone(),
                    slots,
                }))
            }
            Request::FlushAll { .. } => {
                hot.gens.bump_all();
                Hot::Route(Some(HotTag::Write {
                    hot: hot.clone(),
                    slots: Slots::All,
                }))
            }
            _ => Hot::Route(None),
        }
    }
}

impl Worker {
    /// A sampled get of `key`, with its server when the pool places keys itself (an
    /// mcrouter config's route tree decides per request: the share alone picks hot keys).
    #[inline(never)]
    fn sample(&mut self, p: usize, hot: &HotShared, key: &[u8], now_ms: u64) {
        let id = self.id;
        let placed = self.shared.mcrouter.is_none();
        let placement = &mut self.pools[p].placement;
        let server = if placed { placement.for_key(key) } else { None };
        let mut server_of = |k: &[u8]| if placed { placement.for_key(k) } else { None };
        hot.sample(id, key, server, now_ms, &mut server_of);
    }
}

enum Hot {
    /// Answered from the cache.
    Answered,
    /// To be routed, with what its reply owes the cache.
    Route(Option<HotTag>),
}
