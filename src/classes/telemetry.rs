//! The tracing pieces every handle shares: W3C span contexts, `tracing`
//! spans closed once ([`TracedSpan`]), a handle's ray ID
//! ([`InvocationRay`]), `OutboundCall`, and the module functions
//! `setTelemetryLogSink` / `shutdownTelemetry`. `ActorContext`'s tracing
//! calls that hand them out are in `crate::actor_context::telemetry`.
//!
//! Spans are `tracing` spans (our logs carry them; there is no
//! OpenTelemetry exporter). A handle from `ctx.withApplicationSpan` carries
//! the JavaScript span it acts under (W3C `traceparent`); `startCallSpan`
//! opens an `actor.call` span for one call out to another actor, in that
//! trace when there is one and in a new trace otherwise, and gives its W3C
//! context for the callee. `finish` records the outcome and closes it; an
//! `OutboundCall` dropped unfinished closes as cancelled.
//!
//! `setTelemetryLogSink` keeps nothing (no OpenTelemetry SDK warns through
//! it) and `shutdownTelemetry` resolves at once (nothing to flush).

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

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

/// A W3C span context: 32 and 16 lowercase hex digits, and the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: String,
    pub span_id: String,
    pub flags: u8,
    pub tracestate: Option<String>,
}

impl SpanContext {
    /// Parses a version-00 `traceparent`; `None` if it is not one or its
    /// ids are all zeros.
    pub fn parse(traceparent: &str, tracestate: Option<String>) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
        if parts.next().is_some() || version != "00" || !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
            return None;
        }
        if !nonzero(trace_id) || !nonzero(span_id) {
            return None;
        }
        Some(Self {
            trace_id: trace_id.to_ascii_lowercase(),
            span_id: span_id.to_ascii_lowercase(),
            flags: u8::from_str_radix(flags, 16).ok()?,
            tracestate: tracestate.filter(|s| !s.is_empty()),
        })
    }

    /// A child of `parent` (or the root of a new, sampled trace).
    pub(crate) fn child_of(parent: Option<&SpanContext>) -> Self {
        match parent {
            Some(parent) => Self {
                trace_id: parent.trace_id.clone(),
                span_id: random_hex::<8>(),
                flags: parent.flags,
                tracestate: parent.tracestate.clone(),
            },
            None => Self { trace_id: random_hex::<16>(), span_id: random_hex::<8>(), flags: 1, tracestate: None },
        }
    }

    pub(crate) fn to_js(&self) -> JsActorInvocationSpanContext {
        JsActorInvocationSpanContext {
            trace_id: self.trace_id.clone(),
            span_id: self.span_id.clone(),
            trace_flags: u32::from(self.flags),
            tracestate: self.tracestate.clone(),
        }
    }
}

/// `N` random bytes as lowercase hex, never all zeros (W3C forbids it).
fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    if getrandom::getrandom(&mut bytes).is_err() || bytes.iter().all(|b| *b == 0) {
        // No randomness: still a valid, distinct-enough id from the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(1)
            .max(1);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (nanos >> ((i % 16) * 8)) as u8;
        }
        bytes[N - 1] |= 1;
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Accepts the OpenTelemetry log sink and keeps nothing: there is no
/// OpenTelemetry SDK whose warnings it would receive.
#[napi(ts_args_type = "callback: (...args: never[]) => unknown")]
pub fn set_telemetry_log_sink() {}

/// Resolves at once: spans go to `tracing`, there is nothing to flush.
#[napi(ts_return_type = "Promise<void>")]
pub fn shutdown_telemetry(env: &Env) -> napi::Result<PromiseRaw<'_, ()>> {
    spawn_promise(env, async { Ok(()) })
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
        Some(self.span.context.to_js())
    }

    /// Records the outcome and closes the span; later calls do nothing.
    #[napi(ts_args_type = "error?: string | undefined | null")]
    pub fn finish(&self, error: Option<String>) {
        let outcome = if error.is_some() { "error" } else { "ok" };
        self.span.finish(outcome, error.as_deref(), "call finished");
    }
}

/// A `tracing` span with its W3C context, closed once.
pub(crate) struct TracedSpan {
    pub(crate) context: SpanContext,
    span: Mutex<Option<tracing::Span>>,
}

impl TracedSpan {
    pub(crate) fn new(context: SpanContext, span: tracing::Span) -> Self {
        Self { context, span: Mutex::new(Some(span)) }
    }

    /// Records the outcome (and error) and closes the span; later calls
    /// do nothing.
    pub(crate) fn finish(&self, outcome: &str, error: Option<&str>, message: &'static str) {
        let Some(span) = self.span.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        match error {
            Some(error) => tracing::debug!(parent: &span, outcome, error, "{message}"),
            None => tracing::debug!(parent: &span, outcome, "{message}"),
        }
    }
}

impl Drop for TracedSpan {
    fn drop(&mut self) {
        if let Some(span) = self.span.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            tracing::debug!(parent: &span, outcome = "cancelled", "span dropped unfinished");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_parsing() {
        let ok =
            SpanContext::parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", Some("a=b".into())).unwrap();
        assert_eq!(ok.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!((ok.span_id.as_str(), ok.flags, ok.tracestate.as_deref()), ("00f067aa0ba902b7", 1, Some("a=b")));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(SpanContext::parse(bad, None), None, "{bad}");
        }
    }

    #[test]
    fn a_child_keeps_the_trace_and_gets_a_new_span_id() {
        let parent = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
        let child = SpanContext::child_of(Some(&parent));
        assert_eq!(child.trace_id, parent.trace_id);
        assert_ne!(child.span_id, parent.span_id);
        let root = SpanContext::child_of(None);
        assert!(SpanContext::parse(&format!("00-{}-{}-01", root.trace_id, root.span_id), None).is_some());
    }
}
