//! The drain's sleep-first step (docs/drain.md, step 2) against an engine
//! double that answers sleep intents with stops, on a paused clock.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::doubles::*;
use crate::actor::context::ActorIdentity;
use crate::actor::link::MemoryLink;
use crate::actor::{storage, ActorConfig, ActorContext, ActorFactory, ActorKey};
use crate::dispatcher::{Dispatcher, InstanceKey, StopHandle, StopReason};
use crate::registry::drain::{sleep_first, stop_everything_here};

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
        let config = self.dispatcher.factory(name).unwrap().config.as_ref().clone();
        let ctx = ActorContext::new(
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
        );
        self.dispatcher.start_actor(name, ctx.clone()).await.expect("start");
        ctx
    }

    fn sleep_requests(&self) -> Vec<(String, u32)> {
        self.link.sleep_requests.lock().unwrap().clone()
    }

    /// An engine that answers each sleep intent with a stop, except the
    /// first `ignore` intents of the actors in `deaf` (as Engine 2.3.19
    /// does for an actor it is still starting).
    fn spawn_engine(&self, deaf: &[&str], ignore: usize) -> tokio::task::JoinHandle<()> {
        let (dispatcher, link) = (self.dispatcher.clone(), self.link.clone());
        let deaf: HashSet<String> = deaf.iter().map(|s| s.to_string()).collect();
        tokio::spawn(async move {
            let mut seen = 0;
            let mut ignored: HashMap<String, usize> = HashMap::new();
            let mut stopped = HashSet::new();
            loop {
                let requests = link.sleep_requests.lock().unwrap().clone();
                for (actor_id, generation) in requests.into_iter().skip(seen) {
                    seen += 1;
                    let count = ignored.entry(actor_id.clone()).or_default();
                    if deaf.contains(&actor_id) && *count < ignore {
                        *count += 1;
                        continue;
                    }
                    if !stopped.insert(actor_id.clone()) {
                        continue;
                    }
                    let d = dispatcher.clone();
                    tokio::spawn(async move {
                        let _ =
                            d.stop_actor(&actor_id, generation, StopReason::SleepIntent, StopHandle::new(|_| {})).await;
                    });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
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
    let gate = Gate::new();
    *host.hooks.sleep_gate.lock().unwrap() = Some(gate.clone());
    let (stop, seen) = recorded_stop();
    let engine = {
        let d = host.dispatcher.clone();
        tokio::spawn(async move { d.stop_actor("a", 1, StopReason::SleepIntent, stop).await })
    };
    gate.entered().await;

    assert!(!host.dispatcher.stop_here(&key_of(&ctx)).await);
    assert!(!host.dispatcher.awaiting_engine(&key_of(&ctx)));

    gate.release();
    engine.await.unwrap().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(())));
}

#[tokio::test(start_paused = true)]
async fn everything_stops_here_at_once_and_then_counts_as_saved() {
    let host = Host::new();
    let mut actors = Vec::new();
    for i in 0..20 {
        let ctx = host.start(if i % 4 == 0 { WORKER } else { NAME }, &format!("a{i}")).await;
        ctx.set_state(format!("state {i}").into_bytes());
        actors.push(ctx);
    }
    let saved = tokio::sync::watch::Sender::new(None);
    let asked: HashSet<InstanceKey> = host.dispatcher.sleepable_contexts().iter().map(key_of).collect();
    assert_eq!(asked.len(), 15);
    // One more starts after the drain asked the others to sleep: stopped
    // here too, and asked to sleep.
    let late = host.start(NAME, "late").await;
    let stopper = {
        let (d, saved) = (host.dispatcher.clone(), saved.clone());
        tokio::spawn(async move { stop_everything_here(&d, asked, &saved).await })
    };
    saved.subscribe().wait_for(Option::is_some).await.unwrap();

    for (i, ctx) in actors.iter().chain(std::iter::once(&late)).enumerate() {
        assert!(ctx.is_generation_finished(), "{}", ctx.actor_id());
        if i < actors.len() {
            assert_eq!(storage::load_record(ctx).await.unwrap().unwrap().state, format!("state {i}").into_bytes());
        }
    }
    assert_eq!(host.dispatcher.census().awaiting_engine, 21);
    assert_eq!(host.sleep_requests(), vec![("late".to_string(), 1)], "only the late one was asked here");
    stopper.abort();
}

#[tokio::test(start_paused = true)]
async fn sleep_first_waits_until_the_engine_stopped_every_sleeper() {
    let host = Host::new();
    let mut sleepers = Vec::new();
    for i in 0..20 {
        sleepers.push(host.start(NAME, &format!("a{i}")).await);
    }
    for ctx in &sleepers {
        ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
    }
    let engine = host.spawn_engine(&[], 0);

    sleep_first(&host.dispatcher, &sleepers, Duration::from_secs(3)).await;

    assert!(host.dispatcher.is_empty(), "every generation stopped by the engine and removed");
    assert_eq!(host.hooks.calls().iter().filter(|c| c.as_str() == "onSleep:1").count(), 20);
    assert_eq!(host.sleep_requests().len(), 20, "asked once each: no re-ask was needed");
    engine.abort();
}

#[tokio::test(start_paused = true)]
async fn sleep_first_waits_for_the_engine_even_when_everything_stopped_here() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    ctx.link().request_sleep("a", 1);
    assert!(host.dispatcher.stop_here(&key_of(&ctx)).await);
    let sleepers = vec![ctx.clone()];
    let engine = host.spawn_engine(&[], 0);

    sleep_first(&host.dispatcher, &sleepers, Duration::from_secs(3)).await;

    assert!(!host.dispatcher.awaiting_engine(&key_of(&ctx)), "the engine's stop came and was answered");
    engine.abort();
}

#[tokio::test(start_paused = true)]
async fn an_actor_the_engine_ignored_is_asked_again() {
    let host = Host::new();
    let sleepers = vec![host.start(NAME, "a").await, host.start(NAME, "late").await];
    for ctx in &sleepers {
        ctx.link().request_sleep(ctx.actor_id(), ctx.generation());
    }
    let engine = host.spawn_engine(&["late"], 1);

    sleep_first(&host.dispatcher, &sleepers, Duration::from_secs(3)).await;

    assert!(sleepers[1].is_generation_finished());
    let asked_late = host.sleep_requests().iter().filter(|(id, _)| id == "late").count();
    assert_eq!(asked_late, 2, "one re-ask after the engine ignored the first");
    engine.abort();
}

#[tokio::test(start_paused = true)]
async fn an_engine_that_stops_nothing_ends_the_step_after_the_stall() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    let started = tokio::time::Instant::now();

    sleep_first(&host.dispatcher, std::slice::from_ref(&ctx), Duration::from_secs(3)).await;

    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(host.dispatcher.is_active(&key_of(&ctx)));
    assert!(host.sleep_requests().len() >= 2, "asked again meanwhile");
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
