//! [`RegistryState`]: a `CoreRegistry`'s lifecycle (`lifecycle.rs`) and
//! what each state carries, behind one lock. Every `CoreRegistry` method
//! asks it; none reads a field of its own.
//!
//! Two pieces are shared beyond the lock, because other tasks wait on
//! them: the envoy-mode [`Phase`] (a `watch` channel: `waitReady()` and the
//! application listener's routes see it change) and the drain token
//! (cancelled by `shutdown()`; the serve run and the listeners stop on it).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use rivetkit_native_core::actor::ActorFactory;
use rivetkit_native_core::error::catalog;
use rivetkit_native_core::registry::{CoreRegistry as Core, ServeHandle};
use rivetkit_native_core::serverless::ServerlessRuntime;
use rivetkit_native_core::RivetError;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::{settings_from, JsServeConfig};
use super::lifecycle::{step, Event, State};
use super::serverless_runtime::Built;

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

/// What a registry serves from, for `metrics()` and the stop threshold.
pub(crate) enum Serving {
    Envoy(ServeHandle),
    Serverless(Arc<ServerlessRuntime>),
    Nothing,
}

/// The state and what it carries.
struct Inner {
    state: State,
    /// The actor types, until a mode takes them.
    actors: Option<Core>,
    /// The serve run's handle, once ready.
    handle: Option<ServeHandle>,
    /// Why the serve run failed.
    failure: Option<RivetError>,
    /// The `/metadata` payload, fixed when `serve()` (or the first
    /// serverless call) read its config.
    metadata: Option<serde_json::Value>,
    /// The serverless runtime, once built.
    runtime: Option<Arc<ServerlessRuntime>>,
}

pub(crate) struct RegistryState {
    inner: Mutex<Inner>,
    phase: watch::Sender<Phase>,
    shutdown: CancellationToken,
    /// Held while the serverless runtime is built: concurrent first
    /// requests wait for the one build, and shutdown waits for it too.
    built: tokio::sync::Mutex<Built>,
}

impl RegistryState {
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                state: State::Registering,
                actors: Some(Core::new()),
                handle: None,
                failure: None,
                metadata: None,
                runtime: None,
            }),
            phase: watch::channel(Phase::NotStarted).0,
            shutdown: CancellationToken::new(),
            built: tokio::sync::Mutex::new(Built::NotYet),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `event` under the lock held in `inner`; publishes the envoy
    /// phase when it changed.
    fn apply(&self, inner: &mut Inner, event: Event) -> Result<State, RivetError> {
        let before = inner.state;
        let next = step(before, event)?;
        inner.state = next;
        if next != before {
            if let Some(phase) = phase_of(inner) {
                self.phase.send_replace(phase);
            }
        }
        Ok(next)
    }

    /// `register()`: adds the actor type while registering.
    pub(crate) fn register(&self, name: String, factory: ActorFactory) -> Result<(), RivetError> {
        let mut inner = self.lock();
        self.apply(&mut inner, Event::Register)?;
        if let Some(core) = inner.actors.as_mut() {
            core.register(name, factory);
        }
        Ok(())
    }

    /// `serve()`: takes the actor types for envoy mode.
    pub(crate) fn serve(&self) -> Result<Core, RivetError> {
        let mut inner = self.lock();
        self.apply(&mut inner, Event::Serve)?;
        Ok(inner.actors.take().unwrap_or_default())
    }

    /// The serve run, its config read: starts with `metadata`, or says
    /// `false` when `shutdown()` came first (nothing to serve).
    pub(crate) fn serve_start(&self, metadata: serde_json::Value) -> bool {
        let mut inner = self.lock();
        let started = self.apply(&mut inner, Event::ServeStart) == Ok(State::EnvoyStarting);
        if started {
            inner.metadata = Some(metadata);
        }
        started
    }

    /// The serve run is ready.
    pub(crate) fn serve_ready(&self, handle: ServeHandle) {
        let mut inner = self.lock();
        inner.handle = Some(handle);
        let _ = self.apply(&mut inner, Event::ServeReady);
    }

    /// The serve run failed: whether it had been ready, and the new state
    /// (`ShutDown` when `shutdown()` came before it started).
    pub(crate) fn serve_failed(&self, err: RivetError) -> (bool, State) {
        let mut inner = self.lock();
        let was_ready = inner.state == State::EnvoyReady;
        inner.failure = Some(err);
        let state = self.apply(&mut inner, Event::ServeFailed).unwrap_or(inner.state);
        (was_ready, state)
    }

    /// The serve run ended after its drain.
    pub(crate) fn serve_done(&self) {
        let mut inner = self.lock();
        let _ = self.apply(&mut inner, Event::ServeDone);
    }

    /// `waitReady()`: refused at once (before `serve()`, in serverless
    /// mode), else a future that settles with the serve run.
    pub(crate) fn wait_ready(&self) -> Result<impl Future<Output = anyhow::Result<()>> + Send + 'static, RivetError> {
        let mut rx = {
            let mut inner = self.lock();
            self.apply(&mut inner, Event::WaitReady)?;
            self.phase.subscribe()
        };
        Ok(async move {
            let phase = rx
                .wait_for(|p| !matches!(p, Phase::NotStarted | Phase::Starting))
                .await
                .map(|p| p.clone())
                .map_err(|_| catalog::registry_shut_down().into_anyhow())?;
            match phase {
                Phase::Ready(handle) => handle.started().await,
                Phase::Failed(err) => Err(err.into_anyhow()),
                _ => Err(catalog::registry_shut_down().into_anyhow()),
            }
        })
    }

    /// `shutdown()`: trips the drain token (idempotent).
    pub(crate) fn shutdown(&self) {
        let mut inner = self.lock();
        if !self.shutdown.is_cancelled() {
            tracing::info!("shutdown requested");
            tracing::debug!(target: rivetkit_native_core::DRAIN_TRACE, "shutdown requested");
        }
        self.shutdown.cancel();
        if self.apply(&mut inner, Event::Shutdown) == Ok(State::ShutDown) {
            // Never served: nothing to drain, the actor types go.
            inner.actors = None;
        }
    }

    /// Drains the serverless runtime if one was built (after any build in
    /// flight).
    pub(crate) async fn drain_serverless(&self) {
        let runtime = match &*self.built.lock().await {
            Built::Ready(runtime) => runtime.clone(),
            _ => return,
        };
        runtime.shutdown().await;
    }

    /// The token the serve run and the listeners stop on.
    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The envoy phase, followed (the application listener's routes).
    pub(crate) fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// `(status code, status)` of `health()`.
    pub(crate) fn health(&self) -> (u32, &'static str) {
        let (runtime, state) = {
            let inner = self.lock();
            (inner.runtime.clone(), inner.state)
        };
        match runtime {
            Some(runtime) => super::serverless_runtime::health_status(&runtime),
            // Shut down while the first serverless call built the runtime:
            // none was stored, and the envoy phase never left `NotStarted`.
            None if state == State::ServerlessShutDown => (503, "shut_down"),
            None => health_status(&self.phase.borrow()),
        }
    }

    /// The `/metadata` payload, once fixed.
    pub(crate) fn metadata(&self) -> Option<serde_json::Value> {
        self.lock().metadata.clone()
    }

    pub(crate) fn serving(&self) -> Serving {
        if let Some(runtime) = self.lock().runtime.clone() {
            return Serving::Serverless(runtime);
        }
        match &*self.phase.borrow() {
            Phase::Ready(handle) => Serving::Envoy(handle.clone()),
            _ => Serving::Nothing,
        }
    }

    /// The serverless runtime, built from the actor types on the first
    /// call (which takes them); later calls reuse it.
    pub(crate) fn serverless(
        self: &Arc<Self>,
        config: JsServeConfig,
    ) -> impl Future<Output = anyhow::Result<Arc<ServerlessRuntime>>> + Send + 'static {
        let this = self.clone();
        async move {
            // The drain token first: after shutdown() every state refuses
            // with `registry.shut_down` (lifecycle.rs, notes).
            if this.shutdown.is_cancelled() {
                return Err(catalog::registry_shut_down().into_anyhow());
            }
            let mut built = this.built.lock().await;
            match &*built {
                Built::Ready(runtime) => return Ok(runtime.clone()),
                Built::Failed(err) => return Err(err.clone().into_anyhow()),
                Built::NotYet => {}
            }
            // A bad config is refused before the registry is taken, so a
            // later call with a good one still finds it.
            let settings = settings_from(&config);
            let core_config = config.into_core()?;
            let mut core = {
                let mut inner = this.lock();
                this.apply(&mut inner, Event::ServerlessCall).map_err(RivetError::into_anyhow)?;
                inner.actors.take().unwrap_or_default()
            };
            core.set_contract(core_config.contract());
            let runtime = ServerlessRuntime::new(core, core_config, settings);
            if this.shutdown.is_cancelled() {
                runtime.shutdown().await;
                *built = Built::Failed(catalog::registry_shut_down());
                return Err(catalog::registry_shut_down().into_anyhow());
            }
            {
                let mut inner = this.lock();
                inner.metadata = Some(runtime.metadata());
                inner.runtime = Some(runtime.clone());
            }
            *built = Built::Ready(runtime.clone());
            Ok(runtime)
        }
    }
}

/// The envoy phase a state shows, `None` for the serverless states (whose
/// phase stays `NotStarted`).
fn phase_of(inner: &Inner) -> Option<Phase> {
    Some(match inner.state {
        State::Registering | State::EnvoyNotStarted => Phase::NotStarted,
        State::EnvoyStarting => Phase::Starting,
        State::EnvoyReady => Phase::Ready(inner.handle.clone()?),
        State::EnvoyShuttingDown => Phase::ShuttingDown,
        State::EnvoyFailed => Phase::Failed(inner.failure.clone()?),
        State::ShutDown => Phase::ShutDown,
        State::Serverless | State::ServerlessShutDown => return None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The state a shutdown leaves when it comes while the first
    /// serverless call builds the runtime: the actor types taken, no
    /// runtime stored.
    #[test]
    fn a_shutdown_during_the_first_serverless_build_reads_shut_down() {
        let state = RegistryState::new();
        {
            let mut inner = state.lock();
            state.apply(&mut inner, Event::ServerlessCall).unwrap();
            inner.actors.take();
        }
        assert_eq!(state.health(), (503, "not_started"));
        state.shutdown();
        assert_eq!(state.health(), (503, "shut_down"));
    }
}
