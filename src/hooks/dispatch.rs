//! The JavaScript callbacks of one actor type, as core [`ActorHooks`].
//!
//! Every callback is a [`JsCallback`] read by `super::table`: called as
//! `callback(null, payload)`, awaited, and its result checked against the
//! type the hook must return. Payload objects are built on the JS thread;
//! `ctx` is a fresh [`ActorContext`] wrapper around the generation's core
//! context.

use futures::future::{BoxFuture, FutureExt};
use napi::bindgen_prelude::Buffer;
use rivetkit_native_core::actor::queue::{QueueSendResult, QueueSendStatus};
use rivetkit_native_core::actor::{
    ActorContext as CoreContext, ActorHooks, Conn, HttpRequest, HttpResponse, LifecycleHook, QueueSendRequest,
    RawWebSocket, ScheduledFire, SerializeReason, StateDelta,
};
use tokio_util::sync::CancellationToken as CoreToken;

use super::payloads::{
    ActionPayload, ConnPayload, ConnStatePayload, ConnectPayload, CreatePayload, CtxPayload, MigratePayload,
    QueueSendPayload, RequestPayload, SerializePayload, SubscribePayload, WebSocketPayload, WorkflowReplayPayload,
};
use super::table::JsHooks;
use crate::actor_context::ActorContext;
use crate::bridge::js_callback::{Ignored, JsCallback};
use crate::bridge::types::{Checked, JsBytes, JsHttpRequest, JsHttpResponse};
use crate::classes::body_stream::{HttpRequestBodyStream, HttpResponseBodyStream, JsStreamedHttpRequest};
use crate::classes::cancellation_token::CancellationToken;
use crate::classes::conn::ConnHandle;
use crate::classes::telemetry::{InvocationRay, SpanContext};
use crate::classes::websocket::WebSocket;
use rivetkit_native_core::telemetry::{self, Actor, Failure, Invocation, Subject};

type VoidHook<P> = Option<JsCallback<P, Ignored>>;

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

/// The handle given to one invocation and the invocation's span: the
/// handle carries its caller's ray ID and acts under the span (when spans
/// are exported; docs/telemetry.md).
fn invoke(
    ctx: &CoreContext,
    subject: Subject<'_>,
    ray_id: Option<String>,
    parent: Option<&SpanContext>,
) -> (ActorContext, Option<Invocation>) {
    // Without export, an invocation costs nothing here (not even its key's text).
    let invocation = telemetry::export::exporter().and_then(|_| {
        let key = ctx.key().format();
        let actor = Actor { id: ctx.actor_id(), name: ctx.name(), key: &key };
        Invocation::start(actor, ctx.tracing(), subject, ray_id.as_deref(), parent)
    });
    let mut handle = ActorContext::from(ctx.clone());
    handle.ray = InvocationRay::of(ray_id);
    handle.app_span = invocation.as_ref().map(|i| i.context().clone());
    (handle, invocation)
}

/// Why an invocation failed, as its span records it.
fn span_error(err: &anyhow::Error) -> Failure {
    let err = rivetkit_native_core::RivetError::extract(err);
    Failure::new(err.qualified_code(), err.message)
}

/// Ends `invocation` with the outcome of its work.
fn finish<T>(invocation: Option<Invocation>, result: &anyhow::Result<T>) {
    if let Some(invocation) = invocation {
        invocation.finish(result.as_ref().err().map(span_error));
    }
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
        let ray_id = conn.and_then(|c| c.ray_id()).map(str::to_owned);
        let (handle, invocation) = invoke(ctx, Subject::Action(name), ray_id, conn.and_then(Conn::trace_parent));
        let payload = ActionPayload {
            ctx: handle,
            conn: conn.map(|c| ConnHandle::new(ctx, c)),
            args: JsBytes(args),
            scheduled_fire: fire.map(Into::into),
            cancel_token: CancellationToken::from_inner(cancel),
        };
        Some(
            async move {
                let result = hook.call(payload).await.map(|bytes| bytes.0);
                finish(invocation, &result);
                result
            }
            .boxed(),
        )
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
        // RivetKit reads the state synchronously in the call: the queue's
        // handling mark read right after it returns is the one the state
        // reflects (docs/queues-cron.md, "Consumed with the state").
        let mark = std::sync::Arc::new(std::sync::OnceLock::new());
        let (seen, core) = (mark.clone(), ctx.clone());
        Some(
            async move {
                let Checked(delta) = hook
                    .call_then(payload, move || {
                        let _ = seen.set(core.queue().handled_mark());
                    })
                    .await?;
                Ok(StateDelta { state: delta.state.map(|b| b.0), queue_mark: mark.get().copied() })
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
        let subject = Subject::QueueSend { queue: &send.name };
        let (handle, invocation) = invoke(ctx, subject, conn.ray_id().map(str::to_owned), conn.trace_parent());
        let payload = QueueSendPayload {
            ctx: handle,
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
                let result = async {
                    let Checked(result) = hook.call(payload).await?;
                    let status = QueueSendStatus::parse(&result.status).ok_or_else(|| {
                        crate::bridge::error::invalid_return(
                            "onQueueSend",
                            &format!("status `{}` is not \"completed\" or \"timedOut\"", result.status),
                        )
                    })?;
                    Ok(QueueSendResult { status, response: result.response.map(|b| b.to_vec()) })
                }
                .await;
                finish(invocation, &result);
                result
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
        let parent = SpanContext::from_headers(&request.headers);
        let subject = Subject::Request { method: &request.method };
        let (handle, invocation) = invoke(ctx, subject, request.ray_id(), parent.as_ref());
        let payload = RequestPayload {
            ctx: handle,
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
                let result = async {
                    let Checked(response) = hook.call(payload).await?;
                    into_core_response(response)
                }
                .await;
                if let Some(invocation) = invocation {
                    invocation.finish_request(result.as_ref().map(|r| r.status).map_err(span_error));
                }
                result
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
    let status = u16::try_from(status).ok().filter(|s| (100..=999).contains(s)).ok_or_else(|| {
        crate::bridge::error::invalid_return("onRequest", &format!("status {status} is not an HTTP status"))
    })?;
    Ok(HttpResponse {
        status,
        headers: response.headers.unwrap_or_default(),
        body: response.body.map(|b| b.0).unwrap_or_default(),
        stream: response.stream == Some(true),
    })
}
