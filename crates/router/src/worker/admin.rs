//! mcrouter's service-info gets on a router with an mcrouter config: `get __mcrouter__.X`
//! is answered here, never sent to a server.

use proto::Request;
use routetree::admin::{destinations, route_reply, AdminCommand};

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
        let value = match answer(&command, routes) {
            Ok(text) => text,
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
        other => Err(format!("unknown command: {other}")),
    }
}
