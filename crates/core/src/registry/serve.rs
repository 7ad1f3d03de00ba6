//! The serve run (docs/drain.md): engine (reuse or spawn),
//! runner config, envoy, then wait for the shutdown token and drain
//! ([`super::drain`]).
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

use super::config::{is_local_endpoint, should_manage_engine, EngineSpawnMode};
use super::{CoreRegistry, ServeConfig};
use crate::dispatcher::Dispatcher;
use crate::engine;
use crate::envoy::{KeyIndex, RegistryCallbacks};
use crate::error::RivetError;

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

        // The engine this run starts belongs to it: stopped when the run
        // ends, however it ends (docs/engine.md, "Who stops the engine").
        let owned = OwnedEngine::default();
        let setup = async {
            // A list of nodes is a cluster someone else runs: never spawned.
            let manage = match config.engine_spawn {
                EngineSpawnMode::Auto if !config.fallback_endpoints.is_empty() => false,
                mode => should_manage_engine(&config.endpoint, mode)?,
            };
            let mut options = config.engine_options();
            let mut arch = None;
            if manage {
                let status = engine::ensure_engine(&options).await?;
                arch = Some(status.arch());
                match status {
                    // `engine::ensure_engine` said so already, with the version.
                    engine::EngineStatus::Reused { .. } => {}
                    engine::EngineStatus::Spawned(spawned) => {
                        tracing::info!(endpoint = %config.endpoint, pid = spawned.pid, "Rivet Engine started");
                        owned.set(spawned);
                    }
                }
            }
            // The engine that answers decides how its pool is made and what
            // the lease's probes name; asked once, unless ensuring it said.
            options.arch = match arch {
                Some(arch) => arch,
                None => engine::running_arch(&options).await,
            };
            let local = is_local_endpoint(&config.endpoint) && config.fallback_endpoints.is_empty();
            if local {
                engine::ensure_runner_config_with(&options, runner_config_policy(&config)).await?;
            }
            let envoy = connect_envoy(&config, options.arch, &dispatcher, metadata).await?;
            if local {
                // Ready means placeable: the engine lists this host.
                engine::wait_until_listed(&options, &envoy.get_envoy_key(), LISTED_WAIT).await;
            }
            Ok::<_, anyhow::Error>(envoy)
        };
        let envoy = tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                tracing::info!("shutdown requested before the registry finished starting");
                owned.stop().await;
                return Ok(());
            }
            envoy = setup => envoy,
        };
        let envoy = match envoy {
            Ok(envoy) => envoy,
            Err(err) => {
                owned.stop().await;
                return Err(err);
            }
        };
        on_ready(ServeHandle { envoy: envoy.clone(), dispatcher: dispatcher.clone() });
        tracing::info!(pool = %config.pool_name, endpoint = %config.endpoint, "registry serving");

        shutdown.cancelled().await;
        tracing::debug!(target: crate::DRAIN_TRACE, "shutdown token cancelled");
        super::drain::drain(&config, &envoy, &dispatcher).await;
        owned.stop().await;
        Ok(())
    }
}

/// How long `serve()` waits, once connected to a local engine, for the
/// engine to list this host before it says it is ready anyway.
const LISTED_WAIT: Duration = Duration::from_secs(10);

/// The engine this run started, if any: stopped once the drain is done (or
/// setup failed). A run that is dropped without ending (the host process
/// exits) leaves it running, and the next start reuses it.
#[derive(Default)]
struct OwnedEngine(std::sync::Mutex<Option<engine::SpawnedEngine>>);

impl OwnedEngine {
    fn set(&self, spawned: engine::SpawnedEngine) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(spawned);
    }

    async fn stop(&self) {
        let spawned = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(spawned) = spawned {
            spawned.stop().await;
        }
    }
}

/// The runner-config wait shares the envoy's connect bound: one setting
/// says how long to wait for an engine we do not own (the default 30 s is
/// the reference's 60 attempts 500 ms apart).
fn runner_config_policy(config: &ServeConfig) -> engine::RetryPolicy {
    let interval = Duration::from_millis(500);
    let attempts = (config.envoy_connect_timeout.as_millis() / interval.as_millis()).max(1);
    engine::RetryPolicy { attempts: u32::try_from(attempts).unwrap_or(u32::MAX), interval }
}

/// The engine's key index for the new-actor check (I13, docs/generations.md);
/// the log says once when the check is off.
fn key_index(config: &ServeConfig) -> Option<KeyIndex> {
    let index = KeyIndex::new(&config.endpoints(), &config.namespace, config.token().as_deref());
    if index.is_none() {
        tracing::info!(
            endpoint = %config.endpoint,
            "new actors start without asking the engine who holds their key (I13): the built-in HTTP client speaks only http://"
        );
    }
    index
}

/// Starts the envoy and waits, bounded, for the engine to accept it. The
/// envoy client reconnects forever on its own, so the bound is ours.
pub(crate) async fn connect_envoy(
    config: &ServeConfig,
    arch: engine::EngineArch,
    dispatcher: &Arc<Dispatcher>,
    metadata: HashMap<String, serde_json::Value>,
) -> anyhow::Result<EnvoyHandle> {
    // A host name that does not resolve fails at once, not after the
    // connect bound (the envoy client would retry it forever).
    if let Some(cause) = engine::unresolvable(&config.endpoints()).await {
        return Err(RivetError::new(
            crate::error_codes::ENGINE_UNREACHABLE,
            format!(
                "The Rivet Engine at {} cannot be reached: {cause}. Check the endpoint (RIVET_ENDPOINT or the \
                 `endpoint` option) for a typo in its host name.",
                config.endpoint
            ),
        )
        .with_metadata(serde_json::json!({ "endpoint": config.endpoint, "pool": config.pool_name }))
        .into_anyhow());
    }
    let envoy = start_envoy_sync(EnvoyConfig {
        version: config.version,
        endpoint: config.endpoint.clone(),
        fallback_endpoints: config.fallback_endpoints.clone(),
        token: config.token(),
        namespace: config.namespace.clone(),
        pool_name: config.pool_name.clone(),
        prepopulate_actor_names: metadata.into_iter().map(|(k, metadata)| (k, ActorName { metadata })).collect(),
        metadata: Some(serde_json::json!({ "rivetkit": { "version": config.serverless_package_version } })),
        // One envoy per registry, so several registries can share a process.
        not_global: true,
        debug_latency_ms: None,
        max_queued_requests_per_actor: config.max_queued_requests_per_actor,
        lease_probe_actor_id: arch.lease_probe_actor_id().to_owned(),
        callbacks: Arc::new(RegistryCallbacks::new(dispatcher.clone(), key_index(config))),
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
        Ok(Err(_)) if envoy.fatal().is_some_and(|why| why.starts_with("pool.not_found")) => {
            envoy.shutdown(true);
            Err(pool_not_found(config))
        }
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
            Err(unreachable(config, &reason))
        }
    }
}

/// `engine.pool_not_found`: engine 3.0 refused the envoy because its pool
/// does not exist. Fatal: retrying cannot make it exist.
fn pool_not_found(config: &ServeConfig) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_POOL_NOT_FOUND,
        format!(
            "The Rivet Engine at {} has no pool '{}' in namespace '{}', so it refused this host. Create the pool \
             (PUT /pools/{}), or set the pool name your operator created (RIVET_POOL_NAME).",
            config.endpoint, config.pool_name, config.namespace, config.pool_name
        ),
    )
    .with_metadata(serde_json::json!({
        "endpoint": config.endpoint,
        "pool": config.pool_name,
        "namespace": config.namespace,
    }))
    .into_anyhow()
}

/// `engine.unreachable`: the engine did not accept this host, and why.
fn unreachable(config: &ServeConfig, reason: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_UNREACHABLE,
        format!(
            "The Rivet Engine at {} did not accept this host as pool '{}' in namespace '{}' ({reason}). \
             Check that the engine is running and reachable, and that the pool has a runner config.",
            config.endpoint, config.pool_name, config.namespace
        ),
    )
    .with_metadata(serde_json::json!({ "endpoint": config.endpoint, "pool": config.pool_name }))
    .into_anyhow()
}
