//! The payload objects the hooks are called with (`hook(null, payload)`),
//! built on the JS thread; `ctx` is a fresh `ActorContext` wrapper around
//! the generation's core context.

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;

use crate::actor_context::ActorContext;
use crate::bridge::types::{JsBytes, JsHttpRequest};
use crate::classes::body_stream::{HttpResponseBodyStream, JsStreamedHttpRequest};
use crate::classes::cancellation_token::CancellationToken;
use crate::classes::conn::ConnHandle;
use crate::classes::schedule::JsScheduledFireInfo;
use crate::classes::websocket::WebSocket;

#[napi(object, object_from_js = false)]
pub struct CtxPayload {
    pub ctx: ActorContext,
}

#[napi(object, object_from_js = false)]
pub struct CreatePayload {
    pub ctx: ActorContext,
    #[napi(ts_type = "Buffer")]
    pub input: Option<JsBytes>,
}

#[napi(object, object_from_js = false)]
pub struct MigratePayload {
    pub ctx: ActorContext,
    pub is_new: bool,
}

#[napi(object, object_from_js = false)]
pub struct SerializePayload {
    pub ctx: ActorContext,
    #[napi(ts_type = "'save' | 'inspector'")]
    pub reason: String,
}

#[napi(object, object_from_js = false)]
pub struct ConnectPayload {
    pub ctx: ActorContext,
    #[napi(ts_type = "Buffer")]
    pub params: JsBytes,
    pub request: Option<JsHttpRequest>,
}

#[napi(object, object_from_js = false)]
pub struct ConnPayload {
    pub ctx: ActorContext,
    pub conn: ConnHandle,
    pub request: Option<JsHttpRequest>,
}

#[napi(object, object_from_js = false)]
pub struct ConnStatePayload {
    pub ctx: ActorContext,
    pub conn: ConnHandle,
    #[napi(ts_type = "Buffer")]
    pub params: JsBytes,
    pub request: Option<JsHttpRequest>,
}

#[napi(object, object_from_js = false)]
pub struct SubscribePayload {
    pub ctx: ActorContext,
    pub conn: ConnHandle,
    pub event_name: String,
}

#[napi(object, object_from_js = false)]
pub struct ActionPayload {
    pub ctx: ActorContext,
    /// The connection the action came in on; `null` for HTTP actions.
    pub conn: Option<ConnHandle>,
    /// The arguments, a CBOR-encoded array.
    #[napi(ts_type = "Buffer")]
    pub args: JsBytes,
    /// Set when a scheduled event (`schedule.after/at`) runs the action.
    pub scheduled_fire: Option<JsScheduledFireInfo>,
    pub cancel_token: CancellationToken,
}

/// Payload of `replayWorkflow`.
#[napi(object, object_from_js = false)]
pub struct WorkflowReplayPayload {
    pub ctx: ActorContext,
    /// The entry to replay from; the start when absent.
    pub entry_id: Option<String>,
}

/// Payload of `onQueueSend`: a client's `POST /queue/{name}`.
#[napi(object, object_from_js = false)]
pub struct QueueSendPayload {
    pub ctx: ActorContext,
    /// The transient connection of the request (its params are the
    /// `x-rivet-conn-params` header).
    pub conn: ConnHandle,
    pub request: JsHttpRequest,
    pub name: String,
    /// The message body, CBOR.
    pub body: Buffer,
    /// Whether the client waits for the consumer's answer.
    pub wait: bool,
    pub timeout_ms: Option<f64>,
    pub cancel_token: CancellationToken,
}

#[napi(object, object_from_js = false)]
pub struct RequestPayload {
    pub ctx: ActorContext,
    pub request: JsStreamedHttpRequest,
    pub cancel_token: CancellationToken,
    /// Answer `stream: true` and write the body here (docs/streams.md).
    pub response_body_stream: Option<HttpResponseBodyStream>,
}

/// Payload of `onWebSocket`.
#[napi(object, object_from_js = false)]
pub struct WebSocketPayload {
    pub ctx: ActorContext,
    /// The connection the socket belongs to (its params are the
    /// `rivet_conn_params.*` subprotocol).
    pub conn: ConnHandle,
    pub ws: WebSocket,
    /// The upgrade request: method, path (with query) and headers.
    pub request: Option<JsHttpRequest>,
}
