//! Spans of actor invocations, sampled per actor and exported over
//! OTLP/HTTP (docs/telemetry.md).
//!
//! - [`context`]: W3C span contexts;
//! - [`sampler`]: the process rule (`OTEL_TRACES_SAMPLER`) and an actor's rate over it;
//! - [`config`]: an actor type's rates, the `tracing` block of its config;
//! - [`invocation`]: the span of one action, request or queue send;
//! - [`recording`]: a span being recorded;
//! - [`span`]: a finished span's record;
//! - [`export`]: the bounded queue and the worker that sends batches.
//!
//! Nothing is recorded unless the standard OpenTelemetry environment names
//! an endpoint; then only sampled spans cost more than their ids.

pub mod config;
pub mod context;
pub mod export;
pub mod invocation;
mod otlp_json;
pub mod recording;
pub mod sampler;
pub mod span;

pub use config::ActorTracing;
pub use context::SpanContext;
pub use invocation::{open, Actor, Invocation, Subject};
pub use recording::Recording;
pub use span::{Failure, Kind, Value};
