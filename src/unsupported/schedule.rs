//! `Schedule` (`ctx.schedule()`): declared for compatibility; scheduled
//! actions and cron jobs are not built yet, so every operation rejects with
//! `rivetkit-native.unsupported` (see [`super`]). `ctx.setAlarm` is the
//! supported way to wake an actor later.

use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;

use super::reject;

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

/// Scheduled actions and cron jobs (not supported yet).
#[napi]
pub struct Schedule {}

#[napi]
impl Schedule {
    #[napi(ts_args_type = "durationMs: number, actionName: string, args: Buffer", ts_return_type = "Promise<string>")]
    pub fn after<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.after")
    }

    #[napi(ts_args_type = "timestampMs: number, actionName: string, args: Buffer", ts_return_type = "Promise<string>")]
    pub fn at<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.at")
    }

    #[napi(ts_args_type = "id: string", ts_return_type = "Promise<boolean>")]
    pub fn cancel<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cancel")
    }

    #[napi(ts_args_type = "id: string", ts_return_type = "Promise<JsScheduledEventInfo | null>")]
    pub fn get<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.get")
    }

    #[napi(ts_return_type = "Promise<Array<JsScheduledEventInfo>>")]
    pub fn list<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.list")
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

    #[napi(ts_args_type = "name: string, limit?: number | undefined | null", ts_return_type = "Promise<Array<JsCronFire>>")]
    pub fn cron_history<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Schedule.cronHistory")
    }
}
