//! The span of one invocation of an actor: an action, a raw request or a
//! queue send, named and sampled as docs/telemetry.md says.

use super::config::ActorTracing;
use super::context::SpanContext;
use super::export;
use super::recording::Recording;
use super::sampler;
use super::span::{Failure, Kind, Value};

/// The context of a new span under `parent`: its child, with its
/// decision; without one, a new trace decided by the process rule.
pub fn open(parent: Option<&SpanContext>) -> SpanContext {
    match parent {
        Some(parent) => SpanContext::child_of(parent),
        None => {
            let root = SpanContext::root(true);
            let sampled = sampler::decide(&export::process_sampler(), None, None, &root.trace_id);
            root.with_sampled(sampled)
        }
    }
}

/// What is invoked.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Action(&'a str),
    Request { method: &'a str },
    QueueSend { queue: &'a str },
}

impl Subject<'_> {
    fn label(&self) -> &'static str {
        match self {
            Self::Action(_) => "action",
            Self::Request { .. } => "request",
            Self::QueueSend { .. } => "queue_send",
        }
    }

    /// The span's name after the actor's: the action, or the handler (a
    /// path is the caller's to choose, so it stays out of names).
    fn name(&self) -> &str {
        match self {
            Self::Action(name) => name,
            Self::Request { .. } => "onRequest",
            Self::QueueSend { .. } => "queue.send",
        }
    }

    fn rate(&self, tracing: &ActorTracing) -> Option<f64> {
        match self {
            Self::Action(name) => tracing.for_action(name),
            _ => tracing.for_actor(),
        }
    }
}

/// Who is invoked.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub key: &'a str,
}

/// One invocation's span: its context (which JavaScript's spans and the
/// actor's calls out parent to) and, when sampled and exported, its
/// recording.
#[derive(Debug)]
pub struct Invocation {
    context: SpanContext,
    recording: Option<Recording>,
}

impl Invocation {
    /// Starts the span, under the caller's span `parent` when the request
    /// carried one; `None` when no spans are exported (the handle then
    /// carries no span, as before export existed).
    pub fn start(
        actor: Actor<'_>,
        tracing: &ActorTracing,
        subject: Subject<'_>,
        ray_id: Option<&str>,
        parent: Option<&SpanContext>,
    ) -> Option<Self> {
        let exporter = export::exporter()?;
        let rate = subject.rate(tracing);
        let context = match parent {
            Some(parent) => SpanContext::child_of(parent),
            None => SpanContext::root(true),
        };
        let sampled = sampler::decide(&exporter.sampler, rate, parent, &context.trace_id);
        let context = context.with_sampled(sampled);
        let mut recording =
            Recording::start(&context, parent, format!("{}/{}", actor.name, subject.name()), Kind::Server);
        if let Some(span) = recording.as_mut() {
            span.set("rivet.invocation.type", Value::Str(subject.label().into()));
            span.set("rivet.actor.id", Value::Str(actor.id.into()));
            span.set("rivet.actor.name", Value::Str(actor.name.into()));
            span.set("rivet.actor.key", Value::Str(actor.key.into()));
            match subject {
                Subject::Action(name) => span.set("rivet.action.name", Value::Str(name.into())),
                Subject::Request { method } => span.set("http.request.method", Value::Str(method.into())),
                Subject::QueueSend { queue } => span.set("rivet.queue.name", Value::Str(queue.into())),
            }
            if let Some(ray_id) = ray_id {
                span.set("rivet.ray.id", Value::Str(ray_id.into()));
            }
            if let Some(rate) = rate {
                span.set("rivet.sampling.ratio", Value::F64(rate));
            }
        }
        Some(Self { context, recording })
    }

    pub fn context(&self) -> &SpanContext {
        &self.context
    }

    /// Records a raw request's answer; a status of 500 or more fails the span.
    pub fn finish_request(mut self, status: Result<u16, Failure>) {
        match status {
            Ok(status) => {
                if let Some(span) = self.recording.as_mut() {
                    span.set("http.response.status_code", Value::I64(i64::from(status)));
                }
                let failure = (status >= 500).then(|| Failure::new(status.to_string(), format!("status {status}")));
                self.finish(failure);
            }
            Err(failure) => self.finish(Some(failure)),
        }
    }

    /// Ends the span, failed when `failure` is given.
    pub fn finish(self, failure: Option<Failure>) {
        if let Some(recording) = self.recording {
            recording.finish(failure);
        }
    }
}
