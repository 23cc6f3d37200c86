//! WarmUpRoute's `lease-get`, as mcrouter does it: cold's lease-get; on anything but a hit
//! or a hot miss, a plain read of warm. A warm hit answers the client as a lease-get hit and
//! fills cold in the background with a `lease-set` that spends the token cold handed out; a
//! warm miss answers with cold's reply (its lease token, for the client to fill).

use super::{Action, Exec, Kind};
use crate::reply::{self, is_hit, Reply};
use crate::request::ReqSpec;
use crate::Plan;

pub(super) struct WarmUpLease {
    /// The lease-get to cold.
    cold: usize,
    warm_plan: Plan,
    /// Cold planned for the lease-set.
    fill_plan: Plan,
    /// WarmUpRoute's `exptime` (0: none; the warm item's remaining TTL is used).
    exptime: u32,
    /// Once warm is being read: cold's reply, which answers if warm misses.
    cold_reply: Option<Reply>,
}

impl Exec {
    pub(super) fn build_warmup_lease(
        &mut self,
        id: usize,
        plans: [&Plan; 3],
        exptime: u32,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let [cold, warm, fill] = plans;
        Kind::WarmUpLease(WarmUpLease {
            cold: self.build(cold, Some(id), req, sample),
            warm_plan: warm.clone(),
            fill_plan: fill.clone(),
            exptime,
            cold_reply: None,
        })
    }

    pub(super) fn start_warmup_lease(&mut self, id: usize, out: &mut Vec<Action>) {
        if let Kind::WarmUpLease(w) = &self.nodes[id].kind {
            let cold = w.cold;
            self.start_node(cold, out);
        }
    }

    pub(super) fn warmup_lease_child_done(
        &mut self,
        id: usize,
        reply: Reply,
        out: &mut Vec<Action>,
    ) {
        let req = self.nodes[id].req;
        let Kind::WarmUpLease(w) = &mut self.nodes[id].kind else {
            return;
        };
        let Some(cold) = w.cold_reply.take() else {
            // Cold answered. A hot miss: someone else holds the lease and will set the value.
            if is_hit(&reply) || reply.bytes.starts_with(b"NOT_FOUND_HOT") {
                return self.complete(id, reply, out);
            }
            w.cold_reply = Some(reply);
            let warm_plan = w.warm_plan.clone();
            let key = self.requests[req].key().to_vec();
            self.requests.push(ReqSpec::FillRead { key });
            let read = self.requests.len() - 1;
            let child = self.build(&warm_plan, Some(id), read, &mut |_| false);
            return self.start_node(child, out);
        };
        let Some((flags, ttl, value)) = reply::meta_item(&reply.bytes) else {
            return self.complete(id, cold, out);
        };
        let key = self.requests[req].key().to_vec();
        let exptime = match (w.exptime, ttl) {
            (e, _) if e > 0 => i64::from(e),
            (_, t) if t > 0 => t,
            _ => 0,
        };
        let fill = ReqSpec::LeaseSet {
            key: key.clone(),
            token: lease_token(&cold.bytes),
            flags,
            exptime,
            data: value.to_vec(),
        };
        let mut hit = Vec::with_capacity(key.len() + value.len() + 32);
        hit.extend_from_slice(b"VALUE ");
        hit.extend_from_slice(&key);
        hit.extend_from_slice(format!(" {flags} {}\r\n", value.len()).as_bytes());
        hit.extend_from_slice(value);
        hit.extend_from_slice(b"\r\nEND\r\n");
        let fill_plan = w.fill_plan.clone();
        self.complete(id, Reply::from_server(&hit), out);
        self.background(&fill_plan, fill, out);
    }
}

/// The token of a lease-get miss (`LVALUE <key> <token> <flags> <bytes>`); 0 for any other
/// reply, as mcrouter's reply carries then.
fn lease_token(reply: &[u8]) -> u64 {
    let line = reply
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(b"");
    let mut words = line.split(|&b| b == b' ');
    if words.next() != Some(b"LVALUE") {
        return 0;
    }
    words
        .nth(1)
        .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "exec_warmup_lease_tests.rs"]
mod tests;
