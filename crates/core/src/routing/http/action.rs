//! `POST /action/<name>` (docs/wire-formats.md): method, size and body
//! checks, dispatch to the actor task (which bounds it by the action
//! timeout), the output gate, and the response in the request's encoding.

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use super::response;
use super::route::path_without_query;
use crate::actor::ActorTaskHandle;
use crate::actor::HttpRequest;
use crate::error::{ActorSpecifier, RivetError};
use crate::protocol::action::{conn_params, decode_args, encode_output, CONN_PARAMS_HEADER};
use crate::protocol::encoding::header;
use crate::protocol::Encoding;
use crate::routing::failure::{self, Call, Transport};

const BAD_REQUEST: u16 = 400;

pub(super) async fn handle(
    handle: &ActorTaskHandle,
    request: EnvoyRequest,
    name: String,
    body: Vec<u8>,
    encoding: Encoding,
    actor: &ActorSpecifier,
) -> anyhow::Result<EnvoyResponse> {
    let fail = |err: anyhow::Error, status: Option<u16>| response::framework_error(encoding, &err, status, Some(actor));

    if request.method != "POST" {
        return fail(method_not_allowed(&request.method, &request.path).into_anyhow(), None);
    }
    let config = handle.config();
    if body.len() > config.max_incoming_message_size {
        return fail(incoming_too_long().into_anyhow(), Some(BAD_REQUEST));
    }
    let args = match decode_args(encoding, &body) {
        Ok(args) => args,
        Err(err) => return fail(err.context("decode HTTP action request"), Some(BAD_REQUEST)),
    };
    let params = match conn_params(header(&request.headers, CONN_PARAMS_HEADER)) {
        Ok(params) => params,
        Err(err) => return fail(err.context("decode HTTP action connection params"), Some(BAD_REQUEST)),
    };
    // One trip into the actor: a transient connection for this request is
    // connected, the action runs on it, and it is disconnected. The connect
    // hooks see the request without its body (already decoded as the args).
    let hook_request = HttpRequest {
        method: request.method,
        uri: request.path,
        headers: request.headers,
        body: Vec::new(),
        ..Default::default()
    };
    let output = match handle.http_action(params, hook_request, name.clone(), args).await {
        Ok(output) => output,
        Err(err) => {
            failure::log_failed_call(handle.context(), Transport::Http, Call::Action(&name), &err);
            return response::reported_error(encoding, &err, None, Some(actor));
        }
    };
    // The answer waits for the save of what the action changed (docs/durability.md).
    if let Err(err) = handle.output_gate().await {
        return fail(err, None);
    }
    let body = encode_output(encoding, output)?;
    if body.len() > config.max_outgoing_message_size {
        return fail(outgoing_too_long().into_anyhow(), Some(BAD_REQUEST));
    }
    Ok(response::bytes(200, encoding.content_type(), body))
}

/// `actor.method_not_allowed` with `{method, path}` (path without query).
pub(super) fn method_not_allowed(method: &str, path: &str) -> RivetError {
    RivetError::new(crate::error_codes::ACTOR_METHOD_NOT_ALLOWED, "Method not allowed")
        .with_metadata(serde_json::json!({ "method": method, "path": path_without_query(path) }))
}

fn incoming_too_long() -> RivetError {
    RivetError::new(crate::error_codes::MESSAGE_INCOMING_TOO_LONG, "Incoming message too long")
}

fn outgoing_too_long() -> RivetError {
    RivetError::new(crate::error_codes::MESSAGE_OUTGOING_TOO_LONG, "Outgoing message too long")
}
