//! `CoreRegistry`: what JavaScript registers actors on and serves.
//!
//! Its states and their transitions are `lifecycle.rs`; every method asks
//! `RegistryState` (`state.rs`). `shutdown()` only trips the one
//! cancellation token; the drain runs inside `serve()`, whose promise
//! settles when it is done. Nothing here touches signals: the host decides
//! when to stop.

use std::collections::HashMap;
use std::sync::Arc;

use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::error::{catalog, RivetError};
use rivetkit_native_core::registry::ServeConfig;
use rivetkit_native_core::serverless::ServerlessRuntime;

use napi::bindgen_prelude::{ClassInstance, JsObjectValue, Object, Unknown};
use napi::ValueType;
use rivetkit_native_core::actor::ActorFactory;
use rivetkit_native_core::error::validate::invalid;

use super::config::JsServeConfig;
use super::factory::NapiActorFactory;
use super::lifecycle::State;
use super::state::{RegistryState, Serving};
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
    /// Its lifecycle and what each state carries (`state.rs`).
    pub(crate) state: Arc<RegistryState>,
}

impl CoreRegistry {
    /// The serverless runtime, built from the registered factories on the
    /// first call (`handleServerlessRequest`, `serveListener`).
    pub(crate) fn ensure_serverless(
        &self,
        config: JsServeConfig,
    ) -> impl std::future::Future<Output = anyhow::Result<Arc<ServerlessRuntime>>> + Send + 'static {
        self.state.serverless(config)
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
        Self { state: Arc::new(RegistryState::new()) }
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
        self.state.register(name, factory).map_err(|e| to_js_error(env, e.into_anyhow()))
    }

    /// Connects to the engine and serves until `shutdown()`; resolves when
    /// the drain is done. Rejects on a setup failure (engine, runner
    /// config, envoy) with a structured error.
    #[napi(ts_args_type = "config?: JsServeConfig | undefined | null", ts_return_type = "Promise<void>")]
    pub fn serve<'env>(&self, env: &'env Env, config: Option<JsServeConfig>) -> napi::Result<PromiseRaw<'env, ()>> {
        rivetkit_native_core::inspector::set_test_token(config.as_ref().and_then(|c| c.inspector_test_token.clone()));
        let mut core = self.state.serve().map_err(|e| to_js_error(env, e.into_anyhow()))?;
        let state = self.state.clone();
        let actor_metadata = core.actor_metadata();
        let exit_code_on_failure = config.as_ref().and_then(|c| c.exit_code_on_failure).unwrap_or(true);
        let serving = async move {
            let result = match config.unwrap_or_default().into_core() {
                Ok(config) => {
                    // `false`: shutdown() came first, nothing to serve.
                    if !state.serve_start(normal_metadata(&config, actor_metadata)) {
                        return Ok(());
                    }
                    let ready = state.clone();
                    // The actor types follow the contract of the RivetKit
                    // version that serves them (docs/versions.md).
                    core.set_contract(config.contract());
                    core.serve(config, state.shutdown_token(), move |handle| ready.serve_ready(handle)).await
                }
                Err(err) => Err(err),
            };
            match &result {
                Ok(()) => state.serve_done(),
                Err(err) => match state.serve_failed(RivetError::extract(err)) {
                    // A bad config after shutdown(): nothing was served.
                    (_, State::ShutDown) => return Ok(()),
                    (was_ready, _) => report_serve_failure(err, was_ready),
                },
            }
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
        match self.state.wait_ready() {
            Ok(ready) => spawn_promise(env, ready),
            Err(err) => spawn_promise(env, async move { Err(err.into_anyhow()) }),
        }
    }

    /// Trips shutdown. Idempotent; never waits for `serve()` (await that
    /// promise separately to know when the drain is done). Before
    /// `serve()` it resolves at once and ends the registry: `serve()` then
    /// throws `napi.invalid_state` and `waitReady()` rejects with
    /// `registry.shut_down`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        self.state.shutdown();
        // Serverless mode drains here (there is no serve() promise to do it).
        let state = self.state.clone();
        spawn_promise(env, async move {
            state.drain_serverless().await;
            Ok(())
        })
    }

    /// The engine's actor stop threshold in ms, or `null` before it is known.
    #[napi(ts_return_type = "Promise<number | null>")]
    pub fn actor_stop_threshold_ms<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<f64>>> {
        let serving = self.state.serving();
        spawn_promise(env, async move {
            Ok(match serving {
                Serving::Serverless(runtime) => runtime.actor_stop_threshold_ms().await.map(|ms| ms as f64),
                Serving::Envoy(handle) => handle.actor_stop_threshold_ms().await.map(|ms| ms as f64),
                Serving::Nothing => None,
            })
        })
    }

    /// `{status, runtime: "rivetkit", version}` as JSON; 200 only while
    /// serving with a healthy engine link.
    #[napi(ts_return_type = "Promise<JsRegistryRouteResponse>")]
    pub fn health<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, JsRegistryRouteResponse>> {
        let (code, status) = self.state.health();
        let body = serde_json::json!({ "status": status, "runtime": "rivetkit", "version": env!("CARGO_PKG_VERSION") });
        spawn_promise(env, async move { Ok(json_route(code, &body)) })
    }

    /// The normal-mode metadata payload (`{runtime, version,
    /// envoyProtocolVersion, actorNames, envoy}`), status 200. Throws
    /// `napi.invalid_state` before `serve()` has started.
    #[napi]
    pub fn metadata(&self, env: &Env) -> napi::Result<JsRegistryRouteResponse> {
        match self.state.metadata() {
            Some(body) => Ok(json_route(200, &body)),
            None => Err(to_js_error(env, catalog::invalid_state("metadata() before serve() started").into_anyhow())),
        }
    }

    /// Prometheus text (`text/plain; version=0.0.4`), status 200:
    /// `rivetkit_native_active_actors`, the actor generations this host
    /// runs (0 when not serving).
    #[napi]
    pub fn metrics(&self) -> JsRegistryRouteResponse {
        let active = match self.state.serving() {
            Serving::Serverless(runtime) => runtime.active_actor_count(),
            Serving::Envoy(handle) => handle.active_actor_count(),
            Serving::Nothing => 0,
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
