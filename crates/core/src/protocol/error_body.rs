//! How a structured error is shown to an HTTP client (spec http-routing
//! §3.4, §6.3; errors §3): masking of non-public errors, the framework and
//! raw-route status tables, and the JSON body.

use serde_json::{json, Value};

use crate::error::RivetError;

const MASKED_MESSAGE: &str = "An internal error occurred";

/// The error as a client may see it: non-public errors keep their group and
/// code but lose their message and metadata.
pub fn client_view(err: &RivetError) -> RivetError {
    if err.is_public() {
        return err.clone();
    }
    RivetError { message: MASKED_MESSAGE.to_string(), metadata: None, ..err.clone() }
}

/// Status of a framework route error (http-routing §3.4).
pub fn framework_status(err: &RivetError) -> u16 {
    match (err.group.as_str(), err.code.as_str()) {
        ("auth", "forbidden") => 403,
        ("actor", "action_not_found" | "not_found") => 404,
        ("actor", "action_timed_out") => 408,
        ("actor", "invalid_request") => 400,
        ("actor", "method_not_allowed") => 405,
        ("message", "incoming_too_long" | "outgoing_too_long") => 400,
        ("queue", _) => 400,
        ("rivetkit-native", "unsupported") => 400,
        _ => 500,
    }
}

/// Status of a raw-route admission error (http-routing §6.3).
pub fn raw_status(err: &RivetError) -> u16 {
    match (err.group.as_str(), err.code.as_str()) {
        (_, "unauthorized") => 401,
        ("actor", "action_timed_out") => 408,
        (_, "action_not_found") => 404,
        ("actor", "not_found") => 404,
        (_, "invalid_request" | "state_not_enabled") | ("database", "not_enabled") => 400,
        _ => 500,
    }
}

/// `{group, code, message, metadata?, actor?}` after masking.
pub fn framework_json(err: &RivetError) -> Value {
    let view = client_view(err);
    let mut body = json!({ "group": view.group, "code": view.code, "message": view.message });
    if let Some(metadata) = view.metadata {
        body["metadata"] = metadata;
    }
    if let Some(actor) = &view.actor {
        body["actor"] = json!(actor);
    }
    body
}

/// `{group, code, message, metadata: null}` after masking (raw routes).
pub fn raw_json(err: &RivetError) -> Value {
    let view = client_view(err);
    json!({ "group": view.group, "code": view.code, "message": view.message, "metadata": null })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::catalog;

    #[test]
    fn internal_errors_are_masked_but_keep_identity() {
        let err = RivetError::new("core", "internal_error", "secret").with_metadata(json!({"x": 1}));
        let body = framework_json(&err);
        assert_eq!(body, json!({"group": "core", "code": "internal_error", "message": MASKED_MESSAGE}));
        assert_eq!(framework_status(&err), 500);
    }

    #[test]
    fn public_errors_keep_message_and_metadata() {
        let err = catalog::actor_not_found("route", "/x");
        let body = framework_json(&err);
        assert_eq!(body["metadata"]["resource"], "route");
        assert_eq!(framework_status(&err), 404);
        assert_eq!(raw_json(&err)["metadata"], Value::Null);
    }
}
