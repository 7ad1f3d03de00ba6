//! `ActorContext`'s tracing calls: `withApplicationSpan`,
//! `invocationTraceContext` and `startCallSpan` (the spans themselves are
//! in `crate::classes::telemetry`; docs/telemetry.md).

use napi_derive::napi;

use super::handle::ActorContext;
use rivetkit_native_core::telemetry::{open, Kind};

use crate::classes::telemetry::{span_to_js, JsActorInvocationTraceContext, OutboundCall, SpanContext, TracedSpan};

/// `ActorContext`'s tracing calls.
#[napi]
impl ActorContext {
    /// A handle on the same generation acting under the JavaScript span
    /// `traceparent` (ignored unless a valid W3C version-00 header).
    #[napi(ts_args_type = "traceparent?: string | undefined | null, tracestate?: string | undefined | null")]
    pub fn with_application_span(&self, traceparent: Option<String>, tracestate: Option<String>) -> ActorContext {
        let mut ctx = ActorContext::from(self.inner.clone());
        ctx.app_span = traceparent.and_then(|t| SpanContext::parse(&t, tracestate));
        ctx.ray = self.ray.clone();
        ctx
    }

    /// The caller's ray ID and the application span this handle acts
    /// under, or `null` when it has neither.
    #[napi(ts_return_type = "JsActorInvocationTraceContext | null")]
    pub fn invocation_trace_context(&self) -> Option<JsActorInvocationTraceContext> {
        let ray_id = self.ray.current();
        if self.app_span.is_none() && ray_id.is_none() {
            return None;
        }
        Some(JsActorInvocationTraceContext { ray_id, span: self.app_span.as_ref().map(span_to_js) })
    }

    /// Opens the `actor.call` span of one call to `actionName` on an actor
    /// named `actorName`.
    #[napi(ts_args_type = "actorName: string, actionName: string", ts_return_type = "OutboundCall | null")]
    pub fn start_call_span(&self, actor_name: String, action_name: String) -> Option<OutboundCall> {
        let context = open(self.app_span.as_ref());
        let span = tracing::info_span!(
            "actor.call",
            actor_id = %self.inner.actor_id(),
            target = %actor_name,
            action = %action_name,
            trace_id = %context.trace_id,
            span_id = %context.span_id,
            parent_span_id = self.app_span.as_ref().map(|p| p.span_id.as_str()),
        );
        let name = format!("{actor_name}/{action_name}");
        let mut call = TracedSpan::new(context, self.app_span.as_ref(), name, Kind::Client, span);
        call.set("rivet.actor.name", actor_name);
        call.set("rivet.action.name", action_name);
        Some(OutboundCall { span: call })
    }
}
