//! Running requests: a read's requests (`batch`), the binary protocol (`binary`), the one
//! executor (`execute`) with `meta`, `report` (`stats`) and `dump` (key dumps), what a
//! request sees (`env`), what the connection does next (`flow`) and what `watch` logs
//! (`watched`).

pub mod batch;
pub mod binary;
pub mod dump;
pub mod env;
pub mod execute;
pub mod flow;
pub mod meta;
pub mod report;
pub mod textauth;
pub mod tracked;
pub mod watched;
