//! Admission of client traffic (docs/generations.md).

use super::{start, Dispatcher};
use crate::actor::ActorTaskHandle;
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
        // Which generation: the routing pointer. Whether it may take the
        // work: its own phase and signals (one table, `actor::lifecycle`).
        record.context().admit()?;
        Ok(record.handle().clone())
    }
}
