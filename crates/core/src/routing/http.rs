//! Gateway HTTP → actor (spec http-routing §1, §2, §4, §5).
//!
//! `/request[/…]` goes to the actor's `onRequest`; `/`, `/health` and
//! `/metadata` are answered by the framework; everything else is a
//! structured 404. Every routed response carries the actor headers.

use std::collections::HashMap;

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, HttpResponse as EnvoyResponse};

use crate::actor::{ActorContext, HttpRequest};
use crate::dispatcher::Dispatcher;
use crate::error::{catalog, RivetError};
use crate::protocol::error_body;

/// The engine forwards at most 20 MiB; a streamed body past that is refused.
pub const MAX_BUFFERED_BODY: usize = 20 * 1024 * 1024;

#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// Raw request with the rewritten URI.
    Raw(String),
    Root,
    Health,
    Metadata,
    NotFound(String),
}

fn classify(path: &str) -> Route {
    if path == "/request" || path.starts_with("/request/") || path.starts_with("/request?") {
        let rest = &path["/request".len()..];
        let uri = match rest {
            "" | "/" => "/".to_string(),
            // The reference passes `?q` through literally; a leading `/`
            // makes it a valid origin-form URI for every HTTP library.
            r if r.starts_with('?') => format!("/{r}"),
            r => r.to_string(),
        };
        return Route::Raw(uri);
    }
    let bare = path.split('?').next().unwrap_or("");
    match bare {
        "" | "/" => Route::Root,
        "/health" => Route::Health,
        "/metadata" => Route::Metadata,
        _ => Route::NotFound(bare.to_string()),
    }
}

pub async fn handle_fetch(dispatcher: &Dispatcher, actor_id: &str, mut request: EnvoyRequest) -> anyhow::Result<EnvoyResponse> {
    let body = collect_body(&mut request).await?;
    match classify(&request.path) {
        Route::Raw(uri) => {
            let handle = match dispatcher.active_actor(actor_id) {
                Ok(handle) => handle,
                Err(err) => {
                    let e = RivetError::extract(&err);
                    return Ok(json_response(error_body::raw_status(&e), &error_body::raw_json(&e)));
                }
            };
            let ctx = handle.context().clone();
            let method = request.method.clone();
            let result = handle.http(HttpRequest { method: method.clone(), uri, headers: request.headers, body }).await;
            let response = match result {
                Ok(resp) => {
                    let empty = method.eq_ignore_ascii_case("HEAD") || matches!(resp.status, 100..=199 | 204 | 304);
                    EnvoyResponse {
                        status: resp.status,
                        headers: resp.headers,
                        body: if empty { None } else { Some(resp.body) },
                        body_stream: None,
                    }
                }
                Err(err) => framework_error(&err),
            };
            Ok(with_actor_headers(response, &ctx))
        }
        route => {
            let handle = match dispatcher.active_actor(actor_id) {
                Ok(handle) => handle,
                Err(err) => return Ok(framework_error(&err)),
            };
            let ctx = handle.context().clone();
            let get = request.method.eq_ignore_ascii_case("GET");
            let spec = ctx.specifier();
            let framework_error = |err: RivetError| framework_error(&err.with_actor(spec.clone()).into_anyhow());
            let response = match route {
                Route::Root if get => text(200, "This is an RivetKit actor.\n\nLearn more at https://rivetkit.org"),
                Route::Health if get => text(200, "ok"),
                Route::Metadata if get => json_response(200, &metadata_body()),
                Route::Root | Route::Health | Route::Metadata => {
                    framework_error(method_not_allowed(&request.method, &request.path))
                }
                Route::NotFound(path) => framework_error(
                    RivetError::new("actor", "not_found", format!("Actor route '{path}' was not found."))
                        .with_metadata(serde_json::json!({ "resource": "route", "id": path })),
                ),
                Route::Raw(_) => framework_error(catalog::invalid_state("raw route classified twice")),
            };
            Ok(with_actor_headers(response, &ctx))
        }
    }
}

fn method_not_allowed(method: &str, path: &str) -> RivetError {
    RivetError::new("actor", "method_not_allowed", "Method not allowed")
        .with_metadata(serde_json::json!({ "method": method, "path": path }))
}

fn metadata_body() -> serde_json::Value {
    let kind = if std::env::var("NODE_ENV").as_deref() == Ok("production") { "deployed" } else { "local" };
    serde_json::json!({ "runtime": "rivetkit", "version": env!("CARGO_PKG_VERSION"), "type": kind })
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

fn framework_error(err: &anyhow::Error) -> EnvoyResponse {
    let e = RivetError::extract(err);
    if !e.is_public() {
        tracing::warn!(error = %format!("{err:#}"), "request failed");
    }
    json_response(error_body::framework_status(&e), &error_body::framework_json(&e))
}

fn json_response(status: u16, body: &serde_json::Value) -> EnvoyResponse {
    EnvoyResponse {
        status,
        headers: HashMap::from([("content-type".to_string(), "application/json".to_string())]),
        body: Some(serde_json::to_vec(body).unwrap_or_default()),
        body_stream: None,
    }
}

fn text(status: u16, body: &str) -> EnvoyResponse {
    EnvoyResponse {
        status,
        headers: HashMap::from([("content-type".to_string(), "text/plain; charset=utf-8".to_string())]),
        body: Some(body.as_bytes().to_vec()),
        body_stream: None,
    }
}

fn with_actor_headers(mut response: EnvoyResponse, ctx: &ActorContext) -> EnvoyResponse {
    response.headers.insert("x-rivet-actor".into(), ctx.actor_id().to_string());
    response.headers.insert("x-rivet-actor-generation".into(), ctx.generation().to_string());
    let key = ctx.key().format();
    if !key.contains(['\r', '\n']) {
        response.headers.insert("x-rivet-actor-key".into(), key);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_routes_like_the_reference() {
        assert_eq!(classify("/request"), Route::Raw("/".into()));
        assert_eq!(classify("/request/"), Route::Raw("/".into()));
        assert_eq!(classify("/request/users/1?x=2"), Route::Raw("/users/1?x=2".into()));
        assert_eq!(classify("/request?foo=bar"), Route::Raw("/?foo=bar".into()));
        assert_eq!(classify("/requestfoo"), Route::NotFound("/requestfoo".into()));
        assert_eq!(classify("/"), Route::Root);
        assert_eq!(classify("/health"), Route::Health);
        assert_eq!(classify("/metadata?x"), Route::Metadata);
    }
}
