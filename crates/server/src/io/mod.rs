//! Connection I/O: a connection and its socket reads and writes (`conn`), a large value
//! written from the item (`unsent`), and the read buffers (`bufpool`, `bufring`).

pub mod bufpool;
pub mod bufring;
pub mod conn;
pub mod unsent;
