//! router

pub mod config;
