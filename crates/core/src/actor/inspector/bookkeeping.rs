//! The inspector's bookkeeping for one generation, a part of its context
//! (docs/inspector.md): the actor's token and the counters behind
//! `inspectorSnapshot`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use tokio::sync::watch;

/// Per-generation inspector bookkeeping, held by the actor context.
pub struct ActorInspector {
    token: Mutex<Option<String>>,
    /// Moves on every state write; inspector sockets watch it.
    state_revision: watch::Sender<u64>,
    /// Moves when an inspector replayed the workflow; the sockets push
    /// the new history.
    workflow_revision: watch::Sender<u64>,
    /// The queue length last seen by a snapshot, and its revision: the
    /// revision moves whenever a snapshot finds a different length.
    queue_seen: Mutex<(usize, u64)>,
    connected_clients: AtomicU32,
}

impl Default for ActorInspector {
    fn default() -> Self {
        Self {
            token: Mutex::default(),
            state_revision: watch::channel(0).0,
            workflow_revision: watch::channel(0).0,
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
    pub fn subscribe_state(&self) -> watch::Receiver<u64> {
        self.state_revision.subscribe()
    }

    pub(crate) fn state_revision(&self) -> u64 {
        *self.state_revision.borrow()
    }

    /// Called after a replay changed the workflow's history.
    pub fn workflow_changed(&self) {
        self.workflow_revision.send_modify(|n| *n += 1);
    }

    /// Watches replays of the workflow.
    pub fn subscribe_workflow(&self) -> watch::Receiver<u64> {
        self.workflow_revision.subscribe()
    }

    /// The queue's revision for a snapshot that finds `queue_size`
    /// messages: it moves whenever the length differs from the last seen.
    pub(crate) fn queue_revision(&self, queue_size: usize) -> u64 {
        let mut seen = self.queue_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.0 != queue_size {
            *seen = (queue_size, seen.1 + 1);
        }
        seen.1
    }

    pub(crate) fn client_connected(&self) {
        self.connected_clients.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn client_disconnected(&self) {
        self.connected_clients.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn connected_clients(&self) -> u32 {
        self.connected_clients.load(Ordering::Relaxed)
    }

    pub(crate) fn token(&self) -> Option<String> {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn set_token(&self, token: String) {
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token);
    }
}
