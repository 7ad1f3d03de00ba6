//! Admission of client traffic (spec generations §4, `active_actor`).

use super::{start, Dispatcher, InstanceRecord};
use crate::actor::{ActorTaskHandle, ShutdownKind};
use crate::error::catalog;

impl Dispatcher {
    /// The task that client traffic for `actor_id` goes to: only the current
    /// generation, and only while it may accept work.
    pub fn active_actor(&self, actor_id: &str) -> anyhow::Result<ActorTaskHandle> {
        let state = self.lock();
        if let Some(error) = start::failed_start_error(&state, actor_id) {
            return Err(error.into_anyhow());
        }
        let record = state
            .current(actor_id)
            .and_then(|g| state.started_record(&super::InstanceKey::new(actor_id, g)))
            .ok_or_else(|| catalog::actor_not_found("instance", actor_id).into_anyhow())?;
        let ctx = record.context();
        let live = ctx.started() && !ctx.is_lost();
        let refusal = match record {
            InstanceRecord::Active(_) if live && !ctx.destroy_requested() => None,
            InstanceRecord::Active(_) if ctx.destroy_requested() => Some(catalog::actor_destroying()),
            InstanceRecord::Active(_) if ctx.sleep_requested() || ctx.is_lost() => Some(catalog::actor_stopping(None)),
            InstanceRecord::Active(_) => Some(catalog::actor_starting()),
            // Race 13: a destroy during sleep grace leaves the record as is
            // but refuses new work.
            InstanceRecord::Stopping { .. } if ctx.destroy_requested() => Some(catalog::actor_destroying()),
            InstanceRecord::Stopping { kind: ShutdownKind::Sleep, .. } if live => None,
            InstanceRecord::Stopping { kind: ShutdownKind::Sleep, .. } => Some(catalog::actor_stopping(None)),
            InstanceRecord::Stopping { kind: ShutdownKind::Destroy, .. } => Some(catalog::actor_destroying()),
        };
        match refusal {
            None => Ok(record.handle().clone()),
            Some(err) => Err(err.with_actor(ctx.specifier()).into_anyhow()),
        }
    }
}
