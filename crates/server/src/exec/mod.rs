//! Running requests: a read's requests (`batch`), the binary protocol (`binary`), the one
//! executor (`execute`) with `meta` and `report` (`stats`), and what a request sees (`env`).

pub mod batch;
pub mod binary;
pub mod env;
pub mod execute;
pub mod meta;
pub mod report;
pub mod textauth;
