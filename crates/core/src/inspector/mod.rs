//! The inspector's native side: the per-actor bearer token, its check, and
//! the counters behind `inspectorSnapshot` (docs/inspector.md).
//!
//! The inspector's HTTP routes are served by the JavaScript runtime inside
//! `onRequest`; it asks us whether a bearer token is valid and for a summary
//! of the actor. What each generation holds (the token, the counters) and
//! the token's creation live with the actor, in [`crate::actor::inspector`].

use std::sync::RwLock;

use crate::actor::ActorContext;
use crate::error::RivetError;

pub use crate::actor::inspector::{ensure_token, ActorInspector};
/// The exact actor-KV key of the inspector token (defined with every key).
pub use crate::actor::keys::INSPECTOR_TOKEN as TOKEN_KEY;

/// A token every actor accepts, for tests only (the reference's name).
pub const TEST_TOKEN_ENV: &str = crate::env::_RIVET_TEST_INSPECTOR_TOKEN;

/// What `inspectorSnapshot` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InspectorSnapshot {
    pub state_revision: u64,
    pub connections_revision: u64,
    pub queue_revision: u64,
    pub active_connections: usize,
    pub queue_size: usize,
    pub connected_clients: u32,
}

/// Counts one connected inspector client while alive.
pub struct ClientGuard(ActorContext);

impl ClientGuard {
    pub fn new(ctx: &ActorContext) -> Self {
        ctx.inspector().client_connected();
        Self(ctx.clone())
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.inspector().client_disconnected();
    }
}

fn unauthorized() -> RivetError {
    RivetError::new(crate::error_codes::INSPECTOR_UNAUTHORIZED, "Inspector request requires a valid bearer token")
}

static TEST_TOKEN: RwLock<Option<String>> = RwLock::new(None);

/// The serve config's test token (`inspectorTestToken`, set by RivetKit's
/// test mode); `None` or empty clears it.
pub fn set_test_token(token: Option<String>) {
    *TEST_TOKEN.write().unwrap_or_else(|p| p.into_inner()) = token.filter(|t| !t.is_empty());
}

/// The environment's test token, else the serve config's.
fn test_token() -> Option<String> {
    crate::env::get(TEST_TOKEN_ENV)
        .filter(|t| !t.is_empty())
        .or_else(|| TEST_TOKEN.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Accepts `bearer` if it is the actor's token, or the test token when one
/// is configured (it then replaces the actor's).
pub fn verify(ctx: &ActorContext, bearer: Option<&str>) -> Result<(), RivetError> {
    let bearer = bearer.filter(|t| !t.is_empty()).ok_or_else(unauthorized)?;
    let expected = expected_token(ctx).ok_or_else(unauthorized)?;
    if constant_time_eq(bearer.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(unauthorized())
    }
}

/// The token a bearer must match: the test token when one is configured,
/// else the actor's.
pub(crate) fn expected_token(ctx: &ActorContext) -> Option<String> {
    test_token().or_else(|| ctx.inspector().token())
}

/// Compares without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The actor's counters for `inspectorSnapshot`.
pub fn snapshot(ctx: &ActorContext) -> InspectorSnapshot {
    let inspector = ctx.inspector();
    let queue_size = ctx.queue().len();
    let queue_revision = inspector.queue_revision(queue_size);
    InspectorSnapshot {
        state_revision: inspector.state_revision(),
        connections_revision: ctx.conns().revision(),
        queue_revision,
        active_connections: ctx.conns().len(),
        queue_size,
        connected_clients: inspector.connected_clients(),
    }
}

pub mod answers;
#[cfg(test)]
mod tests;
pub mod versions;
pub mod wire;
pub mod ws;
