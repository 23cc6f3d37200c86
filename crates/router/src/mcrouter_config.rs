//! mcrouter's `--validate-config`: checks the config given by `--config file:PATH` (or
//! inline JSON), `--config-file PATH` or `--config-str JSON` and reports it; with `=exit`
//! (the default) the router then exits, with `=run` it goes on to route with it.

use crate::error::RouteError;
use crate::RouteArgs;

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
    let config = routetree::validate(&name, &text, &args.route_prefix)?;
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
