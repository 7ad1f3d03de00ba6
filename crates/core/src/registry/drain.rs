//! The drain after a shutdown (docs/drain.md): put to sleep what may sleep,
//! then the envoy's graceful shutdown for the rest, bounded; at the bound,
//! save everything and force the envoy down.
//!
//! Why sleep first: on the envoy's "stopping", the engine (2.3.19) signals
//! `GoingAway` to each actor of the host one after the other and, once
//! stopped, reschedules it; that costs it about 30 ms of CPU per actor here,
//! so 100 actors took about 3 s. A sleep intent is handled by each actor's
//! own workflow, in parallel, with no rescheduling: about a third of that
//! CPU. The engine turns a sleep intent still in progress into `GoingAway`
//! when the host says it is stopping, so the host says it only once the
//! actors it put to sleep have stopped.

use std::collections::HashMap;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use rivet_envoy_client::handle::EnvoyHandle;
use tokio::time::Instant;

use super::ServeConfig;
use crate::actor::ActorContext;
use crate::dispatcher::Dispatcher;

/// Drain bound when the host configured none (the engine's own threshold
/// is 30 minutes, far longer than anyone waits for Ctrl-C).
pub const DEFAULT_DRAIN_CAP: Duration = Duration::from_secs(30);
/// After a forced stop, how long we still wait for the envoy loop.
const FORCED_STOP_WAIT: Duration = Duration::from_secs(5);
/// How long background jobs (stops, waiters) may take after the envoy stopped.
const TRACKER_WAIT: Duration = Duration::from_secs(5);
/// When the engine stopped none of the actors put to sleep for this long,
/// the drain goes on with the envoy's shutdown (the engine then stops the
/// rest as actors of a host that goes away).
pub(crate) const SLEEP_STALL: Duration = Duration::from_secs(5);
/// How often the drain looks for actors to ask again, how long after the
/// last ask an actor is asked again, and how many at most each time.
const REASK_TICK: Duration = Duration::from_millis(100);
const REASK_AFTER: Duration = Duration::from_secs(1);
/// Each later ask of the same actor waits twice as long, up to this.
const REASK_MAX_AFTER: Duration = Duration::from_secs(8);
const REASK_BATCH: usize = 8;
/// While actors are put to sleep: after this long with no actor stopped
/// and nobody asked, the straggler asked longest ago is asked again.
const STALL_NUDGE: Duration = Duration::from_millis(200);
/// How long the envoy may keep waiting once this host holds no generation.
const EMPTY_HOST_WAIT: Duration = Duration::from_secs(1);
const EMPTY_HOST_POLL: Duration = Duration::from_millis(100);
/// How often a drain that waits for the envoy says what it still holds.
const PROGRESS_REPORT_INTERVAL: Duration = Duration::from_secs(5);

pub(super) async fn drain(config: &ServeConfig, envoy: &EnvoyHandle, dispatcher: &Dispatcher) {
    let threshold = envoy
        .get_protocol_metadata()
        .await
        .and_then(|m| u64::try_from(m.actor_stop_threshold).ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(30 * 60));
    let bound = threshold.min(config.drain_cap.unwrap_or(DEFAULT_DRAIN_CAP));
    tracing::info!(actors = dispatcher.instance_count(), bound_ms = bound.as_millis() as u64, "draining");
    let drained = async {
        sleep_first(dispatcher, SLEEP_STALL).await;
        envoy.shutdown(false);
        let census = dispatcher.census();
        tracing::debug!(target: crate::DRAIN_TRACE, ?census, "envoy graceful shutdown sent");
        tokio::select! {
            _ = envoy.wait_stopped() => {
                tracing::debug!(target: crate::DRAIN_TRACE, "envoy loop ended");
            }
            _ = nudge_stragglers(dispatcher) => {}
            _ = host_emptied(dispatcher) => {
                tracing::warn!(
                    wait_ms = EMPTY_HOST_WAIT.as_millis() as u64,
                    "every actor of this host has stopped but the envoy still waits; stopping it now"
                );
                envoy.shutdown(true);
                let _ = tokio::time::timeout(FORCED_STOP_WAIT, envoy.wait_stopped()).await;
            }
        }
    };
    if tokio::time::timeout(bound, drained).await.is_err() {
        tracing::warn!(
            bound_ms = bound.as_millis() as u64,
            "drain did not finish in time; saving the actors still running"
        );
        save_all(dispatcher).await;
        tracing::warn!("stopping the envoy now");
        envoy.shutdown(true);
        let _ = tokio::time::timeout(FORCED_STOP_WAIT, envoy.wait_stopped()).await;
    }
    dispatcher.tracker().close();
    if tokio::time::timeout(TRACKER_WAIT, dispatcher.tracker().wait()).await.is_err() {
        tracing::warn!("background actor work did not finish after the drain");
    }
    tracing::info!("registry shut down");
    tracing::debug!(target: crate::DRAIN_TRACE, "drain done");
}

/// Step 2 of the drain: asks the engine to put every generation that may
/// sleep to sleep, all at once, and waits until they have stopped (their
/// `onSleep` ran, their state was saved, the stop was reported), re-asking
/// for those the engine has not stopped yet. Returns early when the engine
/// stopped none of them for `stall`. Returns how many it asked for.
pub(crate) async fn sleep_first(dispatcher: &Dispatcher, stall: Duration) -> usize {
    let asked = dispatcher.sleepable_contexts();
    if asked.is_empty() {
        return 0;
    }
    for ctx in &asked {
        ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
    }
    tracing::debug!(target: crate::DRAIN_TRACE, actors = asked.len(), "sleep intents sent");
    let mut finished: FuturesUnordered<_> = asked
        .iter()
        .map(|ctx| {
            let ctx = ctx.clone();
            async move { ctx.wait_for_generation_finished().await }
        })
        .collect();
    let mut progress = Instant::now();
    let mut reasks = Reasker::new(progress);
    let mut tick = tokio::time::interval_at(progress + REASK_TICK, REASK_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            done = finished.next() => match done {
                Some(()) => progress = Instant::now(),
                None => break,
            },
            _ = tick.tick() => {
                let quiet = Instant::now().duration_since(progress.max(reasks.last_ask())) >= STALL_NUDGE;
                reasks.ask_again(dispatcher.sleepable_contexts(), quiet);
            }
            _ = tokio::time::sleep_until(progress + stall) => {
                tracing::warn!(
                    waiting = finished.len(),
                    stall_ms = stall.as_millis() as u64,
                    "the engine stopped none of the actors put to sleep for a while; going on with the envoy's shutdown"
                );
                break;
            }
        }
    }
    tracing::debug!(target: crate::DRAIN_TRACE, actors = asked.len(), "actors put to sleep");
    asked.len()
}

/// Step 3, alongside the envoy's graceful shutdown. The engine (2.3.19)
/// sends no stop to actors it is still starting, when the host says it is
/// stopping or asks for a sleep, and the envoy waits for every actor: each
/// generation still active a second after the envoy said it is stopping is
/// asked to sleep (the normal sleep intent), so the drain ends with every
/// actor's state saved instead of at the drain bound.
async fn nudge_stragglers(dispatcher: &Dispatcher) {
    let start = Instant::now();
    let mut reasks = Reasker::new(start);
    let mut tick = tokio::time::interval_at(start + REASK_TICK, REASK_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_report = start + PROGRESS_REPORT_INTERVAL;
    loop {
        tick.tick().await;
        reasks.ask_again(dispatcher.active_contexts(), false);
        if Instant::now() >= next_report {
            next_report += PROGRESS_REPORT_INTERVAL;
            tracing::info!(census = ?dispatcher.census(), "still waiting for the envoy's shutdown");
        }
    }
}

/// Resolves once the dispatcher has held no generation for
/// [`EMPTY_HOST_WAIT`]: every actor's stop was reported and nothing is
/// starting, so nothing is left to save. The envoy's graceful shutdown
/// waits for every actor task of its own; one left running after our
/// generations are gone would otherwise hold the drain until its bound
/// (seen once in 9 drains of 100 actors, cause not found).
async fn host_emptied(dispatcher: &Dispatcher) {
    let mut empty_since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if dispatcher.is_empty() {
            let since = *empty_since.get_or_insert(now);
            if now.duration_since(since) >= EMPTY_HOST_WAIT {
                return;
            }
        } else {
            empty_since = None;
        }
        tokio::time::sleep(EMPTY_HOST_POLL).await;
    }
}

/// Asks the engine again for the generations it has not stopped: each one
/// [`REASK_AFTER`] after it was first asked, then twice as long after each
/// ask (up to [`REASK_MAX_AFTER`]), at most [`REASK_BATCH`] every
/// [`REASK_TICK`], those due first first; and, when the caller says things
/// are quiet, the one due first.
///
/// Why a trickle rather than everyone at once: the engine's workflow worker
/// pulls fewer ready workflows when the machine's CPU is busy (above 70% it
/// starts shedding, at 90% it pulls one in twenty; which ones is fixed per
/// pending wake-up) and looks again only on its next signal, or its 16 s
/// poll. One ask is one signal: it makes the worker look again, with its
/// load figure updated, at all the actors still waiting. Asking everyone
/// again would add one signal per actor to the load that made it shed.
struct Reasker {
    /// When each generation is due again, and the wait after that; those
    /// not in it are due [`REASK_AFTER`] after `since`.
    due: HashMap<(String, u32), (Instant, Duration)>,
    since: Instant,
    last: Instant,
}

impl Reasker {
    fn new(since: Instant) -> Self {
        Self { due: HashMap::new(), since, last: since }
    }

    /// When anyone was last asked (or `since`).
    fn last_ask(&self) -> Instant {
        self.last
    }

    fn ask_again(&mut self, candidates: Vec<ActorContext>, quiet: bool) {
        let now = Instant::now();
        let mut by_due: Vec<(Instant, ActorContext)> = candidates
            .into_iter()
            .map(|ctx| {
                let due = self.due.get(&(ctx.actor_id().to_owned(), ctx.generation())).map(|(at, _)| *at);
                (due.unwrap_or(self.since + REASK_AFTER), ctx)
            })
            .collect();
        by_due.sort_by_key(|(at, _)| *at);
        let due = by_due.iter().take_while(|(at, _)| *at <= now).count();
        let count = if due > 0 { due.min(REASK_BATCH) } else { usize::from(quiet).min(by_due.len()) };
        if count == 0 {
            return;
        }
        tracing::debug!(target: crate::DRAIN_TRACE, actors = count, "sleep intents sent again");
        for (_, ctx) in by_due.into_iter().take(count) {
            ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
            let key = (ctx.actor_id().to_owned(), ctx.generation());
            let wait = self.due.get(&key).map_or(REASK_AFTER, |(_, wait)| *wait);
            self.due.insert(key, (now + wait, (wait * 2).min(REASK_MAX_AFTER)));
        }
        self.last = now;
    }
}

/// How many final saves the drain runs at once when it hits its bound.
const FINAL_SAVE_CONCURRENCY: usize = 32;
/// How long those saves may take in all. The drain bound limits how long
/// we wait for the engine's stops; this one protects the data (an engine
/// that ignores stops still takes writes), and is never skipped.
const FINAL_SAVE_WAIT: Duration = Duration::from_secs(15);

/// Saves every generation still running (`serializeState`, then the
/// record and connection records), so nothing the actors hold is lost
/// when the drain gives up on the engine's stops.
async fn save_all(dispatcher: &Dispatcher) {
    use crate::actor::save::SaveOptions;
    use futures::stream;

    let live = dispatcher.live_contexts();
    let total = live.len();
    let saves = stream::iter(live)
        .map(|ctx| async move {
            let result = ctx.request_save_and_wait(SaveOptions { immediate: true, max_wait: None }).await;
            if let Err(err) = &result {
                tracing::error!(actor_id = ctx.actor_id(), generation = ctx.generation(), error = %format!("{err:#}"), "final save at the drain bound failed");
            }
            result.is_ok()
        })
        .buffer_unordered(FINAL_SAVE_CONCURRENCY)
        .fold(0usize, |saved, ok| async move { saved + usize::from(ok) });
    match tokio::time::timeout(FINAL_SAVE_WAIT, saves).await {
        Ok(saved) => tracing::info!(saved, total, "saved the actors still running"),
        Err(_) => tracing::error!(
            total,
            wait_ms = FINAL_SAVE_WAIT.as_millis() as u64,
            "final saves at the drain bound did not finish in time"
        ),
    }
}
