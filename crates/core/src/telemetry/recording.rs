//! One span being recorded, until it is finished and queued for export.

use super::context::SpanContext;
use super::export;
use super::span::{now_ns, Kind, SpanRecord, Value};

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

    pub fn set(&mut self, key: &'static str, value: Value) {
        if let Some(record) = self.record.as_mut() {
            record.attributes.retain(|(k, _)| *k != key);
            record.attributes.push((key, value));
        }
    }

    /// Ends the span (failed when `error` is given) and hands it to the
    /// exporter.
    pub fn finish(mut self, error: Option<&str>) {
        self.end(error.map(str::to_owned));
    }

    fn end(&mut self, error: Option<String>) {
        let Some(mut record) = self.record.take() else { return };
        record.end_ns = now_ns().max(record.start_ns);
        if let Some(error) = &error {
            record.attributes.push(("error.type", Value::Str(error_type(error))));
        }
        record.error = error;
        if let Some(exporter) = export::exporter() {
            exporter.push(record);
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.end(Some("cancelled".into()));
    }
}

/// The `group.code` at the start of an error's text, or `error`.
fn error_type(error: &str) -> String {
    let head = error.split([' ', ':', ',']).next().unwrap_or("");
    let qualified = head.split_once('.').is_some_and(|(g, c)| {
        !g.is_empty() && !c.is_empty() && head.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    });
    if qualified {
        head.to_owned()
    } else {
        "error".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_type_is_its_code_when_it_has_one() {
        assert_eq!(error_type("actor.action_timed_out: took too long"), "actor.action_timed_out");
        assert_eq!(error_type("boom"), "error");
        assert_eq!(error_type("something went wrong."), "error");
    }
}
