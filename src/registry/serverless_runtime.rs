//! The serverless runtime's build state ([`Built`]) and the `health()` it
//! gives (docs/serverless.md).
//!
//! The first serverless call (`handleServerlessRequest` or `serveListener`)
//! takes the registered factories and builds the core's
//! [`ServerlessRuntime`] (`state.rs`); every later call reuses it.

use rivetkit_native_core::serverless::ServerlessRuntime;
use rivetkit_native_core::RivetError;

/// The serverless runtime, built once.
pub(crate) enum Built {
    NotYet,
    Ready(std::sync::Arc<ServerlessRuntime>),
    /// Shut down while it was built.
    Failed(RivetError),
}

/// `(status code, status)` of `health()` in serverless mode: healthy only
/// once an envoy exists and hears from the engine (before the first start
/// this says `engine_ping_stale`, like the reference addon; the `/health`
/// route itself says `ok` then).
pub(crate) fn health_status(runtime: &ServerlessRuntime) -> (u32, &'static str) {
    if runtime.is_shut_down() {
        return (503, "shut_down");
    }
    match runtime.envoy() {
        Some(envoy) if envoy.is_ping_healthy() => (200, "ok"),
        _ => (503, "engine_ping_stale"),
    }
}
