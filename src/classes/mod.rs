//! The JavaScript classes around core objects that an `ActorContext`, a
//! hook or a registry method hands out (and the tracing pieces a handle
//! carries). They import `crate::bridge` and each other, never
//! `ActorContext`: the methods that return them live in
//! `crate::actor_context`.
//!
//! - `cancellation_token`: `CancellationToken`, `CancellationListener`;
//! - `conn`: `ConnHandle`;
//! - `kv`: `Kv`; `schedule`: `Schedule`; `queue`: `Queue`, `QueueMessage`;
//! - `sqlite`: `JsNativeDatabase`, `JsSqliteTransaction`, then
//!   `state_transaction`: `JsActorStateTransaction`;
//! - `websocket`: `WebSocket`; `body_stream`: the streamed bodies of a
//!   raw request;
//! - `telemetry`: span contexts, `OutboundCall`, a handle's ray ID.

pub mod body_stream;
pub mod cancellation_token;
pub mod conn;
pub mod kv;
pub mod queue;
pub mod schedule;
pub mod sqlite;
pub mod state_transaction;
pub mod telemetry;
pub mod websocket;
