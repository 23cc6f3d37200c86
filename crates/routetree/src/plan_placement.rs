//! Where a key lands: the child a hash picks (by key or by bucket), a route's selected index,
//! and the orders failover policies try children in.

use super::Eval;
use crate::model::{Route, Target};

impl Eval<'_, '_> {
    /// The child `hash` picks among `n` for this key, or by the bucket id with `by_bucket`
    /// (its decimal digits, then the salt, as mcrouter's bucket selector hashes it).
    pub(super) fn pick(
        &self,
        hash: &ring::PoolHash,
        salt: &str,
        n: usize,
        bucket: Option<Option<u64>>,
    ) -> Option<usize> {
        let Some(bucket) = bucket else {
            return Some(hash.index(&self.hashed(salt), n));
        };
        let mut bytes = bucket?.to_string().into_bytes();
        bytes.extend_from_slice(salt.as_bytes());
        Some(hash.index(&bytes, n))
    }

    /// The bytes a hash function sees: the routing key (no prefix, up to `|#|`) and salt.
    pub(super) fn hashed(&self, salt: &str) -> std::borrow::Cow<'_, [u8]> {
        if salt.is_empty() {
            return std::borrow::Cow::Borrowed(self.rk.hashed);
        }
        let mut bytes = self.rk.hashed.to_vec();
        bytes.extend_from_slice(salt.as_bytes());
        std::borrow::Cow::Owned(bytes)
    }

    /// The index a PoolRoute or HashRoute picks for the key (mcrouter's "selected index" of
    /// a normal route); 0 for other handles, as in mcrouter.
    pub(super) fn selected_index(&self, target: Target) -> usize {
        self.selected_index_at(target, self.bucket)
    }

    /// [`Self::selected_index`] under `bucket`.
    pub(super) fn selected_index_at(&self, target: Target, bucket: Option<u64>) -> usize {
        let Target::Route(id) = target else {
            return 0;
        };
        let (hash, salt, n, by_bucket) = match &self.config.routes[id] {
            Route::Pool {
                pool,
                hash,
                salt,
                by_bucket,
                ..
            } => (
                hash,
                salt,
                self.config.pools[*pool].servers.len(),
                *by_bucket,
            ),
            Route::Hash {
                children,
                hash,
                salt,
                by_bucket,
            } => (hash, salt, children.len(), *by_bucket),
            Route::RateLimit { target, .. } => return self.selected_index_at(*target, bucket),
            Route::SlowWarmUp { target, .. } => return self.selected_index_at(*target, bucket),
            Route::Bucketize { target, settings } => {
                return self.selected_index_at(*target, Some(settings.bucket(self.rk.hashed)))
            }
            _ => return 0,
        };
        if n == 0 {
            return 0;
        }
        self.pick(hash, salt, n, by_bucket.then_some(bucket))
            .unwrap_or(0)
    }

    /// DeterministicOrderPolicy's children for this key: the first, then picks of `hash`
    /// over all `n` children with the routing key salted "2", "3", ..., skipping children
    /// already picked and `skip` (up to 100 tries per pick, then a repeat is taken, as
    /// mcrouter does), `max_tries` in all.
    pub(super) fn deterministic_order(
        &self,
        n: usize,
        max_tries: usize,
        hash: &ring::PoolHash,
        skip: Option<usize>,
    ) -> Vec<usize> {
        let mut used = vec![false; n];
        used[0] = true;
        if let Some(s) = skip.filter(|&s| s < n) {
            used[s] = true;
        }
        let mut order = vec![0];
        let mut salt = 1u32;
        while order.len() < max_tries.min(n) {
            let mut attempts = 0;
            let index = loop {
                salt += 1;
                let index = hash.index(&self.hashed(&salt.to_string()), n);
                if !used[index] || attempts >= 100 {
                    break index;
                }
                attempts += 1;
            };
            used[index] = true;
            order.push(index);
        }
        order
    }
}

/// RendezvousPolicy's children for a routing key: the first, then child `i + 1` for each
/// server `i` in rendezvous order, leaving out `primary` (the server the first child picked).
pub(super) fn rendezvous_order(hash: &ring::Rendezvous, key: &[u8], primary: usize) -> Vec<usize> {
    let mut order = vec![0];
    order.extend(
        hash.order(key)
            .into_iter()
            .filter(|&i| i != primary)
            .map(|i| i + 1),
    );
    order
}
