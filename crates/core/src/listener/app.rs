//! The application's fetch handler as the listener calls it: its request,
//! its answer, and the handler's type.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// A request for the application's fetch handler.
#[derive(Debug)]
pub struct AppRequest {
    pub method: String,
    pub url: String,
    pub headers: HashMap<String, String>,
    pub body: Bytes,
    /// Cancelled when the client went away.
    pub cancel: CancellationToken,
    /// Where the body goes when the answer is `stream: true`
    /// (docs/streams.md).
    pub response_body: crate::actor::http_body::ResponseBodyWriter,
}

#[derive(Debug)]
pub struct AppResponse {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Bytes,
    /// The body follows through the request's `response_body` (`body` is
    /// then ignored).
    pub stream: bool,
}

/// The application's fetch handler.
pub type Application = Arc<dyn Fn(AppRequest) -> BoxFuture<'static, anyhow::Result<AppResponse>> + Send + Sync>;
