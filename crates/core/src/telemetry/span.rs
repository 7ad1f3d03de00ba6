//! One span being recorded, and the finished record the exporter sends.

use std::time::{SystemTime, UNIX_EPOCH};

use super::context::SpanContext;

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    F64(f64),
    I64(i64),
}

/// OTLP's span kinds we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// A finished span, as exported.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub context: SpanContext,
    pub parent_span_id: Option<String>,
    pub name: String,
    pub kind: Kind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// Set when the span's work failed.
    pub error: Option<Failure>,
}

/// Why a span's work failed: its `error.type` (a `group.code` when the
/// error has one) and the status message.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: String,
    pub message: String,
}

impl Failure {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind: kind.into(), message: message.into() }
    }
}

pub(crate) fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}
