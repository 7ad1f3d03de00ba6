//! The registry: registered actor factories, serve configuration, and the
//! serve/shutdown run.

pub mod config;
