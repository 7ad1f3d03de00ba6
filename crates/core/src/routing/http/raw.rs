//! Raw requests to the actor's `onRequest` (docs/wire-formats.md). Bodies
//! stream both ways (docs/streams.md): an upload the gateway streams is
//! handed over unread, and the hook may answer `stream: true` and write the
//! response body afterwards.

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use super::response;
use crate::actor::http_body::{response_body_channel, RequestBodyReader};
use crate::actor::ActorTaskHandle;
use crate::actor::HttpRequest;
use crate::protocol::Encoding;

pub(super) async fn handle(
    handle: &ActorTaskHandle,
    mut request: EnvoyRequest,
    uri: String,
) -> anyhow::Result<EnvoyResponse> {
    let actor = handle.context().specifier();
    let encoding = Encoding::from_headers(&request.headers);
    let method = request.method.clone();
    let body = request.body.take().unwrap_or_default();
    let body_stream = request.body_stream.take().map(RequestBodyReader::new);
    let (writer, receiver) = response_body_channel();
    let hook_request = HttpRequest {
        method: method.clone(),
        uri,
        headers: request.headers,
        body,
        body_stream: body_stream.clone(),
        response_body: Some(writer),
    };
    let result = handle.http(hook_request).await;
    let streaming = matches!(&result, Ok(resp) if resp.stream);
    if let (Some(reader), false) = (&body_stream, streaming) {
        // The answer is complete: the rest of the upload is not wanted.
        reader.cancel().await;
    }
    let mut response = match result {
        Ok(resp) => {
            let empty = method.eq_ignore_ascii_case("HEAD") || matches!(resp.status, 100..=199 | 204 | 304);
            let (body, body_stream) = match (empty, resp.stream) {
                (true, _) => (None, None),
                (false, true) => (None, Some(receiver.into_envoy())),
                (false, false) => (Some(resp.body), None),
            };
            EnvoyResponse { status: resp.status, headers: resp.headers, body, body_stream }
        }
        Err(err) => response::framework_error(encoding, &err, None, Some(&actor))?,
    };
    response::attach_actor_headers(&mut response, &actor);
    Ok(response)
}
