//! `POST /queue/<name>` (docs/wire-formats.md): method, size and body
//! checks, then one trip into the actor (a transient connection, the
//! factory's `onQueueSend`, which checks the queue's schema and permission
//! and sends or enqueues and waits), bounded by the action timeout as the
//! reference bounds it; the answer in the request's encoding.

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use super::action::method_not_allowed;
use super::response;
use crate::actor::{ActorTaskHandle, HttpRequest, QueueSendRequest};
use crate::error::{catalog, RivetError};
use crate::protocol::action::{conn_params, CONN_PARAMS_HEADER};
use crate::protocol::encoding::header;
use crate::protocol::queue::{decode_request, encode_response};
use crate::protocol::Encoding;
use crate::routing::failure::{self, Call, Transport};

const BAD_REQUEST: u16 = 400;

pub(super) async fn handle(
    handle: &ActorTaskHandle,
    request: &EnvoyRequest,
    name: String,
    body: Vec<u8>,
    encoding: Encoding,
) -> anyhow::Result<EnvoyResponse> {
    let actor = handle.context().specifier();
    let fail =
        |err: anyhow::Error, status: Option<u16>| response::framework_error(encoding, &err, status, Some(&actor));

    if request.method != "POST" {
        return fail(method_not_allowed(&request.method, &request.path).into_anyhow(), None);
    }
    let config = handle.config();
    if body.len() > config.max_incoming_message_size {
        return fail(
            too_long(crate::error_codes::MESSAGE_INCOMING_TOO_LONG, "Incoming message too long"),
            Some(BAD_REQUEST),
        );
    }
    let decoded = match decode_request(encoding, &body) {
        Ok(decoded) => decoded,
        Err(err) => return fail(err.context("decode HTTP queue request"), Some(BAD_REQUEST)),
    };
    let params = match conn_params(header(&request.headers, CONN_PARAMS_HEADER)) {
        Ok(params) => params,
        Err(err) => return fail(err.context("decode HTTP queue connection params"), Some(BAD_REQUEST)),
    };
    let hook_request = HttpRequest {
        method: request.method.clone(),
        uri: request.path.clone(),
        headers: request.headers.clone(),
        body: Vec::new(),
        ..Default::default()
    };
    let send =
        QueueSendRequest { name: name.clone(), body: decoded.body, wait: decoded.wait, timeout_ms: decoded.timeout_ms };
    let sent = tokio::time::timeout(config.action_timeout, handle.queue_send(params, hook_request, send)).await;
    let result = match sent.unwrap_or_else(|_| Err(catalog::action_timed_out().into_anyhow())) {
        Ok(result) => result,
        Err(err) => {
            failure::log_failed_call(handle.context(), Transport::Http, Call::QueueSend(&name), &err);
            return response::reported_error(encoding, &err, None, Some(&actor));
        }
    };
    let body = encode_response(encoding, result.status.as_str(), result.response)?;
    if body.len() > config.max_outgoing_message_size {
        return fail(
            too_long(crate::error_codes::MESSAGE_OUTGOING_TOO_LONG, "Outgoing message too long"),
            Some(BAD_REQUEST),
        );
    }
    Ok(response::bytes(200, encoding.content_type(), body))
}

fn too_long(code: crate::error_codes::ErrorCode, message: &str) -> anyhow::Error {
    RivetError::new(code, message).into_anyhow()
}
