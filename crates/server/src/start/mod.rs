//! Start-up: what `serve` sets up before and around the worker threads.

pub mod accept;
pub mod listen;
pub mod process;
pub mod signals;
pub mod threads;

use crate::auth::Authenticator;
use crate::config::Settings;
use crate::error::ServeError;

/// The password file, if any: `-Y`'s, else `-S`'s. As memcached: an unreadable or malformed
/// file stops the server from starting.
pub fn load_auth(settings: &Settings) -> Result<Option<Authenticator>, ServeError> {
    match &settings.auth_file {
        Some(path) => Authenticator::load(path)
            .map(Some)
            .map_err(ServeError::Auth),
        None => load_sasl_users(settings),
    }
}

/// `-S`: the users of the password file $MEMCACHED_SASL_PWDB names (memcached's variable and
/// `user:password` format). memcached falls back on the system's SASL database; memfleet has
/// none, so it refuses to start without the file.
fn load_sasl_users(settings: &Settings) -> Result<Option<Authenticator>, ServeError> {
    if !settings.sasl {
        return Ok(None);
    }
    let path = std::env::var_os("MEMCACHED_SASL_PWDB").ok_or(ServeError::SaslUsersUnset)?;
    Authenticator::load(path)
        .map(Some)
        .map_err(ServeError::Auth)
}
