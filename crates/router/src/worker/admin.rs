//! mcrouter's service-info gets on a router with an mcrouter config: `get __mcrouter__.X`
//! is answered here, never sent to a server.

use proto::Request;
use routetree::admin::{destinations, route_reply, AdminCommand};
use routetree::admin_handles::{pools_reply, route_handles, HostNaming};

use super::Worker;
use crate::shared::McRoutes;

impl Worker {
    /// Answers `req` when it is a one-key `get`/`gets` of a `__mcrouter__.` key; false
    /// otherwise.
    pub(super) fn admin_get(&mut self, ci: usize, req: &Request<'_>, routes: &McRoutes) -> bool {
        let Some(("get" | "gets", key)) = routetree::request::single_key(req) else {
            return false;
        };
        let Some(command) = AdminCommand::parse(key) else {
            return false;
        };
        if let Some(mode) = super::bigvalue::chunks_mode(&command) {
            // Only this router's own big-value helpers know the token.
            self.clients[ci].chunks_of = mode;
            self.local_reply(ci, b"END\r\n");
            return true;
        }
        let value = match answer(&command, routes) {
            // As mcrouter, without one trailing newline.
            Ok(text) => text.strip_suffix('\n').unwrap_or(&text).to_owned(),
            Err(message) => format!("ERROR: {message}"),
        };
        let mut reply = format!(
            "VALUE {} 0 {}\r\n",
            String::from_utf8_lossy(key),
            value.len()
        );
        reply.push_str(&value);
        reply.push_str("\r\nEND\r\n");
        self.local_reply(ci, reply.as_bytes());
        true
    }
}

/// The value mcrouter's command gives (without its trailing newline), or the error text.
fn answer(command: &AdminCommand<'_>, routes: &McRoutes) -> Result<String, String> {
    match command.name {
        "version" => Ok(format!("memfleet {}", env!("CARGO_PKG_VERSION"))),
        "config_age" => Ok(routes.loaded.elapsed().as_secs().to_string()),
        "config_file" => routes
            .config_file
            .clone()
            .ok_or_else(|| "no config file found!".to_owned()),
        "route" => match command.args[..] {
            [op, key] => {
                let found = destinations(&routes.config, op, key.as_bytes(), &routes.prefix)?;
                Ok(route_reply(&routes.config, &found))
            }
            _ => Err("route: 2 args expected".into()),
        },
        "route_handles" => match command.args[..] {
            [op, key] => route_handles(
                &routes.config,
                op,
                key.as_bytes(),
                &routes.prefix,
                naming(routes),
            ),
            _ => Err("route_handles: 2 args expected".into()),
        },
        "pools" => Ok(pools_reply(&routes.config, naming(routes))),
        "options" => options(&command.args, routes),
        "hostid" => Ok(routetree::plan::host_id().to_string()),
        "get_bucket" => match command.args[..] {
            [key] => {
                routetree::admin_handles::get_bucket(&routes.config, key.as_bytes(), &routes.prefix)
            }
            _ => Err("get_bucket: 1 arg (key) expected".into()),
        },
        other => Err(format!("unknown command: {other}")),
    }
}

fn naming(routes: &McRoutes) -> HostNaming<'_> {
    HostNaming {
        timeouts: routes.timeouts,
        default_route: &routes.prefix,
    }
}

/// `options`: every option as `name value` lines; `options(name)`: that option's value.
fn options(args: &[&str], routes: &McRoutes) -> Result<String, String> {
    match args {
        [] => Ok(routes
            .options
            .iter()
            .map(|(name, value)| format!("{name} {value}"))
            .collect::<Vec<_>>()
            .join("\n")),
        ["version"] => Ok(format!("memfleet {}", env!("CARGO_PKG_VERSION"))),
        [name] => routes
            .options
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("options: option {name} not found")),
        _ => Err("options: 0 or 1 args expected".into()),
    }
}
