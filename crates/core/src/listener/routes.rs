//! RivetKit's own routes as the listener sees them, and the serverless
//! runtime as their usual implementation.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::serverless::{ServerlessRequest, ServerlessResponse, ServerlessRuntime};

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
