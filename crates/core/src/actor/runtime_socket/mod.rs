//! The actor runtime socket (experimental; docs/runtime-socket.md): a Unix
//! domain socket per actor generation through which another process on
//! this machine reads and writes the actor's SQLite database.
//!
//! An actor type opts in (`enableActorRuntimeSocket`); its generation then
//! provisions the socket on demand (`ctx.provisionActorRuntimeSocket()`,
//! RivetKit's `c.actorRuntimeSocket()`), once: later calls return the same
//! path. The socket lives in a private directory (mode 0700) under the
//! temporary directory, is itself mode 0600, and is closed and removed when
//! the generation stops, however it stops (sleep, destroy, lost, the host's
//! shutdown); the generation's stop waits for that.
//!
//! - [`wire`]: the messages and their encoding;
//! - [`frame`]: length-prefixed frames and the frame limit;
//! - [`server`]: the listener, connections, the bound on requests;
//! - [`lease`]: transactions spanning requests;
//! - `responder`: the writing side of a connection;
//! - `socket_file`: the socket's file and private directory;
//! - [`sql`]: values and errors between the wire and the database.

pub mod frame;
pub mod lease;
mod responder;
pub mod server;
mod socket_file;
mod sql;
pub mod wire;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::RivetError;
use crate::sqlite::ActorDatabase;

use socket_file::{bind, remove_socket_file};

/// How long the stop of a generation waits for the socket's tasks before
/// aborting them (they are first given [`server::DRAIN_TIMEOUT`]).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// `actor_runtime_socket.not_enabled`.
pub fn not_enabled() -> RivetError {
    RivetError::new(
        crate::error_codes::ACTOR_RUNTIME_SOCKET_NOT_ENABLED,
        "The actor runtime socket is not enabled for this actor (set options.enableActorRuntimeSocket).",
    )
}

/// `actor_runtime_socket.closed`: the generation is stopping or stopped.
pub fn closed() -> RivetError {
    RivetError::new(
        crate::error_codes::ACTOR_RUNTIME_SOCKET_CLOSED,
        "The actor runtime socket is closed for this actor generation.",
    )
}

/// `actor_runtime_socket.database_unavailable`: no SQLite database here.
pub fn database_unavailable() -> RivetError {
    RivetError::new(
        crate::error_codes::ACTOR_RUNTIME_SOCKET_DATABASE_UNAVAILABLE,
        "The actor runtime socket needs the actor's SQLite database, which is not available on this host.",
    )
}

/// One generation's socket.
pub struct RuntimeSocket {
    enabled: bool,
    state: Mutex<State>,
}

enum State {
    Unprovisioned,
    Serving(Serving),
    Closed,
}

struct Serving {
    path: PathBuf,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl RuntimeSocket {
    /// A socket not provisioned yet; `enabled` is the actor type's option.
    pub fn new(enabled: bool) -> Self {
        Self { enabled, state: Mutex::new(State::Unprovisioned) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Where it listens, while it does.
    pub fn path(&self) -> Option<String> {
        match &*self.state() {
            State::Serving(s) => Some(s.path.to_string_lossy().into_owned()),
            _ => None,
        }
    }

    /// Starts serving `db` (once) and returns the socket's path. Must run
    /// inside the Tokio runtime.
    pub fn provision(&self, db: &ActorDatabase) -> anyhow::Result<String> {
        if !self.enabled {
            return Err(not_enabled().into_anyhow());
        }
        let mut state = self.state();
        match &*state {
            State::Serving(s) => return Ok(s.path.to_string_lossy().into_owned()),
            State::Closed => return Err(closed().into_anyhow()),
            State::Unprovisioned => {}
        }
        if db.is_shut() {
            return Err(closed().into_anyhow());
        }
        let (listener, path) = bind()?;
        let cancel = CancellationToken::new();
        let task = tokio::spawn(server::serve_listener(
            listener,
            path.clone(),
            db.clone(),
            cancel.clone(),
            frame::configured_max_frame_bytes(),
        ));
        tracing::debug!(path = %path.display(), "actor runtime socket listening");
        let shown = path.to_string_lossy().into_owned();
        *state = State::Serving(Serving { path, cancel, task });
        Ok(shown)
    }

    /// Closes it for good: no new connection, open ones end (their leases
    /// roll back), the file is removed. Idempotent; later provisioning is
    /// refused with `actor_runtime_socket.closed`.
    pub async fn shutdown(&self) {
        let serving = match std::mem::replace(&mut *self.state(), State::Closed) {
            State::Serving(serving) => serving,
            _ => return,
        };
        let Serving { path, cancel, mut task } = serving;
        cancel.cancel();
        if tokio::time::timeout(SHUTDOWN_TIMEOUT, &mut task).await.is_err() {
            tracing::warn!("actor runtime socket did not close in time; aborting it");
            task.abort();
            let _ = task.await;
        }
        remove_socket_file(&path);
        tracing::debug!(path = %path.display(), "actor runtime socket closed");
    }

    /// The same without waiting (no runtime to wait on, or dropped).
    pub fn shutdown_now(&self) {
        if let State::Serving(Serving { path, cancel, task }) = std::mem::replace(&mut *self.state(), State::Closed) {
            cancel.cancel();
            task.abort();
            remove_socket_file(&path);
        }
    }
}

impl Drop for RuntimeSocket {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}
