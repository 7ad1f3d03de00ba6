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
//! so it cannot outlive it by more than one release).

use std::collections::VecDeque;
use std::sync::Mutex;

use futures::FutureExt;
use tokio_util::task::TaskTracker;

use super::context::WeakContext;
use super::save::SaveOptions;
use super::websocket::{self, Gate, GateHandle};
use super::ActorContext;
use crate::error::{catalog, RivetError};

/// Outputs waiting, at most. Events beyond it are refused (an actor that
/// emits faster than the engine saves); answers are always queued, since
/// their number is bounded by the requests the actor admits.
pub const MAX_QUEUED: usize = 4096;

/// What a release is told: `Ok` once the save covering the output is
/// acknowledged, else why the change may not survive.
pub type Released = Result<(), RivetError>;

type Release = Box<dyn FnOnce(Released) + Send>;

struct Entry {
    /// The save revision that covers the output; `None`: no save will.
    revision: Option<u64>,
    release: Release,
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

    /// Resolves once no drain runs, at most `bound` from now.
    pub async fn idle(&self, bound: std::time::Duration) {
        self.tasks.close();
        if tokio::time::timeout(bound, self.tasks.wait()).await.is_err() {
            tracing::warn!(waiting = self.len(), "gated outputs were still waiting when the generation stopped");
        }
        self.tasks.reopen();
    }
}

impl ActorContext {
    /// Runs `release` once the save covering everything this generation
    /// changed so far is acknowledged, after every output queued before it
    /// (at once when the outbox is not gated). `Err` (`actor.overloaded`)
    /// if an event finds the queue full; `release` is then not called.
    pub fn after_save(&self, kind: Kind, release: impl FnOnce(Released) + Send + 'static) -> Result<(), RivetError> {
        let outbox = self.outbox();
        let runtime = outbox.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok());
        let Some(runtime) = runtime.filter(|_| outbox.gated) else {
            release(Ok(()));
            return Ok(());
        };
        let mut queue = outbox.lock();
        if kind == Kind::Event && queue.entries.len() >= MAX_QUEUED {
            return Err(catalog::actor_overloaded("outbox", "send an event before its save", MAX_QUEUED));
        }
        let revision = self.request_save(SaveOptions { immediate: true, max_wait: None });
        queue.entries.push_back(Entry { revision, release: Box::new(release) });
        if !queue.draining {
            queue.draining = true;
            let ctx = self.clone();
            outbox.tasks.spawn_on(async move { ctx.drain_outbox().await }, &runtime);
        }
        Ok(())
    }

    async fn drain_outbox(self) {
        loop {
            let entry = {
                let mut queue = self.outbox().lock();
                match queue.entries.pop_front() {
                    Some(entry) => entry,
                    None => {
                        queue.draining = false;
                        return;
                    }
                }
            };
            let outcome = match entry.revision {
                Some(revision) => tokio::select! {
                    biased;
                    saved = self.persisted().saves().wait_for(revision) => saved.map_err(|err| RivetError::extract(&err)),
                    // A task that ended without closing its saves (it
                    // panicked) will not save again.
                    () = self.wait_for_generation_finished() => {
                        match self.persisted().saves().wait_for(revision).now_or_never() {
                            Some(saved) => saved.map_err(|err| RivetError::extract(&err)),
                            None => Err(catalog::actor_stopping(Some("the generation ended"))),
                        }
                    }
                },
                None => Err(catalog::actor_stopping(Some("the generation stopped before the save"))),
            };
            (entry.release)(outcome);
        }
    }
}

/// A raw WebSocket's frames wait behind the generation's gate, which the
/// socket holds weakly.
impl GateHandle for WeakContext {
    fn upgrade(&self) -> Option<Box<dyn Gate>> {
        let ctx = WeakContext::upgrade(self).filter(|ctx| ctx.outbox().is_gated())?;
        Some(Box::new(ctx))
    }
}

impl Gate for ActorContext {
    fn after_save(&self, answer: bool, release: websocket::Release) -> Result<(), RivetError> {
        ActorContext::after_save(self, if answer { Kind::Answer } else { Kind::Event }, release)
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
