//! Test doubles: recording hooks with gates, a keyed start gate, and stop
//! handles whose completion can be observed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::actor::context::ActorIdentity;
use crate::actor::link::MemoryLink;
use crate::actor::{
    ActorConfig, ActorContext, ActorFactory, ActorHooks, ActorKey, HttpRequest, HttpResponse, Inbox, LifecycleHook,
};
use crate::dispatcher::{Dispatcher, InstanceKey, StartGate, StopHandle};

pub const NAME: &str = "counter";

/// A gate that blocks until released; `entered` tells when someone waits.
#[derive(Clone)]
pub struct Gate {
    permits: Arc<Semaphore>,
    entered_tx: mpsc::UnboundedSender<()>,
    entered_rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>>,
}

impl Gate {
    pub fn new() -> Self {
        let (entered_tx, entered_rx) = mpsc::unbounded_channel();
        Self {
            permits: Arc::new(Semaphore::new(0)),
            entered_tx,
            entered_rx: Arc::new(tokio::sync::Mutex::new(entered_rx)),
        }
    }
    pub async fn pass(&self) {
        let _ = self.entered_tx.send(());
        if let Ok(permit) = self.permits.acquire().await {
            permit.forget();
        }
    }
    pub async fn entered(&self) {
        self.entered_rx.lock().await.recv().await;
    }
    pub fn release(&self) {
        self.permits.add_permits(1);
    }
}

/// Start gates per generation.
#[derive(Clone, Default)]
pub struct StartGates(Arc<Mutex<HashMap<InstanceKey, Gate>>>);

impl StartGates {
    pub fn arm(&self, key: &InstanceKey) -> Gate {
        let gate = Gate::new();
        self.0.lock().unwrap().insert(key.clone(), gate.clone());
        gate
    }
    pub fn as_start_gate(&self) -> StartGate {
        let gates = self.clone();
        Arc::new(move |key: &InstanceKey| {
            let gate = gates.0.lock().unwrap().get(key).cloned();
            async move {
                if let Some(gate) = gate {
                    gate.pass().await;
                }
            }
            .boxed()
        })
    }
}

/// Hooks that record their calls; `onWake`/`onSleep` can be gated or fail.
#[derive(Clone, Default)]
pub struct TestHooks {
    pub calls: Arc<Mutex<Vec<String>>>,
    pub wake_gate: Arc<Mutex<Option<Gate>>>,
    pub sleep_gate: Arc<Mutex<Option<Gate>>>,
    pub fail_wake: Arc<Mutex<bool>>,
    /// When set, `onWake` fails with this structured error.
    pub wake_error: Arc<Mutex<Option<crate::RivetError>>>,
    pub request_gate: Arc<Mutex<Option<Gate>>>,
    /// When set, the actor has a `run` handler that waits for its abort signal.
    pub has_run: Arc<Mutex<bool>>,
    /// When set, the `run` handler consumes the queue (recording `took <body>`)
    /// until the actor stops.
    pub queue_run: Arc<Mutex<bool>>,
    /// Holds the action named `hang` until released.
    pub action_gate: Arc<Mutex<Option<Gate>>>,
}

impl TestHooks {
    fn record(&self, call: impl Into<String>) {
        self.calls.lock().unwrap().push(call.into());
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl ActorHooks for TestHooks {
    type Ctx = ActorContext;

    fn create_state(
        &self,
        ctx: &ActorContext,
        _input: Option<Vec<u8>>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        self.record(format!("createState:{}", ctx.generation()));
        Some(async { Ok(vec![0]) }.boxed())
    }
    fn on_create(&self, ctx: &ActorContext, _input: Option<Vec<u8>>) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        self.record(format!("onCreate:{}", ctx.generation()));
        Some(async { Ok(()) }.boxed())
    }
    fn lifecycle(&self, hook: LifecycleHook, ctx: &ActorContext) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        if hook == LifecycleHook::Run && *self.queue_run.lock().unwrap() {
            let (ctx, calls) = (ctx.clone(), self.calls.clone());
            return Some(
                async move {
                    loop {
                        let receive = crate::actor::queue::Receive { count: 1, ..Default::default() };
                        match crate::actor::queue::next_batch(&ctx, receive).await {
                            Ok(messages) => {
                                messages.iter().for_each(|m| calls.lock().unwrap().push(format!("took {:?}", m.body)))
                            }
                            Err(_) if ctx.aborted() => return Ok(()),
                            Err(err) => return Err(err),
                        }
                    }
                }
                .boxed(),
            );
        }
        if hook == LifecycleHook::Run {
            if !*self.has_run.lock().unwrap() {
                return None;
            }
            self.record(format!("run:{}", ctx.generation()));
            let abort = ctx.abort_token().clone();
            return Some(
                async move {
                    abort.cancelled().await;
                    Ok(())
                }
                .boxed(),
            );
        }
        self.record(format!("{}:{}", hook.name(), ctx.generation()));
        let gate = match hook {
            LifecycleHook::OnWake => self.wake_gate.lock().unwrap().clone(),
            LifecycleHook::OnSleep | LifecycleHook::OnDestroy => self.sleep_gate.lock().unwrap().clone(),
            _ => None,
        };
        let fail = hook == LifecycleHook::OnWake && *self.fail_wake.lock().unwrap();
        let wake_error = if hook == LifecycleHook::OnWake { self.wake_error.lock().unwrap().clone() } else { None };
        Some(
            async move {
                if let Some(gate) = gate {
                    gate.pass().await;
                }
                if let Some(error) = wake_error {
                    return Err(error.into_anyhow());
                }
                if fail {
                    anyhow::bail!("onWake failed on purpose");
                }
                Ok(())
            }
            .boxed(),
        )
    }
    fn action(
        &self,
        ctx: &ActorContext,
        _conn: Option<&crate::actor::Conn>,
        name: &str,
        _args: Vec<u8>,
        cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        self.record(format!("action {name}:{}", ctx.generation()));
        if let Some(value) = name.strip_prefix("set:") {
            // Changes the state as a host would, before the action returns.
            ctx.set_state(value.as_bytes().to_vec());
        }
        let gate = if name == "hang" { self.action_gate.lock().unwrap().clone() } else { None };
        let (calls, name) = (self.calls.clone(), name.to_string());
        Some(
            async move {
                if let Some(gate) = gate {
                    let seen = calls.clone();
                    let watched = name.clone();
                    // Records when the JS cancel token fires, while the action still runs.
                    tokio::spawn(async move {
                        cancel.cancelled().await;
                        seen.lock().unwrap().push(format!("cancelled {watched}"));
                    });
                    gate.pass().await;
                    calls.lock().unwrap().push(format!("finished {name}"));
                }
                Ok(vec![0xf6])
            }
            .boxed(),
        )
    }
    fn on_disconnect(
        &self,
        _ctx: &ActorContext,
        conn: &crate::actor::Conn,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        self.record(format!("onDisconnect:{}", conn.id()));
        Some(async { Ok(()) }.boxed())
    }
    fn scheduled_action(
        &self,
        ctx: &ActorContext,
        name: &str,
        _args: Vec<u8>,
        fire: &crate::actor::ScheduledFire,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        self.record(format!("scheduled {name} {}:{}", fire.kind, ctx.generation()));
        Some(async { Ok(vec![0xf6]) }.boxed())
    }
    fn on_request(
        &self,
        ctx: &ActorContext,
        request: HttpRequest,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<HttpResponse>>> {
        let body = format!("{} g{}", request.uri, ctx.generation()).into_bytes();
        let gate = self.request_gate.lock().unwrap().clone();
        Some(
            async move {
                if let Some(gate) = gate {
                    gate.pass().await;
                }
                Ok(HttpResponse { status: 200, headers: Default::default(), body, stream: false })
            }
            .boxed(),
        )
    }
}

pub struct Harness {
    pub dispatcher: Arc<Dispatcher>,
    pub hooks: TestHooks,
    pub gates: StartGates,
    pub link: Arc<MemoryLink>,
    pub config: ActorConfig,
    /// The traffic queues of the contexts built by [`Self::ctx`], until
    /// they are started.
    inboxes: Mutex<Vec<(ActorContext, Inbox)>>,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_config(ActorConfig::default())
    }

    pub fn with_config(config: ActorConfig) -> Self {
        let hooks = TestHooks::default();
        let gates = StartGates::default();
        let factory = ActorFactory::new(config.clone(), Arc::new(hooks.clone()));
        let dispatcher =
            Dispatcher::with_start_gate(HashMap::from([(NAME.to_string(), factory)]), gates.as_start_gate());
        Self { dispatcher, hooks, gates, link: Arc::new(MemoryLink::default()), config, inboxes: Mutex::default() }
    }

    pub fn ctx(&self, generation: u32) -> ActorContext {
        let hooks = self.dispatcher.factory(NAME).map(|f| f.hooks.clone());
        let (ctx, inbox) = ActorContext::new(
            ActorIdentity {
                actor_id: "actor".into(),
                generation,
                name: NAME.into(),
                key: ActorKey(vec!["k".into()]),
                region: String::new(),
                input: None,
            },
            CancellationToken::new(),
            self.link.clone(),
            &self.config,
            hooks,
        );
        self.inboxes.lock().unwrap().push((ctx.clone(), inbox));
        ctx
    }

    /// The traffic queue `ctx` was built with (once).
    fn inbox(&self, ctx: &ActorContext) -> Inbox {
        let mut inboxes = self.inboxes.lock().unwrap();
        let i = inboxes.iter().position(|(c, _)| c.same_instance(ctx)).expect("a context built by the harness");
        inboxes.swap_remove(i).1
    }

    /// `start_actor` for a context built by [`Self::ctx`].
    pub async fn start_actor(&self, ctx: ActorContext) -> anyhow::Result<()> {
        let inbox = self.inbox(&ctx);
        self.dispatcher.start_actor(NAME, ctx, inbox).await
    }

    /// Starts generation `g` in the background.
    pub fn spawn_start(&self, ctx: ActorContext) -> tokio::task::JoinHandle<anyhow::Result<()>> {
        let (dispatcher, inbox) = (self.dispatcher.clone(), self.inbox(&ctx));
        tokio::spawn(async move { dispatcher.start_actor(NAME, ctx, inbox).await })
    }

    pub async fn start(&self, generation: u32) -> ActorContext {
        let ctx = self.ctx(generation);
        self.start_actor(ctx.clone()).await.expect("start");
        ctx
    }
}

pub fn key(generation: u32) -> InstanceKey {
    InstanceKey::new("actor", generation)
}

/// A stop handle and a receiver that observes its single signal.
pub fn stop_handle() -> (StopHandle, oneshot::Receiver<Result<(), String>>) {
    let (tx, rx) = oneshot::channel();
    (
        StopHandle::new(move |r: anyhow::Result<()>| {
            let _ = tx.send(r.map_err(|e| format!("{e:#}")));
        }),
        rx,
    )
}

/// True if the stop was signalled (and how), without waiting.
pub fn signalled(rx: &mut oneshot::Receiver<Result<(), String>>) -> Option<Result<(), String>> {
    rx.try_recv().ok()
}
