//! ShardSplitRoute's plans: which sub-shard keys a request goes to, as mcrouter decides it.

use super::keysplit::host_id;
use super::{Eval, Plan};
use crate::model::{AllMode, ShardSplit, Target};

/// mcrouter moves hosts to a new split size in order of their host id modulo this.
const HOST_ID_MODULO: u32 = 16384;

/// The shard id of a routing key as mcrouter finds it: the text between the first and the
/// second colon, ending in a digit. Returned as the range it spans in `key`.
pub fn shard_id(key: &[u8]) -> Option<std::ops::Range<usize>> {
    let first = memchr::memchr(b':', key)? + 1;
    let second = first + memchr::memchr(b':', &key[first..])?;
    (second > first && key[second - 1].is_ascii_digit()).then_some(first..second)
}

/// The key of sub-shard `index` (at least 1): `full` with two letters after the shard id
/// ending at `shard_end` (`a`..`z` for the index minus one modulo 26, then divided by 26).
pub fn split_key(full: &[u8], shard_end: usize, index: usize) -> Vec<u8> {
    let n = index - 1;
    let mut key = Vec::with_capacity(full.len() + 2);
    key.extend_from_slice(&full[..shard_end]);
    key.push(b'a' + (n % 26) as u8);
    key.push(b'a' + (n / 26) as u8);
    key.extend_from_slice(&full[shard_end..]);
    key
}

impl ShardSplit {
    /// The number of sub-shards at `now` for a host with `host_id`: while the split grows,
    /// a host takes the new size once the elapsed part of the period passes its place.
    fn size_at(&self, now: i64, host_id: u32) -> usize {
        if self.old_size == self.new_size || now > self.start.saturating_add(self.period) {
            return self.new_size;
        }
        if now < self.start {
            return self.old_size;
        }
        let point = (now - self.start) as f64 / self.period as f64;
        let place = f64::from(host_id % HOST_ID_MODULO) / f64::from(HOST_ID_MODULO);
        if place < point {
            self.new_size
        } else {
            self.old_size
        }
    }
}

impl Eval<'_, '_> {
    /// mcrouter's ShardSplitRoute: a key of a split shard goes to this host's sub-shard
    /// (host id modulo the split size; sub-shard 0 is the key itself); a delete, when the
    /// split fans deletes out, goes to every sub-shard and the key itself answers.
    pub(super) fn shard_split(
        &mut self,
        destination: Target,
        splits: &[(String, ShardSplit)],
    ) -> Plan {
        let Some(shard) = shard_id(self.rk.hashed) else {
            return self.target(destination);
        };
        let id = &self.rk.hashed[shard.clone()];
        let Ok(at) = splits.binary_search_by(|(s, _)| s.as_bytes().cmp(id)) else {
            return self.target(destination);
        };
        let split = splits[at].1;
        let host = host_id();
        let size = split.size_at(self.now, host);
        if size <= 1 {
            return self.target(destination);
        }
        let full: Vec<u8> = [self.rk.prefix, self.rk.key].concat();
        let shard_end = self.rk.prefix.len() + shard.end;
        if self.op == "delete" && split.fanout_deletes {
            let mut plans = vec![self.target(destination)];
            for i in 1..size {
                plans.push(self.rekeyed(destination, split_key(&full, shard_end, i)));
            }
            return Plan::All {
                mode: AllMode::Initial,
                plans,
            };
        }
        match host as usize % size {
            0 => self.target(destination),
            i => self.rekeyed(destination, split_key(&full, shard_end, i)),
        }
    }
}

#[cfg(test)]
#[path = "plan_shard_split_tests.rs"]
mod tests;
