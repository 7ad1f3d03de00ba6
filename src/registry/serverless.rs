//! `CoreRegistry.handleServerlessRequest` (docs/serverless.md), over the
//! runtime of `serverless_runtime`.
//!
//! A registry runs in one mode: after `serve()` these calls fail with
//! `napi.invalid_state`, and `serve()` fails after them.
//!
//! The response goes back the way RivetKit's TypeScript expects it: the
//! promise resolves with the head (`{status, headers}`), then the body
//! arrives through `onStreamEvent(null, {kind: "chunk", chunk})` calls,
//! each awaited (that is the backpressure), and one final
//! `onStreamEvent(null, {kind: "end", error?})`.

use std::collections::HashMap;

use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, ClassInstance, FromNapiValue, Function, JsValue, Promise, PromiseRaw, Unknown};
use napi::threadsafe_function::ThreadsafeFunction;
use napi::{Env, Status};
use napi_derive::napi;
use rivetkit_native_core::error::validate::invalid;
use rivetkit_native_core::serverless::{ResponseBody, ServerlessRequest};
use rivetkit_native_core::RivetError;
use tokio_util::sync::CancellationToken as TokioToken;

use super::config::JsServeConfig;
use super::core_registry::CoreRegistry;
use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::js_callback::Ignored;
use crate::bridge::types::args;
use crate::classes::cancellation_token::CancellationToken;

/// A serverless request (`handleServerlessRequest`).
#[napi(object)]
pub struct JsServerlessRequest {
    pub method: String,
    pub url: String,
    pub headers: HashMap<String, String>,
    pub body: Buffer,
}

#[napi(object)]
pub struct JsServerlessResponseHead {
    pub status: u32,
    pub headers: HashMap<String, String>,
}

#[napi(object)]
pub struct JsServerlessStreamError {
    pub group: String,
    pub code: String,
    pub message: String,
}

/// What `onStreamEvent` receives.
#[napi(object, object_from_js = false)]
pub struct JsServerlessStreamEvent {
    #[napi(ts_type = "'chunk' | 'end'")]
    pub kind: String,
    pub chunk: Option<Buffer>,
    pub error: Option<JsServerlessStreamError>,
}

/// `onStreamEvent`. Unlike the actor hooks' weak callbacks
/// ([`crate::bridge::js_callback`]), this one is strong: while a body is being
/// delivered it keeps Node's event loop alive, as the socket of the request
/// it answers would (a script that awaits `registry.handler(request)` and
/// then reads the body must not exit half-way). It is released when the
/// delivery ends, so it never outlives the response.
struct StreamCallback(
    ThreadsafeFunction<JsServerlessStreamEvent, StreamReturned, JsServerlessStreamEvent, Status, true, false, 0>,
);

/// What `onStreamEvent` returned: anything, or a promise to wait for.
enum StreamReturned {
    Ready,
    Pending(Promise<Ignored>),
}

impl FromNapiValue for StreamReturned {
    unsafe fn from_napi_value(env: napi::sys::napi_env, value: napi::sys::napi_value) -> napi::Result<Self> {
        let mut is_promise = false;
        let status = unsafe { napi::sys::napi_is_promise(env, value, &mut is_promise) };
        if status == napi::sys::Status::napi_ok && is_promise {
            Ok(Self::Pending(unsafe { Promise::from_napi_value(env, value) }?))
        } else {
            Ok(Self::Ready)
        }
    }
}

impl StreamCallback {
    /// Wraps `value` if it is a function (on the JS thread).
    fn from_unknown(value: Unknown<'_>) -> napi::Result<Option<Self>> {
        if value.get_type()? != napi::ValueType::Function {
            return Ok(None);
        }
        let function: Function<'_, Unknown<'_>, Unknown<'_>> = unsafe { value.cast()? };
        let raw = function.value();
        // Same conversion napi-rs applies to a `ThreadsafeFunction` argument.
        Ok(Some(Self(unsafe { ThreadsafeFunction::from_napi_value(raw.env, raw.value) }?)))
    }

    /// Calls `onStreamEvent(null, event)` and waits for its promise.
    async fn call(&self, event: JsServerlessStreamEvent) -> anyhow::Result<()> {
        let returned = self.0.call_async(Ok(event)).await.map_err(|err| match err.status {
            Status::PendingException => crate::bridge::error::from_js_error("onStreamEvent", err),
            _ => crate::bridge::error::js_callback_unavailable("onStreamEvent", &err.reason),
        })?;
        if let StreamReturned::Pending(promise) = returned {
            promise.await.map_err(|err| crate::bridge::error::from_js_error("onStreamEvent", err))?;
        }
        Ok(())
    }
}

/// The shared token inside a `CancellationToken` instance.
fn token_of(value: &Unknown<'_>) -> Option<TokioToken> {
    if value.get_type().ok() != Some(napi::ValueType::Object) {
        return None;
    }
    // SAFETY: a live handle of the current scope; the class check refuses
    // any other object.
    let instance = unsafe { value.cast::<ClassInstance<CancellationToken>>() }.ok()?;
    Some(instance.inner().clone())
}

#[napi]
impl CoreRegistry {
    /// Answers one request to the serverless routes under the base path
    /// (`/start`, `/health`, `/metadata`, `/metrics`). Resolves with the
    /// response head; the body follows through `onStreamEvent`. A bad
    /// request is an answer (4xx with `{group, code, message, metadata}`),
    /// not a rejection; the promise rejects only for bad arguments, a
    /// registry in the other mode (`napi.invalid_state`) or one shut down.
    #[napi(
        ts_args_type = "req: JsServerlessRequest, onStreamEvent: (...args: never[]) => unknown, cancelToken: CancellationToken, config: JsServeConfig",
        ts_return_type = "Promise<JsServerlessResponseHead>"
    )]
    pub fn handle_serverless_request<'env>(
        &self,
        env: &'env Env,
        req: Unknown<'_>,
        on_stream_event: Unknown<'_>,
        cancel_token: Unknown<'_>,
        config: Option<Unknown<'_>>,
    ) -> napi::Result<PromiseRaw<'env, JsServerlessResponseHead>> {
        let req: JsServerlessRequest = match args::object("req", req) {
            Ok(req) => req,
            Err(err) => return reject(env, err),
        };
        let on_event = match StreamCallback::from_unknown(on_stream_event)? {
            Some(callback) => callback,
            None => return reject(env, invalid("onStreamEvent", "expected a function")),
        };
        let Some(cancel) = token_of(&cancel_token) else {
            return reject(env, invalid("cancelToken", "expected a CancellationToken"));
        };
        let config: JsServeConfig = match args::opt_object("config", config) {
            Ok(config) => config.unwrap_or_default(),
            Err(err) => return reject(env, err),
        };
        let ensure = self.ensure_serverless(config);
        spawn_promise(env, async move {
            let runtime = ensure.await?;
            let request = ServerlessRequest {
                method: req.method.to_ascii_uppercase(),
                url: req.url,
                headers: req.headers.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect(),
                body: Bytes::from(req.body.to_vec()),
                cancel,
            };
            let response = runtime.handle(request).await;
            let head = JsServerlessResponseHead { status: u32::from(response.status), headers: response.headers };
            runtime.track(deliver(response.body, on_event));
            Ok(head)
        })
    }
}

/// Sends the body to JavaScript, chunk by chunk, then the end.
async fn deliver(body: ResponseBody, on_event: StreamCallback) {
    let end = |error: Option<RivetError>| JsServerlessStreamEvent {
        kind: "end".to_owned(),
        chunk: None,
        error: error.map(|e| JsServerlessStreamError { group: e.group, code: e.code, message: e.message }),
    };
    let chunk = |bytes: Bytes| JsServerlessStreamEvent {
        kind: "chunk".to_owned(),
        chunk: Some(Buffer::from(bytes.to_vec())),
        error: None,
    };
    let result = match body {
        ResponseBody::Bytes(bytes) => {
            async {
                if !bytes.is_empty() {
                    on_event.call(chunk(bytes)).await?;
                }
                on_event.call(end(None)).await
            }
            .await
        }
        // Dropping the stream (a failed call, the end) cancels the request.
        ResponseBody::Stream(mut stream) => {
            async {
                loop {
                    match stream.next().await {
                        Some(Ok(bytes)) => {
                            on_event.call(chunk(bytes)).await?;
                        }
                        Some(Err(error)) => return on_event.call(end(Some(error))).await,
                        None => return on_event.call(end(None)).await,
                    }
                }
            }
            .await
        }
    };
    if let Err(err) = result {
        tracing::debug!(error = %format!("{err:#}"), "serverless response not delivered to JavaScript");
    }
}
