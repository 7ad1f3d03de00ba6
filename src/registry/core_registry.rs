//! `CoreRegistry`: what JavaScript registers actors on and serves.
//!
//! States: registering → serving → shut down (or straight to shut down if
//! `shutdown()` comes first). `shutdown()` only trips the one cancellation
//! token; the drain runs inside `serve()`, whose promise settles when it
//! is done. Nothing here touches signals: the host decides when to stop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::error::{catalog, RivetError};
use rivetkit_native_core::registry::{CoreRegistry as Core, ServeConfig};
use rivetkit_native_core::serverless::ServerlessRuntime;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use napi::bindgen_prelude::{ClassInstance, JsObjectValue, Object, Unknown};
use napi::ValueType;
use rivetkit_native_core::actor::ActorFactory;
use rivetkit_native_core::error::validate::invalid;

use super::config::JsServeConfig;
use super::factory::NapiActorFactory;
use super::serverless_runtime::ServerlessCell;
use super::state::{health_status, Phase, Slot};
use crate::bridge::error::{spawn_promise, throw, to_js_error};
use crate::bridge::types::{args, JsRegistryRouteResponse};

/// The factory inside `value`, if it is a `NapiActorFactory` instance.
fn factory_of(value: &Unknown<'_>) -> Option<ActorFactory> {
    if value.get_type().ok() != Some(napi::ValueType::Object) {
        return None;
    }
    // SAFETY: `value` is a live handle of the current scope; the class
    // check (napi_unwrap with our type tag) refuses any other object.
    let instance = unsafe { value.cast::<ClassInstance<NapiActorFactory>>() }.ok()?;
    Some(instance.inner.clone())
}

#[napi]
pub struct CoreRegistry {
    pub(crate) slot: Arc<Mutex<Slot>>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) phase: watch::Sender<Phase>,
    /// The `/metadata` payload, fixed when `serve()` (or the first
    /// serverless call) read its config.
    pub(crate) metadata: Arc<Mutex<Option<serde_json::Value>>>,
    /// Serverless mode (`serverless_runtime`), once a serverless call came.
    pub(crate) serverless: Arc<ServerlessCell>,
}

impl CoreRegistry {
    /// The serverless runtime, built from the registered factories on the
    /// first call (`handleServerlessRequest`, `serveListener`).
    pub(crate) fn ensure_serverless(
        &self,
        config: JsServeConfig,
    ) -> impl std::future::Future<Output = anyhow::Result<Arc<ServerlessRuntime>>> + Send + 'static {
        self.serverless.ensure(self.slot.clone(), self.shutdown.clone(), self.metadata.clone(), config)
    }
}

impl Default for CoreRegistry {
    fn default() -> Self {
        Self::new()
    }
}

#[napi]
impl CoreRegistry {
    #[napi(constructor)]
    pub fn new() -> Self {
        Self {
            slot: Arc::new(Mutex::new(Slot::Registering(Core::new()))),
            shutdown: CancellationToken::new(),
            phase: watch::channel(Phase::NotStarted).0,
            metadata: Arc::new(Mutex::new(None)),
            serverless: Arc::default(),
        }
    }

    /// Registers (or replaces) an actor type. Only before `serve()`.
    /// Throws `napi.invalid_argument` for a name that is not a non-empty
    /// string or a factory that is not a `NapiActorFactory`, and
    /// `napi.invalid_state` after `serve()` or `shutdown()`.
    #[napi(ts_args_type = "name: string, factory: NapiActorFactory")]
    pub fn register(&self, env: &Env, name: Unknown<'_>, factory: Unknown<'_>) -> napi::Result<()> {
        let name = args::string("name", name).map_err(|e| throw(env, e))?;
        if name.is_empty() {
            return Err(throw(env, invalid("name", "an actor name must not be empty")));
        }
        let factory = factory_of(&factory).ok_or_else(|| {
            let got = args::type_name(&factory);
            throw(env, invalid("factory", format!("expected a NapiActorFactory, got {got}")))
        })?;
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *slot {
            Slot::Registering(core) => {
                core.register(name, factory);
                Ok(())
            }
            Slot::Taken => {
                Err(to_js_error(env, catalog::invalid_state("register() after serve() or shutdown()").into_anyhow()))
            }
        }
    }

    /// Connects to the engine and serves until `shutdown()`; resolves when
    /// the drain is done. Rejects on a setup failure (engine, runner
    /// config, envoy) with a structured error.
    #[napi(ts_args_type = "config?: JsServeConfig | undefined | null", ts_return_type = "Promise<void>")]
    pub fn serve<'env>(&self, env: &'env Env, config: Option<JsServeConfig>) -> napi::Result<PromiseRaw<'env, ()>> {
        rivetkit_native_core::inspector::set_test_token(config.as_ref().and_then(|c| c.inspector_test_token.clone()));
        let core = {
            let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            match std::mem::replace(&mut *slot, Slot::Taken) {
                Slot::Registering(core) => core,
                Slot::Taken => {
                    return Err(to_js_error(
                        env,
                        catalog::invalid_state("serve() was already called, or the registry was shut down")
                            .into_anyhow(),
                    ));
                }
            }
        };
        let shutdown = self.shutdown.clone();
        let phase = self.phase.clone();
        let actor_metadata = core.actor_metadata();
        let metadata = self.metadata.clone();
        let exit_code_on_failure = config.as_ref().and_then(|c| c.exit_code_on_failure).unwrap_or(true);
        let serving = async move {
            if shutdown.is_cancelled() {
                phase.send_replace(Phase::ShutDown);
                return Ok(());
            }
            let config = config.unwrap_or_default().into_core();
            let result = match config {
                Ok(config) => {
                    *metadata.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(normal_metadata(&config, actor_metadata));
                    phase.send_replace(Phase::Starting);
                    let ready = phase.clone();
                    core.serve(config, shutdown, move |handle| {
                        ready.send_replace(Phase::Ready(handle));
                    })
                    .await
                }
                Err(err) => Err(err),
            };
            let was_ready = matches!(*phase.borrow(), Phase::Ready(_));
            match &result {
                Ok(()) => phase.send_replace(Phase::ShutDown),
                Err(err) => {
                    report_serve_failure(err, was_ready);
                    phase.send_replace(Phase::Failed(RivetError::extract(err)))
                }
            };
            result
        };
        env.spawn_future_with_callback(async move { Ok(serving.await) }, move |env, result| {
            result.map_err(|err| {
                if exit_code_on_failure {
                    mark_process_failed(env);
                }
                to_js_error(env, err)
            })
        })
    }

    /// Resolves once the engine accepted this host; rejects if serving
    /// failed or the registry shut down first. Call it after `serve()`:
    /// before, it rejects at once with `napi.invalid_state` (nothing would
    /// ever settle it otherwise); after `shutdown()` it rejects with
    /// `registry.shut_down`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn wait_ready<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let never_served = matches!(*self.slot.lock().unwrap_or_else(|p| p.into_inner()), Slot::Registering(_));
        if never_served {
            return spawn_promise(env, async {
                Err(catalog::invalid_state("waitReady() before serve(): call serve() first, then waitReady()")
                    .into_anyhow())
            });
        }
        if self.serverless.current().is_some() {
            return spawn_promise(env, async {
                Err(catalog::invalid_state("waitReady() in serverless mode: hosts become ready per start request")
                    .into_anyhow())
            });
        }
        let mut rx = self.phase.subscribe();
        spawn_promise(env, async move {
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

    /// Trips shutdown. Idempotent; never waits for `serve()` (await that
    /// promise separately to know when the drain is done). Before
    /// `serve()` it resolves at once and ends the registry: `serve()` then
    /// throws `napi.invalid_state` and `waitReady()` rejects with
    /// `registry.shut_down`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        if !self.shutdown.is_cancelled() {
            tracing::info!("shutdown requested");
            tracing::debug!(target: rivetkit_native_core::DRAIN_TRACE, "shutdown requested");
            self.shutdown.cancel();
            self.phase.send_if_modified(|p| {
                if matches!(p, Phase::Ready(_) | Phase::Starting) {
                    *p = Phase::ShuttingDown;
                    true
                } else {
                    false
                }
            });
            // A registry that never served has nothing to drain. Decided
            // under the lock, published after it.
            let never_served = {
                let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
                matches!(std::mem::replace(&mut *slot, Slot::Taken), Slot::Registering(_))
            };
            if never_served {
                self.phase.send_replace(Phase::ShutDown);
            }
        }
        // Serverless mode drains here (there is no serve() promise to do it).
        let serverless = self.serverless.clone();
        spawn_promise(env, async move {
            serverless.shutdown().await;
            Ok(())
        })
    }

    /// The engine's actor stop threshold in ms, or `null` before it is known.
    #[napi(ts_return_type = "Promise<number | null>")]
    pub fn actor_stop_threshold_ms<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<f64>>> {
        let phase = self.phase.borrow().clone();
        let serverless = self.serverless.current();
        spawn_promise(env, async move {
            if let Some(runtime) = serverless {
                return Ok(runtime.actor_stop_threshold_ms().await.map(|ms| ms as f64));
            }
            Ok(match phase {
                Phase::Ready(handle) => handle.actor_stop_threshold_ms().await.map(|ms| ms as f64),
                _ => None,
            })
        })
    }

    /// `{status, runtime: "rivetkit", version}` as JSON; 200 only while
    /// serving with a healthy engine link.
    #[napi(ts_return_type = "Promise<JsRegistryRouteResponse>")]
    pub fn health<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, JsRegistryRouteResponse>> {
        let (code, status) = match self.serverless.current() {
            Some(runtime) => super::serverless_runtime::health_status(&runtime),
            None => health_status(&self.phase.borrow()),
        };
        let body = serde_json::json!({ "status": status, "runtime": "rivetkit", "version": env!("CARGO_PKG_VERSION") });
        spawn_promise(env, async move { Ok(json_route(code, &body)) })
    }

    /// The normal-mode metadata payload (`{runtime, version,
    /// envoyProtocolVersion, actorNames, envoy}`), status 200. Throws
    /// `napi.invalid_state` before `serve()` has started.
    #[napi]
    pub fn metadata(&self, env: &Env) -> napi::Result<JsRegistryRouteResponse> {
        match &*self.metadata.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(body) => Ok(json_route(200, body)),
            None => Err(to_js_error(env, catalog::invalid_state("metadata() before serve() started").into_anyhow())),
        }
    }

    /// Prometheus text (`text/plain; version=0.0.4`), status 200:
    /// `rivetkit_native_active_actors`, the actor generations this host
    /// runs (0 when not serving).
    #[napi]
    pub fn metrics(&self) -> JsRegistryRouteResponse {
        let active = match (&*self.phase.borrow(), self.serverless.current()) {
            (_, Some(runtime)) => runtime.active_actor_count(),
            (Phase::Ready(handle), None) => handle.active_actor_count(),
            _ => 0,
        };
        let body = format!(
            "# HELP rivetkit_native_active_actors Actor generations running on this host.\n\
             # TYPE rivetkit_native_active_actors gauge\n\
             rivetkit_native_active_actors {active}\n"
        );
        JsRegistryRouteResponse {
            status: 200,
            headers: HashMap::from([("content-type".to_string(), "text/plain; version=0.0.4".to_string())]),
            body: Buffer::from(body.into_bytes()),
        }
    }
}

/// The Engine protocol version announced in `/metadata`.
const ENVOY_PROTOCOL_VERSION: u32 = 8;

/// The normal-mode metadata payload (docs/drain.md).
fn normal_metadata(config: &ServeConfig, actors: HashMap<String, serde_json::Value>) -> serde_json::Value {
    let actor_names: serde_json::Map<String, serde_json::Value> =
        actors.into_iter().map(|(name, meta)| (name, serde_json::json!({ "metadata": meta }))).collect();
    serde_json::json!({
        "runtime": "rivetkit",
        "version": config.serverless_package_version,
        "envoyProtocolVersion": ENVOY_PROTOCOL_VERSION,
        "actorNames": actor_names,
        "envoy": { "kind": { "normal": {} }, "version": config.version },
    })
}

fn json_route(status: u32, body: &serde_json::Value) -> JsRegistryRouteResponse {
    JsRegistryRouteResponse {
        status,
        headers: HashMap::from([("content-type".to_string(), "application/json".to_string())]),
        body: Buffer::from(serde_json::to_vec(body).unwrap_or_default()),
    }
}

/// Says once, at error level and as a plain sentence, why `serve()`
/// failed: RivetKit's `registry.start()` only logs the rejection at warn
/// level, as the bridged JSON (docs/errors.md, "Start-up failures").
fn report_serve_failure(err: &anyhow::Error, was_ready: bool) {
    let e = RivetError::extract(err);
    let code = e.qualified_code();
    if was_ready {
        tracing::error!(code, "the registry stopped serving: {}", e.message);
    } else {
        tracing::error!(code, "the registry could not start: {}", e.message);
    }
}

/// A failed `serve()` makes the process exit with code 1 unless the host
/// set an exit code itself (or turned this off, `exitCodeOnFailure`): with
/// RivetKit's `registry.start()` nothing else would, and the process would
/// report success. Never a signal handler, never an exit: only
/// `process.exitCode`, which the host may set back.
fn mark_process_failed(env: &Env) {
    let set = || -> napi::Result<()> {
        let process: Object<'_> = env.get_global()?.get_named_property("process")?;
        let current: Unknown<'_> = process.get_named_property("exitCode")?;
        if matches!(current.get_type()?, ValueType::Undefined | ValueType::Null) {
            let mut process = process;
            process.set_named_property("exitCode", 1)?;
        }
        Ok(())
    };
    if let Err(err) = set() {
        tracing::debug!(error = %err, "could not set process.exitCode after the failed serve()");
    }
}
