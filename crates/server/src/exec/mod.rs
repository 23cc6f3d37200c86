//! Running requests: a read's requests (`batch`), the binary protocol (`binary`), the one
//! executor (`execute`) with `meta`, `report` (`stats`) and `dump` (key dumps), what a
//! request sees (`env`) and what the connection does next (`flow`).

pub mod batch;
pub mod binary;
pub mod dump;
pub mod env;
pub mod execute;
pub mod flow;
pub mod meta;
pub mod report;
pub mod textauth;
