//! The flash tier's server side: memcached's `-o ext_*` options and the files the store's
//! flash pages live in (the store itself does no I/O).

pub mod files;
pub mod options;
