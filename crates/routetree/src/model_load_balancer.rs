//! LoadBalancerRoute's settings. mcrouter weighs each child by the load its replies report;
//! memcached's replies report none, so with memcached behind it every child keeps mcrouter's
//! starting weight (1.0) and the route is a key hash with re-hashes on errors, or a random
//! pick. `load_ttl_ms` and `enable_thrift_server_load` only matter once loads are reported,
//! so they are read and checked, not kept.

use crate::model::{Shadow, Target};

/// LoadBalancerRoute over two children or more (fewer become NullRoute or the child).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadBalancer {
    /// The children, in config order.
    pub children: Vec<Target>,
    /// Appended to the routing key before hashing.
    pub salt: String,
    /// Children tried in all with `weighted-hashing` (at least 1, at most the children).
    pub failover_count: usize,
    /// How a child is chosen.
    pub algorithm: LoadBalancerAlgorithm,
    /// A PoolRoute's asynclog name: its servers' failed deletes are logged under it.
    pub asynclog: Option<String>,
    /// A PoolRoute's shadows, by the position of the server that answers.
    pub shadows: Vec<Shadow>,
}

/// LoadBalancerRoute's `algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadBalancerAlgorithm {
    /// `weighted-hashing` (the default): WeightedCh3 over the children's weights.
    WeightedHashing,
    /// `two-random-choices`: the less loaded of two random children.
    TwoRandomChoices,
}

impl LoadBalancerAlgorithm {
    /// The name in the config (and in mcrouter's route name).
    pub fn name(self) -> &'static str {
        match self {
            LoadBalancerAlgorithm::WeightedHashing => "weighted-hashing",
            LoadBalancerAlgorithm::TwoRandomChoices => "two-random-choices",
        }
    }
}
