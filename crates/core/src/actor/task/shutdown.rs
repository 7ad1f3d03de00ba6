//! Stopping a generation: sleep/destroy grace, the final save, and the
//! bounded teardown of a lost generation (docs/generations.md).

use std::time::Duration;

use tokio::time::Instant;

use super::{ActorTask, Grace, Phase, LOST_SHUTDOWN_GRACE_PERIOD};
use crate::actor::commands::{Reply, ShutdownKind};
use crate::actor::{ActorContext, DynHooks, LifecycleHook};
use crate::error::catalog;

/// The final save may take at least this long, however short the grace.
const MIN_FINAL_SAVE_TIMEOUT: Duration = Duration::from_secs(15);
/// The final save's retries (`final_save_with_retries`).
const FINAL_SAVE_RETRY_FIRST: Duration = Duration::from_millis(50);
const FINAL_SAVE_RETRY_MAX: Duration = Duration::from_secs(1);
const FINAL_SAVE_ATTEMPTS: u32 = 6;
/// Once the saves are closed every gated output is answered at once; this
/// only bounds a release that blocks.
const OUTBOX_RELEASE_BOUND: Duration = Duration::from_secs(1);
/// With the output gate, how long `onSleep` waits at most for the answers
/// in flight to be saved (never more than half the grace period).
const SLEEP_HOOK_WAIT: Duration = Duration::from_secs(2);

impl ActorTask {
    /// Enters grace: cancels the abort signal and starts `onSleep`/`onDestroy`.
    /// The run loop keeps serving (sleep) traffic until the hook and the
    /// in-flight work are done or the grace deadline passes.
    pub(super) fn begin_grace(&mut self, kind: ShutdownKind, reply: Option<Reply<()>>) {
        self.ctx.signals().enter(Phase::Stopping(kind));
        if kind == ShutdownKind::Destroy {
            self.ctx.mark_destroy_requested();
        }
        self.ctx.abort_token().cancel();
        let hook = match kind {
            ShutdownKind::Sleep => LifecycleHook::OnSleep,
            ShutdownKind::Destroy => LifecycleHook::OnDestroy,
        };
        // Connections end with the generation (close 1000, then onDisconnect),
        // except hibernatable ones on a sleep: their sockets stay open at the
        // gateway and the next generation takes them over from their records.
        for conn in self.ctx.conns().list() {
            if kind == ShutdownKind::Sleep && conn.is_hibernatable() {
                conn.mark_dirty();
                continue;
            }
            if conn.is_hibernatable() {
                self.ctx.conns().forget_record(conn.id());
            }
            if self.ctx.conns().remove(&conn) {
                conn.clear_subscriptions();
                self.ctx.close_conn_transport(&conn, 1000, "actor stopping");
                if let Some(fut) = self.factory.hooks.on_disconnect(&self.ctx, &conn) {
                    let timeout = self.factory.config.on_connect_timeout;
                    self.inflight.spawn(async move {
                        if let Err(err) = super::with_timeout("onDisconnect", timeout, fut).await {
                            tracing::warn!(error = %format!("{err:#}"), "onDisconnect failed");
                        }
                    });
                }
            }
        }
        let grace_period = self.factory.config.sleep_grace_period;
        let now = Instant::now();
        // With the output gate, `onSleep` waits for the answers in flight
        // (docs/durability.md, "Sleep grace").
        let (hook, pending) = if kind == ShutdownKind::Sleep && self.gates_answers() {
            (None, Some(hook))
        } else {
            (self.factory.hooks.lifecycle(hook, &self.ctx), None)
        };
        self.grace = Some(Grace {
            kind,
            deadline: now + grace_period,
            hook,
            pending,
            hook_due: now + SLEEP_HOOK_WAIT.min(grace_period / 2),
            replies: reply.into_iter().collect(),
        });
    }

    /// Whether answers of this generation wait for the output gate.
    pub(super) fn gates_answers(&self) -> bool {
        self.factory.config.output_gate == crate::actor::OutputGate::On && self.factory.config.has_state
    }

    /// Invokes the sleep hook held back by [`Self::begin_grace`].
    pub(super) fn invoke_grace_hook(&mut self) {
        let Some(grace) = self.grace.as_mut() else { return };
        if let Some(hook) = grace.pending.take() {
            grace.hook = self.factory.hooks.lifecycle(hook, &self.ctx);
        }
    }

    /// Final save, then the write fence closes (a handle kept by user code
    /// can no longer write), then every stop that waited is answered.
    pub(super) async fn finish_shutdown(&mut self) {
        self.ctx.signals().enter(Phase::Finalizing);
        let kind = self.grace.as_ref().map(|g| g.kind);
        // The final save covers every request made before it began.
        let revision = self.ctx.persisted().saves().begin_save();
        let result = if self.ctx.is_lost() {
            log_lost();
            Ok(())
        } else {
            // The work is done: every message taken and not waiting for
            // `complete` was handled, and this save consumes it, as the
            // reference's receive did (docs/queues-cron.md).
            crate::actor::queue::mark_handled(&self.ctx);
            let timeout = MIN_FINAL_SAVE_TIMEOUT.max(self.factory.config.sleep_grace_period);
            match tokio::time::timeout(timeout, final_save_with_retries(&self.ctx, &*self.factory.hooks)).await {
                Ok(result) => result,
                Err(_) => Err(catalog::callback_timed_out("finalSave", timeout.as_millis() as u64).into_anyhow()),
            }
        };
        tracing::debug!(target: crate::DRAIN_TRACE, actor_id = %self.ctx.actor_id(), generation = self.ctx.generation(), ok = result.is_ok(), "final save done");
        if let Err(err) = &result {
            // Said with the loss, so an operator reading a drain knows
            // which actors' changes did not survive (docs/drain.md).
            tracing::error!(
                error = %format!("{err:#}"),
                "final state save failed; what this actor changed since its last acknowledged save is lost"
            );
        }
        if kind == Some(ShutdownKind::Destroy) && !self.ctx.is_lost() {
            // A destroyed actor must not be woken by its alarm.
            self.ctx.link().set_alarm(self.ctx.actor_id(), self.ctx.generation(), None);
        }
        if self.ctx.is_lost() {
            // Nothing was written: answers waiting on this save are refused.
            let unsaved = Err(catalog::actor_stopping(Some("the generation was lost before the save")).into_anyhow());
            self.ctx.persisted().saves().finish_save(revision, &unsaved);
        } else {
            self.ctx.persisted().saves().finish_save(revision, &result);
        }
        self.ctx.persisted().saves().close(catalog::actor_stopping(Some("the generation stopped")));
        // Every gated output now has its answer (docs/durability.md).
        self.ctx.outbox().idle(OUTBOX_RELEASE_BOUND).await;
        // The runtime socket's clients are database clients: gone first.
        self.ctx.shutdown_runtime_socket().await;
        self.ctx.close_sqlite().await;
        self.ctx.end_writes().await;
        self.ctx.signals().enter(Phase::Stopped);
        tracing::debug!(?kind, "actor stopped");
        self.reply_to_stops(result);
    }

    /// Lost: no user hooks, no writes, everything bounded by 2 s.
    pub(super) async fn abort_lost(&mut self) {
        log_lost();
        self.ctx.signals().enter(Phase::Stopped);
        self.ctx.abort_token().cancel();
        if let Some(grace) = self.grace.as_mut() {
            grace.hook = None;
        }
        let drained = tokio::time::timeout(LOST_SHUTDOWN_GRACE_PERIOD, async {
            while self.inflight.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("in-flight work of a lost generation did not finish in time; aborting it");
            self.inflight.abort_all();
        }
        // No save runs again: waiting answers are refused, later requests too.
        self.ctx.persisted().saves().close(catalog::actor_stopping(Some("the generation was lost before the save")));
        self.ctx.outbox().idle(OUTBOX_RELEASE_BOUND).await;
        self.reply_to_stops(Ok(()));
        // Commands that raced the lost signal still get an answer.
        self.lifecycle_rx.close();
        while let Ok(cmd) = self.lifecycle_rx.try_recv() {
            match cmd {
                super::LifecycleCommand::Start { reply } => {
                    let _ =
                        reply.send(Err(catalog::actor_stopping(Some("declared lost before it started")).into_anyhow()));
                }
                super::LifecycleCommand::Stop { reply, .. } => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
    }

    fn reply_to_stops(&mut self, result: anyhow::Result<()>) {
        let replies = self.grace.take().map(|g| g.replies).unwrap_or_default();
        let mut result = Some(result);
        for reply in replies {
            let r = result.take().unwrap_or(Ok(()));
            let _ = reply.send(r);
        }
    }
}

/// Said once per lost generation, so an operator reading a fence or a
/// drain knows which actors' changes did not survive (docs/durability.md,
/// "The lease"): with the output gate on, only changes never answered.
fn log_lost() {
    tracing::warn!(
        "generation lost (the engine may run it elsewhere): it writes nothing more; what this actor changed \
         since its last acknowledged save is lost"
    );
}

/// The final save, tried again while it fails for a reason that may
/// pass (the engine answering a KV write with an error, as its store
/// does under load: "transaction failed"), 50 ms after the first
/// failure and twice as long after each one, up to 1 s, at most
/// [`FINAL_SAVE_ATTEMPTS`] tries (the engine answers a write over its
/// limits with the same words, and that one never passes); the caller
/// bounds the whole. A generation that may no longer write, and a
/// failure no retry mends (`save::is_permanent`), are not tried again.
async fn final_save_with_retries(ctx: &ActorContext, hooks: &DynHooks) -> anyhow::Result<()> {
    let mut wait = FINAL_SAVE_RETRY_FIRST;
    for attempt in 1.. {
        let result = super::persist::save(ctx, hooks).await;
        let err = match result {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        if attempt >= FINAL_SAVE_ATTEMPTS
            || ctx.writes_closed()
            || ctx.is_lost()
            || crate::actor::save::is_permanent(&crate::error::RivetError::extract(&err))
        {
            return Err(err);
        }
        tracing::warn!(error = %format!("{err:#}"), retry_in_ms = wait.as_millis() as u64, "final state save failed; trying again");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(FINAL_SAVE_RETRY_MAX);
    }
    unreachable!("the loop returns")
}
