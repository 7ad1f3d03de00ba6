//! The actor's wake-up inside the task: the `setAlarm` alarm (`onAlarm`),
//! due scheduled actions and due cron jobs (docs/generations.md,
//! docs/queues-cron.md), fired only while started; a sleeping actor is
//! started by the engine's alarm and fires them then.

use super::{with_timeout, ActorTask};
use crate::actor::{cron, schedule, LifecycleHook};
use crate::error::{catalog, RivetError};

impl ActorTask {
    /// The next wake-up is due: a due alarm is cleared (persisted) and runs
    /// `onAlarm`; due scheduled events run their actions. All as tracked work.
    /// `wake_at` is the wake-up the timer was armed for: it counts as due
    /// even if the wall clock disagrees by a millisecond.
    pub(super) fn fire_alarm(&mut self, wake_at: i64) {
        let now = schedule::now_ms();
        let due_by = now.max(wake_at);
        if self.ctx.alarm().is_some_and(|at| at <= due_by) {
            tracing::debug!("alarm fired");
            // Cannot fail: the task only fires alarms while started.
            let _ = self.ctx.set_alarm(None);
            if let Some(fut) = self.factory.hooks.lifecycle(LifecycleHook::OnAlarm, &self.ctx) {
                let timeout = self.factory.config.action_timeout;
                self.inflight.spawn(async move {
                    if let Err(err) = with_timeout("onAlarm", timeout, fut).await {
                        tracing::warn!(error = %format!("{err:#}"), "onAlarm failed");
                    }
                });
            }
        }
        let due = self.ctx.schedule().take_due(due_by);
        let due_jobs = cron::take_due(&self.ctx, due_by, now);
        if due.is_empty() && due_jobs.is_empty() {
            return;
        }
        self.ctx.sync_engine_alarm();
        for event in due {
            self.fire_scheduled(event, now);
        }
        for job in due_jobs {
            self.fire_cron(job);
        }
    }

    /// Runs one due cron job as tracked work: its advance and the fire are
    /// recorded first, then (unless skipped) the action runs, bounded by
    /// the action timeout, and its outcome is recorded.
    fn fire_cron(&mut self, dispatch: cron::CronDispatch) {
        let ctx = self.ctx.clone();
        let hooks = self.factory.hooks.clone();
        let timeout = self.factory.config.action_timeout;
        self.inflight.spawn(async move {
            let seq = match cron::begin(&ctx, &dispatch).await {
                Ok(seq) => seq,
                Err(err) => {
                    tracing::warn!(job = %dispatch.fire.id, error = %format!("{err:#}"), "could not record a cron fire");
                    None
                }
            };
            if dispatch.skipped {
                tracing::debug!(job = %dispatch.fire.id, "cron job still running; this fire is skipped");
                return;
            }
            tracing::debug!(job = %dispatch.fire.id, action = %dispatch.action, "cron job fired");
            let cancel = tokio_util::sync::CancellationToken::new();
            let _cancel_on_exit = cancel.clone().drop_guard();
            let fut = hooks.scheduled_action(&ctx, &dispatch.action, dispatch.args.clone(), &dispatch.fire, cancel);
            let result = match fut {
                Some(fut) => match tokio::time::timeout(timeout, fut).await {
                    Ok(result) => result.map(drop),
                    Err(_) => Err(catalog::action_timed_out().into_anyhow()),
                },
                None => Err(RivetError::new(crate::error_codes::ACTOR_ACTION_NOT_FOUND, format!("Action `{}` was not found.", dispatch.action),
                )
                .into_anyhow()),
            };
            if let Err(err) = &result {
                let e = RivetError::extract(err);
                tracing::warn!(job = %dispatch.fire.id, action = %dispatch.action, group = %e.group, code = %e.code, error = %e.message, "cron action failed");
            }
            cron::finish(&ctx, &dispatch, seq, result.as_ref().err()).await;
        });
    }

    /// Runs one due scheduled action; its record is deleted once it has
    /// finished, whatever the outcome (a failure is logged, not retried).
    fn fire_scheduled(&mut self, event: schedule::ScheduledEvent, now: i64) {
        let fire = schedule::ScheduledFire {
            kind: "at",
            id: event.id.clone(),
            name: None,
            scheduled_at: event.run_at,
            fired_at: now,
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let fut = self.factory.hooks.scheduled_action(&self.ctx, &event.action, event.args, &fire, cancel.clone());
        let ctx = self.ctx.clone();
        let timeout = self.factory.config.action_timeout;
        self.inflight.spawn(async move {
            let _cancel_on_exit = cancel.drop_guard();
            tracing::debug!(id = %event.id, action = %event.action, "scheduled action fired");
            let result = match fut {
                Some(fut) => match tokio::time::timeout(timeout, fut).await {
                    Ok(result) => result.map(drop),
                    Err(_) => Err(catalog::action_timed_out().into_anyhow()),
                },
                None => Err(RivetError::new(crate::error_codes::ACTOR_ACTION_NOT_FOUND, format!("Action `{}` was not found.", event.action)).into_anyhow()),
            };
            if let Err(err) = result {
                let e = RivetError::extract(&err);
                tracing::warn!(id = %event.id, action = %event.action, group = %e.group, code = %e.code, error = %e.message, "scheduled action failed");
            }
            if let Err(err) = schedule::forget(&ctx, &event.id).await {
                tracing::warn!(id = %event.id, error = %format!("{err:#}"), "could not delete a fired scheduled event");
            }
        });
    }
}
