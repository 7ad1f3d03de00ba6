//! The top layer: `CoreRegistry`, what JavaScript registers actor types on
//! and serves, in envoy mode or serverless mode.
//!
//! - `factory`: `NapiActorFactory` and `JsActorConfig` (one actor type);
//! - `config`: `JsServeConfig` and the core configs read from it;
//! - `lifecycle`: the registry's states, events and transition table;
//! - `serverless_runtime`: the serverless runtime's build state and health;
//! - `state`: `RegistryState`, the lifecycle with what each state carries,
//!   the envoy phase and the drain token;
//! - `core_registry`: the `CoreRegistry` class (register, serve, waitReady,
//!   shutdown, health, metadata, metrics);
//! - `serverless` (`handleServerlessRequest`) and `listener`
//!   (`serveListener`, `serveApplicationListener`): more `CoreRegistry`
//!   methods, in `impl` blocks of their own.
//!
//! Files import in that order, each only files listed before it.

pub mod config;
pub mod core_registry;
pub mod factory;
pub mod lifecycle;
pub mod listener;
pub mod serverless;
pub mod serverless_runtime;
pub mod state;
