//! Serverless mode (docs/serverless.md): the host answers HTTP routes under
//! a base path instead of connecting to the engine on its own. The engine
//! calls `POST {base}/start` when it needs a host for an actor; the host
//! then starts (or reuses) its envoy, hands it that actor, and keeps the
//! request open with an event stream while the actor runs.
//!
//! A serverless start is one more way a generation begins: the envoy built
//! here has the same [`RegistryCallbacks`] and [`Dispatcher`] as the serve
//! run, so everything after the hand-over (start, traffic, sleep, drain) is
//! the code path of the normal mode.
//!
//! - [`http`]: request/response shapes, CORS, error statuses;
//! - [`settings`]: base path and the start checks' settings;
//! - [`start`]: checks of the engine's start request;
//! - [`envoys`]: the one cached envoy;
//! - [`sse`]: the event stream of a start.
//!
//! [`RegistryCallbacks`]: crate::envoy::RegistryCallbacks

pub mod http;
pub mod settings;
pub mod start;

mod envoys;
mod sse;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rivet_envoy_client::handle::EnvoyHandle;
use rivet_envoy_client::protocol;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use http::{BodyStream, ResponseBody, ServerlessRequest, ServerlessResponse};
pub use settings::ServerlessSettings;

use crate::dispatcher::Dispatcher;
use crate::engine;
use crate::registry::{should_manage_engine, CoreRegistry, ServeConfig};
use envoys::EnvoyCache;
use settings::{is_framework_path, route_path, FRAMEWORK_ROUTES};

/// How long event streams may take to end after the envoy stopped.
const STREAMS_WAIT: Duration = Duration::from_secs(5);

pub struct ServerlessRuntime {
    config: ServeConfig,
    settings: ServerlessSettings,
    dispatcher: Arc<Dispatcher>,
    actor_metadata: HashMap<String, Value>,
    envoys: EnvoyCache,
    streams: TaskTracker,
    shutdown: CancellationToken,
    drained: tokio::sync::OnceCell<()>,
    /// Set once the local engine is known to run ([`Self::ensure_engine`]).
    engine: tokio::sync::OnceCell<()>,
    /// The engine this runtime started, announced at shutdown.
    /// The engine this host started, stopped at shutdown (docs/engine.md).
    spawned_engine: Mutex<Option<engine::SpawnedEngine>>,
}

impl ServerlessRuntime {
    /// Builds the runtime from the registry. It upserts no runner config
    /// (a serverless pool's config points at this host's URL, and is the
    /// user's or `configurePool`'s to write); the local engine is found or
    /// started by the requests ([`Self::ensure_engine`]).
    pub fn new(registry: CoreRegistry, config: ServeConfig, settings: ServerlessSettings) -> Arc<Self> {
        let actor_metadata = registry.actor_metadata();
        let dispatcher = Dispatcher::new(registry.into_factories());
        tracing::info!(base_path = %settings.base_path, "registry serving (serverless)");
        Arc::new(Self {
            config,
            settings,
            dispatcher,
            actor_metadata,
            envoys: EnvoyCache::default(),
            streams: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            drained: tokio::sync::OnceCell::new(),
            engine: tokio::sync::OnceCell::new(),
            spawned_engine: Mutex::new(None),
        })
    }

    /// Like the serve run, finds or starts a local engine for a local
    /// endpoint. Tried by every request until it succeeds: a failure (a
    /// held port, say) is not kept, so the host recovers once its cause is
    /// gone, without a restart.
    pub async fn ensure_engine(&self) -> anyhow::Result<()> {
        self.engine
            .get_or_try_init(|| async {
                if should_manage_engine(&self.config.endpoint, self.config.engine_spawn)? {
                    match engine::ensure_engine(&self.config.engine_options()).await? {
                        // `engine::ensure_engine` said so already, with the version.
                        engine::EngineStatus::Reused { .. } => {}
                        engine::EngineStatus::Spawned(spawned) => {
                            tracing::info!(endpoint = %self.config.endpoint, pid = spawned.pid, "Rivet Engine started");
                            *self.spawned_engine.lock().unwrap_or_else(|p| p.into_inner()) = Some(spawned);
                        }
                    }
                }
                anyhow::Ok(())
            })
            .await
            .map(|_| ())
    }

    pub fn settings(&self) -> &ServerlessSettings {
        &self.settings
    }

    /// Whether a listener should answer `path` here rather than hand it to
    /// the application.
    pub fn owns(&self, path: &str) -> bool {
        is_framework_path(&self.settings.base_path, path, FRAMEWORK_ROUTES)
    }

    /// The envoy serving starts, once the first start arrived.
    pub fn envoy(&self) -> Option<EnvoyHandle> {
        self.envoys.current()
    }

    pub fn active_actor_count(&self) -> usize {
        self.dispatcher.instance_count()
    }

    /// The engine's actor stop threshold, once an envoy knows it.
    pub async fn actor_stop_threshold_ms(&self) -> Option<i64> {
        self.envoy()?.get_protocol_metadata().await.map(|m| m.actor_stop_threshold)
    }

    /// `{"status": "ok"}` (200) while no envoy exists or its engine link is
    /// healthy, `engine_ping_stale` (503) otherwise.
    pub fn health(&self) -> (u16, Value) {
        let healthy = self.envoy().map(|e| e.is_ping_healthy()).unwrap_or(true);
        let (code, status) = if healthy { (200, "ok") } else { (503, "engine_ping_stale") };
        (code, json!({ "status": status, "runtime": "rivetkit", "version": self.settings.package_version }))
    }

    /// The `/metadata` document, envoy kind `serverless`.
    pub fn metadata(&self) -> Value {
        serverless_metadata(&self.config, &self.settings, &self.actor_metadata)
    }

    /// Answers one request (docs/serverless.md has the routes). Never fails:
    /// an error is a JSON response.
    pub async fn handle(self: &Arc<Self>, req: ServerlessRequest) -> ServerlessResponse {
        let cors = http::cors_headers(&req);
        // Every route but `/start` answers without the engine.
        let engine = self.ensure_engine().await;
        if let Err(err) = &engine {
            let error = crate::error::RivetError::extract(err);
            tracing::warn!(code = %error.qualified_code(), "the Rivet Engine is not available yet: {}", error.message);
        }
        let mut response = match self.route(req, engine).await {
            Ok(response) => response,
            Err(err) => {
                let error = crate::error::RivetError::extract(&err);
                tracing::debug!(error = %error, "serverless request refused");
                ServerlessResponse::error(&error)
            }
        };
        response.headers.extend(cors);
        response
    }

    async fn route(
        self: &Arc<Self>,
        req: ServerlessRequest,
        engine: anyhow::Result<()>,
    ) -> anyhow::Result<ServerlessResponse> {
        let path = route_path(&self.settings.base_path, &req.path());
        Ok(match (req.method.as_str(), path.as_str()) {
            ("GET", "" | "/") => {
                ServerlessResponse::text(200, "This is a RivetKit server.\n\nLearn more at https://rivet.dev")
            }
            ("GET", "/health") => {
                let (code, body) = self.health();
                ServerlessResponse::json(code, &body)
            }
            ("GET", "/metadata") => ServerlessResponse::json(200, &self.metadata()),
            ("GET", "/metrics") => {
                ServerlessResponse::bytes(200, METRICS_CONTENT_TYPE, metrics_text(self.active_actor_count()))
            }
            ("GET" | "POST", "/start") => {
                engine?;
                self.start(req).await?
            }
            ("OPTIONS", _) => ServerlessResponse::empty(204),
            _ => ServerlessResponse::text(404, "Not Found (RivetKit)"),
        })
    }

    /// `/start`: every check first, then the envoy, then the event stream.
    async fn start(self: &Arc<Self>, req: ServerlessRequest) -> anyhow::Result<ServerlessResponse> {
        let headers = start::parse_headers(&req)?;
        if self.settings.validate_endpoint {
            start::check_identity(&headers, &self.config.endpoint, &self.config.namespace)?;
        }
        start::check_size(req.body.len(), self.settings.max_start_payload_bytes)?;
        self.envoys.check(&headers)?;
        let target = start::decode_payload(&req.body)?;
        let envoy = self.envoys.get_or_connect(&headers, || self.connect(&headers)).await?;

        tracing::debug!(actor_id = %target.actor_id, generation = target.generation, pool = %headers.pool_name, "serverless start");
        let (tx, body) = BodyStream::channel(sse::STREAM_CAPACITY, req.cancel.clone());
        self.streams.spawn(sse::run(envoy, req.body, target, tx, req.cancel));
        Ok(ServerlessResponse {
            status: 200,
            headers: HashMap::from([
                ("content-type".to_owned(), "text/event-stream".to_owned()),
                ("cache-control".to_owned(), "no-cache".to_owned()),
                ("connection".to_owned(), "keep-alive".to_owned()),
            ]),
            body: ResponseBody::Stream(body),
        })
    }

    /// A new envoy for the engine named in the start request, waiting
    /// (bounded) until the engine accepted it.
    async fn connect(&self, headers: &start::StartHeaders) -> anyhow::Result<EnvoyHandle> {
        let mut config = self.config.clone();
        config.endpoint = headers.endpoint.clone();
        config.token = headers.token.clone();
        config.namespace = headers.namespace.clone();
        config.pool_name = headers.pool_name.clone();
        let arch = engine::running_arch(&config.engine_options()).await;
        crate::registry::connect_envoy(&config, arch, &self.dispatcher, self.actor_metadata.clone()).await
    }

    /// Refuses new starts, drains the envoy like the serve run's drain (every
    /// actor put to sleep, state saved), then waits for the event streams.
    /// Idempotent: concurrent callers wait for the same drain.
    pub async fn shutdown(&self) {
        self.drained
            .get_or_init(|| async {
                self.shutdown.cancel();
                match self.envoys.close().await {
                    Some(envoy) => crate::registry::drain(&self.config, &envoy, &self.dispatcher).await,
                    None => {
                        self.dispatcher.tracker().close();
                        tracing::info!("registry shut down (no serverless envoy had started)");
                    }
                }
                self.streams.close();
                if tokio::time::timeout(STREAMS_WAIT, self.streams.wait()).await.is_err() {
                    tracing::warn!("serverless event streams did not end after the drain");
                }
                let spawned = self.spawned_engine.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(spawned) = spawned {
                    spawned.stop().await;
                }
            })
            .await;
    }

    /// Runs `work` as part of this runtime (its end is awaited at shutdown,
    /// like the event streams'): the delivery of a response to the host.
    pub fn track<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.streams.spawn(work);
    }

    pub fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}

/// The `/metadata` document of serverless mode (docs/serverless.md).
pub fn serverless_metadata(
    config: &ServeConfig,
    settings: &ServerlessSettings,
    actors: &HashMap<String, Value>,
) -> Value {
    let actor_names: serde_json::Map<String, Value> =
        actors.iter().map(|(name, meta)| (name.clone(), json!({ "metadata": meta }))).collect();
    let mut payload = json!({
        "runtime": "rivetkit",
        "version": settings.package_version,
        "envoyProtocolVersion": protocol::PROTOCOL_VERSION,
        "actorNames": actor_names,
        "envoy": { "kind": { "serverless": {} }, "version": config.version },
    });
    for (key, value) in [
        ("clientEndpoint", &settings.client_endpoint),
        ("clientNamespace", &settings.client_namespace),
        ("clientToken", &settings.client_token),
    ] {
        if let Some(value) = value {
            payload[key] = json!(value);
        }
    }
    payload
}

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Prometheus text: the actor generations this host runs.
pub fn metrics_text(active: usize) -> Bytes {
    Bytes::from(format!(
        "# HELP rivetkit_native_active_actors Actor generations running on this host.\n\
         # TYPE rivetkit_native_active_actors gauge\n\
         rivetkit_native_active_actors {active}\n"
    ))
}

#[cfg(test)]
mod tests;
