//! Building envoy responses: bodies with a content type, structured errors
//! in the request's encoding (docs/wire-formats.md) and the actor headers
//! every routed response carries (docs/wire-formats.md).

use std::collections::HashMap;

use rivet_envoy_client::config::HttpResponse as EnvoyResponse;

use crate::error::{ActorSpecifier, RivetError};
use crate::protocol::{error_body, Encoding};

pub(super) fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> EnvoyResponse {
    EnvoyResponse {
        status,
        headers: HashMap::from([("content-type".to_string(), content_type.to_string())]),
        body: Some(body),
        body_stream: None,
    }
}

pub(super) fn json(status: u16, body: &serde_json::Value) -> EnvoyResponse {
    bytes(status, "application/json", serde_json::to_vec(body).unwrap_or_default())
}

pub(super) fn text(status: u16, body: &str) -> EnvoyResponse {
    bytes(status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
}

/// A framework error in `encoding`: status from the table in docs/errors.md unless
/// `status` overrides it, message and metadata masked unless public, the
/// `actor` of the error or else `fallback_actor`, and that actor's headers.
pub(super) fn framework_error(
    encoding: Encoding,
    err: &anyhow::Error,
    status: Option<u16>,
    fallback_actor: Option<&ActorSpecifier>,
) -> anyhow::Result<EnvoyResponse> {
    let e = RivetError::extract(err);
    if e.is_public() {
        tracing::debug!(code = %e.qualified_code(), "framework error response");
    } else {
        tracing::warn!(code = %e.qualified_code(), error = %format!("{err:#}"), "request failed");
    }
    reported_error(encoding, err, status, fallback_actor)
}

/// [`framework_error`] for a failure its caller logged already
/// (crate::routing::failure).
pub(super) fn reported_error(
    encoding: Encoding,
    err: &anyhow::Error,
    status: Option<u16>,
    fallback_actor: Option<&ActorSpecifier>,
) -> anyhow::Result<EnvoyResponse> {
    let mut e = RivetError::extract(err);
    if e.actor.is_none() {
        e.actor = fallback_actor.cloned();
    }
    let status = status.unwrap_or_else(|| error_body::framework_status(&e));
    let mut response = bytes(status, encoding.content_type(), error_body::framework_body(encoding, &e)?);
    if let Some(actor) = &e.actor {
        attach_actor_headers(&mut response, actor);
    }
    Ok(response)
}

/// A raw-route admission failure: always JSON, `metadata: null` (docs/wire-formats.md).
pub(super) fn raw_admission_error(err: &anyhow::Error) -> EnvoyResponse {
    let e = RivetError::extract(err);
    let mut response = json(error_body::raw_status(&e), &error_body::raw_json(&e));
    if let Some(actor) = &e.actor {
        attach_actor_headers(&mut response, actor);
    }
    response
}

/// `x-rivet-actor`, `x-rivet-actor-generation` and, unless it contains a
/// line break, `x-rivet-actor-key`.
pub(super) fn attach_actor_headers(response: &mut EnvoyResponse, actor: &ActorSpecifier) {
    response.headers.insert("x-rivet-actor".into(), actor.actor_id.clone());
    response.headers.insert("x-rivet-actor-generation".into(), actor.generation.to_string());
    match &actor.key {
        Some(key) if !key.contains(['\r', '\n']) => {
            response.headers.insert("x-rivet-actor-key".into(), key.clone());
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::catalog;

    fn spec(key: &str) -> ActorSpecifier {
        ActorSpecifier { actor_id: "a1".into(), generation: 2, key: Some(key.into()) }
    }

    #[test]
    fn actor_headers_skip_keys_with_line_breaks() {
        let mut response = text(200, "ok");
        attach_actor_headers(&mut response, &spec("k"));
        assert_eq!(response.headers["x-rivet-actor"], "a1");
        assert_eq!(response.headers["x-rivet-actor-generation"], "2");
        assert_eq!(response.headers["x-rivet-actor-key"], "k");
        let mut response = text(200, "ok");
        attach_actor_headers(&mut response, &spec("a\r\nb"));
        assert!(!response.headers.contains_key("x-rivet-actor-key"));
    }

    #[test]
    fn framework_errors_use_the_request_encoding_and_table() {
        let err = catalog::action_timed_out().into_anyhow();
        let response = framework_error(Encoding::Cbor, &err, None, Some(&spec("k"))).unwrap();
        assert_eq!(response.status, 408);
        assert_eq!(response.headers["content-type"], "application/octet-stream");
        assert_eq!(response.headers["x-rivet-actor"], "a1");
        let response = framework_error(Encoding::Json, &anyhow::anyhow!("bad body"), Some(400), None).unwrap();
        assert_eq!(response.status, 400);
        assert_eq!(response.headers["content-type"], "application/json");
        let body: serde_json::Value = serde_json::from_slice(response.body.as_ref().unwrap()).unwrap();
        assert_eq!(body["code"], "internal_error");
        assert_eq!(body["message"], "An internal error occurred");
        assert!(!response.headers.contains_key("x-rivet-actor"));
    }

    #[test]
    fn admission_errors_carrying_an_actor_get_its_headers() {
        let err = catalog::actor_stopping(None).into_anyhow().context(spec("k"));
        let response = framework_error(Encoding::Json, &err, None, None).unwrap();
        assert_eq!(response.status, 500);
        assert_eq!(response.headers["x-rivet-actor-generation"], "2");
        let response = raw_admission_error(&err);
        assert_eq!(response.headers["x-rivet-actor"], "a1");
    }
}
