//! Raw requests to the actor's `onRequest` (docs/wire-formats.md).

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use super::response;
use crate::actor::ActorTaskHandle;
use crate::actor::HttpRequest;
use crate::protocol::Encoding;

pub(super) async fn handle(
    handle: &ActorTaskHandle,
    request: EnvoyRequest,
    uri: String,
    body: Vec<u8>,
) -> anyhow::Result<EnvoyResponse> {
    let actor = handle.context().specifier();
    let encoding = Encoding::from_headers(&request.headers);
    let method = request.method.clone();
    let result = handle.http(HttpRequest { method: method.clone(), uri, headers: request.headers, body }).await;
    let mut response = match result {
        Ok(resp) => {
            let empty = method.eq_ignore_ascii_case("HEAD") || matches!(resp.status, 100..=199 | 204 | 304);
            EnvoyResponse {
                status: resp.status,
                headers: resp.headers,
                body: if empty { None } else { Some(resp.body) },
                body_stream: None,
            }
        }
        Err(err) => response::framework_error(encoding, &err, None, Some(&actor))?,
    };
    response::attach_actor_headers(&mut response, &actor);
    Ok(response)
}
