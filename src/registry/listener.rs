//! `CoreRegistry.serveListener` and `serveApplicationListener`: the core's
//! native HTTP listener (docs/serverless.md) with the application's fetch
//! handler as a JavaScript callback.
//!
//! - `serveListener` (`registry.listen()`, and `start()` with
//!   `RIVETKIT_RUNTIME_MODE=serverless`) puts the serverless routes in front
//!   (it builds the serverless runtime like `handleServerlessRequest`).
//! - `serveApplicationListener` (`registry.listen({ application })` beside
//!   a serving envoy) puts the envoy mode's own routes in front: the base
//!   path, `/health`, `/metadata` and `/metrics` as `health()`,
//!   `metadata()` and `metrics()` answer them.
//!
//! Both run until the registry's shutdown token is cancelled, then let the
//! responses in flight finish, and resolve.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::error::validate::invalid;
use rivetkit_native_core::listener::{self, AppRequest, AppResponse, Application, ListenerConfig, Routes};
use rivetkit_native_core::serverless::http::cors_headers;
use rivetkit_native_core::serverless::settings::{is_framework_path, route_path};
use rivetkit_native_core::serverless::{metrics_text, ServerlessRequest, ServerlessResponse, METRICS_CONTENT_TYPE};
use rivetkit_native_core::RivetError;

use super::config::{settings_from, JsServeConfig};
use super::core_registry::CoreRegistry;
use super::state::{health_status, Phase, RegistryState};
use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::js_callback::JsCallback;
use crate::bridge::types::{args, Checked};
use crate::classes::body_stream::HttpResponseBodyStream;
use crate::classes::cancellation_token::CancellationToken;

/// Listener configuration of `serveListener` / `serveApplicationListener`.
#[napi(object)]
pub struct JsListenerConfig {
    /// Host to bind. Defaults to `0.0.0.0` when not provided.
    pub host: Option<String>,
    pub port: u32,
    /// Optional static file root mounted below the framework routes.
    pub public_dir: Option<String>,
}

/// What the application's fetch handler receives.
#[napi(object, object_from_js = false)]
pub struct JsApplicationRequest {
    pub method: String,
    pub url: String,
    pub headers: HashMap<String, String>,
    pub body: Buffer,
    /// Cancelled when the client went away (for a streamed answer: when
    /// its body ended or the client went away).
    pub cancel_token: CancellationToken,
    /// Answer `stream: true` and write the body here (docs/streams.md).
    pub response_body_stream: HttpResponseBodyStream,
}

/// What it answers: a whole `body`, or `stream: true` and the body written
/// to the request's `responseBodyStream`.
#[napi(object)]
pub struct JsApplicationResponse {
    pub status: u32,
    pub headers: HashMap<String, String>,
    pub body: Option<Buffer>,
    pub stream: Option<bool>,
}

type AppCallback = JsCallback<JsApplicationRequest, Checked<JsApplicationResponse>>;

fn application_of(callback: AppCallback) -> Application {
    Arc::new(move |req: AppRequest| {
        let callback = callback.clone();
        Box::pin(async move {
            let payload = JsApplicationRequest {
                method: req.method,
                url: req.url,
                headers: req.headers,
                body: Buffer::from(req.body.to_vec()),
                cancel_token: CancellationToken::from_inner(req.cancel),
                response_body_stream: HttpResponseBodyStream { writer: req.response_body },
            };
            let Checked(response) = callback.call(payload).await?;
            let status = u16::try_from(response.status)
                .ok()
                .filter(|s| (100..=999).contains(s))
                .ok_or_else(|| anyhow::anyhow!("the application answered with status {}", response.status))?;
            Ok(AppResponse {
                status,
                headers: response.headers,
                body: response.body.map(|b| Bytes::from(b.to_vec())).unwrap_or_default(),
                stream: response.stream == Some(true),
            })
        }) as BoxFuture<'static, anyhow::Result<AppResponse>>
    })
}

/// Reads the listener argument into the core's config.
fn listener_config(value: Unknown<'_>, config: &JsServeConfig) -> Result<ListenerConfig, RivetError> {
    let listener: JsListenerConfig = args::object("listener", value)?;
    let port = u16::try_from(listener.port)
        .map_err(|_| invalid("listener.port", format!("{} is not a port", listener.port)))?;
    Ok(ListenerConfig {
        host: listener.host.filter(|h| !h.is_empty()),
        port,
        public_dir: listener.public_dir.filter(|d| !d.is_empty()).map(PathBuf::from),
        max_body_bytes: settings_from(config).max_start_payload_bytes,
    })
}

fn app_callback(argument: &str, value: Option<Unknown<'_>>) -> napi::Result<Result<Option<AppCallback>, RivetError>> {
    let Some(value) = value.filter(|v| !args::is_nullish(v)) else { return Ok(Ok(None)) };
    Ok(match JsCallback::from_unknown("application", value)? {
        Some(callback) => Ok(Some(callback)),
        None => Err(invalid(argument, "expected a function")),
    })
}

/// The envoy mode's routes in front of the application.
struct EnvoyRoutes {
    base_path: String,
    state: Arc<RegistryState>,
    version: String,
}

const ENVOY_ROUTES: &[&str] = &["", "/", "/health", "/metadata", "/metrics"];

impl Routes for EnvoyRoutes {
    fn owns(&self, path: &str) -> bool {
        is_framework_path(&self.base_path, path, ENVOY_ROUTES)
    }

    fn handle(&self, req: ServerlessRequest) -> BoxFuture<'static, ServerlessResponse> {
        let path = route_path(&self.base_path, &req.path());
        let mut response = match (req.method.as_str(), path.as_str()) {
            ("GET", "" | "/") => {
                ServerlessResponse::text(200, "This is a RivetKit server.\n\nLearn more at https://rivet.dev")
            }
            ("GET", "/health") => {
                let (code, status) = health_status(&self.state.phase().borrow());
                let body = serde_json::json!({ "status": status, "runtime": "rivetkit", "version": self.version });
                ServerlessResponse::json(code as u16, &body)
            }
            ("GET", "/metadata") => match self.state.metadata() {
                Some(body) => ServerlessResponse::json(200, &body),
                None => ServerlessResponse::text(503, "registry not started\n"),
            },
            ("GET", "/metrics") => {
                let active = match &*self.state.phase().borrow() {
                    Phase::Ready(handle) => handle.active_actor_count(),
                    _ => 0,
                };
                ServerlessResponse::bytes(200, METRICS_CONTENT_TYPE, metrics_text(active))
            }
            ("OPTIONS", _) => ServerlessResponse::empty(204),
            _ => ServerlessResponse::text(404, "Not Found (RivetKit)"),
        };
        response.headers.extend(cors_headers(&req));
        Box::pin(async move { response })
    }
}

#[napi]
impl CoreRegistry {
    /// Serves the serverless routes (then the public directory, then the
    /// optional application) on a native HTTP listener until shutdown.
    /// Rejects with `listener.bind_failed` if the port cannot be bound.
    #[napi(
        ts_args_type = "listener: JsListenerConfig, config: JsServeConfig, application?: ((...args: never[]) => unknown) | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn serve_listener<'env>(
        &self,
        env: &'env Env,
        listener: Unknown<'_>,
        config: Option<Unknown<'_>>,
        application: Option<Unknown<'_>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let config: JsServeConfig = match args::opt_object("config", config) {
            Ok(config) => config.unwrap_or_default(),
            Err(err) => return reject(env, err),
        };
        let listener = match listener_config(listener, &config) {
            Ok(listener) => listener,
            Err(err) => return reject(env, err),
        };
        let application = match app_callback("application", application)? {
            Ok(callback) => callback.map(application_of),
            Err(err) => return reject(env, err),
        };
        let ensure = self.ensure_serverless(config);
        let shutdown = self.state.shutdown_token();
        spawn_promise(env, async move {
            let tcp = listener::bind(&listener).await?;
            let runtime = ensure.await?;
            listener::serve(tcp, listener, Arc::new(runtime), application, shutdown).await
        })
    }

    /// Serves the application (after the envoy mode's own routes and the
    /// public directory) on a native HTTP listener beside `serve()`, until
    /// shutdown.
    #[napi(
        ts_args_type = "listener: JsListenerConfig, application: (...args: never[]) => unknown, config: JsServeConfig",
        ts_return_type = "Promise<void>"
    )]
    pub fn serve_application_listener<'env>(
        &self,
        env: &'env Env,
        listener: Unknown<'_>,
        application: Unknown<'_>,
        config: Option<Unknown<'_>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let config: JsServeConfig = match args::opt_object("config", config) {
            Ok(config) => config.unwrap_or_default(),
            Err(err) => return reject(env, err),
        };
        let listener = match listener_config(listener, &config) {
            Ok(listener) => listener,
            Err(err) => return reject(env, err),
        };
        let application = match app_callback("application", Some(application))? {
            Ok(Some(callback)) => application_of(callback),
            Ok(None) => return reject(env, invalid("application", "expected a function")),
            Err(err) => return reject(env, err),
        };
        let settings = settings_from(&config);
        let routes =
            EnvoyRoutes { base_path: settings.base_path, state: self.state.clone(), version: settings.package_version };
        let shutdown = self.state.shutdown_token();
        spawn_promise(env, async move {
            let tcp = listener::bind(&listener).await?;
            listener::serve(tcp, listener, Arc::new(routes), Some(application), shutdown).await
        })
    }
}
