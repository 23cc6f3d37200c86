//! WarmUpRoute's fill after a cold miss that warm had: warm's item (value, flags, TTL) is read
//! in the background and added to cold, while the client already has warm's value.

use super::{Action, Exec, Kind};
use crate::reply::{self, Reply};
use crate::request::ReqSpec;

impl Exec {
    /// A warm hit: read the item (value, flags, remaining TTL) from warm, in the background.
    pub(super) fn start_fill(&mut self, warm_up: usize, out: &mut Vec<Action>) {
        let Kind::WarmUp {
            warm_plan,
            cold_plan,
            exptime,
            ..
        } = &self.nodes[warm_up].kind
        else {
            return;
        };
        let (warm_plan, cold_plan, exptime) = (warm_plan.clone(), cold_plan.clone(), *exptime);
        let key = self.requests[self.nodes[warm_up].req].key().to_vec();
        self.requests.push(ReqSpec::FillRead { key });
        let req = self.requests.len() - 1;
        let fill = self.background_root(req);
        let read = self.build(&warm_plan, Some(fill), req, &mut |_| false);
        self.nodes[fill].kind = Kind::Fill {
            read,
            cold_plan,
            exptime,
        };
        self.start_node(fill, out);
    }

    /// The warm item arrived: `add` it to cold with the configured exptime, else with the
    /// item's remaining TTL.
    pub(super) fn add_to_cold(&mut self, fill: usize, item: &Reply, out: &mut Vec<Action>) {
        let Kind::Fill {
            cold_plan, exptime, ..
        } = &self.nodes[fill].kind
        else {
            return;
        };
        let Some((flags, ttl, value)) = reply::meta_item(&item.bytes) else {
            self.nodes[fill].done = true;
            return;
        };
        let exptime = match (*exptime, ttl) {
            (e, _) if e > 0 => i64::from(e),
            (_, t) if t > 0 => t,
            _ => 0,
        };
        let cold_plan = cold_plan.clone();
        let key = self.requests[self.nodes[fill].req].key().to_vec();
        self.requests.push(ReqSpec::Store {
            cmd: proto::StoreCmd::Add,
            key,
            flags,
            exptime,
            data: value.to_vec(),
            cas: 0,
        });
        let req = self.requests.len() - 1;
        let add = self.build(&cold_plan, Some(fill), req, &mut |_| false);
        self.start_node(add, out);
    }
}
