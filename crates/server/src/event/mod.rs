//! The event loops: a worker thread's mio loop (`worker`) or io_uring loop (`uring`), what
//! both do as connections arrive and close (`lifecycle`, `handoff`, `busy`) and with flash
//! reads handed back (`flash_back`), and UDP (`udp`).

pub mod busy;
pub mod flash_back;
pub mod handoff;
pub mod lifecycle;
pub mod udp;
pub mod uring;
pub mod worker;
