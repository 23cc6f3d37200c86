//! mcrouter's command line for its JSON config: `--validate-config` checks a config given by
//! `--config file:PATH` (or inline JSON), `--config-file PATH` or `--config-str JSON` and
//! exits. Routing with mcrouter configs is not implemented yet, so nothing else runs here.

use crate::RouteArgs;

/// Whether the command line asks for mcrouter's config handling.
pub fn requested(args: &RouteArgs) -> bool {
    args.validate_config.is_some()
        || args.config.is_some()
        || args.config_file.is_some()
        || args.config_str.is_some()
}

/// Validates the config and reports it; `Err` makes `memfleet` exit with status 1.
pub fn run(args: &RouteArgs) -> Result<(), String> {
    match args.validate_config.as_deref() {
        Some("exit") => {}
        Some("run") => {
            return Err(
                "--validate-config=run: routing with an mcrouter config is not \
                        implemented yet; use --validate-config (=exit) to check one"
                    .into(),
            )
        }
        Some(other) => return Err(format!("--validate-config={other}: expected exit or run")),
        None => {
            return Err("mcrouter configs can only be checked so far: add --validate-config".into())
        }
    }
    let (name, text) = source(args)?;
    let config =
        routetree::validate(&name, &text, &args.route_prefix).map_err(|e| e.to_string())?;
    for warning in &config.warnings {
        eprintln!("memfleet route: warning: {warning}");
    }
    eprintln!(
        "memfleet route: mcrouter config '{name}' is valid ({} pools, {} route handles)",
        config.pools.len(),
        config.routes.len()
    );
    Ok(())
}

/// The config's name (for messages) and text, from whichever option gave it.
fn source(args: &RouteArgs) -> Result<(String, String), String> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|text| (path.to_owned(), text))
            .map_err(|e| format!("cannot read config file '{path}': {e}"))
    };
    match (&args.config, &args.config_file, &args.config_str) {
        (Some(config), _, _) => match config.strip_prefix("file:") {
            Some(path) => read(path),
            None => Ok(("--config".to_owned(), config.clone())),
        },
        (None, Some(path), _) => read(&path.to_string_lossy()),
        (None, None, Some(json)) => Ok(("--config-str".to_owned(), json.clone())),
        (None, None, None) => Err("--validate-config needs --config file:PATH (or \
                                   --config-file PATH, --config-str JSON)"
            .into()),
    }
}
