//! Step 3 of the drain (docs/drain.md): once everything was stopped here,
//! hand the host over to the engine and leave. The usual path closes the
//! connection once the engine took every sleep sent from here and read the
//! withdraw; actors that may not sleep go through the envoy's graceful
//! shutdown instead, and the engine moves them.

use std::collections::HashMap;
use std::time::Duration;

use rivet_envoy_client::handle::EnvoyHandle;
use tokio::sync::watch;
use tokio::time::Instant;

use super::stop_here::{settled_when, Settled};
use crate::actor::ActorContext;
use crate::dispatcher::Dispatcher;

/// Once every generation has stopped here, how long the envoy's actor
/// tasks get to report their `Stopped` (a local hop each). Past it, the
/// envoy's graceful shutdown handles what is left.
const REPORT_WAIT: Duration = Duration::from_secs(2);
const REPORT_POLL: Duration = Duration::from_millis(2);
/// How long the drain waits for the engine to close the envoy's
/// connection after ours closed it. The engine closes it once it has read
/// our close, and with it every frame sent before.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// After the envoy's stop, how long we still wait for its loop, at most
/// (the drain's forced stop uses it too, never past its deadline plus
/// `PAST_DEADLINE`).
pub(super) const ENVOY_STOP_WAIT: Duration = Duration::from_secs(5);
/// How long step 3a' waits for the engine to take the sleeps sent from
/// here (a quiet engine: about 0.5 s for 30 actors, 2 s for a hundred; a
/// busy one took more than 5 s for 4 of 10, and then the host left while
/// the gateway still routed to it). Within the default drain bound (30 s).
const ENGINE_SLEEP_WAIT: Duration = Duration::from_secs(15);
const ENGINE_SLEEP_POLL: Duration = Duration::from_millis(5);
/// How long step 3a' waits with no sleep taken before it asks again for
/// the ones not taken yet, and how often it asks then (a few each time).
const STALL_NUDGE_AFTER: Duration = Duration::from_secs(3);
const STALL_NUDGE_EVERY: Duration = Duration::from_millis(500);
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
const ENGINE_CATCH_UP: Duration = Duration::from_secs(2);
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
/// Before the close: once a request for a generation stopped here was
/// refused during the drain, the host stays connected until none has come
/// for this long (the gateway routes by what it last saw, a little behind
/// the engine's workflow), at most [`GATEWAY_QUIET_MAX`].
const GATEWAY_QUIET: Duration = Duration::from_millis(500);
const GATEWAY_QUIET_MAX: Duration = Duration::from_secs(3);
const GATEWAY_QUIET_POLL: Duration = Duration::from_millis(20);
/// How often a drain that waits for the envoy says what it still holds.
const PROGRESS_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Step 3, once everything present at the start was stopped here. When
/// every actor task of the envoy but the held ones has ended (each one put
/// to sleep here has sent its `Stopped`): 3a' the engine takes the sleeps,
/// 3a'' the host withdraws, 3a''' the held generations are released and
/// stopped here too, 3a' once more, then the connection closes and the
/// drain waits for the engine's close. Otherwise (`for_engine` actors that
/// may not sleep, or actor tasks still running after [`REPORT_WAIT`]) the
/// envoy's graceful shutdown, for at most [`ENGINE_CATCH_UP`]. True once
/// the envoy's loop ended.
pub(super) async fn hand_over(
    envoy: &EnvoyHandle,
    dispatcher: &Dispatcher,
    for_engine: usize,
    settled: &watch::Sender<Settled>,
    release: &watch::Sender<bool>,
    refused_at_start: i64,
) -> bool {
    let held = || settled.borrow().held;
    let reported = for_engine == 0 && all_reported_but(envoy, held).await;
    if !reported {
        // The engine moves whatever is left here, the held ones included.
        release.send_replace(true);
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
    tracing::debug!(target: crate::DRAIN_TRACE, held = held(), "every actor reported stopped");
    // Step 3a'': out of placement, once the engine took every sleep: an
    // actor woken meanwhile starts here and is held. While the engine
    // still has an actor it was asked to put to sleep running here, the
    // withdraw would send it away at once, to no host if this is the only
    // one (docs/drain.md, "After the last stop"), so it is skipped.
    let withdrawn = engine_took_the_sleeps(envoy, dispatcher, held).await;
    if withdrawn {
        // Under load the engine may read the withdraw only seconds later,
        // placing actors here until then: wait until it has.
        if tokio::time::timeout(WITHDRAW_READ_WAIT, envoy.withdraw()).await.is_err() {
            tracing::warn!(
                wait_ms = WITHDRAW_READ_WAIT.as_millis() as u64,
                "the engine has not read the withdraw yet; leaving anyway"
            );
        }
        tokio::time::sleep(WITHDRAW_SETTLE).await;
    }
    // Step 3a''': the held generations stop here like the others (the
    // withdraw may already have the engine moving them).
    release.send_replace(true);
    settled_when(settled, |s| s.idle && s.released).await;
    if held_ones_reported(envoy).await && withdrawn {
        engine_took_the_sleeps(envoy, dispatcher, || 0).await;
    }
    gateway_quiet(envoy, refused_at_start).await;
    close(envoy).await
}

/// Step 3a'''': the gateway may still send a request here for an actor
/// whose sleep the engine took a moment ago; arriving before the close,
/// it is answered `actor.restarting` and retried on the next generation,
/// arriving after, it waits out the gateway's 30 s response timeout
/// (measured: a request sent 450 ms after the engine's stop, 30 s lost).
/// Waits only if a request was refused during the drain (`refused_at_start`
/// is the envoy's figure when it began), until none came for
/// [`GATEWAY_QUIET`], at most [`GATEWAY_QUIET_MAX`].
async fn gateway_quiet(envoy: &EnvoyHandle, refused_at_start: i64) {
    if envoy.last_refused_request_ms() == refused_at_start {
        return;
    }
    let quiet_ms = GATEWAY_QUIET.as_millis() as i64;
    let waited = tokio::time::timeout(GATEWAY_QUIET_MAX, async {
        while crate::actor::clock::now_ms() - envoy.last_refused_request_ms() < quiet_ms {
            tokio::time::sleep(GATEWAY_QUIET_POLL).await;
        }
    })
    .await;
    tracing::debug!(target: crate::DRAIN_TRACE, quiet = waited.is_ok(), "gateway quiet");
}

/// Waits (at most [`REPORT_WAIT`]) until the envoy holds no actor task
/// but `held()` ones.
async fn all_reported_but(envoy: &EnvoyHandle, held: impl Fn() -> usize) -> bool {
    tokio::time::timeout(REPORT_WAIT, async {
        while envoy.active_actor_count() > held() {
            tokio::time::sleep(REPORT_POLL).await;
        }
    })
    .await
    .is_ok()
}

/// After the release: waits for the last actor tasks' reports.
async fn held_ones_reported(envoy: &EnvoyHandle) -> bool {
    let reported = all_reported_but(envoy, || 0).await;
    if !reported {
        tracing::warn!(
            remaining = envoy.active_actor_count(),
            "actors started during the drain have not reported their stop; leaving anyway"
        );
    }
    reported
}

/// The envoy stops at once (its queued frames, then its close), and the
/// drain waits for its loop, then for the engine's end of the connection.
async fn close(envoy: &EnvoyHandle) -> bool {
    let mut session = envoy.subscribe_connection_session();
    envoy.shutdown(true);
    if tokio::time::timeout(ENVOY_STOP_WAIT, envoy.wait_stopped()).await.is_err() {
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
/// its stop for every generation put to sleep here, and the envoy holds no
/// actor task but `held()` ones. The engine sends that stop once the
/// actor's workflow has taken the sleep intent and marked the actor
/// asleep; before that the gateway may still send a request for it to
/// this host, and one that arrives after the connection closed ends in an
/// error for the client (docs/drain.md, "After the last stop").
///
/// When the count has not moved for [`STALL_NUDGE_AFTER`], the sleeps not
/// taken yet are asked for again, a few at a time ([`Reasker`]): each ask
/// is a signal, which makes the engine's workflow worker look again at
/// every ready workflow, a stalled one among them (docs/drain.md, 3a').
async fn engine_took_the_sleeps(envoy: &EnvoyHandle, dispatcher: &Dispatcher, held: impl Fn() -> usize) -> bool {
    let waited = tokio::time::timeout(ENGINE_SLEEP_WAIT, async {
        let start = Instant::now();
        let mut next_report = start + PROGRESS_REPORT_INTERVAL;
        let mut reasks = Reasker::new(start);
        let (mut last_awaiting, mut moved_at, mut next_nudge) = (usize::MAX, start, start);
        loop {
            // The envoy counts every generation the engine has not stopped,
            // so the held ones, still running, are among them.
            let awaiting = envoy.awaiting_engine_stop_count().await.unwrap_or(0);
            let held = held();
            if envoy.active_actor_count() <= held && awaiting <= held {
                return;
            }
            let now = Instant::now();
            if awaiting != last_awaiting {
                (last_awaiting, moved_at) = (awaiting, now);
            } else if now.duration_since(moved_at) >= STALL_NUDGE_AFTER && now >= next_nudge {
                reasks.ask_again(dispatcher.awaiting_engine_contexts());
                next_nudge = now + STALL_NUDGE_EVERY;
            }
            if now >= next_report {
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
