//! Running requests: a read's requests (`batch`), the binary protocol (`binary`), the one
//! executor (`execute`) with `get`, `meta`, `report` (`stats`) and `dump` (key dumps), what a
//! request sees (`env`), what the connection does next (`flow`), how a request waits on
//! flash (`flash_wait`) and what `watch` logs (`watched`).

pub mod batch;
pub mod binary;
pub mod dump;
pub mod env;
pub mod execute;
pub mod flash_wait;
pub mod flow;
pub mod get;
pub mod meta;
pub mod report;
pub mod textauth;
pub mod tracked;
pub mod watched;
