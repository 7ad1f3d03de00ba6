//! The drain after a shutdown (docs/drain.md): every generation stops here
//! at once (bounded): `onSleep`, the final save. Each one that may sleep is
//! then put to sleep by this host itself: its sleep intent and its
//! `Stopped` go to the engine together, in one message, so the engine has
//! nothing left to ask of this host for it. Once
//! every actor task of the envoy has ended, the envoy's connection closes
//! and the drain waits for the engine to close it too (it has then read
//! every frame before the close). Actors that may not sleep go through the
//! envoy's graceful shutdown as in the reference: the engine moves them.
//!
//! Why not wait for the engine's stops: each one is the engine's workflow
//! for that actor running twice (the sleep intent, then the `Stopped`), and
//! the engine works through a hundred of them in 0.5 to 2 s here, with a
//! tail that its own load shedding sets. The sleep intent followed by the
//! `Stopped` is one run of that workflow, and it does not need this host:
//! the engine keeps the events it has read.

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
/// After a forced stop, how long we still wait for the envoy loop, at most
/// (never past the drain's deadline plus [`PAST_DEADLINE`]).
const FORCED_STOP_WAIT: Duration = Duration::from_secs(5);
/// How long background jobs (stops, waiters) may take after the envoy
/// stopped, at most (same limit).
const TRACKER_WAIT: Duration = Duration::from_secs(5);
/// What the last steps may take past the drain's deadline in all: the
/// envoy's forced stop and the end of background work. Nothing that waits
/// for the engine runs past the deadline.
const PAST_DEADLINE: Duration = Duration::from_millis(500);
/// How many generations stop here at once (each: `onSleep`, then
/// `serializeState` and the final save).
pub(crate) const LOCAL_STOP_CONCURRENCY: usize = 64;
/// Once every generation has stopped here, how long the envoy's actor
/// tasks get to report their `Stopped` (a local hop each). Past it, the
/// envoy's graceful shutdown handles what is left.
const REPORT_WAIT: Duration = Duration::from_secs(2);
const REPORT_POLL: Duration = Duration::from_millis(2);
/// How long the drain waits for the engine to close the envoy's
/// connection after ours closed it. The engine closes it once it has read
/// our close, and with it every frame sent before.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// How long step 3a' waits for the engine to take the sleeps sent from
/// here (a quiet engine: about 0.5 s for 30 actors, 2 s for a hundred; a
/// busy one took more than 5 s for 4 of 10, and then the host left while
/// the gateway still routed to it). Within the default drain bound (30 s).
const ENGINE_SLEEP_WAIT: Duration = Duration::from_secs(15);
const ENGINE_SLEEP_POLL: Duration = Duration::from_millis(5);
/// How long the drain waits for the engine to read the withdraw.
const WITHDRAW_READ_WAIT: Duration = Duration::from_secs(3);
/// Once the engine has read the withdraw, how long a start it placed here
/// just before gets to arrive (it is then stopped here like the others).
const WITHDRAW_SETTLE: Duration = Duration::from_millis(200);
/// On the graceful path (actors that may not sleep): once everything has
/// stopped here (all saved), how long the engine still gets to stop the
/// actors it has not stopped yet before the envoy goes down. Those it has
/// not stopped by then it finds gone when it declares the envoy lost (its
/// `envoy_lost_threshold`, 15 s by default).
pub(crate) const ENGINE_CATCH_UP: Duration = Duration::from_secs(2);
/// How often the graceful path looks for actors to ask again, how long
/// after the first ask an actor is asked again, and how many at most each
/// time.
const REASK_TICK: Duration = Duration::from_millis(50);
const REASK_AFTER: Duration = Duration::from_secs(1);
/// Each later ask of the same actor waits twice as long, up to this.
const REASK_MAX_AFTER: Duration = Duration::from_secs(8);
const REASK_BATCH: usize = 4;
/// How long the envoy may keep waiting once this host holds no generation.
const EMPTY_HOST_WAIT: Duration = Duration::from_secs(1);
const EMPTY_HOST_POLL: Duration = Duration::from_millis(100);
/// How often a drain that waits for the envoy says what it still holds.
const PROGRESS_REPORT_INTERVAL: Duration = Duration::from_secs(5);

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
    let saved = watch::Sender::new(false);
    let for_engine = Arc::new(AtomicUsize::new(0));
    let drained = async {
        tokio::select! {
            _ = stop_everything_here(dispatcher, &saved, &for_engine) => false,
            ended = async {
                everything_saved(&saved).await;
                hand_over(envoy, dispatcher, for_engine.load(Ordering::Acquire)).await
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
        let wait = (Instant::now() + FORCED_STOP_WAIT).min(last);
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

/// Step 2, for the whole drain: stops every active generation here,
/// [`LOCAL_STOP_CONCURRENCY`] at a time, including any that starts
/// meanwhile; each one that may sleep is then put to sleep by this host
/// ([`crate::actor::EngineLink::sleep_and_stop`]); `for_engine` counts
/// the others stopped here, whose stop is left to the engine. `saved`
/// turns true once nothing is active, starting or stopping here any more.
/// Never returns.
pub(crate) async fn stop_everything_here(
    dispatcher: &Arc<Dispatcher>,
    saved: &watch::Sender<bool>,
    for_engine: &Arc<AtomicUsize>,
) {
    let permits = Arc::new(Semaphore::new(LOCAL_STOP_CONCURRENCY));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut launched: HashSet<InstanceKey> = HashSet::new();
    let mut answered = dispatcher.stops_answered();
    loop {
        let new: Vec<ActorContext> =
            dispatcher.active_contexts().into_iter().filter(|ctx| !launched.contains(&key_of(ctx))).collect();
        let sleepable: HashSet<InstanceKey> =
            if new.is_empty() { HashSet::new() } else { dispatcher.sleepable_contexts().iter().map(key_of).collect() };
        let launching = new.len();
        for ctx in new {
            let key = key_of(&ctx);
            let sleeps = sleepable.contains(&key);
            launched.insert(key.clone());
            in_flight.fetch_add(1, Ordering::AcqRel);
            let (dispatcher, permits, in_flight) = (dispatcher.clone(), permits.clone(), in_flight.clone());
            let for_engine = for_engine.clone();
            dispatcher.clone().tracker().spawn(async move {
                if let Ok(_permit) = permits.acquire().await {
                    if dispatcher.stop_here(&key).await {
                        if sleeps {
                            ctx.link().sleep_and_stop(ctx.actor_id(), ctx.generation());
                            tracing::debug!(target: crate::DRAIN_TRACE, actor_id = %key.actor_id, generation = key.generation, "put to sleep here");
                        } else {
                            for_engine.fetch_add(1, Ordering::AcqRel);
                        }
                    }
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
        if idle && !*saved.borrow() {
            saved.send_replace(true);
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

/// Resolves once everything was stopped here.
async fn everything_saved(saved: &watch::Sender<bool>) {
    let mut saved = saved.subscribe();
    if saved.wait_for(|saved| *saved).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Step 3, once everything was stopped here: when every actor task of the
/// envoy has ended (each one put to sleep here has sent its `Stopped`), the
/// connection closes and the drain waits for the engine's close; otherwise
/// (`for_engine` actors that may not sleep, or actor tasks still running
/// after [`REPORT_WAIT`]) the envoy's graceful shutdown, for at most
/// [`ENGINE_CATCH_UP`]. True once the envoy's loop ended.
async fn hand_over(envoy: &EnvoyHandle, dispatcher: &Dispatcher, for_engine: usize) -> bool {
    let reported = for_engine == 0
        && tokio::time::timeout(REPORT_WAIT, async {
            while envoy.active_actor_count() > 0 {
                tokio::time::sleep(REPORT_POLL).await;
            }
        })
        .await
        .is_ok();
    if !reported {
        tracing::debug!(target: crate::DRAIN_TRACE, census = ?dispatcher.census(), remaining = envoy.active_actor_count(), "actors left for the engine");
        return tokio::select! {
            ended = shut_envoy_down(envoy, dispatcher) => ended,
            _ = tokio::time::sleep(ENGINE_CATCH_UP) => {
                tracing::warn!(
                    remaining = envoy.active_actor_count(),
                    wait_ms = ENGINE_CATCH_UP.as_millis() as u64,
                    "every actor is stopped and its state saved, but the engine has not stopped all of them yet; \
                     stopping the envoy now (the engine finds them gone once it declares this host lost)"
                );
                false
            }
        };
    }
    tracing::debug!(target: crate::DRAIN_TRACE, "every actor reported stopped");
    // Step 3a'': out of placement, once the engine took every sleep: an
    // actor woken meanwhile would start on a host about to leave. While
    // the engine still has an actor running here, the withdraw would send
    // it away at once, to no host if this is the only one (docs/drain.md,
    // "After the last stop"), so it is skipped.
    if engine_took_the_sleeps(envoy).await {
        // Under load the engine may read the withdraw only seconds later,
        // placing actors here until then: wait until it has.
        if tokio::time::timeout(WITHDRAW_READ_WAIT, envoy.withdraw()).await.is_err() {
            tracing::warn!(
                wait_ms = WITHDRAW_READ_WAIT.as_millis() as u64,
                "the engine has not read the withdraw yet; leaving anyway"
            );
        }
        tokio::time::sleep(WITHDRAW_SETTLE).await;
        engine_took_the_sleeps(envoy).await;
    }
    let mut session = envoy.subscribe_connection_session();
    envoy.shutdown(true);
    if tokio::time::timeout(FORCED_STOP_WAIT, envoy.wait_stopped()).await.is_err() {
        tracing::warn!("the envoy's loop did not end after its stop");
        return true;
    }
    tracing::debug!(target: crate::DRAIN_TRACE, "envoy loop ended");
    match tokio::time::timeout(CLOSE_WAIT, session.wait_for(|s| *s == 0)).await {
        Ok(_) => tracing::debug!(target: crate::DRAIN_TRACE, "connection closed"),
        Err(_) => tracing::warn!(
            wait_ms = CLOSE_WAIT.as_millis() as u64,
            "the engine did not close the envoy's connection in time"
        ),
    }
    true
}

/// Step 3a': waits (at most [`ENGINE_SLEEP_WAIT`]) until the engine sent
/// its stop for every generation put to sleep here. The engine sends it
/// once the actor's workflow has taken the sleep intent and marked the
/// actor asleep; before that the gateway may still send a request for it
/// to this host, and one that arrives after the connection closed ends in
/// an error for the client (docs/drain.md, "After the last stop").
async fn engine_took_the_sleeps(envoy: &EnvoyHandle) -> bool {
    let waited = tokio::time::timeout(ENGINE_SLEEP_WAIT, async {
        let mut next_report = Instant::now() + PROGRESS_REPORT_INTERVAL;
        loop {
            let awaiting = envoy.awaiting_engine_stop_count().await.unwrap_or(0);
            if envoy.active_actor_count() == 0 && awaiting == 0 {
                return;
            }
            if Instant::now() >= next_report {
                tracing::info!(awaiting, "waiting for the engine to take the sleeps sent from here");
                next_report += PROGRESS_REPORT_INTERVAL;
            }
            tokio::time::sleep(ENGINE_SLEEP_POLL).await;
        }
    })
    .await;
    if waited.is_ok() {
        tracing::debug!(target: crate::DRAIN_TRACE, "the engine took every sleep");
        return true;
    }
    let awaiting = envoy.awaiting_engine_stop_count().await.unwrap_or(0);
    tracing::warn!(
        wait_ms = ENGINE_SLEEP_WAIT.as_millis() as u64,
        awaiting,
        "the engine has not taken every sleep yet; leaving anyway (a request it still routes here fails)"
    );
    false
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
        reasks.ask_again(stragglers);
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
/// [`REASK_TICK`], those due first first.
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
}

impl Reasker {
    fn new(since: Instant) -> Self {
        Self { due: HashMap::new(), since }
    }

    fn ask_again(&mut self, candidates: Vec<ActorContext>) {
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
        let count = due.min(REASK_BATCH);
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
    }
}

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
