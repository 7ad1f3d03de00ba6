//! The output gate (docs/durability.md): an answer that may reflect a
//! state change leaves the host only once a save that began after the work
//! finished has been acknowledged by the engine.
//!
//! Why "began after": RivetKit asks for a save one event-loop turn after a
//! mutation (it coalesces them), so when an action's result reaches us its
//! save request may not have. A save that begins later asks the host for
//! its state (`serializeState`) after the action ran, so it covers it
//! whatever the order. Group commit falls out of the save loop: one save
//! runs at a time, and every gate opened while it runs is covered by the
//! next one. A save whose record did not change writes nothing.
//!
//! Events, broadcasts and raw WebSocket frames wait the same way, in the
//! generation's ordered outbox ([`super::outbox`]; [`ActorContext::after_save`]).

use std::time::Duration;

use futures::FutureExt;

use super::config::OutputGate;
use super::context::{ActorContext, WeakContext};
use super::outbox::{Kind, Released};
use super::save::SaveOptions;
use super::task::ActorTaskHandle;
use super::websocket::{self, Gate, GateHandle};
use crate::error::{catalog, RivetError};

impl ActorTaskHandle {
    /// Resolves once the answer to work that just finished may leave: at
    /// once with the gate off or for an actor without state, else when a
    /// save begun after this call is acknowledged. An error means the
    /// answer must not claim success: the change may not survive.
    pub async fn output_gate(&self) -> anyhow::Result<()> {
        let config = self.config();
        if config.output_gate == OutputGate::Off || !config.has_state {
            return Ok(());
        }
        let ctx = self.context();
        let immediate = SaveOptions { immediate: true, max_wait: None::<Duration> };
        let Some(revision) = ctx.request_save(immediate) else {
            return Err(not_saved("the generation stopped before the save").into_anyhow());
        };
        let saved = tokio::select! {
            saved = ctx.persisted().saves().wait_for(revision) => saved,
            // A task that ended without answering (it never started, or
            // panicked) will not save again.
            _ = self.join() => ctx.persisted().saves().wait_for(revision).now_or_never().unwrap_or_else(|| {
                Err(catalog::actor_stopping(Some("the generation ended")).into_anyhow())
            }),
        };
        saved.map_err(|err| unconfirmed(&RivetError::extract(&err)).into_anyhow())
    }
}

/// The answer to work whose save failed with `cause`.
pub fn unconfirmed(cause: &RivetError) -> RivetError {
    not_saved(&cause.message).with_metadata(serde_json::json!({ "cause": cause.qualified_code() }))
}

/// `actor.save_unconfirmed` (503): the work ran, the engine did not confirm
/// the save of what it changed, so the answer is withheld.
fn not_saved(reason: &str) -> RivetError {
    catalog::actor_save_unconfirmed(reason)
}

impl ActorContext {
    /// Runs `release` once the save covering everything this generation
    /// changed so far is acknowledged, after every output queued before it
    /// (at once when the outbox is not gated). `Err` (`actor.overloaded`)
    /// if an event finds the queue full; `release` is then not called.
    pub fn after_save(&self, kind: Kind, release: impl FnOnce(Released) + Send + 'static) -> Result<(), RivetError> {
        let outbox = self.outbox();
        let Some(runtime) = outbox.drain_runtime() else {
            release(Ok(()));
            return Ok(());
        };
        outbox.push(
            kind,
            &runtime,
            || self.request_save(SaveOptions { immediate: true, max_wait: None }),
            Box::new(release),
            || {
                let ctx = self.clone();
                async move { ctx.drain_outbox().await }
            },
        )
    }

    async fn drain_outbox(self) {
        loop {
            let Some(entry) = self.outbox().pop() else { return };
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
