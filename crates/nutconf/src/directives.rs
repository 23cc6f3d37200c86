//! One pool's directives as nc_conf.c's command table reads them: each `key: value` (or
//! each element of `servers:`) checked and stored once, before defaults are applied.

use ring::{Distribution, Hash};

use super::error::ConfigError;
use super::listen::{parse_listen, Listen};
use super::scalar::{once, parse_bool, parse_num};
use super::server::{parse_dns_server, parse_server, DnsName, ServerSpec};
use super::tls::PoolTls;

/// Directive values of one pool as written, before defaults.
#[derive(Default)]
pub(super) struct RawPool {
    pub(super) name: String,
    pub(super) listen: Option<Listen>,
    pub(super) hash: Option<Hash>,
    pub(super) hash_tag: Option<[u8; 2]>,
    pub(super) distribution: Option<Distribution>,
    pub(super) timeout: Option<u32>,
    pub(super) backlog: Option<u32>,
    pub(super) client_connections: Option<u32>,
    pub(super) redis: Option<bool>,
    pub(super) redis_auth: Option<String>,
    pub(super) redis_db: Option<u32>,
    pub(super) redis_cluster: Option<bool>,
    pub(super) redis_sentinel: Option<String>,
    pub(super) redis_read_from: Option<super::ReadFrom>,
    pub(super) redis_backend_user: Option<String>,
    pub(super) redis_backend_auth: Option<String>,
    pub(super) redis_sentinel_user: Option<String>,
    pub(super) redis_sentinel_auth: Option<String>,
    pub(super) preconnect: Option<bool>,
    pub(super) tcpkeepalive: Option<bool>,
    pub(super) reuseport: Option<bool>,
    pub(super) auto_eject_hosts: Option<bool>,
    pub(super) server_connections: Option<u32>,
    pub(super) server_retry_timeout: Option<u32>,
    pub(super) server_failure_limit: Option<u32>,
    pub(super) servers: Vec<ServerSpec>,
    pub(super) client_auth: Option<String>,
    pub(super) tls: PoolTls,
    pub(super) dns: Vec<DnsName>,
    pub(super) dns_refresh_ms: Option<u32>,
    pub(super) item_size_max: Option<u32>,
    pub(super) server_max_inflight: Option<u32>,
    pub(super) big_value_split_threshold: Option<u32>,
    pub(super) big_value_batch_size: Option<u32>,
    pub(super) big_value_hide_reply_flag: Option<bool>,
    pub(super) hot_keys: Option<bool>,
    pub(super) hot_key_ttl: Option<u32>,
    pub(super) hot_key_share: Option<f64>,
    pub(super) hot_key_max: Option<u32>,
    pub(super) hot_key_sample: Option<u32>,
    pub(super) active_req_limit: Option<u32>,
    /// `gets_rate`, `gets_burst`, `sets_rate`, ... (see [`super::PoolRates`]).
    pub(super) rates: [Option<u32>; 6],
}

/// Applies one `key: value` (or one sequence element of `key:`), like nc_conf.c's
/// command table.
pub(super) fn set_directive(
    pool: &mut RawPool,
    key: &str,
    value: &str,
    line: usize,
) -> Result<(), ConfigError> {
    let err = |msg: &str| ConfigError::Directive {
        pool: pool.name.clone(),
        key: key.to_owned(),
        line,
        msg: msg.to_owned(),
    };
    // twemproxy refuses empty scalars before looking at the directive.
    if value.is_empty() {
        return Err(err("has an empty value"));
    }
    let num = |slot: &mut Option<u32>| parse_num(value).and_then(|n| once(slot, n));
    let flag = |slot: &mut Option<bool>| parse_bool(value).and_then(|b| once(slot, b));
    let text = |slot: &mut Option<String>| once(slot, value.to_owned());
    let positive = |slot: &mut Option<u32>| {
        parse_num(value)
            .and_then(|n| {
                if n == 0 {
                    Err("must be at least 1")
                } else {
                    Ok(n)
                }
            })
            .and_then(|n| once(slot, n))
    };
    let result = match key {
        "listen" => parse_listen(value).and_then(|l| once(&mut pool.listen, l)),
        "hash" => Hash::from_name(value)
            .ok_or("is not a valid hash")
            .and_then(|h| once(&mut pool.hash, h)),
        "hash_tag" => match value.as_bytes() {
            &[l, r] => once(&mut pool.hash_tag, [l, r]),
            _ => Err("is not a valid hash tag string with two characters"),
        },
        "distribution" => Distribution::from_name(value)
            .ok_or("is not a valid distribution")
            .and_then(|d| once(&mut pool.distribution, d)),
        "timeout" => num(&mut pool.timeout),
        "backlog" => num(&mut pool.backlog),
        "client_connections" => num(&mut pool.client_connections),
        "redis" => flag(&mut pool.redis),
        "tcpkeepalive" => flag(&mut pool.tcpkeepalive),
        "reuseport" => flag(&mut pool.reuseport),
        "redis_auth" => text(&mut pool.redis_auth),
        "redis_db" => num(&mut pool.redis_db),
        "preconnect" => flag(&mut pool.preconnect),
        "auto_eject_hosts" => flag(&mut pool.auto_eject_hosts),
        "server_connections" => num(&mut pool.server_connections),
        "server_retry_timeout" => num(&mut pool.server_retry_timeout),
        "server_failure_limit" => num(&mut pool.server_failure_limit),
        "servers" => match parse_dns_server(value) {
            Some(d) => d.map(|d| pool.dns.push(d)),
            None => parse_server(value).map(|s| pool.servers.push(s)),
        },
        "dns_refresh_ms" => num(&mut pool.dns_refresh_ms),
        // ---- memfleet-only directives (nutcracker rejects them) ----
        "client_auth" => text(&mut pool.client_auth),
        "redis_cluster" => flag(&mut pool.redis_cluster),
        "redis_sentinel" => text(&mut pool.redis_sentinel),
        "redis_read_from" => {
            super::ReadFrom::from_name(value).and_then(|r| once(&mut pool.redis_read_from, r))
        }
        "redis_backend_user" => text(&mut pool.redis_backend_user),
        "redis_backend_auth" => text(&mut pool.redis_backend_auth),
        "redis_sentinel_user" => text(&mut pool.redis_sentinel_user),
        "redis_sentinel_auth" => text(&mut pool.redis_sentinel_auth),
        "item_size_max" => parse_num(value)
            .and_then(|n| {
                super::ITEM_SIZE_MAX_RANGE
                    .contains(&n)
                    .then_some(n)
                    .ok_or("is not between 1024 and 1073741824 (bytes)")
            })
            .and_then(|n| once(&mut pool.item_size_max, n)),
        "server_max_inflight" => num(&mut pool.server_max_inflight),
        "big_value_split_threshold" => num(&mut pool.big_value_split_threshold),
        "big_value_batch_size" => num(&mut pool.big_value_batch_size),
        "big_value_hide_reply_flag" => flag(&mut pool.big_value_hide_reply_flag),
        "hot_keys" => flag(&mut pool.hot_keys),
        "hot_key_ttl" => positive(&mut pool.hot_key_ttl),
        "hot_key_share" => super::parse_share(value).and_then(|f| once(&mut pool.hot_key_share, f)),
        "hot_key_max" => positive(&mut pool.hot_key_max),
        "hot_key_sample" => positive(&mut pool.hot_key_sample),
        "active_req_limit" => num(&mut pool.active_req_limit),
        _ if super::RATE_KEYS.contains(&key) => {
            let i = super::RATE_KEYS.iter().position(|k| *k == key).unwrap_or(0);
            num(&mut pool.rates[i])
        }
        // The `tls*` and `listen_tls*` directives, else an unknown one.
        _ => pool.tls.directive(key, value).unwrap_or(Err("is unknown")),
    };
    result.map_err(err)
}
