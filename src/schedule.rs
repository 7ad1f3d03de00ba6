//! `Schedule` (`ctx.schedule()`): one-shot scheduled actions
//! (`after`, `at`, `cancel`, `get`, `list`), persisted and fired by the core
//! (`rivetkit_native_core::actor::schedule`). Cron jobs are not built yet:
//! those methods reject with `rivetkit-native.unsupported`.

use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::schedule::{self, ScheduledEvent};
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::error::{reject as reject_invalid, reject_unsupported as reject, spawn_promise};
use crate::types::args::{self, ArgResult};
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
            name: None,
            scheduled_at: fire.scheduled_at as f64,
            fired_at: fire.fired_at as f64,
        }
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

    #[napi(
        ts_args_type = "name: string, expression: string, timezone: string | undefined | null, actionName: string, args: Buffer, maxHistory?: number | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn cron_set<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronSet")
    }

    #[napi(
        ts_args_type = "name: string, intervalMs: number, actionName: string, args: Buffer, maxHistory?: number | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn cron_every<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronEvery")
    }

    #[napi(ts_args_type = "name: string", ts_return_type = "Promise<JsCronJobInfo | null>")]
    pub fn cron_get<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronGet")
    }

    #[napi(ts_return_type = "Promise<Array<JsCronJobInfo>>")]
    pub fn cron_list<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronList")
    }

    #[napi(ts_args_type = "name: string", ts_return_type = "Promise<boolean>")]
    pub fn cron_delete<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronDelete")
    }

    #[napi(
        ts_args_type = "name: string, limit?: number | undefined | null",
        ts_return_type = "Promise<Array<JsCronFire>>"
    )]
    pub fn cron_history<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronHistory")
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
