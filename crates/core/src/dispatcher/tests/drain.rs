//! The drain's stop-here step (docs/drain.md, step 2) on a paused clock,
//! with an in-memory engine link that records what it is asked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::doubles::*;
use crate::actor::context::ActorIdentity;
use crate::actor::link::MemoryLink;
use crate::actor::{storage, ActorConfig, ActorContext, ActorFactory, ActorKey, Inbox};
use crate::dispatcher::{Dispatcher, InstanceKey, StopHandle, StopReason};
use crate::registry::drain::{stop_everything_here, Settled};

const WORKER: &str = "worker";

struct Host {
    dispatcher: Arc<Dispatcher>,
    hooks: TestHooks,
    link: Arc<MemoryLink>,
}

impl Host {
    /// `counter` actors may sleep; `worker` actors are `noSleep`.
    fn new() -> Self {
        let hooks = TestHooks::default();
        let factories = HashMap::from([
            (NAME.to_string(), ActorFactory::new(ActorConfig::default(), Arc::new(hooks.clone()))),
            (
                WORKER.to_string(),
                ActorFactory::new(ActorConfig { no_sleep: true, ..Default::default() }, Arc::new(hooks.clone())),
            ),
        ]);
        Self { dispatcher: Dispatcher::new(factories), hooks, link: Arc::new(MemoryLink::default()) }
    }

    async fn start(&self, name: &str, actor_id: &str) -> ActorContext {
        let (ctx, inbox) = self.context(name, actor_id);
        self.dispatcher.start_actor(name, ctx.clone(), inbox).await.expect("start");
        ctx
    }

    /// Generation 1 of `actor_id`, not started yet.
    fn context(&self, name: &str, actor_id: &str) -> (ActorContext, Inbox) {
        let factory = self.dispatcher.factory(name).unwrap();
        let (config, hooks) = (factory.config.as_ref().clone(), factory.hooks.clone());
        ActorContext::new(
            ActorIdentity {
                actor_id: actor_id.into(),
                generation: 1,
                name: name.into(),
                key: ActorKey(vec![actor_id.into()]),
                region: String::new(),
                input: None,
            },
            CancellationToken::new(),
            self.link.clone(),
            &config,
            Some(hooks),
        )
    }

    fn slept_here(&self) -> Vec<(String, u32)> {
        let mut v = self.link.slept_here.lock().unwrap().clone();
        v.sort();
        v
    }

    fn sleep_requests(&self) -> Vec<(String, u32)> {
        self.link.sleep_requests.lock().unwrap().clone()
    }
}

fn key_of(ctx: &ActorContext) -> InstanceKey {
    InstanceKey::new(ctx.actor_id(), ctx.generation())
}

/// Where a stop handle's outcome is kept.
type Seen = Arc<std::sync::Mutex<Option<Result<(), String>>>>;

/// A stop handle whose outcome can be read back.
fn recorded_stop() -> (StopHandle, Seen) {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let slot = seen.clone();
    (StopHandle::new(move |r: anyhow::Result<()>| *slot.lock().unwrap() = Some(r.map_err(|e| format!("{e:#}")))), seen)
}

/// The engine's sleep stop for generation 1 of `actor_id`, held inside
/// `onSleep` until the returned gate is released.
async fn engine_stop_held_in_on_sleep(
    host: &Host,
    actor_id: &str,
) -> (Gate, Seen, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let gate = Gate::new();
    *host.hooks.sleep_gate.lock().unwrap() = Some(gate.clone());
    let (stop, seen) = recorded_stop();
    let engine = {
        let (d, id) = (host.dispatcher.clone(), actor_id.to_string());
        tokio::spawn(async move { d.stop_actor(&id, 1, StopReason::SleepIntent, stop).await })
    };
    gate.entered().await;
    (gate, seen, engine)
}

/// The drain's stop-here step in a task: where it stands, its release,
/// how many stops it left to the engine, and the task.
struct StopHere {
    settled: tokio::sync::watch::Sender<Settled>,
    release: tokio::sync::watch::Sender<bool>,
    for_engine: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl StopHere {
    /// Resolves once everything but the held generations stopped here.
    async fn idle(&self) -> Settled {
        *self.settled.subscribe().wait_for(|s| s.idle).await.unwrap()
    }
}

fn spawn_stop_everything_here(host: &Host) -> StopHere {
    let settled = tokio::sync::watch::Sender::new(Settled::default());
    let release = tokio::sync::watch::Sender::new(false);
    let for_engine = Arc::new(AtomicUsize::new(0));
    let task = {
        let (d, s, r, f) = (host.dispatcher.clone(), settled.clone(), release.subscribe(), for_engine.clone());
        tokio::spawn(async move { stop_everything_here(&d, &s, r, &f).await })
    };
    StopHere { settled, release, for_engine, task }
}

#[tokio::test(start_paused = true)]
async fn a_generation_stopped_here_is_saved_and_the_engines_stop_is_answered_at_once() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    ctx.set_state(b"before the stop".to_vec());

    assert!(host.dispatcher.stop_here(&key_of(&ctx)).await);

    assert!(ctx.is_generation_finished(), "onSleep ran, the state was saved, the writes are closed");
    assert_eq!(host.hooks.calls().iter().filter(|c| c.as_str() == "onSleep:1").count(), 1);
    assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"before the stop");
    assert!(host.dispatcher.awaiting_engine(&key_of(&ctx)));
    assert_eq!(host.dispatcher.census().awaiting_engine, 1);
    assert!(!host.dispatcher.is_empty(), "the envoy still waits for the engine's stop");

    let (stop, seen) = recorded_stop();
    host.dispatcher.stop_actor("a", 1, StopReason::SleepIntent, stop).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
    assert!(!host.dispatcher.awaiting_engine(&key_of(&ctx)));
    assert!(host.dispatcher.is_empty());
    assert_eq!(host.hooks.calls().iter().filter(|c| c.as_str() == "onSleep:1").count(), 1, "onSleep ran once");
}

#[tokio::test(start_paused = true)]
async fn the_engines_stop_during_a_stop_here_waits_for_its_outcome() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    let gate = Gate::new();
    *host.hooks.sleep_gate.lock().unwrap() = Some(gate.clone());
    let local = {
        let (d, key) = (host.dispatcher.clone(), key_of(&ctx));
        tokio::spawn(async move { d.stop_here(&key).await })
    };
    gate.entered().await;

    let (stop, seen) = recorded_stop();
    let engine = {
        let d = host.dispatcher.clone();
        tokio::spawn(async move { d.stop_actor("a", 1, StopReason::GoingAway, stop).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(*seen.lock().unwrap(), None, "answered only once the stop here ended");

    gate.release();
    assert!(local.await.unwrap());
    engine.await.unwrap().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
    assert_eq!(host.hooks.calls().iter().filter(|c| c.as_str() == "onSleep:1").count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_generation_the_engine_already_stops_is_not_stopped_here() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    let (gate, seen, engine) = engine_stop_held_in_on_sleep(&host, "a").await;

    assert!(!host.dispatcher.stop_here(&key_of(&ctx)).await);
    assert!(!host.dispatcher.awaiting_engine(&key_of(&ctx)));

    gate.release();
    engine.await.unwrap().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
}

/// Runs the drain's stop-here step until everything is stopped here;
/// returns how many stops it left to the engine.
async fn stop_all_here(host: &Host) -> usize {
    let step = spawn_stop_everything_here(host);
    step.idle().await;
    step.task.abort();
    step.for_engine.load(Ordering::Acquire)
}

#[tokio::test(start_paused = true)]
async fn everything_stops_here_at_once_and_each_sleeper_is_put_to_sleep_here() {
    let host = Host::new();
    let mut actors = Vec::new();
    for i in 0..20 {
        let ctx = host.start(if i % 4 == 0 { WORKER } else { NAME }, &format!("a{i}")).await;
        ctx.set_state(format!("state {i}").into_bytes());
        actors.push(ctx);
    }

    let for_engine = stop_all_here(&host).await;

    for (i, ctx) in actors.iter().enumerate() {
        assert!(ctx.is_generation_finished(), "{}", ctx.actor_id());
        assert_eq!(storage::load_record(ctx).await.unwrap().unwrap().state, format!("state {i}").into_bytes());
    }
    let mut sleepers: Vec<(String, u32)> = (0..20).filter(|i| i % 4 != 0).map(|i| (format!("a{i}"), 1)).collect();
    sleepers.sort();
    assert_eq!(host.slept_here(), sleepers, "each one that may sleep, after its final save");
    assert_eq!(for_engine, 5, "the noSleep workers are left to the engine");
    assert!(host.sleep_requests().is_empty(), "no sleep intent on its own: it goes with the stop");
    assert_eq!(host.dispatcher.census().awaiting_engine, 20);
}

#[tokio::test(start_paused = true)]
async fn a_generation_that_starts_during_the_drain_serves_until_released_then_sleeps_here_too() {
    let host = Host::new();
    host.start(NAME, "a").await;
    let step = spawn_stop_everything_here(&host);
    step.idle().await;
    let late = host.start(NAME, "late").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Held: it serves the request that woke it (docs/drain.md, step 2).
    assert!(!late.is_generation_finished());
    assert!(host.dispatcher.active_actor("late").is_ok());
    let held = *step.settled.subscribe().wait_for(|s| s.held == 1).await.unwrap();
    assert!(held.idle, "a held generation does not keep the drain from going on");
    assert_eq!(host.slept_here(), vec![("a".to_string(), 1)]);

    step.release.send_replace(true);
    let settled = *step.settled.subscribe().wait_for(|s| s.idle && s.released).await.unwrap();
    assert_eq!(settled.held, 0);
    assert!(late.is_generation_finished());
    assert_eq!(host.slept_here(), vec![("a".to_string(), 1), ("late".to_string(), 1)]);
    step.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_generation_that_starts_after_the_release_serves_a_moment_before_it_sleeps_here() {
    let host = Host::new();
    host.start(NAME, "a").await;
    let step = spawn_stop_everything_here(&host);
    step.idle().await;
    step.release.send_replace(true);
    step.settled.subscribe().wait_for(|s| s.released).await.unwrap();

    // Started (woken by a request) after the host withdrew: the gateway has
    // yet to send it that request, so it is not stopped at once.
    let late = host.start(NAME, "late").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!late.is_generation_finished(), "it serves its first second");
    assert!(!step.settled.borrow().idle, "the drain waits for it");

    let settled = *step.settled.subscribe().wait_for(|s| s.idle).await.unwrap();
    assert_eq!(settled.held, 0);
    assert!(late.is_generation_finished());
    assert_eq!(host.slept_here(), vec![("a".to_string(), 1), ("late".to_string(), 1)]);
    step.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_generation_still_starting_when_the_drain_begins_is_not_held() {
    let host = Host::new();
    let gate = Gate::new();
    *host.hooks.wake_gate.lock().unwrap() = Some(gate.clone());
    let (ctx, inbox) = host.context(NAME, "starting");
    let starting = {
        let (d, ctx) = (host.dispatcher.clone(), ctx.clone());
        tokio::spawn(async move { d.start_actor(NAME, ctx, inbox).await })
    };
    gate.entered().await;
    let step = spawn_stop_everything_here(&host);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!step.settled.borrow().idle, "the drain waits for it");

    gate.release();
    starting.await.unwrap().unwrap();
    let settled = step.idle().await;
    assert_eq!(settled.held, 0);
    assert!(ctx.is_generation_finished());
    assert_eq!(host.slept_here(), vec![("starting".to_string(), 1)]);
    step.task.abort();
}

#[tokio::test(start_paused = true)]
async fn the_envoys_stop_for_a_generation_put_to_sleep_here_is_answered_with_its_outcome() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    ctx.set_state(b"saved before the report".to_vec());
    assert_eq!(stop_all_here(&host).await, 0);
    assert_eq!(host.slept_here(), vec![("a".to_string(), 1)]);

    // The envoy answers `sleep_and_stop` by running the stop callback, as
    // for an engine's stop; the outcome goes into its `Stopped`.
    let (stop, seen) = recorded_stop();
    host.dispatcher.stop_actor("a", 1, StopReason::SleepIntent, stop).await.unwrap();

    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
    assert!(host.dispatcher.is_empty());
    assert_eq!(host.hooks.calls().iter().filter(|c| c.as_str() == "onSleep:1").count(), 1, "onSleep ran once");
    assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"saved before the report");
}

#[tokio::test(start_paused = true)]
async fn a_generation_whose_stop_the_engine_started_is_not_put_to_sleep_here() {
    let host = Host::new();
    host.start(NAME, "a").await;
    let (gate, seen, engine) = engine_stop_held_in_on_sleep(&host, "a").await;
    let step = spawn_stop_everything_here(&host);
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.release();
    engine.await.unwrap().unwrap();
    step.idle().await;

    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
    assert!(host.slept_here().is_empty(), "its own stop reports it");
    assert_eq!(step.for_engine.load(Ordering::Acquire), 0);
    step.task.abort();
}

#[tokio::test(start_paused = true)]
async fn actors_that_may_not_sleep_are_not_asked_to() {
    let host = Host::new();
    host.start(NAME, "sleeper").await;
    host.start(WORKER, "worker").await;
    *host.hooks.has_run.lock().unwrap() = true;
    let runner = host.start(NAME, "runner").await;
    assert!(runner.run_handler_active());

    let sleepable: Vec<String> =
        host.dispatcher.sleepable_contexts().iter().map(|ctx| ctx.actor_id().to_string()).collect();
    assert_eq!(sleepable, vec!["sleeper".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_only_once_the_envoy_has_written_every_response_of_the_generation() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    host.link.unsent_responses.send_replace(1);
    let (stop, seen) = recorded_stop();
    let engine = {
        let d = host.dispatcher.clone();
        tokio::spawn(async move { d.stop_actor("a", 1, StopReason::SleepIntent, stop).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(*seen.lock().unwrap(), None, "a response is still being written");
    assert!(!ctx.is_generation_finished());

    host.link.unsent_responses.send_replace(0);
    engine.await.unwrap().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
    assert!(ctx.is_generation_finished());
}

#[tokio::test(start_paused = true)]
async fn the_wait_for_unsent_responses_ends_with_the_grace_period() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    ctx.set_state(b"kept".to_vec());
    host.link.unsent_responses.send_replace(1);
    let started = tokio::time::Instant::now();
    let (stop, seen) = recorded_stop();
    host.dispatcher.stop_actor("a", 1, StopReason::SleepIntent, stop).await.unwrap();
    let grace = ActorConfig::default().sleep_grace_period;

    assert!(started.elapsed() >= grace, "waited for the response until the grace period ended");
    assert!(started.elapsed() < grace + Duration::from_secs(1));
    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
    assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"kept", "the final save still ran");
}
