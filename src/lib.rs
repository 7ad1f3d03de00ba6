//! rivetkit-native: a Node.js addon that hosts RivetKit actors on the
//! Rivet Engine.
//!
//! This crate is the JavaScript surface only; everything that can be
//! written without napi lives in `rivetkit-native-core`. Modules depend one
//! way, each only on those listed before it:
//!
//! 1. [`error`] (structured errors across the boundary: `err.code`, the
//!    `__RIVET_ERROR_JSON__:` message contract), [`logging`] (the `tracing`
//!    subscriber), [`types`] (plain payload objects and argument readers),
//!    [`runtime`] (module set-up: logging, panic hook, tokio runtime);
//! 2. [`settle`] (awaiting a promise a callback returned), then
//!    [`js_callback`]: the one typed wrapper for JavaScript callbacks;
//! 3. the classes around core objects: [`cancellation_token`], [`conn`]
//!    (`ConnHandle`), [`kv`], [`schedule`], [`sqlite`] (`JsNativeDatabase`),
//!    [`websocket`] (`WebSocket`),
//!    then [`actor_context`] (`ActorContext`, which hands out the others),
//!    [`queue`] (`Queue`, `QueueMessage`, and `ctx.queue()`) and
//!    [`runtime_socket`] (`ctx.provisionActorRuntimeSocket()`);
//! 4. the rest of `ActorContext`, by feature: [`state_transaction`],
//!    [`workflow`], [`telemetry`], [`inspector`], [`body_stream`], and
//!    [`bookkeeping`] (the runtime's no-op bookkeeping calls);
//! 5. [`hooks`]: the hook payloads and the JavaScript callbacks as the
//!    core's `ActorHooks`;
//! 6. [`factory`] (`NapiActorFactory`), then [`registry`] (`CoreRegistry`);
//! 7. [`serverless`] (`handleServerlessRequest`, the serverless runtime)
//!    and [`listener`] (`serveListener`, `serveApplicationListener`): more
//!    `CoreRegistry` methods, in `impl` blocks of their own;
//!    `testing` (feature `testing` only) uses the callback type and a class.

#![deny(clippy::all)]

pub mod error;
pub mod log_writer;
pub mod logging;
pub mod runtime;
pub mod types;

pub mod js_callback;
pub mod settle;

pub mod cancellation_token;
pub mod conn;
pub mod kv;
pub mod schedule;
pub mod sqlite;
pub mod state_transaction;
pub mod websocket;

pub mod actor_context;
pub mod body_stream;
pub mod inspector;
pub mod queue;
pub mod runtime_socket;
pub mod telemetry;
pub mod workflow;

pub mod bookkeeping;

pub mod hooks;

pub mod factory;
pub mod registry;

pub mod listener;
pub mod serverless;

#[cfg(feature = "testing")]
pub mod testing;
