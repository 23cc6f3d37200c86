//! LoadBalancerRoute's plan for one request, as mcrouter routes it in front of memcached:
//! memcached's replies carry no server load, so every child's weight stays at mcrouter's
//! starting 1.0.

use ring::PoolHash;

use super::{Eval, Plan};
use crate::model::{LoadBalancer, LoadBalancerAlgorithm, RouteId, Target};

/// The results on which mcrouter's LoadBalancerRoute tries another child: every error.
const ANY_ERROR: &[&str] = &[
    "timeout",
    "connect_timeout",
    "connect_error",
    "tko",
    "remote_error",
    "local_error",
    "client_error",
    "busy",
    "shutdown",
    "try_again",
    "deadline_exceeded",
];

impl Eval<'_, '_> {
    pub(super) fn load_balancer(&mut self, id: RouteId, lb: &LoadBalancer) -> Plan {
        let n = lb.children.len();
        match (lb.algorithm, n) {
            (_, 0) => Plan::Null,
            (_, 1) => self.load_balancer_child(lb, 0),
            // Equal loads: of the pair mcrouter draws it takes the second. With two children
            // the pair is always (0, 1), undrawn; with more, the second is uniform.
            (LoadBalancerAlgorithm::TwoRandomChoices, 2) => self.load_balancer_child(lb, 1),
            (LoadBalancerAlgorithm::TwoRandomChoices, _) => Plan::Random {
                plans: (0..n).map(|i| self.load_balancer_child(lb, i)).collect(),
            },
            (LoadBalancerAlgorithm::WeightedHashing, _) => {
                let order = self.weighted_hashing_order(&lb.salt, n, lb.failover_count);
                let mut plans: Vec<Plan> = order
                    .iter()
                    .map(|&i| self.load_balancer_child(lb, i))
                    .collect();
                if plans.len() == 1 {
                    return plans.pop().unwrap_or(Plan::Null);
                }
                let errors = ANY_ERROR.iter().map(|e| e.to_string()).collect();
                Plan::Failover {
                    order: (0..plans.len()).collect(),
                    plans,
                    least_failures: None,
                    max_error_tries: usize::MAX,
                    errors,
                    limit: None,
                    route: id,
                }
            }
        }
    }

    /// Child `i`, with a PoolRoute's asynclog name and shadows when it is one of its servers.
    fn load_balancer_child(&mut self, lb: &LoadBalancer, i: usize) -> Plan {
        match lb.children[i] {
            Target::Server { pool, index } => {
                let main = self.send(pool, index, lb.asynclog.as_ref());
                self.shadowed(main, i, &lb.shadows)
            }
            route => self.target(route),
        }
    }

    /// The children `weighted-hashing` tries for this key, in order: WeightedCh3 with equal
    /// weights over all `n` (salted with `salt`), then on each error, as mcrouter retries,
    /// the failed child's place is taken by the last one and WeightedCh3 runs over the ones
    /// left, salted with `salt` followed by the number of tries still allowed.
    pub(super) fn weighted_hashing_order(&self, salt: &str, n: usize, count: usize) -> Vec<usize> {
        let mut weights = vec![1.0; n];
        let mut left: Vec<usize> = (0..n).collect();
        let mut at = PoolHash::WeightedCh3(weights.clone()).index(&self.hashed(salt), n);
        let mut order = vec![left[at]];
        let mut retries = count.min(n);
        while retries > 1 {
            retries -= 1;
            weights.swap_remove(at);
            left.swap_remove(at);
            let salted = format!("{salt}{retries}");
            at = PoolHash::WeightedCh3(weights.clone()).index(&self.hashed(&salted), left.len());
            order.push(left[at]);
        }
        order
    }
}
