//! One request through the listener: read it (bounded), pick who answers
//! (module docs of [`super`]), and turn the answer into a hyper response
//! whose streamed body flushes chunk by chunk.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use rivet_envoy_client::config::ResponseChunk;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::app::{AppRequest, AppResponse, Application};
use super::config::ListenerConfig;
use super::routes::Routes;
use super::static_files;
use crate::actor::http_body::{response_body_channel, ResponseBodyReceiver};
use crate::serverless::start::check_size;
use crate::serverless::{ResponseBody, ServerlessRequest, ServerlessResponse};

pub(super) type Body = BoxBody<Bytes, std::io::Error>;

/// What every request of one listener answers with.
pub(super) struct Shared {
    pub(super) config: ListenerConfig,
    pub(super) routes: Arc<dyn Routes>,
    pub(super) application: Option<Application>,
}

pub(super) async fn answer(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let limit = shared.config.max_body_bytes;
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            let response = if err.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                let error = check_size(limit.saturating_add(1), limit).expect_err("over the limit");
                ServerlessResponse::error(&error)
            } else {
                tracing::debug!(error = %err, "could not read a request body");
                ServerlessResponse::text(400, "Bad Request")
            };
            return into_hyper(response, None);
        }
    };
    let path = parts.uri.path().to_owned();
    let url = request_url(&parts);
    let headers = joined_headers(&parts.headers);
    let method = parts.method.as_str().to_owned();
    // Cancelled when the response (or its stream) is dropped: the client
    // went away, or the answer is complete.
    let cancel = CancellationToken::new();

    if shared.routes.owns(&path) {
        let req = ServerlessRequest { method, url, headers, body, cancel: cancel.clone() };
        return into_hyper(shared.routes.handle(req).await, Some(cancel));
    }
    if let Some(dir) = &shared.config.public_dir {
        if method == "GET" || method == "HEAD" {
            if let Some((bytes, content_type)) = static_files::lookup(dir, &path).await {
                let mut response = ServerlessResponse::bytes(200, content_type, bytes);
                if method == "HEAD" {
                    response.body = ResponseBody::Bytes(Bytes::new());
                }
                return into_hyper(response, None);
            }
        }
    }
    if let Some(application) = &shared.application {
        let guard = cancel.clone().drop_guard();
        let (response_body, receiver) = response_body_channel();
        let result = application(AppRequest { method, url, headers, body, cancel, response_body }).await;
        return match result {
            Ok(app) if app.stream => streamed(app, receiver, guard),
            Ok(app) => {
                drop(guard);
                let response = ServerlessResponse {
                    status: app.status,
                    headers: app.headers,
                    body: ResponseBody::Bytes(app.body),
                };
                into_hyper(response, None)
            }
            Err(err) => {
                drop(guard);
                tracing::error!(error = %format!("{err:#}"), "the application's fetch handler failed");
                into_hyper(ServerlessResponse::text(500, "Internal Server Error"), None)
            }
        };
    }
    let req = ServerlessRequest { method, url, headers, body, cancel: cancel.clone() };
    into_hyper(shared.routes.handle(req).await, Some(cancel))
}

/// The application's streamed answer: its head at once, then the chunks
/// it writes as they come. The request's cancel token fires (through
/// `guard`) only once hyper drops the body: delivered, or the client left,
/// which also resolves the writer's `cancelled()`.
fn streamed(app: AppResponse, receiver: ResponseBodyReceiver, guard: DropGuard) -> Response<Body> {
    let frames = futures::stream::unfold((receiver, Some(guard)), |(mut receiver, guard)| async move {
        guard.as_ref()?;
        let item = match receiver.recv().await {
            Some(ResponseChunk::Data { data, finish: false }) => Ok(Frame::data(Bytes::from(data))),
            Some(ResponseChunk::Data { data, finish: true }) => {
                // The last chunk; the stream ends after it.
                return Some((Ok(Frame::data(Bytes::from(data))), (receiver, None)));
            }
            Some(ResponseChunk::Error(message)) => {
                tracing::warn!(error = %message, "the application's streamed body ended with an error");
                Err(std::io::Error::other(message))
            }
            None => Err(std::io::Error::other("the application's body stream closed before its end")),
        };
        let next = if item.is_ok() { guard } else { None };
        Some((item, (receiver, next)))
    });
    let mut builder = Response::builder().status(app.status);
    for (name, value) in &app.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder.body(StreamBody::new(frames).boxed()).unwrap_or_else(|err| {
        tracing::warn!(error = %err, "invalid response head; answering 500");
        into_hyper(ServerlessResponse::text(500, "Internal Server Error"), None)
    })
}

/// The absolute URL the client asked for: scheme from `x-forwarded-proto`
/// (`http`/`https` only), host from `x-forwarded-host`, else `host`.
fn request_url(parts: &hyper::http::request::Parts) -> String {
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim());
    let scheme = match header("x-forwarded-proto").and_then(|v| v.split(',').next()).map(str::trim) {
        Some("https") => "https",
        _ => "http",
    };
    let host = header("x-forwarded-host")
        .and_then(|v| v.split(',').next())
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .or_else(|| header("host"))
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))
        .unwrap_or("localhost");
    let path = parts.uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    format!("{scheme}://{host}{path}")
}

/// Lower-case names; a repeated header's values joined with `", "`.
fn joined_headers(headers: &hyper::HeaderMap) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::new();
    for (name, value) in headers {
        let Ok(value) = value.to_str() else { continue };
        out.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(value);
            })
            .or_insert_with(|| value.to_owned());
    }
    out
}

/// A hyper response. A streamed body is sent chunk by chunk as the
/// producer writes it; `cancel` is cancelled once a whole body was handed
/// over (a stream cancels through its own guard when hyper drops it).
fn into_hyper(response: ServerlessResponse, cancel: Option<CancellationToken>) -> Response<Body> {
    let mut builder = Response::builder().status(response.status);
    for (name, value) in &response.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body: Body = match response.body {
        ResponseBody::Bytes(bytes) => {
            if let Some(cancel) = cancel {
                cancel.cancel();
            }
            Full::new(bytes).map_err(|never| match never {}).boxed()
        }
        ResponseBody::Stream(stream) => {
            let frames = futures::stream::unfold(stream, |mut stream| async move {
                let item = stream.next().await?;
                let frame = item.map(Frame::data).map_err(|err| {
                    tracing::warn!(error = %err, "streamed response ended with an error");
                    std::io::Error::other(err.to_string())
                });
                Some((frame, stream))
            });
            StreamBody::new(frames).boxed()
        }
    };
    builder.body(body).unwrap_or_else(|err| {
        tracing::warn!(error = %err, "invalid response head; answering 500");
        let mut response = Response::new(
            Full::new(Bytes::from_static(b"Internal Server Error")).map_err(|never| match never {}).boxed(),
        );
        *response.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        response
    })
}
