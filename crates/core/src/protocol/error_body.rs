//! How a structured error is shown to an HTTP client (docs/wire-formats.md): masking of non-public errors, the framework and
//! raw-route status tables, and the body in each encoding.

use serde_json::{json, Value};

use super::bare;
use super::cbor_json::to_cbor;
use super::encoding::Encoding;
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

/// Status of a framework route error (docs/errors.md).
pub fn framework_status(err: &RivetError) -> u16 {
    match (err.group.as_str(), err.code.as_str()) {
        ("auth", "forbidden") => 403,
        ("actor", "action_not_found" | "not_found") => 404,
        ("actor", "action_timed_out") => 408,
        ("actor", "invalid_request") => 400,
        ("actor", "method_not_allowed") => 405,
        ("message", "incoming_too_long" | "outgoing_too_long") => 400,
        ("queue", _) => 400,
        _ => 500,
    }
}

/// Status of a raw-route admission error (docs/errors.md).
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

/// The framework error body in `encoding`, after masking: JSON as
/// [`framework_json`], CBOR the same map, BARE an `HttpResponseError` (v4)
/// whose metadata is the CBOR of the metadata JSON.
pub fn framework_body(encoding: Encoding, err: &RivetError) -> anyhow::Result<Vec<u8>> {
    match encoding {
        Encoding::Json => Ok(serde_json::to_vec(&framework_json(err))?),
        Encoding::Cbor => to_cbor(&framework_json(err)),
        Encoding::Bare => {
            let view = client_view(err);
            let metadata = view.metadata.as_ref().map(to_cbor).transpose()?;
            bare::encode_http_response_error(&view.group, &view.code, &view.message, metadata, view.actor.as_ref())
        }
    }
}

/// `{group, code, message, metadata: null}` after masking (raw routes).
pub fn raw_json(err: &RivetError) -> Value {
    let view = client_view(err);
    json!({ "group": view.group, "code": view.code, "message": view.message, "metadata": null })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{catalog, ActorSpecifier};
    use crate::protocol::cbor_json::from_cbor;
    use rivetkit_client_protocol::versioned::HttpResponseError;
    use vbare::OwnedVersionedData;

    #[test]
    fn internal_errors_are_masked_but_keep_identity() {
        let err = RivetError::new(crate::error_codes::CORE_INTERNAL_ERROR, "secret").with_metadata(json!({"x": 1}));
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

    fn spec() -> ActorSpecifier {
        ActorSpecifier { actor_id: "abc".into(), generation: 9, key: Some("user/1".into()) }
    }

    #[test]
    fn body_in_each_encoding() {
        let err = catalog::action_timed_out().with_actor(spec());
        let expected = json!({
            "group": "actor", "code": "action_timed_out", "message": "Action timed out",
            "actor": {"actorId": "abc", "generation": 9, "key": "user/1"},
        });
        let body = framework_body(Encoding::Json, &err).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), expected);
        let body = framework_body(Encoding::Cbor, &err).unwrap();
        assert_eq!(from_cbor::<Value>(&body).unwrap(), expected);
        let body = framework_body(Encoding::Bare, &err).unwrap();
        let e = HttpResponseError::deserialize_with_embedded_version(&body).unwrap();
        assert_eq!(
            (e.group.as_str(), e.code.as_str(), e.message.as_str()),
            ("actor", "action_timed_out", "Action timed out")
        );
        assert_eq!(e.metadata, None);
        let a = e.actor.unwrap();
        assert_eq!((a.actor_id.as_str(), a.generation.0, a.key.as_deref()), ("abc", 9, Some("user/1")));
    }

    #[test]
    fn bare_metadata_is_cbor_of_the_json() {
        let err = RivetError::new(crate::error_codes::ACTOR_METHOD_NOT_ALLOWED, "Method not allowed")
            .with_metadata(json!({"method": "GET", "path": "/action/x"}));
        let body = framework_body(Encoding::Bare, &err).unwrap();
        let e = HttpResponseError::deserialize_with_embedded_version(&body).unwrap();
        assert_eq!(from_cbor::<Value>(&e.metadata.unwrap()).unwrap(), json!({"method": "GET", "path": "/action/x"}));
        assert!(e.actor.is_none());
    }

    #[test]
    fn masking_applies_in_every_encoding() {
        let err = RivetError::new(crate::error_codes::NAPI_INVALID_STATE, "secret").with_metadata(json!({"x": 1}));
        for encoding in [Encoding::Json, Encoding::Cbor] {
            let body = framework_body(encoding, &err).unwrap();
            let value: Value = if encoding == Encoding::Json {
                serde_json::from_slice(&body).unwrap()
            } else {
                from_cbor(&body).unwrap()
            };
            assert_eq!(value, json!({"group": "napi", "code": "invalid_state", "message": MASKED_MESSAGE}));
        }
        let body = framework_body(Encoding::Bare, &err).unwrap();
        let e = HttpResponseError::deserialize_with_embedded_version(&body).unwrap();
        assert_eq!((e.group.as_str(), e.message.as_str(), e.metadata), ("napi", MASKED_MESSAGE, None));
    }

    #[test]
    fn status_table() {
        let status = |g: &str, c: &str| framework_status(&RivetError::foreign(g, c, ""));
        assert_eq!(status("auth", "forbidden"), 403);
        assert_eq!(status("actor", "action_not_found"), 404);
        assert_eq!(status("actor", "method_not_allowed"), 405);
        assert_eq!(status("actor", "action_timed_out"), 408);
        assert_eq!(status("actor", "invalid_request"), 400);
        assert_eq!(status("message", "incoming_too_long"), 400);
        assert_eq!(status("message", "outgoing_too_long"), 400);
        assert_eq!(status("queue", "anything"), 400);
        assert_eq!(status("user", "boom"), 500);
        assert_eq!(status("actor", "stopping"), 500);
        assert_eq!(status("core", "internal_error"), 500);
    }
}
