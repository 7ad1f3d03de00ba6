//! The tracing pieces every handle shares: spans closed once
//! ([`TracedSpan`]), a handle's ray ID ([`InvocationRay`]), `OutboundCall`,
//! and the module functions `setTelemetryLogSink` / `shutdownTelemetry`.
//! `ActorContext`'s tracing calls that hand them out are in
//! `crate::actor_context::telemetry`; span contexts, sampling and export
//! are the core's (`rivetkit_native_core::telemetry`, docs/telemetry.md).
//!
//! A span goes to the logs as a `tracing` span and, when sampled while
//! export is on, to the OTLP collector. A handle given to an invocation
//! acts under that invocation's span; one from `ctx.withApplicationSpan`
//! under the JavaScript span it names (W3C `traceparent`). `startCallSpan`
//! opens an `actor.call` span for one call out to another actor, in that
//! trace when there is one and in a new trace otherwise, and gives its W3C
//! context for the callee. `finish` records the outcome and closes it; an
//! `OutboundCall` dropped unfinished closes as cancelled.
//!
//! `setTelemetryLogSink` keeps nothing (export problems are logged through
//! `tracing`) and `shutdownTelemetry` sends what is queued.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use rivetkit_native_core::telemetry::{self, Failure, Kind, Recording, Value};

use crate::bridge::error::spawn_promise;

/// The ray ID a handle reports: its invocation's, or, for a handle whose
/// invocation had none (the `run` handler's, a workflow's), that of the
/// last queue message received through it, so work a message caused
/// carries its sender's ray (docs/telemetry.md). Handles derived with
/// `withApplicationSpan` share it.
#[derive(Clone, Default)]
pub(crate) struct InvocationRay {
    own: Option<String>,
    taken: Arc<Mutex<Option<String>>>,
}

impl InvocationRay {
    pub(crate) fn of(own: Option<String>) -> Self {
        Self { own, taken: Arc::default() }
    }

    pub(crate) fn current(&self) -> Option<String> {
        self.own.clone().or_else(|| self.taken.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// A handle without a ray of its own takes that of the last received
    /// message that has one.
    pub(crate) fn received<'a>(&self, rays: impl DoubleEndedIterator<Item = Option<&'a str>>) {
        if self.own.is_some() {
            return;
        }
        if let Some(ray) = rays.rev().flatten().next() {
            *self.taken.lock().unwrap_or_else(|p| p.into_inner()) = Some(ray.to_owned());
        }
    }
}

/// Active actor invocation correlation: the application span of the handle.
#[napi(object)]
pub struct JsActorInvocationTraceContext {
    pub ray_id: Option<String>,
    pub span: Option<JsActorInvocationSpanContext>,
}

/// W3C span context of a span.
#[napi(object)]
pub struct JsActorInvocationSpanContext {
    pub trace_id: String,
    pub span_id: String,
    pub trace_flags: u32,
    pub tracestate: Option<String>,
}

/// A W3C span context (the core's; docs/telemetry.md).
pub use rivetkit_native_core::telemetry::SpanContext;

/// A span context as JavaScript sees it.
pub(crate) fn span_to_js(context: &SpanContext) -> JsActorInvocationSpanContext {
    JsActorInvocationSpanContext {
        trace_id: context.trace_id.clone(),
        span_id: context.span_id.clone(),
        trace_flags: u32::from(context.flags),
        tracestate: context.tracestate.clone(),
    }
}

/// Accepts the OpenTelemetry log sink and keeps nothing: there is no
/// OpenTelemetry SDK whose warnings it would receive.
#[napi(ts_args_type = "callback: (...args: never[]) => unknown")]
pub fn set_telemetry_log_sink() {}

/// Sends the spans finished so far to the OTLP collector, waiting 5 s at
/// most; resolves at once when no spans are exported. Export stays on.
#[napi(ts_return_type = "Promise<void>")]
pub fn shutdown_telemetry(env: &Env) -> napi::Result<PromiseRaw<'_, ()>> {
    spawn_promise(env, async {
        telemetry::export::flush().await;
        Ok(())
    })
}

/// One open call out to another actor (`ctx.startCallSpan`): an
/// `actor.call` span until `finish`.
#[napi]
pub struct OutboundCall {
    pub(crate) span: TracedSpan,
}

#[napi]
impl OutboundCall {
    /// The call span's W3C context, for the callee to parent to.
    #[napi(ts_return_type = "JsActorInvocationSpanContext | null")]
    pub fn span_context(&self) -> Option<JsActorInvocationSpanContext> {
        Some(span_to_js(&self.span.context))
    }

    /// Records the outcome and closes the span; later calls do nothing.
    #[napi(ts_args_type = "error?: string | undefined | null")]
    pub fn finish(&self, error: Option<String>) {
        let outcome = if error.is_some() { "error" } else { "ok" };
        self.span.finish(outcome, error.as_deref(), "call finished");
    }
}

/// A span with its W3C context, closed once: a `tracing` span for the
/// logs and, when sampled and exported, its OTLP recording.
pub(crate) struct TracedSpan {
    pub(crate) context: SpanContext,
    span: Mutex<Option<(tracing::Span, Option<Recording>)>>,
}

impl TracedSpan {
    /// `context` is a child of `parent` (see [`telemetry::open`]).
    pub(crate) fn new(
        context: SpanContext,
        parent: Option<&SpanContext>,
        name: String,
        kind: Kind,
        span: tracing::Span,
    ) -> Self {
        let recording = Recording::start(&context, parent, name, kind);
        Self { context, span: Mutex::new(Some((span, recording))) }
    }

    /// Sets a string attribute of the recording (before it is shared).
    pub(crate) fn set(&mut self, key: &'static str, value: String) {
        if let Some((_, Some(recording))) = self.span.get_mut().unwrap_or_else(|p| p.into_inner()) {
            recording.set(key, Value::Str(value));
        }
    }

    /// Records the outcome (and error) and closes the span; later calls
    /// do nothing.
    pub(crate) fn finish(&self, outcome: &str, error: Option<&str>, message: &'static str) {
        let Some((span, recording)) = self.span.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        match error {
            Some(error) => tracing::debug!(parent: &span, outcome, error, "{message}"),
            None => tracing::debug!(parent: &span, outcome, "{message}"),
        }
        if let Some(mut recording) = recording {
            recording.set("rivet.outcome", Value::Str(outcome.to_owned()));
            recording.finish(error.map(|e| Failure::new("error", e)));
        }
    }
}

impl Drop for TracedSpan {
    fn drop(&mut self) {
        if let Some((span, recording)) = self.span.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            tracing::debug!(parent: &span, outcome = "cancelled", "span dropped unfinished");
            drop(recording);
        }
    }
}
