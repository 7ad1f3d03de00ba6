//! `stop_actor` and the shutdown of a started generation.

use std::sync::Arc;

use tokio::sync::watch;

use super::state::Generation;
use super::{Dispatcher, InstanceKey, InstanceRecord, PendingStop, StopHandle, StopReason};
use crate::actor::{ActorTaskHandle, ShutdownKind};

enum StopAction {
    Parked,
    Completed,
    Shutdown(ActorTaskHandle),
    /// Stopped here already (the drain): answered with that outcome.
    StoppedHere(watch::Receiver<Option<Result<(), crate::RivetError>>>),
}

impl Dispatcher {
    /// Applies a stop for exactly generation `generation` (invariant I4).
    /// `stop` is signalled exactly once (I5), possibly later (parked).
    pub async fn stop_actor(
        self: &Arc<Self>,
        actor_id: &str,
        generation: u32,
        reason: StopReason,
        stop: StopHandle,
    ) -> anyhow::Result<()> {
        let key = InstanceKey::new(actor_id, generation);
        let kind = reason.kind();
        tracing::debug!(target: crate::DRAIN_TRACE, %actor_id, generation, ?reason, "stop received");
        let (action, stop) = {
            let mut state = self.lock();
            let superseded = state.current(actor_id).is_some_and(|g| g > generation);
            if let Some(outcome) = state.here(&key) {
                let outcome = outcome.subscribe();
                if let (StopReason::Lost, Some(record)) = (reason, state.started_record(&key)) {
                    record.context().mark_lost();
                }
                (StopAction::StoppedHere(outcome), Some(stop))
            } else {
                match state.get_mut(&key) {
                    Some(Generation::Failed(_)) => {
                        super::start::take_failed_start(&mut state, &key);
                        (StopAction::Completed, Some(stop))
                    }
                    Some(Generation::Starting { parked, .. }) => {
                        if parked.is_some() {
                            tracing::debug!(%key, "duplicate stop for a parked generation");
                            (StopAction::Completed, Some(stop))
                        } else {
                            *parked = Some(PendingStop { reason, stop });
                            (StopAction::Parked, None)
                        }
                    }
                    Some(Generation::StopBeforeStart(_)) => {
                        tracing::debug!(%key, "duplicate stop for a parked generation");
                        (StopAction::Completed, Some(stop))
                    }
                    Some(Generation::Started(record)) => {
                        let handle = record.handle().clone();
                        if kind == ShutdownKind::Destroy {
                            // Refused from now on, before the task hears of it.
                            handle.context().mark_destroy_requested();
                        }
                        match record {
                            InstanceRecord::Active(_) => {
                                *record = InstanceRecord::Stopping { handle: handle.clone(), kind }
                            }
                            InstanceRecord::Stopping { kind: current, .. } => {
                                tracing::warn!(%key, ?current, requested = ?kind, "stop for a generation that is already stopping");
                            }
                        }
                        (StopAction::Shutdown(handle), Some(stop))
                    }
                    None if superseded => (StopAction::Completed, Some(stop)),
                    None => {
                        state.insert(key.clone(), Generation::StopBeforeStart(PendingStop { reason, stop }));
                        (StopAction::Parked, None)
                    }
                }
            }
        };
        match (action, stop) {
            (StopAction::Shutdown(handle), Some(stop)) => {
                let result = self.shutdown_started_instance(&handle, reason, stop).await;
                self.remove_stopping_instance_when_finished(&key, &handle);
                result
            }
            (StopAction::Completed, Some(stop)) => {
                tracing::debug!(%key, "stop for a generation that already finished");
                stop.complete();
                Ok(())
            }
            (StopAction::StoppedHere(outcome), Some(stop)) => {
                self.answer_stopped_here(&key, reason, outcome, stop).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Stops a started generation and signals `stop` with the outcome.
    pub(super) async fn shutdown_started_instance(
        &self,
        handle: &ActorTaskHandle,
        reason: StopReason,
        stop: StopHandle,
    ) -> anyhow::Result<()> {
        let ctx = handle.context();
        let kind = reason.kind();
        if kind == ShutdownKind::Destroy {
            ctx.mark_destroy_requested();
        }
        if reason == StopReason::Lost {
            ctx.mark_lost();
        }
        let stop_result = match handle.stop(kind).await {
            // A lost task may already have exited.
            Err(_) if ctx.is_lost() => Ok(()),
            other => other,
        };
        let join_result = handle.join().await;
        let result = stop_result.and(join_result);
        match &result {
            Ok(()) => stop.complete(),
            Err(err) => stop.fail(anyhow::Error::new(crate::RivetError::extract(err))),
        }
        self.count_stop_answered();
        tracing::debug!(target: crate::DRAIN_TRACE, actor_id = %ctx.actor_id(), generation = ctx.generation(), ok = result.is_ok(), "stop reported");
        result
    }

    /// Removes the record once its generation is finished (I7), and only if
    /// it is still the same stopping task; the routing pointer goes with it
    /// only if it still points at this generation.
    pub(super) fn remove_stopping_instance_when_finished(
        self: &Arc<Self>,
        key: &InstanceKey,
        handle: &ActorTaskHandle,
    ) {
        let ctx = handle.context().clone();
        if ctx.is_generation_finished() {
            self.remove_stopping_instance(key, handle);
            return;
        }
        let this = Arc::clone(self);
        let key = key.clone();
        let handle = handle.clone();
        self.spawn_tracked(async move {
            ctx.wait_for_generation_finished().await;
            this.remove_stopping_instance(&key, &handle);
        });
    }

    fn remove_stopping_instance(&self, key: &InstanceKey, handle: &ActorTaskHandle) {
        let mut state = self.lock();
        let same = matches!(state.started_record(key), Some(InstanceRecord::Stopping { handle: h, .. }) if h.same_task(handle));
        if same {
            state.unregister(key);
        }
    }
}
