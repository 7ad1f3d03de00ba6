//! Spans as an OTLP/HTTP JSON `ExportTraceServiceRequest`
//! (docs/telemetry.md, "Export").

use serde_json::{json, Value as Json};

use super::span::{SpanRecord, Value};

/// The request body for `spans`, under one resource and one scope.
pub fn encode(resource: &[(&'static str, Value)], spans: &[SpanRecord]) -> Json {
    json!({
        "resourceSpans": [{
            "resource": { "attributes": attributes(resource) },
            "scopeSpans": [{
                "scope": { "name": "rivetkit-native", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(span).collect::<Vec<_>>(),
            }],
        }],
    })
}

fn span(record: &SpanRecord) -> Json {
    let mut span = json!({
        "traceId": record.context.trace_id,
        "spanId": record.context.span_id,
        "name": record.name,
        "kind": record.kind as u8,
        // 64-bit integers are strings in OTLP JSON.
        "startTimeUnixNano": record.start_ns.to_string(),
        "endTimeUnixNano": record.end_ns.to_string(),
        "attributes": attributes(&record.attributes),
        "status": match &record.error {
            Some(failure) => json!({ "code": 2, "message": failure.message }),
            None => json!({ "code": 0 }),
        },
    });
    if let Some(parent) = &record.parent_span_id {
        span["parentSpanId"] = json!(parent);
    }
    if let Some(state) = &record.context.tracestate {
        span["traceState"] = json!(state);
    }
    span
}

fn attributes(list: &[(&'static str, Value)]) -> Vec<Json> {
    list.iter()
        .map(|(key, value)| {
            let value = match value {
                Value::Str(s) => json!({ "stringValue": s }),
                Value::F64(f) => json!({ "doubleValue": f }),
                Value::I64(i) => json!({ "intValue": i.to_string() }),
            };
            json!({ "key": key, "value": value })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::context::SpanContext;
    use crate::telemetry::span::{Failure, Kind};

    #[test]
    fn a_span_encodes_as_otlp_json() {
        let context = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
        let record = SpanRecord {
            context,
            parent_span_id: Some("1111111111111111".into()),
            name: "counter/increment".into(),
            kind: Kind::Server,
            start_ns: 1,
            end_ns: 2,
            attributes: vec![("rivet.sampling.ratio", Value::F64(0.5)), ("http.response.status_code", Value::I64(200))],
            error: Some(Failure::new("error", "boom")),
        };
        let body = encode(&[("service.name", Value::Str("app".into()))], &[record]);
        let span = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span["parentSpanId"], "1111111111111111");
        assert_eq!((span["kind"].as_u64(), span["startTimeUnixNano"].as_str()), (Some(2), Some("1")));
        assert_eq!(span["attributes"][0]["value"]["doubleValue"], 0.5);
        assert_eq!(span["attributes"][1]["value"]["intValue"], "200");
        assert_eq!(span["status"]["code"], 2);
        assert_eq!(body["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"], "app");
    }
}
