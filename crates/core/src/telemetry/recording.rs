//! One span being recorded, until it is finished and queued for export.

use super::context::SpanContext;
use super::export;
use super::span::{now_ns, Failure, Kind, SpanRecord, Value};

/// A span from its start to [`Recording::finish`]. It exists only for a
/// sampled span while export is on, so an unsampled or unexported span
/// costs nothing past its ids. Dropped unfinished, it is exported as
/// cancelled.
#[derive(Debug)]
pub struct Recording {
    record: Option<SpanRecord>,
}

impl Recording {
    /// Starts recording span `context` (a child of `parent` when given), or
    /// `None` when it is not sampled or nothing is exported.
    pub fn start(context: &SpanContext, parent: Option<&SpanContext>, name: String, kind: Kind) -> Option<Self> {
        if !context.is_sampled() || export::exporter().is_none() {
            return None;
        }
        Some(Self {
            record: Some(SpanRecord {
                context: context.clone(),
                parent_span_id: parent.map(|p| p.span_id.clone()),
                name,
                kind,
                start_ns: now_ns(),
                end_ns: 0,
                attributes: Vec::new(),
                error: None,
            }),
        })
    }

    /// Adds attribute `key` (each is set once).
    pub fn set(&mut self, key: &'static str, value: Value) {
        if let Some(record) = self.record.as_mut() {
            record.attributes.push((key, value));
        }
    }

    /// Ends the span (failed when `failure` is given) and hands it to the
    /// exporter.
    pub fn finish(mut self, failure: Option<Failure>) {
        self.end(failure);
    }

    fn end(&mut self, failure: Option<Failure>) {
        let Some(mut record) = self.record.take() else { return };
        record.end_ns = now_ns().max(record.start_ns);
        if let Some(failure) = &failure {
            record.attributes.push(("error.type", Value::Str(failure.kind.clone())));
        }
        record.error = failure;
        if let Some(exporter) = export::exporter() {
            exporter.push(record);
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.end(Some(Failure::new("cancelled", "dropped unfinished")));
    }
}
