//! Why `top` could not start, or stopped. Each prints as the message alone (with the
//! subcommand's `top: ` prefix), which `memfleet` shows after its name.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum TopError {
    /// `--delay` out of range.
    Delay(f64),
    /// A command-line server that is not HOST:PORT, [V6]:PORT or a socket path.
    Server(routetree::BadServer),
    /// The `-c` nutcracker.yml could not be read or is not valid.
    Nutcracker(nutconf::LoadError),
    /// The `--config file:PATH` mcrouter config could not be read.
    ReadMcrouter { path: String, error: io::Error },
    /// The `--config` mcrouter config is not valid.
    Mcrouter(routetree::ConfigError),
    /// Neither servers, `-c` nor `--config` named a server.
    NoServers,
    /// Standard output is not a terminal.
    NoTerminal,
    /// Setting up or drawing on the terminal failed.
    Terminal(io::Error),
}

impl fmt::Display for TopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("top: ")?;
        match self {
            TopError::Delay(d) => write!(f, "--delay {d}: expected 0.1 to 3600 seconds"),
            TopError::Server(e) => write!(f, "{e}"),
            TopError::Nutcracker(e) => write!(f, "{e}"),
            TopError::ReadMcrouter { path, error } => {
                write!(f, "cannot read config file '{path}': {error}")
            }
            TopError::Mcrouter(e) => write!(f, "{e}"),
            TopError::NoServers => f.write_str(
                "no servers to watch: give HOST:PORT..., -c nutcracker.yml or \
                 --config file:mcrouter.json",
            ),
            TopError::NoTerminal => f.write_str("needs a terminal (standard output is not one)"),
            TopError::Terminal(e) => write!(f, "terminal: {e}"),
        }
    }
}

impl std::error::Error for TopError {}
