//! The drain after a shutdown (docs/drain.md): every generation stops here
//! at once (bounded): `onSleep`, the final save. Each one that may sleep is
//! then put to sleep by this host itself: its sleep intent and its
//! `Stopped` go to the engine together, in one message, so the engine has
//! nothing left to ask of this host for it. Once
//! every actor task of the envoy has ended, the envoy's connection closes
//! and the drain waits for the engine to close it too (it has then read
//! every frame before the close). Actors that may not sleep go through the
//! envoy's graceful shutdown as in the reference: the engine moves them.
//! A generation the engine starts here during the drain is held until the
//! host has withdrawn (`stop_here`); the hand-over to the engine is
//! `hand_over`.
//!
//! Why not wait for the engine's stops: each one is the engine's workflow
//! for that actor running twice (the sleep intent, then the `Stopped`), and
//! the engine works through a hundred of them in 0.5 to 2 s here, with a
//! tail that its own load shedding sets. The sleep intent followed by the
//! `Stopped` is one run of that workflow, and it does not need this host:
//! the engine keeps the events it has read.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rivet_envoy_client::handle::EnvoyHandle;
use tokio::sync::watch;
use tokio::time::Instant;

use super::ServeConfig;
use crate::dispatcher::Dispatcher;

mod hand_over;
mod stop_here;

use hand_over::ENVOY_STOP_WAIT;
pub(crate) use stop_here::{stop_everything_here, Settled};

/// Drain bound when the host configured none (the engine's own threshold
/// is 30 minutes, far longer than anyone waits for Ctrl-C).
pub const DEFAULT_DRAIN_CAP: Duration = Duration::from_secs(30);
/// How long background jobs (stops, waiters) may take after the envoy
/// stopped, at most (same limit).
const TRACKER_WAIT: Duration = Duration::from_secs(5);
/// What the last steps may take past the drain's deadline in all: the
/// envoy's forced stop and the end of background work. Nothing that waits
/// for the engine runs past the deadline.
const PAST_DEADLINE: Duration = Duration::from_millis(500);

pub(crate) async fn drain(config: &ServeConfig, envoy: &EnvoyHandle, dispatcher: &Arc<Dispatcher>) {
    let started = Instant::now();
    let threshold = tokio::time::timeout(METADATA_WAIT, envoy.get_protocol_metadata())
        .await
        .ok()
        .flatten()
        .and_then(|m| u64::try_from(m.actor_stop_threshold).ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(30 * 60));
    let bound = threshold.min(config.drain_cap.unwrap_or(DEFAULT_DRAIN_CAP));
    // One deadline for the whole drain (docs/drain.md, "The bound"): the
    // hand-over gets the bound less the final saves' reserve; the final
    // saves end at the deadline; only the envoy's forced stop and the end
    // of background work may run past it, by [`PAST_DEADLINE`] in all.
    let deadline = started + bound;
    let hand_over_until = deadline - final_save_reserve(bound);
    tracing::info!(actors = dispatcher.instance_count(), bound_ms = bound.as_millis() as u64, "draining");
    let refused_at_start = envoy.last_refused_request_ms();
    let settled = watch::Sender::new(Settled::default());
    let release = watch::Sender::new(false);
    let for_engine = Arc::new(AtomicUsize::new(0));
    let drained = async {
        tokio::select! {
            _ = stop_everything_here(dispatcher, &settled, release.subscribe(), &for_engine) => false,
            ended = async {
                stop_here::settled_when(&settled, |s| s.idle).await;
                hand_over::hand_over(
                    envoy,
                    dispatcher,
                    for_engine.load(Ordering::Acquire),
                    &settled,
                    &release,
                    refused_at_start,
                )
                .await
            } => ended,
        }
    };
    let ended = match tokio::time::timeout_at(hand_over_until, drained).await {
        Ok(ended) => ended,
        Err(_) => {
            tracing::warn!(
                bound_ms = bound.as_millis() as u64,
                "drain did not finish in time; saving the actors still running"
            );
            false
        }
    };
    let last = deadline + PAST_DEADLINE;
    if !ended {
        save_all(dispatcher, deadline).await;
        envoy.shutdown(true);
        let wait = (Instant::now() + ENVOY_STOP_WAIT).min(last);
        let _ = tokio::time::timeout_at(wait, envoy.wait_stopped()).await;
        tracing::debug!(target: crate::DRAIN_TRACE, "envoy stopped at once");
    }
    dispatcher.tracker().close();
    let wait = (Instant::now() + TRACKER_WAIT).min(last);
    if tokio::time::timeout_at(wait, dispatcher.tracker().wait()).await.is_err() {
        tracing::warn!("background actor work did not finish after the drain");
    }
    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "registry shut down");
    tracing::debug!(target: crate::DRAIN_TRACE, "drain done");
}

/// How long the drain asks the envoy for the engine's thresholds (it holds
/// them from its handshake; an engine that never finished one answers none).
const METADATA_WAIT: Duration = Duration::from_millis(200);

/// How many final saves the drain runs at once when it hits its bound.
const FINAL_SAVE_CONCURRENCY: usize = 32;
/// The part of the drain bound kept for those saves: a quarter of it,
/// between these two figures. The hand-over to the engine gets the rest.
const FINAL_SAVE_RESERVE_MIN: Duration = Duration::from_millis(250);
const FINAL_SAVE_RESERVE_MAX: Duration = Duration::from_secs(5);

/// The time kept at the end of a drain bound for the final saves.
fn final_save_reserve(bound: Duration) -> Duration {
    (bound / 4).clamp(FINAL_SAVE_RESERVE_MIN, FINAL_SAVE_RESERVE_MAX).min(bound / 2)
}

/// Saves every generation still running (`serializeState`, then the
/// record and connection records), so nothing the actors hold is lost
/// when the drain gives up on the engine's stops. Saves still unfinished
/// at `deadline` (an engine that is gone or frozen takes no write) are
/// named in the log, one error each: what changed since that actor's last
/// acknowledged save is lost.
async fn save_all(dispatcher: &Dispatcher, deadline: Instant) {
    use crate::actor::save::SaveOptions;
    use futures::stream::{self, StreamExt};
    use std::sync::Mutex;

    let live = dispatcher.live_contexts();
    let total = live.len();
    let pending: Mutex<HashSet<(String, u32)>> =
        Mutex::new(live.iter().map(|ctx| (ctx.actor_id().to_owned(), ctx.generation())).collect());
    let pending = &pending;
    let saves = stream::iter(live)
        .map(|ctx| async move {
            let result = ctx.request_save_and_wait(SaveOptions { immediate: true, max_wait: None }).await;
            // Settled either way: named below only if it never settles.
            pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&(ctx.actor_id().to_owned(), ctx.generation()));
            if let Err(err) = &result {
                tracing::error!(
                    actor_id = ctx.actor_id(),
                    generation = ctx.generation(),
                    error = %format!("{err:#}"),
                    "the final save at the drain bound failed; what this actor changed since its last \
                     acknowledged save is lost"
                );
            }
            result.is_ok()
        })
        .buffer_unordered(FINAL_SAVE_CONCURRENCY)
        .fold(0usize, |saved, ok| async move { saved + usize::from(ok) });
    match tokio::time::timeout_at(deadline, saves).await {
        Ok(saved) => tracing::info!(saved, total, "saved the actors still running"),
        Err(_) => {
            let unsaved = pending.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (actor_id, generation) in &unsaved {
                tracing::error!(
                    actor_id = %actor_id,
                    generation,
                    "the final save did not finish within the drain bound (the engine took no write); \
                     what this actor changed since its last acknowledged save is lost"
                );
            }
            tracing::error!(unsaved = unsaved.len(), total, "final saves at the drain bound did not finish in time");
        }
    }
}
