//! The gated outbox (docs/durability.md, "The output gate"): events,
//! broadcasts, connection answers and raw WebSocket frames of an actor with
//! state leave the host in the order they were produced, each once a save
//! that began after it was produced has been acknowledged by the engine.
//!
//! Why one ordered queue per generation: an action's event and its answer
//! travel on the same client socket, and the client may read the event
//! first; were each released by its own waiter, two outputs covered by the
//! same save could overtake each other. Here a single drain releases them
//! in order. Group commit comes from the save loop: every output queued
//! while a save runs is covered by the next one.
//!
//! The drain runs only while the queue holds something; it is tracked, and
//! the generation's stop waits for it (its saves end with the generation,
//! so it cannot outlive it by more than one release). It is the context's
//! ([`super::output_gate`]): this file holds only the queue, a part of the
//! context.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio_util::task::TaskTracker;

use crate::error::{catalog, RivetError};

/// Outputs waiting, at most. Events beyond it are refused (an actor that
/// emits faster than the engine saves); answers are always queued, since
/// their number is bounded by the requests the actor admits.
pub const MAX_QUEUED: usize = 4096;

/// What a release is told: `Ok` once the save covering the output is
/// acknowledged, else why the change may not survive.
pub type Released = Result<(), RivetError>;

pub type Release = Box<dyn FnOnce(Released) + Send>;

pub(crate) struct Entry {
    /// The save revision that covers the output; `None`: no save will.
    pub(crate) revision: Option<u64>,
    pub(crate) release: Release,
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    draining: bool,
}

pub struct Outbox {
    /// Off: every output is released at once (the gate is off, or the
    /// actor has no state to save).
    gated: bool,
    queue: Mutex<Queue>,
    tasks: TaskTracker,
    /// Where the drain runs: outputs are queued from the JavaScript thread,
    /// which is no runtime's, so the handle is taken when the generation
    /// is created (on the runtime).
    runtime: Option<tokio::runtime::Handle>,
}

/// Which outputs may be refused when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An answer to a request: always queued.
    Answer,
    /// An event or a raw frame: refused over [`MAX_QUEUED`].
    Event,
}

impl Outbox {
    pub fn new(gated: bool) -> Self {
        Self {
            gated,
            queue: Mutex::default(),
            tasks: TaskTracker::new(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    pub fn is_gated(&self) -> bool {
        self.gated
    }

    /// Outputs waiting for their save.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where a drain would run; `None` when the gate is off (or there is no
    /// runtime to run one): outputs are then released at once.
    pub(crate) fn drain_runtime(&self) -> Option<tokio::runtime::Handle> {
        let runtime = self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok());
        runtime.filter(|_| self.gated)
    }

    /// Queues `release` behind the save `request_save` asks for, and, if no
    /// drain runs, starts `drain` on `runtime`. `Err` (`actor.overloaded`)
    /// if an event finds the queue full; `release` is then not called.
    pub(crate) fn push<F>(
        &self,
        kind: Kind,
        runtime: &tokio::runtime::Handle,
        request_save: impl FnOnce() -> Option<u64>,
        release: Release,
        drain: impl FnOnce() -> F,
    ) -> Result<(), RivetError>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut queue = self.lock();
        if kind == Kind::Event && queue.entries.len() >= MAX_QUEUED {
            return Err(catalog::actor_overloaded("outbox", "send an event before its save", MAX_QUEUED));
        }
        let revision = request_save();
        queue.entries.push_back(Entry { revision, release });
        if !queue.draining {
            queue.draining = true;
            self.tasks.spawn_on(drain(), runtime);
        }
        Ok(())
    }

    /// The next output to release, oldest first; `None` ends the drain.
    pub(crate) fn pop(&self) -> Option<Entry> {
        let mut queue = self.lock();
        let entry = queue.entries.pop_front();
        if entry.is_none() {
            queue.draining = false;
        }
        entry
    }

    /// Resolves once no drain runs, at most `bound` from now.
    pub async fn idle(&self, bound: std::time::Duration) {
        self.tasks.close();
        if tokio::time::timeout(bound, self.tasks.wait()).await.is_err() {
            tracing::warn!(waiting = self.len(), "gated outputs were still waiting when the generation stopped");
        }
        self.tasks.reopen();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ungated_outbox_releases_at_once() {
        let outbox = Outbox::new(false);
        assert!(!outbox.is_gated());
        assert!(outbox.is_empty());
    }
}
