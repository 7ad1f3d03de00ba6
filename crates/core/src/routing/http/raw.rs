//! Raw requests to the actor's `onRequest` (docs/wire-formats.md). Bodies
//! stream both ways (docs/streams.md): of an upload the gateway streams,
//! the first [`INLINE_BODY`] bytes are read ahead (a small body arrives
//! whole) and the rest is handed over unread; the hook may answer
//! `stream: true` and write the response body afterwards. The response
//! head passes the output gate (docs/durability.md).

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpRequestBodyStream, HttpResponse as EnvoyResponse};

use super::response;
use crate::actor::http_body::{response_body_channel, RequestBodyReader, INLINE_BODY};
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
    let (body, rest) = inline_prefix(&mut request).await?;
    let body_stream = rest.map(RequestBodyReader::new);
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
    // The head waits for the save of what the hook changed (docs/durability.md).
    let result = match result {
        Ok(resp) => handle.output_gate().await.map(|()| resp),
        Err(err) => Err(err),
    };
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

/// Reads a streamed upload until it ends or [`INLINE_BODY`] bytes are in:
/// a small body reaches the hook whole in `body` (as it always did), a
/// larger one as that prefix plus the stream of the rest. A failed upload
/// fails the request (the envoy answers 500).
async fn inline_prefix(request: &mut EnvoyRequest) -> anyhow::Result<(Vec<u8>, Option<HttpRequestBodyStream>)> {
    let mut body = request.body.take().unwrap_or_default();
    let Some(mut stream) = request.body_stream.take() else { return Ok((body, None)) };
    while body.len() < INLINE_BODY {
        match stream.recv().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok((body, None)),
            Err(err) => anyhow::bail!("request body stream failed: {err}"),
        }
    }
    Ok((body, Some(stream)))
}
