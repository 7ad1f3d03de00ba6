//! `ActorContext` calls through which `@rivetkit/rivetkit-napi`'s runtime
//! keeps books that the core keeps itself: state-change hooks, hibernation changes, prevent-sleep, the run wake time
//! and tracked shutdown work. Most are no-ops that answer as "nothing
//! pending" (each says what it answers); the run wake time is kept by the
//! core and joins the engine's alarm.

use napi::bindgen_prelude::{PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;

use super::handle::ActorContext;
use crate::bridge::error::{reject as reject_invalid, spawn_promise};
use crate::bridge::types::args;
use crate::classes::conn::ConnHandle;

#[napi]
impl ActorContext {
    /// No-op (state-change hooks are driven by the TypeScript runtime).
    #[napi]
    pub fn begin_on_state_change(&self) {}

    /// No-op, see `beginOnStateChange`.
    #[napi]
    pub fn end_on_state_change(&self) {}

    /// No-op: hibernatable connections are persisted by `saveState`.
    #[napi(ts_args_type = "connId: string")]
    pub fn queue_hibernation_removal(&self) {}

    /// Always `false` (see `queueHibernationRemoval`).
    #[napi]
    pub fn has_pending_hibernation_changes(&self) -> bool {
        false
    }

    /// Always empty (see `queueHibernationRemoval`).
    #[napi]
    pub fn take_pending_hibernation_changes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Always empty (see `queueHibernationRemoval`).
    #[napi]
    pub fn dirty_hibernatable_conns(&self) -> Vec<ConnHandle> {
        Vec::new()
    }

    /// Deprecated no-op: use `beginKeepAwake`/`endKeepAwake`.
    #[napi(ts_args_type = "preventSleep: boolean")]
    pub fn set_prevent_sleep(&self) {}

    /// Always `false` (see `setPreventSleep`).
    #[napi]
    pub fn prevent_sleep(&self) -> bool {
        false
    }

    /// Sets (or, with no argument, clears) the time the `run` handler wants
    /// the actor awake by: the engine's alarm covers it, so a sleeping actor
    /// starts (with its `run`) on time. Rejects on a stopped generation.
    #[napi(ts_args_type = "timestampMs?: number | undefined | null", ts_return_type = "Promise<void>")]
    pub fn set_run_wake_at<'env>(
        &self,
        env: &'env Env,
        timestamp_ms: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let timestamp = match args::opt_timestamp_ms("timestampMs", timestamp_ms) {
            Ok(timestamp) => timestamp,
            Err(err) => return reject_invalid(env, err),
        };
        let ctx = self.inner.clone();
        spawn_promise(env, async move { ctx.set_run_wake_at(timestamp) })
    }

    /// Resolves `true` at once: tracked work (`waitUntil`, `keepAwake`,
    /// `registerTask`) is awaited by the core's own stop sequence.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn wait_for_tracked_shutdown_work<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, bool>> {
        spawn_promise(env, async { Ok(true) })
    }

    /// Resolves at once, see `waitForTrackedShutdownWork`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn wait_for_tracked_shutdown_work_unbounded<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        spawn_promise(env, async { Ok(()) })
    }
}
