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

mod app;
mod config;
mod request;
mod routes;
mod static_files;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::RivetError;
pub use app::{AppRequest, AppResponse, Application};
pub use config::ListenerConfig;
use request::Shared;
pub use routes::Routes;

/// How long connections may take to finish after shutdown.
pub const CONNECTIONS_WAIT: Duration = Duration::from_secs(60);

/// Binds the listener; `serve` then runs it. Split so a host learns of a
/// port in use before anything else starts.
pub async fn bind(config: &ListenerConfig) -> anyhow::Result<TcpListener> {
    let host = config.host.as_deref().unwrap_or("0.0.0.0");
    TcpListener::bind((host, config.port)).await.map_err(|err| {
        RivetError::new(
            crate::error_codes::LISTENER_BIND_FAILED,
            format!("Cannot listen on {host}:{}: {err}", config.port),
        )
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
