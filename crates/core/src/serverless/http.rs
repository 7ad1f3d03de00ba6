//! The plain request/response shapes of the serverless routes, shared by
//! the napi glue (`handleServerlessRequest`) and the native listener.
//!
//! A response body is either whole bytes or a bounded stream of chunks that
//! can end with a structured error (the SSE stream of `/start`). The stream
//! owns a drop guard on the request's cancellation token: whoever consumes
//! the body and goes away (the client hung up, JavaScript cancelled its
//! `ReadableStream`) ends the work behind it.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::RivetError;

/// One request to the serverless routes. Header names are lower case.
#[derive(Debug)]
pub struct ServerlessRequest {
    pub method: String,
    /// The absolute URL (`http://host/api/rivet/start`); only its path is routed.
    pub url: String,
    pub headers: HashMap<String, String>,
    pub body: Bytes,
    /// Cancelled when the caller gave up on the request.
    pub cancel: CancellationToken,
}

impl ServerlessRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// The URL's path (`/` when the URL cannot be parsed).
    pub fn path(&self) -> String {
        url_path(&self.url)
    }
}

/// The path of an absolute URL, or of a bare path; `/` when there is none.
pub fn url_path(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => parsed.path().to_owned(),
        Err(_) => {
            let path = url.split(['?', '#']).next().unwrap_or("");
            if path.starts_with('/') {
                path.to_owned()
            } else {
                "/".to_owned()
            }
        }
    }
}

/// A response: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct ServerlessResponse {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: ResponseBody,
}

#[derive(Debug)]
pub enum ResponseBody {
    Bytes(Bytes),
    Stream(BodyStream),
}

/// Chunks of a streamed body. Bounded: the producer waits for (or skips,
/// for pings) a consumer that does not keep up. Ends after an `Err`.
#[derive(Debug)]
pub struct BodyStream {
    rx: mpsc::Receiver<Result<Bytes, RivetError>>,
    _cancel_on_drop: DropGuard,
}

impl BodyStream {
    /// A channel of `capacity` chunks; dropping the stream cancels `cancel`.
    pub fn channel(capacity: usize, cancel: CancellationToken) -> (mpsc::Sender<Result<Bytes, RivetError>>, Self) {
        let (tx, rx) = mpsc::channel(capacity);
        (tx, Self { rx, _cancel_on_drop: cancel.drop_guard() })
    }

    /// The next chunk; `None` once the producer is done.
    pub async fn next(&mut self) -> Option<Result<Bytes, RivetError>> {
        self.rx.recv().await
    }
}

impl ServerlessResponse {
    pub fn bytes(status: u16, content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: HashMap::from([("content-type".to_owned(), content_type.to_owned())]),
            body: ResponseBody::Bytes(body.into()),
        }
    }

    pub fn text(status: u16, body: &str) -> Self {
        Self::bytes(status, "text/plain; charset=utf-8", body.to_owned())
    }

    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self::bytes(status, "application/json", serde_json::to_vec(body).unwrap_or_default())
    }

    pub fn empty(status: u16) -> Self {
        Self { status, headers: HashMap::new(), body: ResponseBody::Bytes(Bytes::new()) }
    }

    /// `{group, code, message, metadata}` with the status of [`error_status`].
    /// Message and metadata are not masked: these errors are about the
    /// request itself, for the engine or an operator to read.
    pub fn error(error: &RivetError) -> Self {
        let body = json!({
            "group": error.group,
            "code": error.code,
            "message": error.message,
            "metadata": error.metadata,
        });
        Self::json(error_status(error), &body)
    }

    /// The whole body, for responses that are not streamed (tests).
    pub fn body_bytes(&self) -> Option<&Bytes> {
        match &self.body {
            ResponseBody::Bytes(bytes) => Some(bytes),
            ResponseBody::Stream(_) => None,
        }
    }
}

/// Status of an error answered outside a stream (docs/serverless.md).
pub fn error_status(error: &RivetError) -> u16 {
    match (error.group.as_str(), error.code.as_str()) {
        ("auth", "forbidden") => 403,
        ("message", "incoming_too_long") => 413,
        ("registry", "shut_down") | ("engine", _) => 503,
        ("core", "internal_error") => 500,
        _ => 400,
    }
}

/// CORS headers for `req` (every answer of the routes carries them).
pub fn cors_headers(req: &ServerlessRequest) -> Vec<(String, String)> {
    let origin = req.header("origin").unwrap_or("*").to_owned();
    let mut headers = vec![
        ("access-control-allow-origin".to_owned(), origin.clone()),
        ("access-control-allow-credentials".to_owned(), "true".to_owned()),
        ("access-control-expose-headers".to_owned(), "*".to_owned()),
    ];
    if origin != "*" {
        headers.push(("vary".to_owned(), "Origin".to_owned()));
    }
    if req.method == "OPTIONS" {
        headers.push(("access-control-allow-methods".to_owned(), "GET, POST, PUT, DELETE, OPTIONS, PATCH".to_owned()));
        let requested = req.header("access-control-request-headers").unwrap_or("*").to_owned();
        headers.push(("access-control-allow-headers".to_owned(), requested));
        headers.push(("access-control-max-age".to_owned(), "86400".to_owned()));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_urls_and_bare_paths() {
        assert_eq!(url_path("http://h:3000/api/rivet/start?x=1"), "/api/rivet/start");
        assert_eq!(url_path("/api/rivet/health?x"), "/api/rivet/health");
        assert_eq!(url_path("garbage"), "/");
    }

    #[test]
    fn error_statuses() {
        let status = |group: &str, code: &str| error_status(&RivetError::foreign(group, code, ""));
        assert_eq!(status("request", "invalid"), 400);
        assert_eq!(status("message", "incoming_too_long"), 413);
        assert_eq!(status("auth", "forbidden"), 403);
        assert_eq!(status("registry", "shut_down"), 503);
        assert_eq!(status("config", "pool_mismatch"), 400);
    }

    #[test]
    fn cors_echoes_the_origin() {
        let req = ServerlessRequest {
            method: "OPTIONS".into(),
            url: "http://h/api/rivet/start".into(),
            headers: HashMap::from([("origin".into(), "https://app".into())]),
            body: Bytes::new(),
            cancel: CancellationToken::new(),
        };
        let headers: HashMap<_, _> = cors_headers(&req).into_iter().collect();
        assert_eq!(headers["access-control-allow-origin"], "https://app");
        assert_eq!(headers["vary"], "Origin");
        assert_eq!(headers["access-control-allow-headers"], "*");
    }

    #[tokio::test]
    async fn dropping_a_stream_cancels_its_request() {
        let cancel = CancellationToken::new();
        let (tx, mut stream) = BodyStream::channel(2, cancel.clone());
        tx.send(Ok(Bytes::from_static(b"a"))).await.unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap(), Bytes::from_static(b"a"));
        assert!(!cancel.is_cancelled());
        drop(stream);
        assert!(cancel.is_cancelled());
        assert!(tx.is_closed());
    }
}
