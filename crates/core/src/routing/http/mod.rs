//! Gateway HTTP → actor (docs/wire-formats.md).
//!
//! [`handle_fetch`] classifies the path ([`route`]) and hands the request
//! to the raw handler (`/request[/…]` → `onRequest`, bodies streamed, see
//! docs/streams.md) or, with the body buffered, to the framework handler (actions, queues, `/`, `/health`, `/metadata`, a
//! structured 404). Every routed response carries the actor headers.

mod action;
mod framework;
#[cfg(test)]
mod proptests;
mod queue;
mod raw;
mod response;
mod route;
#[cfg(test)]
mod tests;

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use crate::dispatcher::Dispatcher;
use crate::protocol::Encoding;
use route::Route;

/// The engine forwards at most 20 MiB; a streamed body past that is refused.
pub const MAX_BUFFERED_BODY: usize = 20 * 1024 * 1024;

/// Answers one gateway request for `actor_id`. An `Err` (an undecodable
/// action or queue name, a failed body stream) becomes the envoy's 500
/// `envoy.fetch_failed`.
///
/// Admission is decided from the path and headers alone: a request the
/// actor refuses is answered before its body is read.
pub async fn handle_fetch(
    dispatcher: &Dispatcher,
    actor_id: &str,
    mut request: EnvoyRequest,
) -> anyhow::Result<EnvoyResponse> {
    let route = Route::classify(&request.path)?;
    let admitted = dispatcher.active_actor(actor_id);
    let handle = match (admitted, &route) {
        (Ok(handle), _) => handle,
        (Err(err), Route::Raw(_)) => return Ok(response::raw_admission_error(&err)),
        (Err(err), _) => return response::framework_error(Encoding::from_headers(&request.headers), &err, None, None),
    };
    match route {
        // Raw requests stream their bodies (docs/streams.md).
        Route::Raw(uri) => raw::handle(&handle, request, uri).await,
        route => {
            let body = collect_body(&mut request).await?;
            framework::handle(&handle, request, route, body).await
        }
    }
}

async fn collect_body(request: &mut EnvoyRequest) -> anyhow::Result<Vec<u8>> {
    let mut body = request.body.take().unwrap_or_default();
    if let Some(mut stream) = request.body_stream.take() {
        while let Some(chunk) = stream.recv().await.map_err(|e| anyhow::anyhow!("request body stream failed: {e:?}"))? {
            if body.len() + chunk.len() > MAX_BUFFERED_BODY {
                anyhow::bail!("request body exceeds {MAX_BUFFERED_BODY} bytes");
            }
            body.extend_from_slice(&chunk);
        }
    }
    Ok(body)
}
