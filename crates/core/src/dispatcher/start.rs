//! `start_actor` and what it needs: waiting out older generations, abandoning
//! a failed start, completing stops that a newer start made moot.

use super::{Dispatcher, InstanceKey, InstanceRecord, PendingStop, OLDER_GENERATION_STOP_TIMEOUT};
use crate::actor::task::spawn_actor_task;
use crate::actor::{ActorContext, ShutdownKind};
use crate::error::catalog;

use std::sync::Arc;

impl Dispatcher {
    /// Starts generation `ctx.generation()` of `ctx.actor_id()` with the
    /// factory registered as `name`. Resolves after the start hooks ran
    /// (invariant I9) or with the start error.
    pub async fn start_actor(self: &Arc<Self>, name: &str, ctx: ActorContext) -> anyhow::Result<()> {
        let key = InstanceKey::new(ctx.actor_id(), ctx.generation());
        let hold = ctx.hold_generation();
        self.lock().starting.entry(key.clone()).or_insert_with(|| ctx.clone());

        let prepared = async {
            self.wait_for_older_generations(&key).await?;
            if let Some(gate) = &self.start_gate {
                gate(&key).await;
            }
            if ctx.is_lost() {
                return Err(catalog::actor_stopping(Some("declared lost before it started")).into_anyhow());
            }
            self.factories
                .get(name)
                .cloned()
                .ok_or_else(|| catalog::actor_not_registered(name).into_anyhow())
        }
        .await;
        let factory = match prepared {
            Ok(factory) => factory,
            Err(err) => {
                drop(hold);
                self.abandon_startup(&key);
                return Err(err.context(ctx.specifier()));
            }
        };

        let handle = spawn_actor_task(ctx.clone(), factory, hold);
        match handle.start().await {
            Ok(()) => {
                let parked = {
                    let mut state = self.lock();
                    let parked = state.pending_stops.remove(&key);
                    let record = match &parked {
                        Some(stop) => {
                            let kind = stop.reason.kind();
                            if kind == ShutdownKind::Destroy {
                                ctx.mark_destroy_requested();
                            }
                            InstanceRecord::Stopping { handle: handle.clone(), kind }
                        }
                        None => InstanceRecord::Active(handle.clone()),
                    };
                    register(&mut state, &key, record);
                    state.starting.remove(&key);
                    parked
                };
                if let Some(PendingStop { reason, stop }) = parked {
                    // Invariant I6: the stop that beat us applies right now.
                    let this = Arc::clone(self);
                    let key = key.clone();
                    self.spawn_tracked(async move {
                        let _ = this.shutdown_started_instance(&handle, reason, stop).await;
                        this.remove_stopping_instance_when_finished(&key, &handle);
                    });
                }
                self.complete_stops_for_older_generations(&key);
                Ok(())
            }
            Err(err) => {
                if ctx.is_lost() {
                    // Do not report the generation stopped while it is still
                    // aborting; wait (bounded) for it to finish.
                    let finished =
                        tokio::time::timeout(OLDER_GENERATION_STOP_TIMEOUT, ctx.wait_for_generation_finished()).await;
                    if finished.is_err() {
                        // Keep the starting record so newer generations keep
                        // waiting on it; release it once it finishes.
                        let this = Arc::clone(self);
                        self.spawn_tracked(async move {
                            ctx.wait_for_generation_finished().await;
                            this.abandon_startup(&key);
                        });
                        return Err(err);
                    }
                }
                self.abandon_startup(&key);
                Err(err)
            }
        }
    }

    /// Spec `wait_for_older_generations`: refuse if a newer generation
    /// exists; otherwise mark every older local generation lost and wait
    /// (bounded) until all of them are finished.
    async fn wait_for_older_generations(&self, key: &InstanceKey) -> anyhow::Result<()> {
        let older: Vec<ActorContext> = {
            let state = self.lock();
            let same_actor_older = |k: &InstanceKey| k.actor_id == key.actor_id && k.generation < key.generation;
            let newer = state
                .starting
                .keys()
                .chain(state.instances.keys())
                .any(|k| k.actor_id == key.actor_id && k.generation > key.generation);
            if newer {
                return Err(catalog::actor_stopping(Some(
                    "a newer generation of this actor is already running on this runner",
                ))
                .into_anyhow());
            }
            state
                .starting
                .iter()
                .filter(|(k, _)| same_actor_older(k))
                .map(|(_, c)| c.clone())
                .chain(state.instances.iter().filter(|(k, _)| same_actor_older(k)).map(|(_, r)| r.context().clone()))
                .collect()
        };
        if older.is_empty() {
            return Ok(());
        }
        for ctx in &older {
            if !ctx.is_lost() {
                tracing::info!(actor_id = %ctx.actor_id(), generation = ctx.generation(), newer = key.generation,
                    "marking older generation lost before starting a newer one");
                ctx.mark_lost();
            }
        }
        let all_finished = futures::future::join_all(older.iter().map(|c| c.wait_for_generation_finished()));
        match tokio::time::timeout(OLDER_GENERATION_STOP_TIMEOUT, all_finished).await {
            Ok(_) => Ok(()),
            Err(_) => Err(catalog::actor_stopping(Some(
                "an older generation of this actor is still running on this runner",
            ))
            .into_anyhow()),
        }
    }

    /// A start that will not complete: complete its parked stop (there is
    /// nothing to stop) and drop the starting record.
    pub(super) fn abandon_startup(&self, key: &InstanceKey) {
        let parked = {
            let mut state = self.lock();
            let parked = state.pending_stops.remove(key);
            state.starting.remove(key);
            parked
        };
        if let Some(parked) = parked {
            parked.stop.complete();
        }
    }

    /// Stops parked for generations older than `key` will never apply.
    fn complete_stops_for_older_generations(&self, key: &InstanceKey) {
        let stale: Vec<PendingStop> = {
            let mut state = self.lock();
            let keys: Vec<InstanceKey> = state
                .pending_stops
                .keys()
                .filter(|k| k.actor_id == key.actor_id && k.generation < key.generation)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| state.pending_stops.remove(k)).collect()
        };
        for parked in stale {
            parked.stop.complete();
        }
    }
}

/// Upserts a record and moves the routing pointer forward, never back (I3).
fn register(state: &mut super::State, key: &InstanceKey, record: InstanceRecord) {
    state.instances.insert(key.clone(), record);
    let current = state.current.entry(key.actor_id.clone()).or_insert(key.generation);
    *current = (*current).max(key.generation);
}
