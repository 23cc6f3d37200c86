//! The flash tier's server side: memcached's `-o ext_*` options and the files the store's
//! flash pages live in (the store itself does no I/O), and the I/O threads text gets read
//! flash items with (`reads`).

pub mod files;
pub mod options;
pub mod reads;
