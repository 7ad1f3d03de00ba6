//! rivetkit-native: a Node.js addon that hosts RivetKit actors on the
//! Rivet Engine.
//!
//! This crate is the JavaScript surface only; everything that can be
//! written without napi lives in `rivetkit-native-core`. Its folders are
//! layers, and a layer imports only the layers before it:
//!
//! 1. [`bridge`]: how Rust and JavaScript talk (errors, the typed
//!    callback, promise settling, plain payload types, logging and the
//!    tokio runtime); it imports no other folder;
//! 2. [`classes`]: the classes around core objects (`CancellationToken`,
//!    `ConnHandle`, `Kv`, `Schedule`, `Queue`, `JsNativeDatabase`,
//!    `WebSocket`, the body streams, tracing spans);
//! 3. [`actor_context`]: `ActorContext`, one file per part of its surface;
//! 4. [`hooks`]: the hook table and the JavaScript callbacks as the core's
//!    `ActorHooks`;
//! 5. [`registry`]: `NapiActorFactory` and `CoreRegistry` (envoy mode,
//!    serverless mode, the native listener);
//!
//! and `testing` (feature `testing` only, never shipped), which uses
//! `bridge` and `classes` and which nothing uses.
//!
//! No two files import each other, directly or through others; inside a
//! folder, its `mod.rs` says the order. `__test__/layers.test.mjs` checks
//! both rules against docs/architecture.md.

#![deny(clippy::all)]

pub mod bridge;

pub mod classes;

pub mod actor_context;

pub mod hooks;

pub mod registry;

#[cfg(feature = "testing")]
pub mod testing;
