//! The inspector's native side: the per-actor bearer token, its check, and
//! the counters behind `inspectorSnapshot` (docs/inspector.md).
//!
//! The inspector's HTTP routes are served by the JavaScript runtime inside
//! `onRequest`; it asks us whether a bearer token is valid and for a summary
//! of the actor. The token is created on an actor's first start and kept at
//! the exact actor-KV key `[3]`, where the dashboard reads it through the
//! engine. Scheduled events share the `[3, ..]` prefix, so their prefix scan
//! skips that exact key.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, RwLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::actor::ActorContext;
use crate::error::RivetError;

/// The exact actor-KV key of the inspector token (defined with every key).
pub use crate::actor::keys::INSPECTOR_TOKEN as TOKEN_KEY;
/// Random bytes in a token (base64url without padding on the wire).
const TOKEN_BYTES: usize = 32;
/// A token every actor accepts, for tests only (the reference's name).
pub const TEST_TOKEN_ENV: &str = crate::env::_RIVET_TEST_INSPECTOR_TOKEN;

/// Per-generation inspector bookkeeping, held by the actor context.
pub struct ActorInspector {
    token: Mutex<Option<String>>,
    /// Moves on every state write; inspector sockets watch it.
    state_revision: tokio::sync::watch::Sender<u64>,
    /// Moves when an inspector replayed the workflow; the sockets push
    /// the new history.
    workflow_revision: tokio::sync::watch::Sender<u64>,
    /// The queue length last seen by a snapshot, and its revision: the
    /// revision moves whenever a snapshot finds a different length.
    queue_seen: Mutex<(usize, u64)>,
    connected_clients: AtomicU32,
}

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

impl Default for ActorInspector {
    fn default() -> Self {
        Self {
            token: Mutex::default(),
            state_revision: tokio::sync::watch::channel(0).0,
            workflow_revision: tokio::sync::watch::channel(0).0,
            queue_seen: Mutex::default(),
            connected_clients: AtomicU32::new(0),
        }
    }
}

impl ActorInspector {
    /// Called on every state write.
    pub fn state_changed(&self) {
        self.state_revision.send_modify(|n| *n += 1);
    }

    /// Watches the state revision.
    pub fn subscribe_state(&self) -> tokio::sync::watch::Receiver<u64> {
        self.state_revision.subscribe()
    }

    /// Called after a replay changed the workflow's history.
    pub fn workflow_changed(&self) {
        self.workflow_revision.send_modify(|n| *n += 1);
    }

    /// Watches replays of the workflow.
    pub fn subscribe_workflow(&self) -> tokio::sync::watch::Receiver<u64> {
        self.workflow_revision.subscribe()
    }

    fn token(&self) -> Option<String> {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_token(&self, token: String) {
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token);
    }
}

/// Counts one connected inspector client while alive.
pub struct ClientGuard(ActorContext);

impl ClientGuard {
    pub fn new(ctx: &ActorContext) -> Self {
        ctx.inspector().connected_clients.fetch_add(1, Ordering::Relaxed);
        Self(ctx.clone())
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.inspector().connected_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Loads the actor's token, creating and storing one if it has none yet.
pub async fn ensure_token(ctx: &ActorContext) -> anyhow::Result<()> {
    let stored = ctx.link().kv_get(ctx.actor_id(), vec![TOKEN_KEY.to_vec()]).await?;
    let existing = stored
        .into_iter()
        .next()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|token| !token.is_empty());
    let token = match existing {
        Some(token) => token,
        None => {
            let token = generate_token()?;
            ctx.link()
                .kv_put(ctx.actor_id(), vec![(TOKEN_KEY.to_vec(), token.as_bytes().to_vec())], ctx.lost_token().clone())
                .await?;
            tracing::debug!(actor_id = %ctx.actor_id(), "created the actor's inspector token");
            token
        }
    };
    ctx.inspector().set_token(token);
    Ok(())
}

fn generate_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::getrandom(&mut bytes).map_err(|err| anyhow::anyhow!("no randomness for the inspector token: {err}"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn unauthorized() -> RivetError {
    RivetError::new("inspector", "unauthorized", "Inspector request requires a valid bearer token")
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
    let queue_revision = {
        let mut seen = inspector.queue_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.0 != queue_size {
            *seen = (queue_size, seen.1 + 1);
        }
        seen.1
    };
    InspectorSnapshot {
        state_revision: *inspector.state_revision.borrow(),
        connections_revision: ctx.conns().revision(),
        queue_revision,
        active_connections: ctx.conns().len(),
        queue_size,
        connected_clients: inspector.connected_clients.load(Ordering::Relaxed),
    }
}

pub mod answers;
#[cfg(test)]
mod tests;
pub mod versions;
pub mod wire;
pub mod ws;
