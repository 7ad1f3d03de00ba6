//! The native HTTP listener behind `registry.listen()` (docs/serverless.md).
//!
//! An HTTP/1.1 server (hyper) that answers, in this order:
//! 1. RivetKit's own routes under the base path (`/start`, `/health`,
//!    `/metadata`, `/metrics`, the base path itself), through [`Routes`];
//! 2. a file of the public directory, if one is configured and has it;
//! 3. the application's fetch handler, if there is one;
//! 4. [`Routes`] again, which answers what is left (a 404, or `/health`
//!    and the like at the origin root in serverless mode).
//!
//! It stops accepting when the shutdown token is cancelled, lets every
//! connection finish its response in flight (an event stream ends when the
//! runtime's drain stopped its actor), and returns once they are closed or
//! after [`CONNECTIONS_WAIT`].

mod request;
mod static_files;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::RivetError;
use crate::serverless::{ServerlessRequest, ServerlessResponse, ServerlessRuntime};

/// How long connections may take to finish after shutdown.
pub const CONNECTIONS_WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// Address to bind; `0.0.0.0` when absent.
    pub host: Option<String>,
    pub port: u16,
    /// Static files, served below RivetKit's routes.
    pub public_dir: Option<PathBuf>,
    /// Largest request body read (413 above).
    pub max_body_bytes: usize,
}

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

/// RivetKit's routes as the listener sees them.
pub trait Routes: Send + Sync + 'static {
    /// Whether `path` is one of RivetKit's routes (answered before the
    /// static files and the application).
    fn owns(&self, path: &str) -> bool;
    /// Answers a request: one of the owned routes, or anything nothing else took.
    fn handle(&self, req: ServerlessRequest) -> BoxFuture<'static, ServerlessResponse>;
}

impl Routes for Arc<ServerlessRuntime> {
    fn owns(&self, path: &str) -> bool {
        ServerlessRuntime::owns(self, path)
    }
    fn handle(&self, req: ServerlessRequest) -> BoxFuture<'static, ServerlessResponse> {
        let runtime = self.clone();
        Box::pin(async move { runtime.handle(req).await })
    }
}

struct Shared {
    config: ListenerConfig,
    routes: Arc<dyn Routes>,
    application: Option<Application>,
}

/// Binds the listener; `serve` then runs it. Split so a host learns of a
/// port in use before anything else starts.
pub async fn bind(config: &ListenerConfig) -> anyhow::Result<TcpListener> {
    let host = config.host.as_deref().unwrap_or("0.0.0.0");
    TcpListener::bind((host, config.port)).await.map_err(|err| {
        RivetError::new("listener", "bind_failed", format!("Cannot listen on {host}:{}: {err}", config.port))
            .with_metadata(serde_json::json!({ "host": host, "port": config.port }))
            .into_anyhow()
    })
}

/// Serves on `listener` until `shutdown` is cancelled (see the module docs).
pub async fn serve(
    listener: TcpListener,
    config: ListenerConfig,
    routes: Arc<dyn Routes>,
    application: Option<Application>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let local = listener.local_addr().map_or_else(|_| "an unknown address".to_owned(), |a: SocketAddr| a.to_string());
    tracing::info!(address = %local, "listening");
    let shared = Arc::new(Shared { config, routes, application });
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: wait, then go on.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(request::answer(&shared, req).await) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(err) = result {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(CONNECTIONS_WAIT, connections.wait()).await.is_err() {
        tracing::warn!("connections still open after the listener stopped");
    }
    tracing::info!(address = %local, "listener stopped");
    Ok(())
}

#[cfg(test)]
mod tests;
