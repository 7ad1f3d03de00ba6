//! The JavaScript callbacks of one actor type, as core [`ActorHooks`].
//!
//! Every callback is a [`JsCallback`]: called as `callback(null, payload)`,
//! awaited, and its result checked against the type the hook must return.
//! Payload objects are built on the JS thread; `ctx` is a fresh
//! [`ActorContext`] wrapper around the generation's core context.

use std::collections::HashMap;

use futures::future::{BoxFuture, FutureExt};
use napi::bindgen_prelude::{Buffer, FromNapiValue, JsObjectValue, Object, Unknown};
use napi::ValueType;
use napi_derive::napi;
use rivetkit_native_core::actor::queue::{QueueSendResult, QueueSendStatus};
use rivetkit_native_core::actor::{
    ActorContext as CoreContext, ActorHooks, Conn, HttpRequest, HttpResponse, LifecycleHook, QueueSendRequest,
    ScheduledFire, SerializeReason, StateDelta,
};
use tokio_util::sync::CancellationToken as CoreToken;

use rivetkit_native_core::actor::RawWebSocket;

use crate::actor_context::ActorContext;
use crate::body_stream::{HttpRequestBodyStream, HttpResponseBodyStream, JsStreamedHttpRequest};
use crate::cancellation_token::CancellationToken;
use crate::conn::ConnHandle;
use crate::js_callback::{Ignored, JsCallback};
use crate::types::{Checked, JsBytes, JsHttpRequest, JsHttpResponse, StateDeltaPayload};
use crate::websocket::WebSocket;

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
    pub scheduled_fire: Option<crate::schedule::JsScheduledFireInfo>,
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
    pub request: crate::body_stream::JsStreamedHttpRequest,
    pub cancel_token: CancellationToken,
    /// Answer `stream: true` and write the body here (docs/streams.md).
    pub response_body_stream: Option<crate::body_stream::HttpResponseBodyStream>,
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

type VoidHook<P> = Option<JsCallback<P, Ignored>>;

/// The callbacks read from the object given to `NapiActorFactory`.
#[derive(Default)]
pub struct JsHooks {
    create_state: Option<JsCallback<CreatePayload, JsBytes>>,
    on_create: VoidHook<CreatePayload>,
    on_migrate: VoidHook<MigratePayload>,
    create_vars: VoidHook<CtxPayload>,
    on_wake: VoidHook<CtxPayload>,
    on_before_actor_start: VoidHook<CtxPayload>,
    on_sleep: VoidHook<CtxPayload>,
    on_destroy: VoidHook<CtxPayload>,
    on_alarm: VoidHook<CtxPayload>,
    run: VoidHook<CtxPayload>,
    serialize_state: Option<JsCallback<SerializePayload, Checked<StateDeltaPayload>>>,
    on_request: Option<JsCallback<RequestPayload, Checked<JsHttpResponse>>>,
    on_queue_send: Option<JsCallback<QueueSendPayload, Checked<crate::queue::JsQueueSendResult>>>,
    actions: HashMap<String, JsCallback<ActionPayload, JsBytes>>,
    on_before_connect: VoidHook<ConnectPayload>,
    create_conn_state: Option<JsCallback<ConnStatePayload, JsBytes>>,
    on_connect: VoidHook<ConnPayload>,
    on_disconnect: VoidHook<ConnPayload>,
    on_before_subscribe: VoidHook<SubscribePayload>,
    on_websocket: VoidHook<WebSocketPayload>,
    get_workflow_history: Option<JsCallback<CtxPayload, Option<JsBytes>>>,
    replay_workflow: Option<JsCallback<WorkflowReplayPayload, Option<JsBytes>>>,
}

impl JsHooks {
    /// Reads every known callback by name; a missing or non-function value
    /// means "not defined" (the reference adapter's rule).
    pub fn from_object(callbacks: &Object<'_>) -> napi::Result<Self> {
        Ok(Self {
            create_state: hook(callbacks, "createState")?,
            on_create: hook(callbacks, "onCreate")?,
            on_migrate: hook(callbacks, "onMigrate")?,
            create_vars: hook(callbacks, "createVars")?,
            on_wake: hook(callbacks, "onWake")?,
            on_before_actor_start: hook(callbacks, "onBeforeActorStart")?,
            on_sleep: hook(callbacks, "onSleep")?,
            on_destroy: hook(callbacks, "onDestroy")?,
            on_alarm: hook(callbacks, "onAlarm")?,
            run: hook(callbacks, "run")?,
            serialize_state: hook(callbacks, "serializeState")?,
            on_request: hook(callbacks, "onRequest")?,
            on_queue_send: hook(callbacks, "onQueueSend")?,
            actions: read_actions(callbacks)?,
            on_before_connect: hook(callbacks, "onBeforeConnect")?,
            create_conn_state: hook(callbacks, "createConnState")?,
            on_connect: hook(callbacks, "onConnect")?,
            // `onDisconnectFinal` is the name rivetkit's runtime registers.
            on_disconnect: match hook(callbacks, "onDisconnectFinal")? {
                Some(hook) => Some(hook),
                None => hook(callbacks, "onDisconnect")?,
            },
            on_before_subscribe: hook(callbacks, "onBeforeSubscribe")?,
            on_websocket: hook(callbacks, "onWebSocket")?,
            get_workflow_history: hook(callbacks, "getWorkflowHistory")?,
            replay_workflow: hook(callbacks, "replayWorkflow")?,
        })
    }
}

fn invalid_argument(message: String) -> napi::Error {
    napi::Error::new(napi::Status::InvalidArg, message)
}

/// The callback `callbacks[name]`, named after its property in errors:
/// `undefined`/`null` is no hook, anything else must be a function (a
/// `onWake: 42` is a mistake to report, not a hook to drop silently).
fn hook<A, R>(callbacks: &Object<'_>, name: &'static str) -> napi::Result<Option<JsCallback<A, R>>>
where
    A: napi::bindgen_prelude::JsValuesTupleIntoVec + Send + 'static,
    R: FromNapiValue + Send + 'static,
{
    let value: Unknown<'_> = callbacks.get_named_property(name)?;
    match value.get_type()? {
        ValueType::Undefined | ValueType::Null | ValueType::Function => JsCallback::from_unknown(name, value),
        _ => Err(invalid_argument(format!(
            "`callbacks.{name}` must be a function, got {}",
            crate::types::args::type_name(&value)
        ))),
    }
}

/// `callbacks.actions`: `{[name]: fn}`; every entry must be a function.
fn read_actions(callbacks: &Object<'_>) -> napi::Result<HashMap<String, JsCallback<ActionPayload, JsBytes>>> {
    let value: Unknown<'_> = callbacks.get_named_property("actions")?;
    match value.get_type()? {
        ValueType::Undefined | ValueType::Null => return Ok(HashMap::new()),
        ValueType::Object => {}
        _ => {
            return Err(invalid_argument(format!(
                "`callbacks.actions` must be an object of functions, got {}",
                crate::types::args::type_name(&value)
            )))
        }
    }
    let actions: Object<'_> = unsafe { value.cast()? };
    let mut out = HashMap::new();
    for name in Object::keys(&actions)? {
        match JsCallback::from_property("action", &actions, &name)? {
            Some(callback) => {
                out.insert(name, callback);
            }
            None => return Err(invalid_argument(format!("action `{name}` must be a function"))),
        }
    }
    Ok(out)
}

fn void_call<P: napi::bindgen_prelude::JsValuesTupleIntoVec + Send + 'static>(
    hook: &VoidHook<P>,
    payload: impl FnOnce() -> P,
) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
    let hook = hook.clone()?;
    let payload = payload();
    Some(async move { hook.call(payload).await.map(|_| ()) }.boxed())
}

fn js_ctx(ctx: &CoreContext) -> ActorContext {
    ActorContext::from(ctx.clone())
}

/// The handle given to one invocation, carrying its caller's ray ID.
fn js_invocation_ctx(ctx: &CoreContext, ray_id: Option<String>) -> ActorContext {
    let mut handle = ActorContext::from(ctx.clone());
    handle.ray = crate::telemetry::InvocationRay::of(ray_id);
    handle
}

impl JsHooks {
    /// The action `name` as JavaScript sees it: from a connection, from HTTP
    /// (`conn` null) or from a scheduled event (`scheduledFire` set).
    fn call_action(
        &self,
        ctx: &CoreContext,
        conn: Option<&Conn>,
        name: &str,
        args: Vec<u8>,
        fire: Option<&ScheduledFire>,
        cancel: CoreToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        let hook = self.actions.get(name)?.clone();
        let payload = ActionPayload {
            ctx: js_invocation_ctx(ctx, conn.and_then(|c| c.ray_id()).map(str::to_owned)),
            conn: conn.map(|c| ConnHandle::new(ctx, c)),
            args: JsBytes(args),
            scheduled_fire: fire.map(Into::into),
            cancel_token: CancellationToken::from_inner(cancel),
        };
        Some(async move { Ok(hook.call(payload).await?.0) }.boxed())
    }
}

impl ActorHooks for JsHooks {
    type Ctx = CoreContext;

    fn on_migrate(&self, ctx: &CoreContext, is_new: bool) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_migrate, || MigratePayload { ctx: js_ctx(ctx), is_new })
    }

    fn create_state(
        &self,
        ctx: &CoreContext,
        input: Option<Vec<u8>>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        let hook = self.create_state.clone()?;
        let payload = CreatePayload { ctx: js_ctx(ctx), input: input.map(JsBytes) };
        Some(async move { Ok(hook.call(payload).await?.0) }.boxed())
    }

    fn on_create(&self, ctx: &CoreContext, input: Option<Vec<u8>>) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_create, || CreatePayload { ctx: js_ctx(ctx), input: input.map(JsBytes) })
    }

    fn lifecycle(&self, hook: LifecycleHook, ctx: &CoreContext) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        let callback = match hook {
            LifecycleHook::CreateVars => &self.create_vars,
            LifecycleHook::OnWake => &self.on_wake,
            LifecycleHook::OnBeforeActorStart => &self.on_before_actor_start,
            LifecycleHook::OnSleep => &self.on_sleep,
            LifecycleHook::OnDestroy => &self.on_destroy,
            LifecycleHook::OnAlarm => &self.on_alarm,
            LifecycleHook::Run => &self.run,
        };
        void_call(callback, || CtxPayload { ctx: js_ctx(ctx) })
    }

    fn serialize_state(
        &self,
        ctx: &CoreContext,
        reason: SerializeReason,
    ) -> Option<BoxFuture<'static, anyhow::Result<StateDelta>>> {
        let hook = self.serialize_state.clone()?;
        let payload = SerializePayload { ctx: js_ctx(ctx), reason: reason.as_str().to_string() };
        Some(
            async move {
                let Checked(delta) = hook.call(payload).await?;
                Ok(StateDelta { state: delta.state.map(|b| b.0) })
            }
            .boxed(),
        )
    }

    fn on_before_connect(
        &self,
        ctx: &CoreContext,
        params: &[u8],
        request: Option<&HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_before_connect, || ConnectPayload {
            ctx: js_ctx(ctx),
            params: JsBytes(params.to_vec()),
            request: request.cloned().map(js_request),
        })
    }

    fn create_conn_state(
        &self,
        ctx: &CoreContext,
        conn: &Conn,
        params: &[u8],
        request: Option<&HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        let hook = self.create_conn_state.clone()?;
        let payload = ConnStatePayload {
            ctx: js_ctx(ctx),
            conn: ConnHandle::new(ctx, conn),
            params: JsBytes(params.to_vec()),
            request: request.cloned().map(js_request),
        };
        Some(async move { Ok(hook.call(payload).await?.0) }.boxed())
    }

    fn on_connect(
        &self,
        ctx: &CoreContext,
        conn: &Conn,
        request: Option<HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_connect, || ConnPayload {
            ctx: js_ctx(ctx),
            conn: ConnHandle::new(ctx, conn),
            request: request.map(js_request),
        })
    }

    fn on_disconnect(&self, ctx: &CoreContext, conn: &Conn) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_disconnect, || ConnPayload {
            ctx: js_ctx(ctx),
            conn: ConnHandle::new(ctx, conn),
            request: None,
        })
    }

    fn on_before_subscribe(
        &self,
        ctx: &CoreContext,
        conn: &Conn,
        event_name: &str,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_before_subscribe, || SubscribePayload {
            ctx: js_ctx(ctx),
            conn: ConnHandle::new(ctx, conn),
            event_name: event_name.to_string(),
        })
    }

    fn on_websocket(
        &self,
        ctx: &CoreContext,
        conn: &Conn,
        ws: RawWebSocket,
        request: Option<HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        void_call(&self.on_websocket, || WebSocketPayload {
            ctx: js_ctx(ctx),
            conn: ConnHandle::new(ctx, conn),
            ws: WebSocket::new(ws),
            request: request.map(js_request),
        })
    }

    fn action(
        &self,
        ctx: &CoreContext,
        conn: Option<&Conn>,
        name: &str,
        args: Vec<u8>,
        cancel: CoreToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        self.call_action(ctx, conn, name, args, None, cancel)
    }

    fn workflow_history(&self, ctx: &CoreContext) -> Option<BoxFuture<'static, anyhow::Result<Option<Vec<u8>>>>> {
        let hook = self.get_workflow_history.clone()?;
        let payload = CtxPayload { ctx: js_ctx(ctx) };
        Some(async move { Ok(hook.call(payload).await?.map(|b| b.0)) }.boxed())
    }

    fn replay_workflow(
        &self,
        ctx: &CoreContext,
        entry_id: Option<String>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Option<Vec<u8>>>>> {
        let hook = self.replay_workflow.clone()?;
        let payload = WorkflowReplayPayload { ctx: js_ctx(ctx), entry_id };
        Some(async move { Ok(hook.call(payload).await?.map(|b| b.0)) }.boxed())
    }

    fn scheduled_action(
        &self,
        ctx: &CoreContext,
        name: &str,
        args: Vec<u8>,
        fire: &ScheduledFire,
        cancel: CoreToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        self.call_action(ctx, None, name, args, Some(fire), cancel)
    }

    fn on_queue_send(
        &self,
        ctx: &CoreContext,
        conn: &Conn,
        request: HttpRequest,
        send: QueueSendRequest,
        cancel: CoreToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<QueueSendResult>>> {
        let hook = self.on_queue_send.clone()?;
        let payload = QueueSendPayload {
            ctx: js_invocation_ctx(ctx, conn.ray_id().map(str::to_owned)),
            conn: ConnHandle::new(ctx, conn),
            request: js_request(request),
            name: send.name,
            body: Buffer::from(send.body),
            wait: send.wait,
            timeout_ms: send.timeout_ms.map(|t| t as f64),
            cancel_token: CancellationToken::from_inner(cancel),
        };
        Some(
            async move {
                let Checked(result) = hook.call(payload).await?;
                let status = QueueSendStatus::parse(&result.status).ok_or_else(|| {
                    crate::error::invalid_return(
                        "onQueueSend",
                        &format!("status `{}` is not \"completed\" or \"timedOut\"", result.status),
                    )
                })?;
                Ok(QueueSendResult { status, response: result.response.map(|b| b.to_vec()) })
            }
            .boxed(),
        )
    }

    fn on_request(
        &self,
        ctx: &CoreContext,
        request: HttpRequest,
        cancel: CoreToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<HttpResponse>>> {
        let hook = self.on_request.clone()?;
        let payload = RequestPayload {
            ctx: js_invocation_ctx(ctx, request.ray_id()),
            response_body_stream: request.response_body.clone().map(|writer| HttpResponseBodyStream { writer }),
            request: JsStreamedHttpRequest {
                body_stream: request.body_stream.clone().map(|reader| HttpRequestBodyStream { reader }),
                method: request.method,
                uri: request.uri,
                headers: Some(request.headers),
                body: Some(Buffer::from(request.body)),
            },
            cancel_token: CancellationToken::from_inner(cancel),
        };
        Some(
            async move {
                let Checked(response) = hook.call(payload).await?;
                into_core_response(response)
            }
            .boxed(),
        )
    }
}

fn js_request(request: HttpRequest) -> JsHttpRequest {
    JsHttpRequest {
        method: request.method,
        uri: request.uri,
        headers: Some(request.headers),
        body: Some(Buffer::from(request.body)),
    }
}

fn into_core_response(response: JsHttpResponse) -> anyhow::Result<HttpResponse> {
    let status = response.status.unwrap_or(200);
    let status = u16::try_from(status)
        .ok()
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| crate::error::invalid_return("onRequest", &format!("status {status} is not an HTTP status")))?;
    Ok(HttpResponse {
        status,
        headers: response.headers.unwrap_or_default(),
        body: response.body.map(|b| b.0).unwrap_or_default(),
        stream: response.stream == Some(true),
    })
}

/// The callbacks object given to `NapiActorFactory`, for TypeScript only
/// (the constructor reads the hooks by name). Every hook is optional and is
/// called as `hook(null, payload)`; it may return its result or a promise.
#[napi(object, object_to_js = false)]
pub struct ActorCallbacks {
    #[napi(ts_type = "(error: null, payload: CreatePayload) => Buffer | Promise<Buffer>")]
    pub create_state: Option<()>,
    #[napi(ts_type = "(error: null, payload: CreatePayload) => void | Promise<void>")]
    pub on_create: Option<()>,
    #[napi(ts_type = "(error: null, payload: MigratePayload) => void | Promise<void>")]
    pub on_migrate: Option<()>,
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub create_vars: Option<()>,
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub on_wake: Option<()>,
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub on_before_actor_start: Option<()>,
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub on_sleep: Option<()>,
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub on_destroy: Option<()>,
    /// The alarm set with `ctx.setAlarm` fired (rivetkit-native extension).
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub on_alarm: Option<()>,
    /// Long-running work started after the start hooks; it should return
    /// when `ctx.abortSignal()` aborts (the actor is stopping).
    #[napi(ts_type = "(error: null, payload: CtxPayload) => void | Promise<void>")]
    pub run: Option<()>,
    /// The host's latest state, asked for before every save.
    #[napi(ts_type = "(error: null, payload: SerializePayload) => StateDeltaPayload | Promise<StateDeltaPayload>")]
    pub serialize_state: Option<()>,
    #[napi(ts_type = "(error: null, payload: RequestPayload) => JsHttpResponse | Promise<JsHttpResponse>")]
    pub on_request: Option<()>,
    /// A client's queue send (`POST /queue/{name}`): check it, then
    /// `ctx.queue().send` or `enqueueAndWait`; resolve to the status.
    #[napi(ts_type = "(error: null, payload: QueueSendPayload) => JsQueueSendResult | Promise<JsQueueSendResult>")]
    pub on_queue_send: Option<()>,
    /// Reject to refuse a connection (its client gets the error).
    #[napi(ts_type = "(error: null, payload: ConnectPayload) => void | Promise<void>")]
    pub on_before_connect: Option<()>,
    /// The initial state of a new connection (CBOR).
    #[napi(ts_type = "(error: null, payload: ConnStatePayload) => Buffer | Promise<Buffer>")]
    pub create_conn_state: Option<()>,
    #[napi(ts_type = "(error: null, payload: ConnPayload) => void | Promise<void>")]
    pub on_connect: Option<()>,
    /// After a connection ended (also `onDisconnectFinal`).
    #[napi(ts_type = "(error: null, payload: ConnPayload) => void | Promise<void>")]
    pub on_disconnect: Option<()>,
    #[napi(ts_type = "(error: null, payload: ConnPayload) => void | Promise<void>")]
    pub on_disconnect_final: Option<()>,
    /// Reject to refuse a subscription (the connection is closed).
    #[napi(ts_type = "(error: null, payload: SubscribePayload) => void | Promise<void>")]
    pub on_before_subscribe: Option<()>,
    /// A raw WebSocket opened (any path but `/connect`): set its event
    /// callback with `ws.setEventCallback`. A rejection closes the socket
    /// with 1011 `<group>.<code>`.
    #[napi(js_name = "onWebSocket", ts_type = "(error: null, payload: WebSocketPayload) => void | Promise<void>")]
    pub on_websocket: Option<()>,
    /// The workflow's history for the inspector (RivetKit sets it when
    /// `run` is a workflow); `undefined` when there is none yet.
    #[napi(ts_type = "(error: null, payload: CtxPayload) => Buffer | undefined | Promise<Buffer | undefined>")]
    pub get_workflow_history: Option<()>,
    /// Replays the workflow from `entryId` (the start when absent) and
    /// returns its history, as `getWorkflowHistory`.
    #[napi(
        ts_type = "(error: null, payload: WorkflowReplayPayload) => Buffer | undefined | Promise<Buffer | undefined>"
    )]
    pub replay_workflow: Option<()>,
    /// Actions by name; each resolves to its CBOR-encoded output.
    #[napi(ts_type = "Record<string, (error: null, payload: ActionPayload) => Buffer | Promise<Buffer>>")]
    pub actions: Option<()>,
}
