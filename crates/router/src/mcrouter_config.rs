//! mcrouter's `--validate-config`: checks the config given by `--config file:PATH` (or
//! inline JSON), `--config-file PATH` or `--config-str JSON` and reports it; with `=exit`
//! (the default) the router then exits, with `=run` it goes on to route with it. Also
//! `--print-expanded-config`, which prints the config with its JSONM expanded.

use crate::error::RouteError;
use crate::RouteArgs;

/// `--print-expanded-config`: prints the config with its JSONM expanded, as the router reads
/// it, and reports whether it did (the router then exits).
pub fn print_expanded(args: &RouteArgs) -> Result<bool, RouteError> {
    if !args.print_expanded_config {
        return Ok(false);
    }
    let (name, text) = crate::mcrouter::source(args)?;
    let expanded = crate::mcrouter::with_jsonm_env(args, |env| {
        routetree::jsonm::expand_text(&name, &text, env)
    })?;
    println!("{expanded:#}");
    Ok(true)
}

/// Whether the router goes on after `--validate-config` (`=run`). `Err` makes `memfleet`
/// exit with status 1.
pub fn validate(args: &RouteArgs) -> Result<bool, RouteError> {
    let run = match args.validate_config.as_deref() {
        Some("exit") => false,
        Some("run") => true,
        Some(other) => {
            return Err(RouteError::Usage(format!(
                "--validate-config={other}: expected exit or run"
            )))
        }
        None => return Ok(true),
    };
    let (name, text) = crate::mcrouter::source(args)?;
    let config = crate::mcrouter::with_jsonm_env(args, |env| {
        routetree::validate_with(&name, &text, &args.route_prefix, env)
    })?;
    for warning in &config.warnings {
        eprintln!("memfleet route: warning: {warning}");
    }
    crate::mcrouter_tls::check_servers(&config).map_err(RouteError::Server)?;
    eprintln!(
        "memfleet route: mcrouter config '{name}' is valid ({} pools, {} route handles)",
        config.pools.len(),
        config.routes.len()
    );
    Ok(run)
}
