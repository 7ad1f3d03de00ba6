//! `start_actor` and what it needs: waiting out older generations, abandoning
//! a failed start, completing stops that a newer start made moot.
//!
//! ## A start whose hooks fail
//!
//! Reporting the failure to the engine as the start's result (a `Stopped`
//! event with an error, as the reference does) tells the client nothing:
//! the gateway sees the actor stop before it became ready, wakes it again
//! (eight times, each a full failed start), then answers 503
//! `guard.actor_wake_retries_exceeded` without the hook's error. So when
//! the start hooks fail, the generation is *accepted* instead: the engine
//! sees it running, and every request or socket routed to it gets the
//! structured start error (`failed` in the dispatcher's state; see
//! [`failed_start_error`]): HTTP requests as an error body, WebSockets as
//! a close 1011 `<group>.<code>` once open (`envoy::callbacks`). Once that
//! error has been handed to traffic (plus [`AFTER_SERVED`], for requests
//! that woke it together), or after [`FAILED_START_LINGER`] if no traffic
//! comes (an alarm, or a request the engine is slow to route), the crash
//! is reported (`report_crash`: a sleep intent with the error). Reporting
//! it before the waking request arrived would put the actor to sleep under
//! that request, which would then wait for a readiness that never comes
//! (the gateway's 30 s `actor_ready_timeout`). The engine records
//! it on the actor (`error: {crashed: {message}}`) and puts the actor to
//! sleep; its stop then completes at once. One start per waking request
//! (at most one per linger while traffic keeps coming) instead of nine.
//!
//! Not on this path: a generation that is lost or fenced by a newer one
//! (`actor.stopping`), and a start that a stop already beat (the parked
//! stop completes and the start reports its error as before).

use super::failed_start::FailedStart;
use super::state::{Generation, State};
use super::{Dispatcher, InstanceKey, InstanceRecord, PendingStop, OLDER_GENERATION_STOP_TIMEOUT};
use crate::actor::task::spawn_actor_task;
use crate::actor::{ActorContext, Inbox, ShutdownKind};
use crate::error::{catalog, RivetError};

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The longest a generation whose start failed answers its traffic with
/// the start error before the crash is reported, when no traffic came.
pub const FAILED_START_LINGER: Duration = Duration::from_secs(10);
/// How long after the start error was first handed to traffic the crash
/// is reported (requests that woke the actor together get the same error).
pub const AFTER_SERVED: Duration = Duration::from_millis(250);

/// The start error that traffic for `actor_id` gets, if its newest
/// generation failed to start and no newer one is registered.
pub(super) fn failed_start_error(state: &State, actor_id: &str) -> Option<RivetError> {
    state.unsuperseded_failed(actor_id).map(FailedStart::serve)
}

/// Removes the failed start of exactly `key`, if there is one: its stop has
/// nothing to tear down.
pub(super) fn take_failed_start(state: &mut State, key: &InstanceKey) -> bool {
    if !matches!(state.get(key), Some(Generation::Failed(_))) {
        return false;
    }
    if let Some(Generation::Failed(failed)) = state.remove(key) {
        failed.forget();
    }
    true
}

impl Dispatcher {
    /// Starts generation `ctx.generation()` of `ctx.actor_id()` with the
    /// factory registered as `name`; its task reads `inbox`, the traffic
    /// queue `ctx` was built with. Resolves after the start hooks ran
    /// (invariant I9) or with the start error.
    pub async fn start_actor(self: &Arc<Self>, name: &str, ctx: ActorContext, inbox: Inbox) -> anyhow::Result<()> {
        let key = InstanceKey::new(ctx.actor_id(), ctx.generation());
        let duplicate = {
            let mut state = self.lock();
            let (parked, duplicate) = match state.remove(&key) {
                Some(Generation::StopBeforeStart(stop)) => (Some(stop), None),
                Some(known) => {
                    let stopping = matches!(known, Generation::Started(InstanceRecord::Stopping { .. }));
                    state.insert(key.clone(), known);
                    (None, Some(stopping))
                }
                None => (None, None),
            };
            if duplicate.is_none() {
                state.insert(key.clone(), Generation::Starting { ctx: ctx.clone(), parked });
                state.forget_older_failed(&key);
            }
            duplicate
        };
        if let Some(stopping) = duplicate {
            return self.drop_duplicate_start(&key, &ctx, stopping).await;
        }
        let hold = ctx.hold_generation();

        let prepared = async {
            self.wait_for_older_generations(&key).await?;
            if let Some(gate) = &self.start_gate {
                gate(&key).await;
            }
            if ctx.is_lost() {
                return Err(catalog::actor_stopping(Some("declared lost before it started")).into_anyhow());
            }
            self.factories.get(name).cloned().ok_or_else(|| catalog::actor_not_registered(name).into_anyhow())
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

        let handle = spawn_actor_task(ctx.clone(), inbox, factory, hold);
        match handle.start().await {
            Ok(()) => {
                let parked = {
                    let mut state = self.lock();
                    let parked = match state.get_mut(&key) {
                        Some(Generation::Starting { parked, .. }) => parked.take(),
                        _ => None,
                    };
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
                    state.register(&key, record);
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
                if !ctx.is_lost() && self.accept_failed_start(&key, &ctx, &err) {
                    return Ok(());
                }
                self.abandon_startup(&key);
                Err(err)
            }
        }
    }

    /// A second start of a generation already known here (invariant I12,
    /// docs/generations.md): the engine sent a new start command for a
    /// generation that is starting or running, which the envoy's replay
    /// filter lets through. Running the start hooks again would fork the
    /// actor: a second task, a second `onWake` that reloads the last saved
    /// state under the first one's live state. It is dropped: its context
    /// never writes, the first task keeps serving, and it is answered as
    /// started (or, if the generation is stopping here, `actor.stopping`).
    async fn drop_duplicate_start(&self, key: &InstanceKey, ctx: &ActorContext, stopping: bool) -> anyhow::Result<()> {
        tracing::warn!(
            actor_id = %key.actor_id,
            generation = key.generation,
            stopping,
            "the engine started a generation that is already here; the second start is dropped"
        );
        ctx.end_writes().await;
        if stopping {
            return Err(catalog::actor_stopping(Some("a second start of a generation that is stopping here"))
                .into_anyhow()
                .context(ctx.specifier()));
        }
        Ok(())
    }

    /// The start error that traffic for `actor_id` gets while its newest
    /// generation is a failed start (module docs), else `None`.
    pub fn failed_start_error(&self, actor_id: &str) -> Option<RivetError> {
        failed_start_error(&self.lock(), actor_id)
    }

    /// Turns the failed start of `key` into an accepted generation that
    /// answers with `err` (module docs), unless the error is a fencing one,
    /// a stop for it is parked or a newer generation exists. Returns
    /// whether it did.
    fn accept_failed_start(self: &Arc<Self>, key: &InstanceKey, ctx: &ActorContext, err: &anyhow::Error) -> bool {
        let error = RivetError::extract(err).with_actor_if_missing(ctx.specifier());
        if error.group == "actor" && error.code == "stopping" {
            return false;
        }
        let done = CancellationToken::new();
        let served = Arc::new(tokio::sync::Notify::new());
        {
            let mut state = self.lock();
            let newer = state.has_newer_live(key) || state.current(&key.actor_id).is_some_and(|g| g > key.generation);
            let parked = matches!(state.get(key), Some(Generation::Starting { parked: Some(_), .. }));
            if newer || parked {
                return false;
            }
            state.forget_older_failed(key);
            state
                .insert(key.clone(), Generation::Failed(FailedStart::new(error.clone(), done.clone(), served.clone())));
        }
        tracing::warn!(%key, error = %format!("{err:#}"), "actor start failed; its traffic gets the error until the engine stops it");
        let this = Arc::clone(self);
        let (key, ctx, message) = (key.clone(), ctx.clone(), format!("{err:#}"));
        self.spawn_tracked(async move {
            let linger = async {
                tokio::select! {
                    _ = tokio::time::sleep(FAILED_START_LINGER) => {}
                    _ = served.notified() => tokio::time::sleep(AFTER_SERVED).await,
                }
            };
            tokio::select! {
                _ = linger => {}
                _ = done.cancelled() => return,
                _ = ctx.lost_token().cancelled() => return,
            }
            let still_failed = matches!(this.lock().get(&key), Some(Generation::Failed(_)));
            if still_failed {
                tracing::debug!(%key, "reporting the failed start to the engine");
                ctx.link().report_crash(&key.actor_id, key.generation, message);
            }
        });
        true
    }

    /// Refuse if a newer generation
    /// exists; otherwise mark every older local generation lost and wait
    /// (bounded) until all of them are finished.
    async fn wait_for_older_generations(&self, key: &InstanceKey) -> anyhow::Result<()> {
        let older: Vec<ActorContext> = {
            let state = self.lock();
            if state.has_newer_live(key) {
                return Err(catalog::actor_stopping(Some(
                    "a newer generation of this actor is already running on this runner",
                ))
                .into_anyhow());
            }
            state.older_live_contexts(key)
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
            Err(_) => {
                Err(catalog::actor_stopping(Some("an older generation of this actor is still running on this runner"))
                    .into_anyhow())
            }
        }
    }

    /// A start that will not complete: complete its parked stop (there is
    /// nothing to stop) and drop the starting record.
    pub(super) fn abandon_startup(&self, key: &InstanceKey) {
        let parked = {
            let mut state = self.lock();
            match state.remove(key) {
                Some(Generation::Starting { parked, .. }) => parked,
                Some(other) => {
                    state.insert(key.clone(), other);
                    None
                }
                None => None,
            }
        };
        if let Some(parked) = parked {
            parked.stop.complete();
        }
    }

    /// Stops parked for generations older than `key` will never apply.
    fn complete_stops_for_older_generations(&self, key: &InstanceKey) {
        let stale = self.lock().take_older_parked_stops(key);
        for parked in stale {
            parked.stop.complete();
        }
    }
}
