//! Step 2 of the drain (docs/drain.md): every generation that was here when
//! the drain began stops here at once, and each one that may sleep is put
//! to sleep by this host.
//!
//! A generation the engine starts here *during* the drain is held: it
//! serves like any other until the drain releases it, after the engine has
//! read the host's withdraw. Stopping it at once, as we did first, sent the
//! request that woke it back as `actor.restarting`, and the engine placed
//! the retry on this same host (the emptiest of the pool) until it was
//! withdrawn: a loop of wakes and sleeps that ended in 20-30 s stalls and
//! `core.internal_error` for the client.
//!
//! A held generation also serves at least [`HELD_MIN_SERVE`] once it is
//! active, released or not: one that finished starting just after the
//! release was stopped within 50 ms, before the gateway had sent it the
//! request it was woken for, and engine 2.3.19's gateway never sent that
//! request to the next generation either (a 30 s stall, then
//! `core.internal_error`; the rolling-deploy test, about 1 run in 8).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use crate::actor::ActorContext;
use crate::dispatcher::{Dispatcher, InstanceKey};

/// How many generations stop here at once (each: `onSleep`, then
/// `serializeState` and the final save).
const LOCAL_STOP_CONCURRENCY: usize = 64;
/// How often the step looks for generations to stop besides the stops it
/// is told about.
const LOOK_AGAIN: Duration = Duration::from_millis(50);
/// How long a generation started during the drain serves at least, from
/// the first look that found it active.
const HELD_MIN_SERVE: Duration = Duration::from_secs(1);

/// Where step 2 stands, published after each look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Nothing left to stop here but the held generations.
    pub idle: bool,
    /// The step has seen the release: nothing is held any more.
    pub released: bool,
    /// Generations started during the drain and not stopped yet (starting
    /// ones included): each is an envoy actor that stays until released.
    pub held: usize,
}

/// Stops here every generation present when it was called,
/// [`LOCAL_STOP_CONCURRENCY`] at a time, and, once `release` turns true,
/// every generation started since; each one that may sleep is then put to
/// sleep by this host ([`crate::actor::EngineLink::sleep_and_stop`]).
/// `for_engine` counts the others stopped here, whose stop is left to the
/// engine. Never returns.
pub(crate) async fn stop_everything_here(
    dispatcher: &Arc<Dispatcher>,
    settled: &watch::Sender<Settled>,
    mut release: watch::Receiver<bool>,
    for_engine: &Arc<AtomicUsize>,
) {
    let first: HashSet<InstanceKey> = dispatcher.unstopped_keys().into_iter().collect();
    let permits = Arc::new(Semaphore::new(LOCAL_STOP_CONCURRENCY));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut launched: HashSet<InstanceKey> = HashSet::new();
    // Generations started during the drain: when a look first found each active.
    let mut active_since: HashMap<InstanceKey, tokio::time::Instant> = HashMap::new();
    let mut answered = dispatcher.stops_answered();
    // A drain that dropped its sender has nothing to wait for any more.
    let mut sender_gone = false;
    loop {
        let released = *release.borrow_and_update() || sender_gone;
        let active = dispatcher.active_contexts();
        let looked_at = tokio::time::Instant::now();
        for ctx in &active {
            let key = key_of(ctx);
            if !first.contains(&key) {
                active_since.entry(key).or_insert(looked_at);
            }
        }
        let served =
            |key: &InstanceKey| active_since.get(key).is_some_and(|since| looked_at - *since >= HELD_MIN_SERVE);
        let to_stop = |key: &InstanceKey| !launched.contains(key) && (first.contains(key) || (released && served(key)));
        let new: Vec<ActorContext> = active.into_iter().filter(|ctx| to_stop(&key_of(ctx))).collect();
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
            tracing::debug!(target: crate::DRAIN_TRACE, actors = launching, released, "stopping here");
        }
        let unstopped = dispatcher.unstopped_keys();
        let held = unstopped.iter().filter(|key| !released && !first.contains(key) && !launched.contains(key)).count();
        let idle = in_flight.load(Ordering::Acquire) == 0 && held == unstopped.len();
        let now = Settled { idle, released, held };
        let was = *settled.borrow();
        if now != was {
            if idle && !was.idle {
                tracing::debug!(target: crate::DRAIN_TRACE, held, released, "everything stopped here");
            }
            if held > was.held {
                tracing::debug!(target: crate::DRAIN_TRACE, held, "a generation started during the drain is held");
            }
            settled.send_replace(now);
        }
        tokio::select! {
            _ = answered.changed() => {}
            changed = release.changed(), if !released => sender_gone = changed.is_err(),
            _ = tokio::time::sleep(LOOK_AGAIN) => {}
        }
    }
}

pub(super) fn key_of(ctx: &ActorContext) -> InstanceKey {
    InstanceKey::new(ctx.actor_id(), ctx.generation())
}

/// Resolves once `settled` says `done`; never if its step is gone.
pub(super) async fn settled_when(settled: &watch::Sender<Settled>, done: impl Fn(&Settled) -> bool) {
    let mut rx = settled.subscribe();
    if rx.wait_for(|s| done(s)).await.is_err() {
        std::future::pending::<()>().await;
    }
}
