//! Parts of the `@rivetkit/rivetkit-napi@2.3.19` surface that
//! rivetkit-native does not implement yet.
//!
//! RivetKit's TypeScript runtime expects every class, method and function
//! of that package to exist. These modules declare them with the same
//! TypeScript signatures so that the runtime loads and everything that
//! does not touch them keeps working. A feature that is not built fails
//! only when it is actually used, with the structured error
//! `rivetkit-native.unsupported` (HTTP 400) whose message and
//! `metadata.feature` name the method (e.g. `Queue.send`). Calls that are
//! harmless without the feature (tracing, telemetry, hibernation
//! bookkeeping) succeed as no-ops instead; each says so.

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use rivetkit_native_core::error::catalog;

use crate::error::{spawn_promise, to_js_error};

pub mod inspector;
pub mod queue;
pub mod sqlite;
pub mod streams;
pub mod telemetry;
pub mod workflow;

/// The error thrown by a synchronous unsupported method.
pub(crate) fn fail(env: &Env, feature: &str) -> napi::Error {
    to_js_error(env, catalog::unsupported(feature).into_anyhow())
}

/// A promise rejected with the unsupported error, for asynchronous methods.
/// The Rust value type is irrelevant (it never resolves); the TypeScript
/// type comes from each method's `ts_return_type`.
pub(crate) fn reject<'env>(env: &'env Env, feature: &'static str) -> napi::Result<PromiseRaw<'env, ()>> {
    spawn_promise(env, async move { Err(catalog::unsupported(feature).into_anyhow()) })
}
