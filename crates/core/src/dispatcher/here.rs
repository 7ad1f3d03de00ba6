//! Stops made here, without a stop from the engine: the drain stops every
//! generation at once (docs/drain.md) while the engine catches up, and the
//! engine's own stop for each, when it comes, is answered with the outcome
//! at once ([`Dispatcher::stop_actor`]).

use std::sync::Arc;

use tokio::sync::watch;

use super::state::Generation;
use super::{Dispatcher, InstanceKey, InstanceRecord, StopHandle, StopReason};
use crate::actor::ShutdownKind;
use crate::RivetError;

impl Dispatcher {
    /// Stops generation `key` here as for a sleep (grace, `onSleep`, final
    /// save, write fence), if it is active; resolves once it stopped.
    /// Returns false when it was not active (starting, already stopping, or
    /// gone): then the engine's stop applies as usual.
    pub async fn stop_here(self: &Arc<Self>, key: &InstanceKey) -> bool {
        let (handle, outcome) = {
            let mut state = self.lock();
            let handle = match state.get_mut(key) {
                Some(Generation::Started(record @ InstanceRecord::Active(_))) => {
                    let handle = record.handle().clone();
                    *record = InstanceRecord::Stopping { handle: handle.clone(), kind: ShutdownKind::Sleep };
                    handle
                }
                _ => return false,
            };
            let outcome = watch::Sender::new(None);
            state.insert_here(key.clone(), outcome.clone(), handle.context().clone());
            (handle, outcome)
        };
        tracing::debug!(target: crate::DRAIN_TRACE, actor_id = %key.actor_id, generation = key.generation, "stop here");
        let stop = StopHandle::new(move |result: anyhow::Result<()>| {
            outcome.send_replace(Some(result.map_err(|err| RivetError::extract(&err))));
        });
        // The outcome is kept for the engine's stop; errors are logged there.
        let _ = self.shutdown_started_instance(&handle, StopReason::SleepIntent, stop).await;
        self.remove_stopping_instance_when_finished(key, &handle);
        true
    }

    /// Stopped here, and the engine's stop for it has not come yet.
    pub fn awaiting_engine(&self, key: &InstanceKey) -> bool {
        self.lock().here(key).is_some()
    }

    /// The engine has not stopped it yet: still active, or stopped here
    /// only.
    pub fn unstopped_by_engine(&self, key: &InstanceKey) -> bool {
        let state = self.lock();
        state.here(key).is_some() || matches!(state.started_record(key), Some(InstanceRecord::Active(_)))
    }

    /// The generations stopped here whose stop from the engine has not come.
    pub fn awaiting_engine_contexts(&self) -> Vec<crate::actor::ActorContext> {
        self.lock().here_contexts()
    }

    /// Changes each time a stop was answered (to the engine or here).
    pub fn stops_answered(&self) -> watch::Receiver<u64> {
        self.stops_answered.subscribe()
    }

    pub(crate) fn count_stop_answered(&self) {
        self.stops_answered.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The engine's stop for a generation stopped here: answered with the
    /// outcome of that stop, once it is known.
    pub(super) async fn answer_stopped_here(
        &self,
        key: &InstanceKey,
        reason: StopReason,
        mut outcome: watch::Receiver<Option<Result<(), RivetError>>>,
        stop: StopHandle,
    ) {
        if reason.kind() == ShutdownKind::Destroy {
            tracing::warn!(%key, "destroy for a generation this host stopped for its shutdown; its onDestroy does not run");
        }
        let result = match outcome.wait_for(Option::is_some).await {
            Ok(result) => result.clone().unwrap_or(Ok(())),
            // The sender lives in the map until this very answer removes it.
            Err(_) => Ok(()),
        };
        self.lock().remove_here(key);
        tracing::debug!(target: crate::DRAIN_TRACE, actor_id = %key.actor_id, generation = key.generation, ok = result.is_ok(), "engine's stop answered");
        match result {
            Ok(()) => stop.complete(),
            Err(err) => stop.fail(anyhow::Error::new(err)),
        }
        self.count_stop_answered();
    }
}
