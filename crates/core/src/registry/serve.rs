//! The serve run (docs/drain.md): engine (reuse or spawn),
//! runner config, envoy, then wait for the shutdown token and drain.
//!
//! There is no signal handling here or anywhere in the library: the host
//! owns its signals and cancels the token (a handler installed by a native
//! library replaces Node's own and leaves it unable to exit on Ctrl-C).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rivet_envoy_client::config::{ActorName, EnvoyConfig};
use rivet_envoy_client::envoy::start_envoy_sync;
use rivet_envoy_client::handle::EnvoyHandle;
use tokio_util::sync::CancellationToken;

use super::config::{is_local_endpoint, should_manage_engine};
use super::{CoreRegistry, ServeConfig};
use crate::dispatcher::Dispatcher;
use crate::engine;
use crate::envoy::RegistryCallbacks;
use crate::error::RivetError;

/// Drain bound when the host configured none (the engine's own threshold
/// is 30 minutes, far longer than anyone waits for Ctrl-C).
pub const DEFAULT_DRAIN_CAP: Duration = Duration::from_secs(30);
/// After a forced stop, how long we still wait for the envoy loop.
const FORCED_STOP_WAIT: Duration = Duration::from_secs(5);
/// How long background jobs (stops, waiters) may take after the envoy stopped.
const TRACKER_WAIT: Duration = Duration::from_secs(5);

/// What a running registry exposes to its host.
#[derive(Clone)]
pub struct ServeHandle {
    envoy: EnvoyHandle,
    dispatcher: Arc<Dispatcher>,
}

impl ServeHandle {
    /// Resolves once the engine accepted the envoy (its init message arrived).
    pub async fn started(&self) -> anyhow::Result<()> {
        self.envoy.started().await
    }
    /// The engine's actor stop threshold, once protocol metadata arrived.
    pub async fn actor_stop_threshold_ms(&self) -> Option<i64> {
        self.envoy.get_protocol_metadata().await.map(|m| m.actor_stop_threshold)
    }
    pub fn is_ping_healthy(&self) -> bool {
        self.envoy.is_ping_healthy()
    }
    pub fn active_actor_count(&self) -> usize {
        self.dispatcher.instance_count()
    }
    pub fn is_stopped(&self) -> bool {
        self.envoy.is_stopped()
    }
}

impl CoreRegistry {
    /// Runs until `shutdown` is cancelled, then drains. `on_ready` receives
    /// the handle once the engine accepted the envoy. Setup failures
    /// (engine, runner config, envoy) reject; a shutdown during setup
    /// resolves `Ok` without serving.
    pub async fn serve(
        self,
        config: ServeConfig,
        shutdown: CancellationToken,
        on_ready: impl FnOnce(ServeHandle) + Send,
    ) -> anyhow::Result<()> {
        let metadata = self.actor_metadata();
        let dispatcher = Dispatcher::new(self.into_factories());

        // Said once when this run ends, however it ends: the engine we
        // started keeps running on purpose, and the user should know how
        // to stop it.
        let left_running = LeftRunning::default();
        let setup = async {
            if should_manage_engine(&config.endpoint, config.engine_spawn)? {
                match engine::ensure_engine(&config.engine_options()).await? {
                    engine::EngineStatus::Reused => {
                        tracing::info!(endpoint = %config.endpoint, "using the Rivet Engine already running")
                    }
                    engine::EngineStatus::Spawned { pid, .. } => {
                        left_running.set(pid, &config.endpoint);
                        tracing::info!(endpoint = %config.endpoint, pid, "Rivet Engine started")
                    }
                }
            }
            if is_local_endpoint(&config.endpoint) {
                engine::ensure_runner_config_with(&config.engine_options(), runner_config_policy(&config)).await?;
            }
            connect_envoy(&config, &dispatcher, metadata).await
        };
        let envoy = tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                tracing::info!("shutdown requested before the registry finished starting");
                return Ok(());
            }
            envoy = setup => envoy?,
        };
        on_ready(ServeHandle { envoy: envoy.clone(), dispatcher: dispatcher.clone() });
        tracing::info!(pool = %config.pool_name, endpoint = %config.endpoint, "registry serving");

        shutdown.cancelled().await;
        drain(&config, &envoy, &dispatcher).await;
        Ok(())
    }
}

/// The engine this run started, announced once when the run ends (drop).
#[derive(Default)]
struct LeftRunning(std::sync::Mutex<Option<(u32, String)>>);

impl LeftRunning {
    fn set(&self, pid: u32, endpoint: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((pid, endpoint.to_owned()));
    }
}

impl Drop for LeftRunning {
    fn drop(&mut self) {
        if let Some((pid, endpoint)) = self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            tracing::info!(pid, endpoint = %endpoint, "{}", left_running_message(pid, &endpoint));
        }
    }
}

/// What we say about an engine we started and leave running.
pub fn left_running_message(pid: u32, endpoint: &str) -> String {
    let stop = if cfg!(windows) { format!("taskkill /PID {pid} /T /F") } else { format!("kill {pid}") };
    format!(
        "the Rivet Engine this process started (pid {pid}, {endpoint}) keeps running, and the next start \
         reuses it; stop it with `{stop}`"
    )
}

/// The runner-config wait shares the envoy's connect bound: one setting
/// says how long to wait for an engine we do not own (the default 30 s is
/// the reference's 60 attempts 500 ms apart).
fn runner_config_policy(config: &ServeConfig) -> engine::RetryPolicy {
    let interval = Duration::from_millis(500);
    let attempts = (config.envoy_connect_timeout.as_millis() / interval.as_millis()).max(1);
    engine::RetryPolicy { attempts: u32::try_from(attempts).unwrap_or(u32::MAX), interval }
}

/// Starts the envoy and waits, bounded, for the engine to accept it. The
/// envoy client reconnects forever on its own, so the bound is ours.
pub(crate) async fn connect_envoy(
    config: &ServeConfig,
    dispatcher: &Arc<Dispatcher>,
    metadata: HashMap<String, serde_json::Value>,
) -> anyhow::Result<EnvoyHandle> {
    let envoy = start_envoy_sync(EnvoyConfig {
        version: config.version,
        endpoint: config.endpoint.clone(),
        token: config.token.clone(),
        namespace: config.namespace.clone(),
        pool_name: config.pool_name.clone(),
        prepopulate_actor_names: metadata.into_iter().map(|(k, metadata)| (k, ActorName { metadata })).collect(),
        metadata: Some(serde_json::json!({ "rivetkit": { "version": config.serverless_package_version } })),
        // One envoy per registry, so several registries can share a process.
        not_global: true,
        debug_latency_ms: None,
        callbacks: Arc::new(RegistryCallbacks::new(dispatcher.clone())),
    });
    // The envoy client retries a DNS failure or a refused connection
    // forever and only logs it: find the cause ourselves, say it at once,
    // and put it in the error if the engine never accepts us.
    let endpoint = config.endpoint.clone();
    let diagnosis = tokio::spawn(async move {
        let cause = engine::diagnose_reachability(&endpoint).await;
        if let Some(cause) = &cause {
            tracing::warn!(endpoint = %endpoint, "cannot reach the Rivet Engine: {cause}");
        }
        cause
    });
    let started = tokio::time::timeout(config.envoy_connect_timeout, envoy.started()).await;
    if matches!(started, Ok(Ok(()))) {
        diagnosis.abort();
    }
    match started {
        Ok(Ok(())) => Ok(envoy),
        outcome => {
            envoy.shutdown(true);
            let mut reason = match outcome {
                Ok(Err(err)) => format!("{err:#}"),
                _ => format!("no answer within {} ms", config.envoy_connect_timeout.as_millis()),
            };
            if let Ok(Ok(Some(cause))) = tokio::time::timeout(engine::DIAGNOSIS_TIMEOUT, diagnosis).await {
                reason.push_str("; ");
                reason.push_str(&cause);
            }
            Err(RivetError::new(
                "engine",
                "unreachable",
                format!(
                    "The Rivet Engine at {} did not accept this host as pool '{}' in namespace '{}' ({reason}). \
                     Check that the engine is running and reachable, and that the pool has a runner config.",
                    config.endpoint, config.pool_name, config.namespace
                ),
            )
            .with_metadata(serde_json::json!({ "endpoint": config.endpoint, "pool": config.pool_name }))
            .into_anyhow())
        }
    }
}

/// Graceful envoy shutdown (every actor gets `GoingAway` and sleeps),
/// bounded by the engine's stop threshold and our cap, then a forced stop.
/// How long the engine gets to stop our actors after we said we are
/// stopping, before we ask again for the ones it has not stopped.
const STRAGGLER_NUDGE_INTERVAL: Duration = Duration::from_secs(1);

/// The engine (2.3.19) does not send a stop for actors it is still starting
/// when the envoy says it is stopping, and the envoy waits for every actor.
/// Every [`STRAGGLER_NUDGE_INTERVAL`], each generation still active asks the
/// engine to put it to sleep (the normal sleep intent), so the drain ends
/// with every actor's state saved instead of at the drain bound.
async fn nudge_stragglers(dispatcher: &Dispatcher) {
    loop {
        tokio::time::sleep(STRAGGLER_NUDGE_INTERVAL).await;
        let stragglers = dispatcher.active_contexts();
        if !stragglers.is_empty() {
            tracing::info!(actors = stragglers.len(), "asking the engine again to stop actors it has not stopped");
        }
        for ctx in stragglers {
            ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
        }
    }
}

/// How many final saves the drain runs at once when it hits its bound.
const FINAL_SAVE_CONCURRENCY: usize = 32;
/// How long those saves may take in all. The drain bound limits how long
/// we wait for the engine's stops; this one protects the data (an engine
/// that ignores stops still takes writes), and is never skipped.
const FINAL_SAVE_WAIT: Duration = Duration::from_secs(15);

/// Saves every generation still running (`serializeState`, then the
/// record and connection records), so nothing the actors hold is lost
/// when the drain gives up on the engine's stops.
async fn save_all(dispatcher: &Dispatcher) {
    use crate::actor::save::SaveOptions;
    use futures::stream::{self, StreamExt};

    let live = dispatcher.live_contexts();
    let total = live.len();
    let saves = stream::iter(live)
        .map(|ctx| async move {
            let result = ctx.request_save_and_wait(SaveOptions { immediate: true, max_wait: None }).await;
            if let Err(err) = &result {
                tracing::error!(actor_id = ctx.actor_id(), generation = ctx.generation(), error = %format!("{err:#}"), "final save at the drain bound failed");
            }
            result.is_ok()
        })
        .buffer_unordered(FINAL_SAVE_CONCURRENCY)
        .fold(0usize, |saved, ok| async move { saved + usize::from(ok) });
    match tokio::time::timeout(FINAL_SAVE_WAIT, saves).await {
        Ok(saved) => tracing::info!(saved, total, "saved the actors still running"),
        Err(_) => tracing::error!(
            total,
            wait_ms = FINAL_SAVE_WAIT.as_millis() as u64,
            "final saves at the drain bound did not finish in time"
        ),
    }
}

pub(crate) async fn drain(config: &ServeConfig, envoy: &EnvoyHandle, dispatcher: &Dispatcher) {
    let threshold = envoy
        .get_protocol_metadata()
        .await
        .and_then(|m| u64::try_from(m.actor_stop_threshold).ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(30 * 60));
    let bound = threshold.min(config.drain_cap.unwrap_or(DEFAULT_DRAIN_CAP));
    tracing::info!(actors = dispatcher.instance_count(), bound_ms = bound.as_millis() as u64, "draining");
    let drained = async {
        tokio::select! {
            _ = envoy.shutdown_and_wait(false) => {}
            _ = nudge_stragglers(dispatcher) => {}
        }
    };
    if tokio::time::timeout(bound, drained).await.is_err() {
        tracing::warn!(
            bound_ms = bound.as_millis() as u64,
            "drain did not finish in time; saving the actors still running"
        );
        save_all(dispatcher).await;
        tracing::warn!("stopping the envoy now");
        envoy.shutdown(true);
        let _ = tokio::time::timeout(FORCED_STOP_WAIT, envoy.wait_stopped()).await;
    }
    dispatcher.tracker().close();
    if tokio::time::timeout(TRACKER_WAIT, dispatcher.tracker().wait()).await.is_err() {
        tracing::warn!("background actor work did not finish after the drain");
    }
    tracing::info!("registry shut down");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_running_message_says_how_to_stop_it() {
        let message = left_running_message(4242, "http://127.0.0.1:6420");
        assert!(message.contains("pid 4242") && message.contains("http://127.0.0.1:6420"), "{message}");
        assert!(message.contains(if cfg!(windows) { "taskkill /PID 4242" } else { "`kill 4242`" }), "{message}");
    }
}
