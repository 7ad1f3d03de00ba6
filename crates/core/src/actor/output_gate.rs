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

use std::time::Duration;

use futures::FutureExt;

use super::config::OutputGate;
use super::save::SaveOptions;
use super::task::ActorTaskHandle;
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
