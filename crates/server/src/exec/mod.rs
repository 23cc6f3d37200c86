//! Running requests: a read's requests (`batch`), the binary protocol (`binary`), the one
//! executor (`execute`) with `meta`, `report` (`stats`) and `dump` (key dumps), and what a request sees (`env`).

pub mod batch;
pub mod binary;
pub mod dump;
pub mod env;
pub mod execute;
pub mod meta;
pub mod report;
pub mod textauth;
