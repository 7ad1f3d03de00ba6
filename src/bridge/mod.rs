//! The lowest layer: how Rust and JavaScript talk, with no class of the
//! addon in it. Nothing here imports another `src` folder.
//!
//! - `error`: structured errors across the boundary (`err.code`, the
//!   `__RIVET_ERROR_JSON__:` message contract) and promise helpers;
//! - `settle` (awaiting a promise a callback returned), then `js_callback`:
//!   the one typed wrapper for JavaScript callbacks;
//! - `types`: plain payload objects and argument readers;
//! - `runtime`: module set-up (logging, panic hook, tokio runtime), over
//!   `logging` (the `tracing` subscriber), over `log_writer` (stderr that a
//!   slow reader cannot make fail).

pub mod error;
pub mod js_callback;
pub mod log_writer;
pub mod logging;
pub mod runtime;
pub mod settle;
pub mod types;
