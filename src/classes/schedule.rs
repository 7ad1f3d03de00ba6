//! `Schedule` (`ctx.schedule()`): one-shot scheduled actions
//! (`after`, `at`, `cancel`, `get`, `list`) and cron jobs (`cronSet`,
//! `cronEvery`, `cronGet`, `cronList`, `cronDelete`, `cronHistory`),
//! persisted and fired by the core (`rivetkit_native_core::actor::schedule`
//! and `::cron`, which document the semantics).

use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::schedule::{self, ScheduledEvent};
use rivetkit_native_core::actor::ActorContext as CoreContext;

use rivetkit_native_core::actor::cron::{self, Cadence, CronFire, CronJob};

use crate::bridge::error::{reject as reject_invalid, spawn_promise};
use crate::bridge::types::args::{self, ArgResult};
use rivetkit_native_core::error::validate;

#[napi(object)]
pub struct JsScheduledEventInfo {
    pub id: String,
    pub action: String,
    pub args: Buffer,
    pub run_at: f64,
}

#[napi(object)]
pub struct JsCronJobInfo {
    pub name: String,
    pub kind: String,
    pub action: String,
    pub args: Buffer,
    pub next_run_at: f64,
    pub last_run_at: Option<f64>,
    pub expression: Option<String>,
    pub timezone: Option<String>,
    pub interval_ms: Option<f64>,
    pub max_history: u32,
}

#[napi(object)]
pub struct JsScheduleErrorInfo {
    pub group: String,
    pub code: String,
    pub message: String,
    #[napi(ts_type = "unknown")]
    pub metadata: Option<serde_json::Value>,
}

#[napi(object)]
pub struct JsCronFire {
    pub action: String,
    pub scheduled_at: f64,
    pub fired_at: f64,
    pub finished_at: Option<f64>,
    pub result: String,
    pub error: Option<JsScheduleErrorInfo>,
}

/// Why a scheduled action runs: the `scheduledFire` of its action payload.
#[napi(object, object_to_js = true, object_from_js = false)]
pub struct JsScheduledFireInfo {
    /// `"at"` for `after`/`at` events.
    #[napi(ts_type = "'at' | 'cron' | 'every'")]
    pub kind: String,
    pub id: String,
    pub name: Option<String>,
    pub scheduled_at: f64,
    pub fired_at: f64,
}

impl From<&schedule::ScheduledFire> for JsScheduledFireInfo {
    fn from(fire: &schedule::ScheduledFire) -> Self {
        Self {
            kind: fire.kind.to_string(),
            id: fire.id.clone(),
            name: fire.name.clone(),
            scheduled_at: fire.scheduled_at as f64,
            fired_at: fire.fired_at as f64,
        }
    }
}

impl From<CronJob> for JsCronJobInfo {
    fn from(job: CronJob) -> Self {
        let (expression, timezone, interval_ms) = match job.cadence {
            Cadence::Cron { expression, timezone } => (Some(expression), Some(timezone), None),
            Cadence::Every { interval_ms } => (None, None, Some(interval_ms as f64)),
        };
        Self {
            name: job.name,
            kind: if interval_ms.is_some() { "every" } else { "cron" }.to_string(),
            action: job.action,
            args: Buffer::from(job.args),
            next_run_at: job.next_run_at as f64,
            last_run_at: job.last_run_at.map(|t| t as f64),
            expression,
            timezone,
            interval_ms,
            max_history: job.max_history,
        }
    }
}

impl From<CronFire> for JsCronFire {
    fn from(fire: CronFire) -> Self {
        Self {
            action: fire.action,
            scheduled_at: fire.scheduled_at as f64,
            fired_at: fire.fired_at as f64,
            finished_at: fire.finished_at.map(|t| t as f64),
            result: fire.result.as_str().to_string(),
            error: fire.error.map(|e| JsScheduleErrorInfo {
                group: e.group,
                code: e.code,
                message: e.message,
                metadata: e.metadata,
            }),
        }
    }
}

/// A whole number (a count or a number of ms) that JavaScript holds
/// exactly; the core checks its range.
fn whole(argument: &str, value: Unknown<'_>) -> ArgResult<i64> {
    let n = args::number(argument, value)?;
    if !n.is_finite() || n.fract() != 0.0 || n.abs() > validate::MAX_SAFE_INTEGER {
        return Err(validate::invalid(argument, format!("expected a whole number, got {}", validate::describe(n))));
    }
    Ok(n as i64)
}

fn opt_whole(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<i64>> {
    value.filter(|v| !args::is_nullish(v)).map(|v| whole(argument, v)).transpose()
}

/// The arguments `cronSet` and `cronEvery` share.
struct JobArgs {
    name: String,
    action: String,
    args: Vec<u8>,
    max_history: Option<i64>,
}

impl JobArgs {
    fn read(
        name: Unknown<'_>,
        action: Unknown<'_>,
        cbor_args: Unknown<'_>,
        max_history: Option<Unknown<'_>>,
    ) -> ArgResult<Self> {
        Ok(Self {
            name: args::string("name", name)?,
            action: args::string("actionName", action)?,
            args: args::bytes("args", cbor_args)?,
            max_history: opt_whole("maxHistory", max_history)?,
        })
    }

    /// Checks the name, the cadence and `maxHistory` in the reference's
    /// order (`schedule.*` errors), then sets the job.
    async fn set(self, ctx: &CoreContext, cadence: anyhow::Result<Cadence>) -> anyhow::Result<()> {
        cron::expr::validate_name(&self.name)?;
        let cadence = cadence?;
        let max_history = cron::expr::max_history(self.max_history)?;
        cron::set(ctx, &self.name, cadence, &self.action, self.args, max_history).await
    }
}

fn info(event: ScheduledEvent) -> JsScheduledEventInfo {
    JsScheduledEventInfo {
        id: event.id,
        action: event.action,
        args: Buffer::from(event.args),
        run_at: event.run_at as f64,
    }
}

/// Scheduled actions of one actor: each runs the named action with the
/// given CBOR args once it is due, waking the actor if it sleeps.
#[napi]
pub struct Schedule {
    pub(crate) ctx: CoreContext,
}

#[napi]
impl Schedule {
    /// Runs `actionName` in `durationMs`; resolves to the event's id once it
    /// is persisted. A duration that is not a finite, non-negative number
    /// (or puts the time past the range of a JavaScript `Date`), or `args`
    /// that is not a `Buffer`, rejects with `napi.invalid_argument`.
    #[napi(ts_args_type = "durationMs: number, actionName: string, args: Buffer", ts_return_type = "Promise<string>")]
    pub fn after<'env>(
        &self,
        env: &'env Env,
        duration_ms: Unknown<'env>,
        action_name: Unknown<'env>,
        args: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let read = || -> ArgResult<i64> {
            let delay = args::duration_ms("durationMs", duration_ms)?;
            // Both are within ±8.64e15, so the sum fits; it must still be a valid time.
            let run_at = schedule::now_ms().saturating_add(delay as i64);
            validate::timestamp_ms("durationMs", run_at as f64)
        };
        match read() {
            Ok(run_at) => self.schedule_at(env, run_at, action_name, args),
            Err(err) => reject_invalid(env, err),
        }
    }

    /// Runs `actionName` at `timestampMs` (ms since the epoch; a past time
    /// runs now). A timestamp that is not a finite number within the range
    /// of a JavaScript `Date` rejects with `napi.invalid_argument`.
    #[napi(ts_args_type = "timestampMs: number, actionName: string, args: Buffer", ts_return_type = "Promise<string>")]
    pub fn at<'env>(
        &self,
        env: &'env Env,
        timestamp_ms: Unknown<'env>,
        action_name: Unknown<'env>,
        args: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        match args::timestamp_ms("timestampMs", timestamp_ms) {
            Ok(run_at) => self.schedule_at(env, run_at, action_name, args),
            Err(err) => reject_invalid(env, err),
        }
    }

    /// Cancels a pending event; resolves to whether there was one.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn cancel<'env>(&self, env: &'env Env, id: String) -> napi::Result<PromiseRaw<'env, bool>> {
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { schedule::cancel(&ctx, &id).await })
    }

    /// A pending event, or `null`.
    #[napi(ts_return_type = "Promise<JsScheduledEventInfo | null>")]
    pub fn get<'env>(
        &self,
        env: &'env Env,
        id: String,
    ) -> napi::Result<PromiseRaw<'env, Option<JsScheduledEventInfo>>> {
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { Ok(ctx.schedule().get(&id).map(info)) })
    }

    /// Pending events, earliest first.
    #[napi(ts_return_type = "Promise<Array<JsScheduledEventInfo>>")]
    pub fn list<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Vec<JsScheduledEventInfo>>> {
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { Ok(ctx.schedule().list().into_iter().map(info).collect()) })
    }

    /// Creates or replaces the cron job `name`: `actionName` runs with
    /// `args` at every occurrence of the five-field `expression` in
    /// `timezone` (default `UTC`). A job whose expression and time zone are
    /// unchanged keeps its next run. Its last `maxHistory` fires (default
    /// 100, at most 1,000) are kept.
    #[napi(
        ts_args_type = "name: string, expression: string, timezone: string | undefined | null, actionName: string, args: Buffer, maxHistory?: number | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn cron_set<'env>(
        &self,
        env: &'env Env,
        name: Unknown<'env>,
        expression: Unknown<'env>,
        timezone: Option<Unknown<'env>>,
        action_name: Unknown<'env>,
        args: Unknown<'env>,
        max_history: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let read = || -> ArgResult<(JobArgs, String, Option<String>)> {
            Ok((
                JobArgs::read(name, action_name, args, max_history)?,
                args::string("expression", expression)?,
                args::opt_string("timezone", timezone)?,
            ))
        };
        let (job, expression, timezone) = match read() {
            Ok(read) => read,
            Err(err) => return reject_invalid(env, err),
        };
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { job.set(&ctx, Cadence::cron(&expression, timezone.as_deref())).await })
    }

    /// Creates or replaces the cron job `name`, run every `intervalMs`
    /// (at least 5,000) from now; an unchanged interval keeps its next run.
    #[napi(
        ts_args_type = "name: string, intervalMs: number, actionName: string, args: Buffer, maxHistory?: number | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn cron_every<'env>(
        &self,
        env: &'env Env,
        name: Unknown<'env>,
        interval_ms: Unknown<'env>,
        action_name: Unknown<'env>,
        args: Unknown<'env>,
        max_history: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let read = || -> ArgResult<(JobArgs, i64)> {
            Ok((JobArgs::read(name, action_name, args, max_history)?, whole("intervalMs", interval_ms)?))
        };
        let (job, interval_ms) = match read() {
            Ok(read) => read,
            Err(err) => return reject_invalid(env, err),
        };
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { job.set(&ctx, Cadence::every(interval_ms)).await })
    }

    /// The cron job `name`, or `null`.
    #[napi(ts_args_type = "name: string", ts_return_type = "Promise<JsCronJobInfo | null>")]
    pub fn cron_get<'env>(
        &self,
        env: &'env Env,
        name: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, Option<JsCronJobInfo>>> {
        let name = match args::string("name", name) {
            Ok(name) => name,
            Err(err) => return reject_invalid(env, err),
        };
        let ctx = self.ctx.clone();
        spawn_promise(env, async move {
            cron::expr::validate_name(&name)?;
            Ok(ctx.schedule().cron().get(&name).map(JsCronJobInfo::from))
        })
    }

    /// Every cron job, by next run.
    #[napi(ts_return_type = "Promise<Array<JsCronJobInfo>>")]
    pub fn cron_list<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Vec<JsCronJobInfo>>> {
        let jobs = self.ctx.schedule().cron().list();
        spawn_promise(env, async move { Ok(jobs.into_iter().map(JsCronJobInfo::from).collect()) })
    }

    /// Deletes the cron job `name` and its history; resolves to whether
    /// there was one.
    #[napi(ts_args_type = "name: string", ts_return_type = "Promise<boolean>")]
    pub fn cron_delete<'env>(&self, env: &'env Env, name: Unknown<'env>) -> napi::Result<PromiseRaw<'env, bool>> {
        let name = match args::string("name", name) {
            Ok(name) => name,
            Err(err) => return reject_invalid(env, err),
        };
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { cron::delete(&ctx, &name).await })
    }

    /// The job's last `limit` fires (default 20, at most 1,000), newest first.
    #[napi(
        ts_args_type = "name: string, limit?: number | undefined | null",
        ts_return_type = "Promise<Array<JsCronFire>>"
    )]
    pub fn cron_history<'env>(
        &self,
        env: &'env Env,
        name: Unknown<'env>,
        limit: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, Vec<JsCronFire>>> {
        let read =
            || -> ArgResult<(String, Option<i64>)> { Ok((args::string("name", name)?, opt_whole("limit", limit)?)) };
        let (name, limit) = match read() {
            Ok(read) => read,
            Err(err) => return reject_invalid(env, err),
        };
        let ctx = self.ctx.clone();
        spawn_promise(env, async move {
            let limit = cron::expr::history_limit(limit)?;
            Ok(cron::history(&ctx, &name, limit).await?.into_iter().map(JsCronFire::from).collect())
        })
    }
}

impl Schedule {
    fn schedule_at<'env>(
        &self,
        env: &'env Env,
        run_at: i64,
        action: Unknown<'env>,
        args: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let ctx = self.ctx.clone();
        let read = || -> ArgResult<(String, Vec<u8>)> {
            Ok((args::string("actionName", action)?, args::bytes("args", args)?))
        };
        let (action, args) = match read() {
            Ok(read) => read,
            Err(err) => return reject_invalid(env, err),
        };
        spawn_promise(env, async move { schedule::schedule_at(&ctx, run_at, &action, args).await })
    }
}
