//! rivetkit-native: a Node.js addon that hosts RivetKit actors on the
//! Rivet Engine.
//!
//! This crate is the JavaScript surface only; everything that can be
//! written without napi lives in `rivetkit-native-core`. Layout:
//! - [`runtime`]: module set-up (logging, panic hook, tokio runtime);
//! - [`logging`]: the `tracing` subscriber;
//! - [`error`]: structured errors across the boundary (`err.code`, the
//!   `__RIVET_ERROR_JSON__:` message contract);
//! - [`js_callback`]: the one typed wrapper for JavaScript callbacks;
//! - [`cancellation_token`]: the `CancellationToken` class;
//! - [`unsupported`]: the rest of the `@rivetkit/rivetkit-napi` surface,
//!   declared so the TypeScript runtime loads, failing only when used.

#![deny(clippy::all)]

pub mod cancellation_token;
pub mod conn;
pub mod error;
pub mod js_callback;
pub mod logging;
pub mod runtime;
pub mod actor_context;
pub mod factory;
pub mod hooks;
pub mod kv;
pub mod registry;
pub mod schedule;
pub mod types;
pub mod unsupported;
pub mod websocket;
