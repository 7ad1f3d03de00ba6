//! Where a `CoreRegistry` is: its registered actor types until a mode
//! takes them ([`Slot`]), and the envoy-mode serve run ([`Phase`], and the
//! `health()` it gives).

use rivetkit_native_core::error::RivetError;
use rivetkit_native_core::registry::{CoreRegistry as Core, ServeHandle};

/// Where the serve run is, as seen by `waitReady`/`health`.
#[derive(Clone)]
pub(crate) enum Phase {
    NotStarted,
    Starting,
    Ready(ServeHandle),
    Failed(RivetError),
    ShuttingDown,
    ShutDown,
}

pub(crate) enum Slot {
    Registering(Core),
    Taken,
}

/// `(status code, status)` of `health()` in envoy mode.
pub(crate) fn health_status(phase: &Phase) -> (u32, &'static str) {
    match phase {
        Phase::NotStarted => (503, "not_started"),
        Phase::Starting => (503, "starting"),
        Phase::Ready(h) if h.is_ping_healthy() => (200, "ok"),
        Phase::Ready(_) => (503, "engine_ping_stale"),
        Phase::Failed(_) | Phase::ShutDown => (503, "shut_down"),
        Phase::ShuttingDown => (503, "shutting_down"),
    }
}
