//! The registry's serverless runtime, built once ([`ServerlessCell`]), and
//! the `health()` it gives (docs/serverless.md).
//!
//! The first serverless call (`handleServerlessRequest` or `serveListener`)
//! takes the registered factories and builds the core's
//! [`ServerlessRuntime`]; every later call reuses it.

use std::sync::{Arc, Mutex};

use rivetkit_native_core::error::catalog;
use rivetkit_native_core::registry::CoreRegistry as Core;
use rivetkit_native_core::serverless::ServerlessRuntime;
use rivetkit_native_core::RivetError;
use tokio_util::sync::CancellationToken;

use super::config::{settings_from, JsServeConfig};
use super::state::Slot;

enum Built {
    NotYet,
    Ready(Arc<ServerlessRuntime>),
    Failed(RivetError),
}

/// The registry's serverless runtime, built once.
pub(crate) struct ServerlessCell {
    /// Held while the runtime is built: concurrent first requests wait for
    /// the one build, and shutdown waits for it too.
    built: tokio::sync::Mutex<Built>,
    /// The runtime once built, for the synchronous routes.
    current: Mutex<Option<Arc<ServerlessRuntime>>>,
}

impl Default for ServerlessCell {
    fn default() -> Self {
        Self { built: tokio::sync::Mutex::new(Built::NotYet), current: Mutex::new(None) }
    }
}

impl ServerlessCell {
    /// The runtime, if this registry runs in serverless mode.
    pub(crate) fn current(&self) -> Option<Arc<ServerlessRuntime>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drains the runtime if one was built (after any build in flight).
    pub(crate) async fn shutdown(&self) {
        let runtime = match &*self.built.lock().await {
            Built::Ready(runtime) => runtime.clone(),
            _ => return,
        };
        runtime.shutdown().await;
    }
}

impl ServerlessCell {
    /// The serverless runtime, built from the factories in `slot` on the
    /// first call (which takes them); `metadata` is set when it is built.
    pub(crate) fn ensure(
        self: &Arc<Self>,
        slot: Arc<Mutex<Slot>>,
        shutdown: CancellationToken,
        metadata: Arc<Mutex<Option<serde_json::Value>>>,
        config: JsServeConfig,
    ) -> impl std::future::Future<Output = anyhow::Result<Arc<ServerlessRuntime>>> + Send + 'static {
        let cell = self.clone();
        async move {
            if shutdown.is_cancelled() {
                return Err(catalog::registry_shut_down().into_anyhow());
            }
            let mut built = cell.built.lock().await;
            match &*built {
                Built::Ready(runtime) => return Ok(runtime.clone()),
                Built::Failed(err) => return Err(err.clone().into_anyhow()),
                Built::NotYet => {}
            }
            // A bad config is refused before the registry is taken, so a
            // later call with a good one still finds it.
            let settings = settings_from(&config);
            let core_config = config.into_core()?;
            let core: Core = {
                let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                match std::mem::replace(&mut *slot, Slot::Taken) {
                    Slot::Registering(core) => core,
                    Slot::Taken => {
                        return Err(catalog::invalid_state(
                            "serverless requests need a registry that is not serving: serve() was already called",
                        )
                        .into_anyhow())
                    }
                }
            };
            let runtime = ServerlessRuntime::new(core, core_config, settings);
            if shutdown.is_cancelled() {
                runtime.shutdown().await;
                *built = Built::Failed(catalog::registry_shut_down());
                return Err(catalog::registry_shut_down().into_anyhow());
            }
            *metadata.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime.metadata());
            *cell.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime.clone());
            *built = Built::Ready(runtime.clone());
            Ok(runtime)
        }
    }
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
