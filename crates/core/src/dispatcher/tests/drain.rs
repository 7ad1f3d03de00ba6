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
use crate::dispatcher::{Dispatcher, InstanceRecord, StopHandle, StopReason};
use crate::registry::drain::sleep_first;

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

#[tokio::test(start_paused = true)]
async fn every_actor_that_may_sleep_runs_on_sleep_and_is_saved_before_it_returns() {
    let host = Host::new();
    let mut actors = Vec::new();
    for i in 0..20 {
        let ctx = host.start(NAME, &format!("a{i}")).await;
        ctx.set_state(format!("state {i}").into_bytes());
        actors.push(ctx);
    }
    let engine = host.spawn_engine(&[], 0);

    assert_eq!(sleep_first(&host.dispatcher, Duration::from_secs(3)).await, 20);

    assert_eq!(host.dispatcher.instance_count(), 0, "every generation stopped and was removed");
    let calls = host.hooks.calls();
    assert_eq!(calls.iter().filter(|c| c.as_str() == "onSleep:1").count(), 20, "{calls:?}");
    for (i, ctx) in actors.iter().enumerate() {
        assert!(ctx.is_generation_finished());
        let record = storage::load_record(ctx).await.unwrap().unwrap();
        assert_eq!(record.state, format!("state {i}").into_bytes());
    }
    assert_eq!(host.sleep_requests().len(), 20, "asked once each: no re-ask was needed");
    engine.abort();
}

#[tokio::test(start_paused = true)]
async fn actors_that_may_not_sleep_are_left_to_the_engine() {
    let host = Host::new();
    host.start(NAME, "sleeper").await;
    host.start(WORKER, "worker").await;
    *host.hooks.has_run.lock().unwrap() = true;
    let runner = host.start(NAME, "runner").await;
    assert!(runner.run_handler_active());
    let engine = host.spawn_engine(&[], 0);

    assert_eq!(sleep_first(&host.dispatcher, Duration::from_secs(3)).await, 1);

    assert_eq!(host.sleep_requests(), vec![("sleeper".to_string(), 1)]);
    let active: Vec<String> = host.dispatcher.active_contexts().iter().map(|ctx| ctx.actor_id().to_string()).collect();
    assert_eq!(active.len(), 2, "{active:?}");
    assert!(active.contains(&"worker".to_string()) && active.contains(&"runner".to_string()));
    engine.abort();
}

#[tokio::test(start_paused = true)]
async fn an_actor_the_engine_ignored_is_asked_again() {
    let host = Host::new();
    host.start(NAME, "a").await;
    let late = host.start(NAME, "late").await;
    let engine = host.spawn_engine(&["late"], 1);

    assert_eq!(sleep_first(&host.dispatcher, Duration::from_secs(3)).await, 2);

    assert!(late.is_generation_finished());
    let asked_late = host.sleep_requests().iter().filter(|(id, _)| id == "late").count();
    assert_eq!(asked_late, 2, "one re-ask after the engine ignored the first");
    engine.abort();
}

#[tokio::test(start_paused = true)]
async fn an_engine_that_stops_nothing_ends_the_step_after_the_stall() {
    let host = Host::new();
    let ctx = host.start(NAME, "a").await;
    let started = tokio::time::Instant::now();

    assert_eq!(sleep_first(&host.dispatcher, Duration::from_secs(3)).await, 1);

    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(matches!(
        host.dispatcher.record(&crate::dispatcher::InstanceKey::new("a", 1)),
        Some(InstanceRecord::Active(_))
    ));
    assert!(!ctx.is_generation_finished(), "nothing stopped it: the envoy's shutdown comes next");
    assert!(host.sleep_requests().len() >= 2, "asked again meanwhile");
}
