//! The actor task: one tokio task per generation, the only place that runs
//! a generation's lifecycle.
//!
//! It owns two bounded inboxes, lifecycle commands (start, stop) and client
//! traffic (dispatch), and a `JoinSet` of in-flight requests so that every
//! piece of work it starts is tracked and can be waited for or aborted. Its
//! `select!` is biased: the lost signal first, then lifecycle commands, then
//! traffic, so a stop is never starved by a busy actor.
//!
//! Phases: `Loading → Started → Grace(Sleep|Destroy) → Finalizing →
//! Terminated`. During sleep grace client traffic is still served
//! (invariant I10); during destroy grace it is refused.

mod commands;
mod dispatch;
mod handle;
mod shutdown;
mod startup;

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use commands::{DispatchCommand, LifecycleCommand, ShutdownKind};
pub use handle::ActorTaskHandle;

use super::{ActorContext, ActorFactory, GenerationHold};
use crate::error::catalog;

/// How long a lost generation may take to tear down (spec: 2 s).
pub const LOST_SHUTDOWN_GRACE_PERIOD: Duration = Duration::from_secs(2);
const LIFECYCLE_QUEUE_CAPACITY: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Loading,
    Started,
    Grace(ShutdownKind),
}

struct Grace {
    kind: ShutdownKind,
    deadline: Instant,
    /// `onSleep` / `onDestroy`; `None` once finished or abandoned.
    hook: Option<BoxFuture<'static, anyhow::Result<()>>>,
    replies: Vec<oneshot::Sender<anyhow::Result<()>>>,
}

pub(crate) struct ActorTask {
    ctx: ActorContext,
    factory: ActorFactory,
    lifecycle_rx: mpsc::Receiver<LifecycleCommand>,
    dispatch_rx: mpsc::Receiver<DispatchCommand>,
    inflight: JoinSet<()>,
    phase: Phase,
    grace: Option<Grace>,
    _hold: GenerationHold,
}

/// Spawns the task for one generation. `hold` keeps the generation
/// unfinished until the task has fully exited.
pub fn spawn_actor_task(ctx: ActorContext, factory: ActorFactory, hold: GenerationHold) -> ActorTaskHandle {
    let (lifecycle_tx, lifecycle_rx) = mpsc::channel(LIFECYCLE_QUEUE_CAPACITY);
    let (dispatch_tx, dispatch_rx) = mpsc::channel(factory.config.dispatch_queue_capacity.max(1));
    let task = ActorTask {
        ctx: ctx.clone(),
        factory: factory.clone(),
        lifecycle_rx,
        dispatch_rx,
        inflight: JoinSet::new(),
        phase: Phase::Loading,
        grace: None,
        _hold: hold,
    };
    let span = tracing::info_span!("actor", actor_id = %ctx.actor_id(), generation = ctx.generation());
    // Whatever way the task ends, the actor's abort signal fires with it.
    let abort_on_exit = ctx.abort_token().clone().drop_guard();
    let run = async move {
        let _abort_on_exit = abort_on_exit;
        task.run().await;
    };
    let join = tokio::spawn(tracing::Instrument::instrument(run, span));
    ActorTaskHandle::new(ctx, lifecycle_tx, dispatch_tx, factory.config.dispatch_queue_capacity, join)
}

impl ActorTask {
    async fn run(mut self) {
        let lost = self.ctx.lost_token().clone();
        loop {
            let grace_deadline = self.grace.as_ref().map(|g| g.deadline);
            let accepting = matches!(self.phase, Phase::Started | Phase::Grace(_));
            tokio::select! {
                biased;
                _ = lost.cancelled() => {
                    self.abort_lost().await;
                    return;
                }
                cmd = self.lifecycle_rx.recv() => match cmd {
                    Some(cmd) => {
                        if self.handle_lifecycle(cmd).await.is_break() {
                            return;
                        }
                    }
                    // The dispatcher dropped the handle: nobody can stop us
                    // any more, so wind down as a sleep would.
                    None => {
                        if self.phase == Phase::Loading {
                            return;
                        }
                        if self.grace.is_none() {
                            self.begin_grace(ShutdownKind::Sleep, None);
                        }
                    }
                },
                Some(cmd) = self.dispatch_rx.recv(), if accepting => self.handle_dispatch(cmd),
                Some(_) = self.inflight.join_next(), if !self.inflight.is_empty() => {}
                result = poll_grace_hook(&mut self.grace), if self.grace.as_ref().is_some_and(|g| g.hook.is_some()) => {
                    if let Err(err) = result {
                        tracing::warn!(error = %format!("{err:#}"), "stop hook failed");
                    }
                    if let Some(grace) = self.grace.as_mut() {
                        grace.hook = None;
                    }
                }
                _ = sleep_until_opt(grace_deadline), if grace_deadline.is_some() => {
                    tracing::warn!("sleep grace period elapsed; abandoning unfinished work");
                    if let Some(grace) = self.grace.as_mut() {
                        grace.hook = None;
                    }
                    self.inflight.abort_all();
                    self.finish_shutdown().await;
                    return;
                }
            }
            if self.grace.as_ref().is_some_and(|g| g.hook.is_none()) && self.inflight.is_empty() {
                self.finish_shutdown().await;
                return;
            }
        }
    }

    async fn handle_lifecycle(&mut self, cmd: LifecycleCommand) -> std::ops::ControlFlow<()> {
        use std::ops::ControlFlow;
        match cmd {
            LifecycleCommand::Start { reply } => {
                if self.phase != Phase::Loading {
                    let _ = reply.send(Err(catalog::actor_not_ready().into_anyhow()));
                    return ControlFlow::Continue(());
                }
                match self.start().await {
                    Ok(()) => {
                        self.phase = Phase::Started;
                        self.ctx.set_started(true);
                        let _ = reply.send(Ok(()));
                        ControlFlow::Continue(())
                    }
                    Err(err) => {
                        let _ = reply.send(Err(err));
                        ControlFlow::Break(())
                    }
                }
            }
            LifecycleCommand::Stop { kind, reply } => {
                match self.phase {
                    Phase::Loading => {
                        let _ = reply.send(Err(catalog::actor_not_ready().into_anyhow()));
                    }
                    Phase::Started => self.begin_grace(kind, Some(reply)),
                    Phase::Grace(current) => {
                        if current != kind {
                            tracing::warn!(?current, requested = ?kind, "second stop with a different reason during grace");
                        }
                        // One stop per generation is expected; acknowledge the
                        // duplicate once the shutdown that is under way ends.
                        if let Some(grace) = self.grace.as_mut() {
                            grace.replies.push(reply);
                        }
                    }
                }
                ControlFlow::Continue(())
            }
        }
    }
}

async fn poll_grace_hook(grace: &mut Option<Grace>) -> anyhow::Result<()> {
    match grace.as_mut().and_then(|g| g.hook.as_mut()) {
        Some(hook) => hook.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Runs a hook future bounded by `timeout`, naming the hook on timeout.
pub(crate) async fn with_timeout<T>(
    name: &str,
    timeout: Duration,
    fut: BoxFuture<'static, anyhow::Result<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(catalog::callback_timed_out(name, timeout.as_millis() as u64).into_anyhow()),
    }
}

