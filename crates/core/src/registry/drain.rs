//! The drain after a shutdown (docs/drain.md): every generation stops here
//! at once (bounded) while the engine is asked to put to sleep what may
//! sleep; then the envoy's graceful shutdown for the rest. The engine's
//! stops are answered at once with the outcome of the stop made here. Once
//! everything is saved, the engine gets a short while to catch up, then the
//! envoy goes down; at the drain bound, likewise.
//!
//! Why sleep first: on the envoy's "stopping", the engine (2.3.19) signals
//! `GoingAway` to each actor of the host one after the other and, once
//! stopped, reschedules it; that costs it about 30 ms of CPU per actor here,
//! so 100 actors took about 3 s. A sleep intent is handled by each actor's
//! own workflow, in parallel, with no rescheduling: about a third of that
//! CPU. The engine turns a sleep intent still in progress into `GoingAway`
//! when the host says it is stopping, so the host says it only once the
//! actors it put to sleep have been stopped by the engine.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rivet_envoy_client::handle::EnvoyHandle;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::ServeConfig;
use crate::actor::ActorContext;
use crate::dispatcher::{Dispatcher, InstanceKey};

/// Drain bound when the host configured none (the engine's own threshold
/// is 30 minutes, far longer than anyone waits for Ctrl-C).
pub const DEFAULT_DRAIN_CAP: Duration = Duration::from_secs(30);
/// After a forced stop, how long we still wait for the envoy loop.
const FORCED_STOP_WAIT: Duration = Duration::from_secs(5);
/// How long background jobs (stops, waiters) may take after the envoy stopped.
const TRACKER_WAIT: Duration = Duration::from_secs(5);
/// How many generations stop here at once (each: `onSleep`, then
/// `serializeState` and the final save).
pub(crate) const LOCAL_STOP_CONCURRENCY: usize = 64;
/// Once every generation has stopped here (all saved), how long the engine
/// still gets to stop the actors it has not stopped yet before the envoy
/// goes down. Those it has not stopped by then it finds stopped when it
/// declares the envoy lost (its `envoy_lost_threshold`, 15 s by default);
/// requests to them wait until then.
pub(crate) const ENGINE_CATCH_UP: Duration = Duration::from_secs(2);
/// When the engine stopped none of the actors put to sleep for this long,
/// the drain goes on with the envoy's shutdown (the engine then stops the
/// rest as actors of a host that goes away).
pub(crate) const SLEEP_STALL: Duration = Duration::from_secs(5);
/// How often the drain looks for actors to ask again, how long after the
/// first ask an actor is asked again, and how many at most each time.
const REASK_TICK: Duration = Duration::from_millis(50);
const REASK_AFTER: Duration = Duration::from_secs(1);
/// Each later ask of the same actor waits twice as long, up to this.
const REASK_MAX_AFTER: Duration = Duration::from_secs(8);
const REASK_BATCH: usize = 4;
/// While actors are put to sleep: after this long with no stop answered
/// and nobody asked, the straggler due first is asked again.
const STALL_NUDGE: Duration = Duration::from_millis(50);
/// How long the envoy may keep waiting once this host holds no generation.
const EMPTY_HOST_WAIT: Duration = Duration::from_secs(1);
const EMPTY_HOST_POLL: Duration = Duration::from_millis(100);
/// How often a drain that waits for the envoy says what it still holds.
const PROGRESS_REPORT_INTERVAL: Duration = Duration::from_secs(5);

pub(crate) async fn drain(config: &ServeConfig, envoy: &EnvoyHandle, dispatcher: &Arc<Dispatcher>) {
    let threshold = envoy
        .get_protocol_metadata()
        .await
        .and_then(|m| u64::try_from(m.actor_stop_threshold).ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(30 * 60));
    let bound = threshold.min(config.drain_cap.unwrap_or(DEFAULT_DRAIN_CAP));
    tracing::info!(actors = dispatcher.instance_count(), bound_ms = bound.as_millis() as u64, "draining");
    // Asked before anything stops here: stopping makes them inactive.
    let sleepers = ask_to_sleep(dispatcher);
    let asked: HashSet<InstanceKey> = sleepers.iter().map(key_of).collect();
    let saved = watch::Sender::new(None);
    let drained = async {
        tokio::select! {
            _ = stop_everything_here(dispatcher, asked, &saved) => false,
            ended = async {
                sleep_first(dispatcher, &sleepers, SLEEP_STALL).await;
                shut_envoy_down(envoy, dispatcher).await
            } => ended,
            _ = engine_caught_up_or_not(&saved) => {
                let census = dispatcher.census();
                tracing::warn!(
                    not_stopped_by_engine = census.awaiting_engine + census.active,
                    wait_ms = ENGINE_CATCH_UP.as_millis() as u64,
                    "every actor is stopped and its state saved, but the engine has not stopped all of them yet; \
                     stopping the envoy now (the engine puts those to sleep once it declares this host lost)"
                );
                false
            }
        }
    };
    let ended = match tokio::time::timeout(bound, drained).await {
        Ok(ended) => ended,
        Err(_) => {
            tracing::warn!(
                bound_ms = bound.as_millis() as u64,
                "drain did not finish in time; saving the actors still running"
            );
            false
        }
    };
    if !ended {
        save_all(dispatcher).await;
        envoy.shutdown(true);
        let _ = tokio::time::timeout(FORCED_STOP_WAIT, envoy.wait_stopped()).await;
        tracing::debug!(target: crate::DRAIN_TRACE, "envoy stopped at once");
    }
    dispatcher.tracker().close();
    if tokio::time::timeout(TRACKER_WAIT, dispatcher.tracker().wait()).await.is_err() {
        tracing::warn!("background actor work did not finish after the drain");
    }
    tracing::info!("registry shut down");
    tracing::debug!(target: crate::DRAIN_TRACE, "drain done");
}

/// Step 2a: asks the engine to put every generation that may sleep to
/// sleep (the envoy's sleep intent, as `ctx.sleep()` sends); returns them.
fn ask_to_sleep(dispatcher: &Dispatcher) -> Vec<ActorContext> {
    let sleepers = dispatcher.sleepable_contexts();
    for ctx in &sleepers {
        ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
    }
    tracing::debug!(target: crate::DRAIN_TRACE, actors = sleepers.len(), "sleep intents sent");
    sleepers
}

/// Step 2b, for the whole drain: stops every active generation here,
/// [`LOCAL_STOP_CONCURRENCY`] at a time, including any that starts
/// meanwhile (asked to sleep too, when it may). `saved` gets the time at
/// which nothing was active, starting or stopping any more. Never returns.
pub(crate) async fn stop_everything_here(
    dispatcher: &Arc<Dispatcher>,
    asked: HashSet<InstanceKey>,
    saved: &watch::Sender<Option<Instant>>,
) {
    let permits = Arc::new(Semaphore::new(LOCAL_STOP_CONCURRENCY));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut launched: HashSet<InstanceKey> = HashSet::new();
    let mut answered = dispatcher.stops_answered();
    loop {
        let new: Vec<ActorContext> =
            dispatcher.active_contexts().into_iter().filter(|ctx| !launched.contains(&key_of(ctx))).collect();
        if new.iter().any(|ctx| !asked.contains(&key_of(ctx))) {
            // Started after the drain began: asked to sleep too, when it may.
            for ctx in dispatcher.sleepable_contexts() {
                if !asked.contains(&key_of(&ctx)) && !launched.contains(&key_of(&ctx)) {
                    ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
                }
            }
        }
        let launching = new.len();
        for ctx in new {
            let key = key_of(&ctx);
            launched.insert(key.clone());
            in_flight.fetch_add(1, Ordering::AcqRel);
            let (dispatcher, permits, in_flight) = (dispatcher.clone(), permits.clone(), in_flight.clone());
            dispatcher.clone().tracker().spawn(async move {
                if let Ok(_permit) = permits.acquire().await {
                    dispatcher.stop_here(&key).await;
                }
                in_flight.fetch_sub(1, Ordering::AcqRel);
                dispatcher.count_stop_answered();
            });
        }
        if launching > 0 {
            tracing::debug!(target: crate::DRAIN_TRACE, actors = launching, "stopping here");
        }
        let census = dispatcher.census();
        let idle = census.active == 0 && census.starting == 0 && in_flight.load(Ordering::Acquire) == 0;
        if idle && saved.borrow().is_none() {
            saved.send_replace(Some(Instant::now()));
            tracing::debug!(target: crate::DRAIN_TRACE, "everything stopped here");
        }
        tokio::select! {
            _ = answered.changed() => {}
            _ = tokio::time::sleep(REASK_TICK) => {}
        }
    }
}

fn key_of(ctx: &ActorContext) -> InstanceKey {
    InstanceKey::new(ctx.actor_id(), ctx.generation())
}

/// Resolves [`ENGINE_CATCH_UP`] after everything was stopped here.
async fn engine_caught_up_or_not(saved: &watch::Sender<Option<Instant>>) {
    let mut saved = saved.subscribe();
    let at = match saved.wait_for(Option::is_some).await.map(|at| *at) {
        Ok(at) => at.unwrap_or_else(Instant::now),
        Err(_) => return std::future::pending().await,
    };
    tokio::time::sleep_until(at + ENGINE_CATCH_UP).await;
}

/// Step 2c: waits until the engine has stopped every generation asked to
/// sleep (its stop answered), re-asking for those it has not stopped yet.
/// Returns early when the engine stopped none of them for `stall`.
pub(crate) async fn sleep_first(dispatcher: &Dispatcher, sleepers: &[ActorContext], stall: Duration) {
    if sleepers.is_empty() {
        return;
    }
    let mut answered = dispatcher.stops_answered();
    let start = Instant::now();
    let mut progress = start;
    let mut reasks = Reasker::new(start);
    let mut tick = tokio::time::interval_at(start + REASK_TICK, REASK_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut waiting = sleepers.len();
    loop {
        // Not stopped by the engine yet: still active, or stopped here only.
        let unstopped: Vec<ActorContext> =
            sleepers.iter().filter(|ctx| dispatcher.unstopped_by_engine(&key_of(ctx))).cloned().collect();
        let pending = unstopped.len() + sleepers.iter().filter(|ctx| !ctx.is_generation_finished()).count();
        if pending == 0 {
            break;
        }
        if pending < waiting {
            waiting = pending;
            progress = Instant::now();
        }
        tokio::select! {
            _ = answered.changed() => {}
            _ = tick.tick() => {
                let quiet = Instant::now().duration_since(progress.max(reasks.last_ask())) >= STALL_NUDGE;
                reasks.ask_again(unstopped, quiet);
            }
            _ = tokio::time::sleep_until(progress + stall) => {
                tracing::warn!(
                    waiting = pending,
                    stall_ms = stall.as_millis() as u64,
                    "the engine stopped none of the actors put to sleep for a while; going on with the envoy's shutdown"
                );
                break;
            }
        }
    }
    tracing::debug!(target: crate::DRAIN_TRACE, actors = sleepers.len(), "actors put to sleep");
}

/// Step 3: the envoy's graceful shutdown; true once its loop ended.
async fn shut_envoy_down(envoy: &EnvoyHandle, dispatcher: &Dispatcher) -> bool {
    envoy.shutdown(false);
    tracing::debug!(target: crate::DRAIN_TRACE, census = ?dispatcher.census(), "envoy graceful shutdown sent");
    tokio::select! {
        _ = envoy.wait_stopped() => {
            tracing::debug!(target: crate::DRAIN_TRACE, "envoy loop ended");
            true
        }
        _ = nudge_stragglers(dispatcher) => false,
        _ = host_emptied(dispatcher) => {
            tracing::warn!(
                wait_ms = EMPTY_HOST_WAIT.as_millis() as u64,
                "every actor of this host has stopped but the envoy still waits; stopping it now"
            );
            false
        }
    }
}

/// Step 3, alongside the envoy's graceful shutdown. The engine (2.3.19)
/// sends no stop to actors it is still starting, when the host says it is
/// stopping or asks for a sleep, and the envoy waits for every actor: each
/// generation the engine has not stopped a second after the envoy said it
/// is stopping is asked to sleep (the normal sleep intent).
async fn nudge_stragglers(dispatcher: &Dispatcher) {
    let start = Instant::now();
    let mut reasks = Reasker::new(start);
    let mut tick = tokio::time::interval_at(start + REASK_TICK, REASK_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_report = start + PROGRESS_REPORT_INTERVAL;
    loop {
        tick.tick().await;
        let mut stragglers = dispatcher.active_contexts();
        stragglers.extend(dispatcher.awaiting_engine_contexts());
        reasks.ask_again(stragglers, false);
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
    use futures::stream::{self, StreamExt};

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
