//! The router's settings under mcrouter's option names, for `__mcrouter__.options`.

use crate::args::RouteArgs;

/// `(mcrouter option name, value)` for the options memfleet acts on, in the order of
/// mcrouter's option lists; values are written as mcrouter writes them (booleans `0`/`1`).
pub fn startup_options(args: &RouteArgs, threads: usize) -> Vec<(&'static str, String)> {
    let flag = |b: bool| if b { "1" } else { "0" }.to_owned();
    let mut opts = vec![
        ("asynclog_disable", flag(args.asynclog_disable)),
        (
            "async_spool",
            args.async_dir
                .as_ref()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
        ("num_proxies", threads.to_string()),
        (
            "big_value_split_threshold",
            args.big_value_split_threshold.to_string(),
        ),
        ("config", args.config.clone().unwrap_or_default()),
        (
            "config_file",
            args.config_file
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
        ("config_str", args.config_str.clone().unwrap_or_default()),
        (
            "runtime_vars_file",
            args.runtime_vars_file
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
        ("default_route", args.route_prefix.clone()),
        (
            "probe_delay_initial_ms",
            args.probe_timeout_initial.to_string(),
        ),
        ("probe_delay_max_ms", args.probe_timeout_max.to_string()),
        ("failures_until_tko", args.timeouts_until_tko.to_string()),
        ("server_timeout_ms", args.server_timeout.to_string()),
        (
            "cross_region_timeout_ms",
            args.cross_region_timeout_ms.to_string(),
        ),
        (
            "cross_cluster_timeout_ms",
            args.cross_cluster_timeout_ms.to_string(),
        ),
        (
            "within_cluster_timeout_ms",
            args.within_cluster_timeout_ms.to_string(),
        ),
    ];
    opts.push((
        "listen_addresses",
        args.listen_addresses.clone().unwrap_or_default(),
    ));
    let ports: Vec<String> = args.port.iter().map(u16::to_string).collect();
    opts.push(("ports", ports.join(",")));
    opts
}
