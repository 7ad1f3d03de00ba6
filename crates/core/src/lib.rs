//! The plain-Rust core of rivetkit-native.
//!
//! Nothing here depends on napi: the JavaScript surface lives in the addon
//! crate and plugs into the core through [`actor::ActorHooks`]. That keeps
//! every rule about generations, lifecycle and shutdown testable with plain
//! `cargo test`, including deterministic races with test doubles.
//!
//! Layout:
//! - [`registry`]: the registered factories, `ServeConfig` and the serve/shutdown run;
//! - [`dispatcher`]: per (actor id, generation) bookkeeping and admission;
//! - [`actor`]: one generation's task, its context and the hooks it calls;
//! - [`envoy`]: the link to the engine through `rivet-envoy-client`;
//! - [`engine`]: finding, reusing or spawning a local engine process;
//! - [`routing`]: gateway traffic (HTTP, WebSocket) to the right generation;
//! - [`protocol`]: wire formats shared with clients (error bodies, encodings);
//! - [`sqlite`]: the actor's SQLite database on the engine's page store;
//! - [`serverless`]: the serverless routes (`/start` and its event stream);
//! - [`listener`]: the native HTTP listener in front of them;
//! - [`inspector`]: the inspector's token and counters;
//! - [`telemetry`]: invocation spans, their sampling and OTLP export;
//! - [`contract`]: what differs between the RivetKit versions we serve;
//! - [`env`]: every environment variable we read.

pub mod actor;
pub mod contract;
pub mod dispatcher;
pub mod engine;
pub mod env;
pub mod envoy;
pub mod error;
pub mod error_codes;
pub mod inspector;
pub mod listener;
pub mod protocol;
pub mod registry;
pub mod routing;
pub mod serverless;
pub mod sqlite;
pub mod telemetry;

pub use error::{ActorSpecifier, RivetError};

/// `tracing` target of the drain's timeline (docs/drain.md): enable it
/// with `RIVET_LOG_LEVEL=warn,rivetkit_native::drain=debug`.
pub const DRAIN_TRACE: &str = "rivetkit_native::drain";
