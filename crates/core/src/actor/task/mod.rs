//! The actor task: one tokio task per generation, the only place that runs
//! a generation's lifecycle.
//!
//! It owns two bounded inboxes, lifecycle commands (start, stop) and client
//! traffic (dispatch), and a `JoinSet` of in-flight requests so that every
//! piece of work it starts is tracked and can be waited for or aborted. Its
//! `select!` is biased: the lost signal first, then lifecycle commands, then
//! traffic, so a stop is never starved by a busy actor.
//!
//! Its phase (`Created → Starting → Started → Stopping(kind) → Finalizing →
//! Stopped`, see [`crate::actor::lifecycle`]) is published in the context,
//! not kept here. During sleep grace client traffic is still served
//! (invariant I10) until `onSleep` resolves; during destroy grace it is
//! refused.

mod action_slots;
mod alarm;
mod dispatch;
mod handle;
pub(crate) mod persist;
mod shutdown;
mod startup;

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use super::commands::{DispatchCommand, LifecycleCommand, ShutdownKind};
pub use action_slots::DEFAULT_MAX_ACTIONS;
pub use handle::ActorTaskHandle;

use super::clock;
use super::lifecycle::Phase;
use super::{ActorContext, ActorFactory, GenerationHold, Inbox, LifecycleHook};
use crate::error::catalog;

/// How long a lost generation may take to tear down (2 s).
pub const LOST_SHUTDOWN_GRACE_PERIOD: Duration = Duration::from_secs(2);
const LIFECYCLE_QUEUE_CAPACITY: usize = 8;

struct Grace {
    kind: ShutdownKind,
    deadline: Instant,
    /// `onSleep` / `onDestroy`; `None` once finished or abandoned.
    hook: Option<BoxFuture<'static, anyhow::Result<()>>>,
    /// A sleep hook not invoked yet: with the output gate, `onSleep` waits
    /// until the answers in flight are saved (at most until `hook_due`),
    /// since RivetKit drops the actor's state from memory at its end
    /// (docs/durability.md, "Sleep grace").
    pending: Option<LifecycleHook>,
    hook_due: Instant,
    replies: Vec<oneshot::Sender<anyhow::Result<()>>>,
}

pub(crate) struct ActorTask {
    ctx: ActorContext,
    factory: ActorFactory,
    lifecycle_rx: mpsc::Receiver<LifecycleCommand>,
    dispatch_rx: mpsc::Receiver<DispatchCommand>,
    inflight: JoinSet<()>,
    /// The cap on client action handlers running at once (`maxActions`).
    action_slots: action_slots::ActionSlots,
    grace: Option<Grace>,
    /// When the idle actor asks to sleep; `None` while busy.
    sleep_deadline: Option<Instant>,
    /// The save under way, if any (one at a time).
    saving: Option<BoxFuture<'static, ()>>,
    /// The `run` handler while it runs.
    run: Option<BoxFuture<'static, anyhow::Result<()>>>,
    /// During grace, once nothing else is left: the envoy writing the
    /// generation's last HTTP responses (I11); `responses_sent` once done.
    responses: Option<BoxFuture<'static, ()>>,
    responses_sent: bool,
    _hold: GenerationHold,
}

/// Spawns the task for one generation, which reads `inbox`, the traffic
/// queue `ctx` was built with. `hold` keeps the generation unfinished until
/// the task has fully exited.
pub fn spawn_actor_task(
    ctx: ActorContext,
    inbox: Inbox,
    factory: ActorFactory,
    hold: GenerationHold,
) -> ActorTaskHandle {
    let (lifecycle_tx, lifecycle_rx) = mpsc::channel(LIFECYCLE_QUEUE_CAPACITY);
    let dispatch_tx = ctx.clients().traffic().clone();
    let dispatch_rx = inbox.into_receiver();
    let task = ActorTask {
        ctx: ctx.clone(),
        factory: factory.clone(),
        lifecycle_rx,
        dispatch_rx,
        inflight: JoinSet::new(),
        action_slots: action_slots::ActionSlots::new(
            factory.config.max_actions,
            factory.config.dispatch_queue_capacity,
        ),
        grace: None,
        sleep_deadline: None,
        saving: None,
        responses: None,
        responses_sent: false,
        run: None,
        _hold: hold,
    };
    let span = tracing::info_span!("actor", actor_id = %ctx.actor_id(), generation = ctx.generation());
    // Whatever way the task ends (a panic included), the actor's abort
    // signal fires and its writes end with it.
    let abort_on_exit = ctx.abort_token().clone().drop_guard();
    let end_writes_on_exit = EndWritesOnExit(ctx.clone());
    let run = async move {
        let _abort_on_exit = abort_on_exit;
        let _end_writes_on_exit = end_writes_on_exit;
        task.run().await;
    };
    let join = tokio::spawn(tracing::Instrument::instrument(run, span));
    ActorTaskHandle::new(
        ctx,
        factory.config.clone(),
        lifecycle_tx,
        dispatch_tx,
        factory.config.dispatch_queue_capacity,
        join,
    )
}

/// Closes the generation's write fence when the task is gone.
struct EndWritesOnExit(ActorContext);

impl Drop for EndWritesOnExit {
    fn drop(&mut self) {
        self.0.end_writes_now();
    }
}

impl ActorTask {
    async fn run(mut self) {
        let lost = self.ctx.lost_token().clone();
        let mut activity = self.ctx.activity().subscribe();
        let mut alarm = self.ctx.persisted().subscribe_alarm();
        let mut scheduled = self.ctx.schedule().subscribe();
        let mut conns = self.ctx.conns().subscribe_count();
        let mut queue_waits = self.ctx.queue().subscribe_waits();
        loop {
            let grace_deadline = self.grace.as_ref().map(|g| g.deadline);
            let phase = self.ctx.phase();
            let accepting = matches!(phase, Phase::Started | Phase::Stopping(_));
            // Saves also run during destroy grace (unlike the reference), so
            // a hook that awaits a save there cannot deadlock the shutdown.
            let save_deadline = self.ctx.persisted().saves().deadline().filter(|_| accepting && self.saving.is_none());
            let wake_at = self.ctx.next_wake();
            let alarm_deadline = clock::instant_of(wake_at).filter(|_| phase == Phase::Started);
            let sleep_deadline = self.sleep_deadline.filter(|_| phase == Phase::Started);
            let hook_due = self.grace.as_ref().filter(|g| g.pending.is_some()).map(|g| g.hook_due);
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
                        if phase == Phase::Created {
                            return;
                        }
                        if self.grace.is_none() {
                            self.begin_grace(ShutdownKind::Sleep, None);
                        }
                    }
                },
                Some(cmd) = self.dispatch_rx.recv(), if accepting => {
                    self.sleep_deadline = None;
                    self.handle_dispatch(cmd);
                }
                _ = self.ctx.clients().ended_changed(), if accepting => self.run_disconnects(),
                Some(_) = self.inflight.join_next(), if !self.inflight.is_empty() => {}
                _ = activity.changed() => self.sleep_deadline = None,
                _ = conns.changed() => self.sleep_deadline = None,
                // A receive began or stopped waiting: the idle timer starts
                // over (a `run` blocked on the queue counts as idle).
                _ = queue_waits.changed() => self.sleep_deadline = None,
                result = poll_grace_hook(&mut self.grace), if self.grace.as_ref().is_some_and(|g| g.hook.is_some()) => {
                    tracing::debug!(target: crate::DRAIN_TRACE, actor_id = %self.ctx.actor_id(), generation = self.ctx.generation(), ok = result.is_ok(), "stop hook done");
                    if let Err(err) = result {
                        tracing::warn!(error = %format!("{err:#}"), "stop hook failed");
                    }
                    if let Some(grace) = self.grace.as_mut() {
                        grace.hook = None;
                    }
                    // RivetKit has dropped this generation's JS state:
                    // traffic goes to the next one (docs/versions.md).
                    self.ctx.signals().mark_stop_hook_resolved();
                }
                _ = poll_opt(&mut self.saving), if self.saving.is_some() => self.saving = None,
                _ = sleep_until_opt(hook_due), if hook_due.is_some() => self.invoke_grace_hook(),
                _ = poll_opt(&mut self.responses), if self.responses.is_some() => {
                    self.responses = None;
                    self.responses_sent = true;
                }
                result = poll_run(&mut self.run), if self.run.is_some() => self.on_run_exit(result),
                _ = self.ctx.run_handler().restart_requested(), if phase == Phase::Started && self.run.is_none() => self.start_run(),
                _ = self.ctx.persisted().saves().changed() => {}
                _ = sleep_until_opt(save_deadline), if save_deadline.is_some() => self.start_save(),
                _ = alarm.changed() => {}
                _ = scheduled.changed() => {}
                _ = sleep_until_opt(alarm_deadline), if alarm_deadline.is_some() => self.fire_alarm(wake_at.unwrap_or_default()),
                _ = sleep_until_opt(sleep_deadline), if sleep_deadline.is_some() => {
                    self.sleep_deadline = None;
                    if self.can_sleep() {
                        tracing::debug!("idle for the sleep timeout; asking the engine to sleep");
                        let _ = self.ctx.sleep();
                    }
                }
                _ = sleep_until_opt(grace_deadline), if grace_deadline.is_some() => {
                    tracing::warn!("sleep grace period elapsed; abandoning unfinished work");
                    if let Some(grace) = self.grace.as_mut() {
                        grace.hook = None;
                        grace.pending = None;
                    }
                    self.inflight.abort_all();
                    self.saving = None;
                    self.run = None;
                    self.ctx.run_handler().set_active(false);
                    self.finish_shutdown().await;
                    return;
                }
            }
            if self.grace.is_some() {
                // Connections that ended during grace still get their hook.
                self.run_disconnects();
            }
            if self.grace.as_ref().is_some_and(|g| g.pending.is_some())
                && self.inflight.is_empty()
                && self.saving.is_none()
                && self.ctx.persisted().saves().deadline().is_none()
            {
                self.invoke_grace_hook();
            }
            let quiet = self.grace.as_ref().is_some_and(|g| g.hook.is_none() && g.pending.is_none())
                && self.inflight.is_empty()
                && self.saving.is_none()
                && self.run.is_none()
                && self.ctx.activity().open_regions() == 0;
            if !quiet {
                // Work came back (sleep grace serves traffic): its responses
                // are waited for afresh once it is done.
                self.responses = None;
                self.responses_sent = false;
            } else if self.responses_sent {
                self.finish_shutdown().await;
                return;
            } else if self.responses.is_none() {
                self.responses = Some(self.ctx.link().responses_sent(self.ctx.actor_id(), self.ctx.generation()));
            }
            self.arm_sleep_timer();
        }
    }

    /// idle means started, sleep allowed, nothing in
    /// flight and no keep-awake region open. A `run` handler counts as
    /// idle while a receive is blocked on the queue (the reference's rule:
    /// the stop aborts the wait, and the next generation runs it again).
    fn can_sleep(&self) -> bool {
        self.ctx.phase() == Phase::Started
            && !self.factory.config.no_sleep
            && !self.ctx.sleep_requested()
            && self.inflight.is_empty()
            && (self.run.is_none() || self.ctx.queue().blocked_receives() > 0)
            && self.ctx.activity().open_regions() == 0
            && self.ctx.conns().is_empty()
    }

    /// Arms the idle timer once the actor becomes idle; any activity
    /// disarms it (it is re-armed, from zero, when the actor is idle again).
    fn arm_sleep_timer(&mut self) {
        if !self.can_sleep() {
            self.sleep_deadline = None;
        } else if self.sleep_deadline.is_none() {
            self.sleep_deadline = Some(Instant::now() + self.factory.config.sleep_timeout);
        }
    }

    async fn handle_lifecycle(&mut self, cmd: LifecycleCommand) -> std::ops::ControlFlow<()> {
        use std::ops::ControlFlow;
        match cmd {
            LifecycleCommand::Start { reply } => {
                if self.ctx.phase() != Phase::Created {
                    let _ = reply.send(Err(catalog::actor_not_ready().into_anyhow()));
                    return ControlFlow::Continue(());
                }
                match self.start().await {
                    Ok(()) => {
                        self.ctx.signals().enter(Phase::Started);
                        self.start_run();
                        let _ = reply.send(Ok(()));
                        ControlFlow::Continue(())
                    }
                    Err(err) => {
                        self.ctx
                            .persisted()
                            .saves()
                            .abandon(catalog::actor_stopping(Some("the actor failed to start")));
                        let _ = reply.send(Err(err));
                        ControlFlow::Break(())
                    }
                }
            }
            LifecycleCommand::Stop { kind, reply } => {
                match self.ctx.phase() {
                    Phase::Started => self.begin_grace(kind, Some(reply)),
                    Phase::Stopping(current) => {
                        if current != kind {
                            tracing::warn!(?current, requested = ?kind, "second stop with a different reason during grace");
                        }
                        // One stop per generation is expected; acknowledge the
                        // duplicate once the shutdown that is under way ends.
                        if let Some(grace) = self.grace.as_mut() {
                            grace.replies.push(reply);
                        }
                    }
                    // Before the start (or while finishing): nothing to stop here.
                    Phase::Created | Phase::Starting | Phase::Finalizing | Phase::Stopped => {
                        let _ = reply.send(Err(catalog::actor_not_ready().into_anyhow()));
                    }
                }
                ControlFlow::Continue(())
            }
        }
    }

    /// Starts a save in the background of the loop (one at a time).
    fn start_save(&mut self) {
        let ctx = self.ctx.clone();
        let hooks = self.factory.hooks.clone();
        let revision = ctx.persisted().saves().begin_save();
        self.saving = Some(Box::pin(async move {
            let result = persist::save(&ctx, &*hooks).await;
            if let (Err(err), false) = (&result, ctx.is_lost()) {
                tracing::warn!(error = %format!("{err:#}"), "state save failed; retrying");
            }
            ctx.persisted().saves().finish_save(revision, &result);
        }));
    }

    /// Starts the `run` handler, if the actor has one.
    fn start_run(&mut self) {
        if let Some(fut) = self.factory.hooks.lifecycle(LifecycleHook::Run, &self.ctx) {
            self.ctx.run_handler().set_active(true);
            self.run = Some(fut);
        }
    }

    /// `run` returned. A failure while started is a crash the engine
    /// records (the actor is put to sleep); an exit caused by the abort
    /// signal during a stop is the normal unwind.
    fn on_run_exit(&mut self, result: anyhow::Result<()>) {
        self.run = None;
        self.ctx.run_handler().set_active(false);
        match result {
            Ok(()) => tracing::debug!("run handler returned"),
            Err(err) if self.ctx.aborted() => {
                tracing::debug!(error = %format!("{err:#}"), "run handler ended on abort")
            }
            Err(err) => {
                let e = crate::error::RivetError::extract(&err);
                tracing::warn!(error = %format!("{err:#}"), "run handler failed; reporting a crash");
                self.ctx.stop_with_error(format!("{}.{}: {}", e.group, e.code, e.message));
            }
        }
    }
}

async fn poll_run(run: &mut Option<BoxFuture<'static, anyhow::Result<()>>>) -> anyhow::Result<()> {
    match run.as_mut() {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn poll_opt(fut: &mut Option<BoxFuture<'static, ()>>) {
    match fut.as_mut() {
        Some(f) => f.await,
        None => std::future::pending().await,
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
        // Due already: ready at once. Tokio's timer rounds a deadline up to
        // its next millisecond tick, so a sleep until now would hold a save
        // asked for an answer (docs/durability.md) for up to a millisecond.
        // It still spends the task's cooperative budget, so that a deadline
        // that stays due cannot keep the loop from yielding its worker.
        Some(d) if d <= Instant::now() => tokio::task::coop::consume_budget().await,
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

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_due_deadline_is_ready_at_once() {
        // A save asked for an answer is due now: it must start on this poll,
        // not at the timer's next millisecond tick.
        assert!(sleep_until_opt(Some(Instant::now())).now_or_never().is_some());
        let past = Instant::now() - Duration::from_millis(5);
        assert!(sleep_until_opt(Some(past)).now_or_never().is_some());
        let later = Instant::now() + Duration::from_secs(60);
        assert!(sleep_until_opt(Some(later)).now_or_never().is_none());
        assert!(sleep_until_opt(None).now_or_never().is_none());
    }

    #[tokio::test]
    async fn a_deadline_that_stays_due_still_yields_the_worker() {
        // One thread: the other task runs only when this one yields.
        let other = tokio::spawn(async {});
        let past = Instant::now();
        for _ in 0..10_000 {
            sleep_until_opt(Some(past)).await;
            if other.is_finished() {
                return;
            }
        }
        panic!("a loop on a due deadline never yielded");
    }
}
