//! The operations on cron jobs over the actor context: set, delete,
//! history, and the task's fires (docs/queues-cron.md).

use std::collections::VecDeque;

use super::record::{CronFire, CronJob, FireResult, ScheduleErrorInfo};
use super::{expr, store, Cadence, CronJobs, State, NEVER};
use crate::actor::clock::now_ms;
use crate::actor::keys::cron as keys;
use crate::actor::scheduled_fire::ScheduledFire;
use crate::actor::ActorContext;
use crate::error::RivetError;

/// A due job handed to the actor task.
#[derive(Debug, Clone)]
pub struct CronDispatch {
    pub action: String,
    pub args: Vec<u8>,
    /// What the action learns (`scheduledFire`): kind `cron` or `every`,
    /// `id` and `name` the job's name.
    pub fire: ScheduledFire,
    /// The previous run still goes: recorded, not run.
    pub skipped: bool,
    name: String,
    incarnation: u64,
}

fn jobs(ctx: &ActorContext) -> &CronJobs {
    ctx.schedule().cron()
}

/// Loads the stored jobs (at start, before any hook).
pub(crate) async fn load(ctx: &ActorContext) -> anyhow::Result<()> {
    let loaded = store::load_jobs(ctx).await?;
    jobs(ctx).state(|s| loaded.into_iter().for_each(|job| s.insert(job)));
    ctx.schedule().publish_next();
    Ok(())
}

/// `cronSet` / `cronEvery`: creates or replaces the job `name`. A job
/// whose cadence is unchanged keeps its next run; a new cadence starts
/// from now. Its history is cut to `max_history`.
pub async fn set(
    ctx: &ActorContext,
    name: &str,
    cadence: Cadence,
    action: &str,
    args: Vec<u8>,
    max_history: u32,
) -> anyhow::Result<()> {
    expr::validate_name(name)?;
    if action.is_empty() {
        return Err(RivetError::new(
            crate::error_codes::SCHEDULE_INVALID_NAME,
            "The scheduled action name must not be empty.",
        )
        .into_anyhow());
    }
    let cron = jobs(ctx);
    let _writes = cron.writes.lock().await;
    ctx.check_writable()?;
    let existing = cron.get(name);
    if existing.is_none() {
        ctx.schedule().check_capacity()?;
    }
    let now = now_ms();
    let next_run_at = match &existing {
        Some(existing) if existing.cadence == cadence => existing.next_run_at,
        _ => cadence.first(now)?,
    };
    let job = CronJob {
        name: name.to_string(),
        cadence,
        action: action.to_string(),
        args,
        next_run_at,
        last_run_at: existing.as_ref().and_then(|e| e.last_run_at),
        max_history,
    };
    store::put(ctx, vec![(keys::job_key(name), store::encode_job(&job)?)]).await?;
    cron.state(|s| match s.jobs.get_mut(name) {
        Some(entry) => entry.job = job,
        None => s.insert(job),
    });
    ctx.schedule().publish_next();
    ctx.sync_engine_alarm();
    let pruned = with_history(ctx, name, |seqs| prune(seqs, max_history)).await?.unwrap_or_default();
    store::delete(ctx, pruned.iter().map(|seq| keys::history_key(name, *seq)).collect()).await
}

/// `cronDelete(name)`: whether there was such a job. Its history goes
/// with it; a run under way finishes unrecorded.
pub async fn delete(ctx: &ActorContext, name: &str) -> anyhow::Result<bool> {
    expr::validate_name(name)?;
    let cron = jobs(ctx);
    let _writes = cron.writes.lock().await;
    ctx.check_writable()?;
    if cron.get(name).is_none() {
        return Ok(false);
    }
    store::delete_job(ctx, name).await?;
    cron.state(|s| s.jobs.remove(name));
    ctx.schedule().publish_next();
    ctx.sync_engine_alarm();
    Ok(true)
}

/// `cronHistory(name, limit)`: the job's last `limit` fires, newest first
/// (nothing for a job that does not exist).
pub async fn history(ctx: &ActorContext, name: &str, limit: u32) -> anyhow::Result<Vec<CronFire>> {
    expr::validate_name(name)?;
    let cron = jobs(ctx);
    let _writes = cron.writes.lock().await;
    if with_history(ctx, name, |_| ()).await?.is_none() {
        return Ok(Vec::new());
    }
    let mut fires: Vec<CronFire> = store::load_history(ctx, name).await?.into_iter().map(|(_, f)| f).collect();
    fires.reverse();
    fires.truncate(limit as usize);
    Ok(fires)
}

/// Runs `f` on the job's history index, reading it first if this
/// generation has not (fires left `running` by an earlier generation are
/// then recorded as interrupted). `None` when there is no such job. The
/// caller holds `writes`.
async fn with_history<R>(
    ctx: &ActorContext,
    name: &str,
    f: impl FnOnce(&mut VecDeque<u64>) -> R,
) -> anyhow::Result<Option<R>> {
    let cron = jobs(ctx);
    let Some(loaded) = cron.state(|s| s.jobs.get(name).map(|e| e.seqs.is_some())) else {
        return Ok(None);
    };
    if !loaded {
        let stored = store::load_history(ctx, name).await?;
        let now = now_ms();
        let interrupted: Vec<_> = stored
            .iter()
            .filter(|(_, fire)| fire.result == FireResult::Running)
            .map(|(seq, fire)| {
                let fire = CronFire {
                    finished_at: Some(now),
                    result: FireResult::Error,
                    error: Some(ScheduleErrorInfo {
                        group: "schedule".into(),
                        code: "interrupted".into(),
                        message: "Scheduled action was interrupted before completion.".into(),
                        metadata: None,
                    }),
                    ..fire.clone()
                };
                (keys::history_key(name, *seq), store::encode_fire(&fire))
            })
            .collect();
        if !interrupted.is_empty() && !ctx.writes_closed() {
            store::put(ctx, interrupted).await?;
        }
        let seqs: VecDeque<u64> = stored.into_iter().map(|(seq, _)| seq).collect();
        cron.state(|s| {
            if let Some(entry) = s.jobs.get_mut(name) {
                entry.seqs.get_or_insert(seqs);
            }
        });
    }
    Ok(cron.state(|s| s.jobs.get_mut(name).and_then(|e| e.seqs.as_mut()).map(f)))
}

/// Drops the oldest sequence numbers beyond `keep`; returns them.
fn prune(seqs: &mut VecDeque<u64>, keep: u32) -> Vec<u64> {
    let excess = seqs.len().saturating_sub(keep as usize);
    seqs.drain(..excess).collect()
}

/// The jobs due at `due_by`, advanced to their next run (in memory; the
/// task's dispatch persists them). `now` is the fire time.
pub(crate) fn take_due(ctx: &ActorContext, due_by: i64, now: i64) -> Vec<CronDispatch> {
    let due = jobs(ctx).state(|s| {
        let State { jobs, running, .. } = s;
        let mut due = Vec::new();
        for entry in jobs.values_mut().filter(|e| e.job.next_run_at <= due_by) {
            let job = &mut entry.job;
            let scheduled_at = job.next_run_at;
            job.next_run_at = job.cadence.after(scheduled_at, now).unwrap_or_else(|err| {
                tracing::warn!(job = %job.name, error = %format!("{err:#}"), "cron job has no next run; it stops");
                NEVER
            });
            let skipped = running.contains_key(&job.name);
            if !skipped {
                job.last_run_at = Some(now);
                running.insert(job.name.clone(), entry.incarnation);
            }
            due.push(CronDispatch {
                action: job.action.clone(),
                args: job.args.clone(),
                fire: ScheduledFire {
                    kind: job.cadence.kind(),
                    id: job.name.clone(),
                    name: Some(job.name.clone()),
                    scheduled_at,
                    fired_at: now,
                },
                skipped,
                name: job.name.clone(),
                incarnation: entry.incarnation,
            });
        }
        due
    });
    if !due.is_empty() {
        ctx.schedule().publish_next();
    }
    due
}

/// Persists a due job's advance and records its fire (`running`, or
/// `skipped`); the fire's sequence number when history is kept.
pub(crate) async fn begin(ctx: &ActorContext, dispatch: &CronDispatch) -> anyhow::Result<Option<u64>> {
    let cron = jobs(ctx);
    let _writes = cron.writes.lock().await;
    let Some(job) = cron
        .state(|s| s.jobs.get(&dispatch.name).filter(|e| e.incarnation == dispatch.incarnation).map(|e| e.job.clone()))
    else {
        return Ok(None);
    };
    let mut puts = vec![(keys::job_key(&job.name), store::encode_job(&job)?)];
    let mut seq = None;
    let mut pruned = Vec::new();
    if job.max_history > 0 {
        let floor = u64::try_from(dispatch.fire.fired_at).unwrap_or(0).saturating_mul(1000);
        let appended = with_history(ctx, &job.name, |seqs| {
            let next = seqs.back().map_or(floor, |last| (last + 1).max(floor));
            seqs.push_back(next);
            (next, prune(seqs, job.max_history))
        })
        .await?;
        if let Some((next, dropped)) = appended {
            let result = if dispatch.skipped { FireResult::Skipped } else { FireResult::Running };
            let fire = CronFire {
                action: job.action.clone(),
                scheduled_at: dispatch.fire.scheduled_at,
                fired_at: dispatch.fire.fired_at,
                finished_at: dispatch.skipped.then_some(dispatch.fire.fired_at),
                result,
                error: None,
            };
            puts.push((keys::history_key(&job.name, next), store::encode_fire(&fire)));
            seq = Some(next);
            pruned = dropped;
        }
    }
    store::put(ctx, puts).await?;
    store::delete(ctx, pruned.iter().map(|s| keys::history_key(&job.name, *s)).collect()).await?;
    Ok(seq)
}

/// Records how a run ended (`ok`, or `error` with the error as clients see
/// it) and lets the job run again.
pub(crate) async fn finish(
    ctx: &ActorContext,
    dispatch: &CronDispatch,
    seq: Option<u64>,
    outcome: Option<&anyhow::Error>,
) {
    let cron = jobs(ctx);
    cron.state(|s| {
        if s.running.get(&dispatch.name) == Some(&dispatch.incarnation) {
            s.running.remove(&dispatch.name);
        }
    });
    let Some(seq) = seq else { return };
    let _writes = cron.writes.lock().await;
    let still_kept = cron.state(|s| {
        s.jobs
            .get(&dispatch.name)
            .is_some_and(|e| e.incarnation == dispatch.incarnation && e.seqs.as_ref().is_some_and(|h| h.contains(&seq)))
    });
    if !still_kept || ctx.writes_closed() {
        return;
    }
    let fire = CronFire {
        action: dispatch.action.clone(),
        scheduled_at: dispatch.fire.scheduled_at,
        fired_at: dispatch.fire.fired_at,
        finished_at: Some(now_ms()),
        result: if outcome.is_some() { FireResult::Error } else { FireResult::Ok },
        error: outcome.map(client_error),
    };
    let entry = vec![(keys::history_key(&dispatch.name, seq), store::encode_fire(&fire))];
    if let Err(err) = store::put(ctx, entry).await {
        tracing::warn!(job = %dispatch.name, error = %format!("{err:#}"), "could not record the end of a cron fire");
    }
}

/// The error as a client may see it: a non-public error keeps its group
/// and code, with its message masked and no metadata.
fn client_error(err: &anyhow::Error) -> ScheduleErrorInfo {
    let e = RivetError::extract(err);
    let public = e.is_public();
    ScheduleErrorInfo {
        message: if public { e.message } else { "An internal error occurred".into() },
        metadata: if public { e.metadata } else { None },
        group: e.group,
        code: e.code,
    }
}
