//! Telemetry and tracing entry points of `@rivetkit/rivetkit-napi`.
//!
//! rivetkit-native exports no OpenTelemetry spans yet. These work as
//! harmless no-ops rather than failing: `setTelemetryLogSink` keeps
//! nothing, `shutdownTelemetry` resolves, `OutboundCall` has no span
//! context and `finish` does nothing (`ctx.startCallSpan` returns `null`
//! anyway, so it is never handed out). On `ActorContext`,
//! `withApplicationSpan` returns a handle on the same generation and
//! `invocationTraceContext`/`startCallSpan` return `null`.

use napi::bindgen_prelude::{Null, PromiseRaw};
use napi::Env;
use napi_derive::napi;

use crate::actor_context::ActorContext;
use crate::error::spawn_promise;

/// Active actor invocation correlation (never produced yet:
/// `ctx.invocationTraceContext()` returns `null`).
#[napi(object)]
pub struct JsActorInvocationTraceContext {
    pub ray_id: Option<String>,
    pub span: Option<JsActorInvocationSpanContext>,
}

/// W3C span context of an invocation span.
#[napi(object)]
pub struct JsActorInvocationSpanContext {
    pub trace_id: String,
    pub span_id: String,
    pub trace_flags: u32,
    pub tracestate: Option<String>,
}

/// Accepts the OpenTelemetry log sink and keeps nothing: there is no
/// OpenTelemetry SDK whose warnings it would receive.
#[napi(ts_args_type = "callback: (...args: never[]) => unknown")]
pub fn set_telemetry_log_sink() {}

/// Resolves at once: there is no telemetry pipeline to flush.
#[napi(ts_return_type = "Promise<void>")]
pub fn shutdown_telemetry(env: &Env) -> napi::Result<PromiseRaw<'_, ()>> {
    spawn_promise(env, async { Ok(()) })
}

/// One open call out to another actor. Without tracing it carries no
/// span: `spanContext()` is `null` and `finish` does nothing.
#[napi]
pub struct OutboundCall {}

#[napi]
impl OutboundCall {
    #[napi(ts_return_type = "JsActorInvocationSpanContext | null")]
    pub fn span_context(&self) -> Null {
        Null
    }

    #[napi(ts_args_type = "error?: string | undefined | null")]
    pub fn finish(&self) {}
}

/// `ActorContext`'s tracing calls: no spans.
#[napi]
impl ActorContext {
    /// Without tracing: a handle on the same generation.
    #[napi(ts_args_type = "traceparent?: string | undefined | null, tracestate?: string | undefined | null")]
    pub fn with_application_span(&self) -> ActorContext {
        ActorContext::from(self.inner.clone())
    }

    /// Always `null`: no invocation tracing yet.
    #[napi(ts_return_type = "JsActorInvocationTraceContext | null")]
    pub fn invocation_trace_context(&self) -> Null {
        Null
    }

    /// Always `null` (tracing disabled): the caller sends its own context.
    #[napi(ts_args_type = "actorName: string, actionName: string", ts_return_type = "OutboundCall | null")]
    pub fn start_call_span(&self) -> Null {
        Null
    }
}
