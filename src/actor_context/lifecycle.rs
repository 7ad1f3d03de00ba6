//! When the actor runs and stops: the alarm, keep-awake regions and tracked
//! promises, the `run` handler, `sleep`/`destroy`, and the abort signal.

use napi::bindgen_prelude::{Function, JsObjectValue, Object, Promise, PromiseRaw, Unknown};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::{Env, JsValue};
use napi_derive::napi;

use super::handle::ActorContext;
use crate::bridge::error::{spawn_promise, throw, to_js_error};
use crate::bridge::js_callback::Ignored;
use crate::bridge::types::args::{self, ArgResult};

#[napi]
impl ActorContext {
    /// Sets the alarm (ms since the epoch), or clears it with no argument.
    /// A sleeping actor is woken for it; `onAlarm` runs when it fires. A
    /// timestamp that is not a finite number within the range of a
    /// JavaScript `Date` throws `napi.invalid_argument`.
    #[napi(ts_args_type = "timestampMs?: number | undefined | null")]
    pub fn set_alarm(&self, env: &Env, timestamp_ms: Option<Unknown<'_>>) -> napi::Result<()> {
        let timestamp = args::opt_timestamp_ms("timestampMs", timestamp_ms).map_err(|e| throw(env, e))?;
        self.inner.set_alarm(timestamp).map_err(|e| to_js_error(env, e))
    }

    /// Opens a keep-awake region; the actor does not sleep until it ends.
    #[napi]
    pub fn begin_keep_awake(&self) -> u32 {
        self.inner.activity().begin()
    }

    #[napi(ts_args_type = "regionId: number")]
    pub fn end_keep_awake(&self, env: &Env, region_id: Unknown<'_>) -> napi::Result<()> {
        let region = region_id_arg(region_id).map_err(|e| throw(env, e))?;
        self.inner.activity().end(region);
        Ok(())
    }

    /// Keeps the actor awake until `promise` settles.
    #[napi(ts_args_type = "promise: Promise<unknown>")]
    pub fn keep_awake(&self, promise: Promise<Ignored>) {
        self.track(promise);
    }

    /// Work the actor waits for before it may sleep or finish stopping.
    #[napi(ts_args_type = "promise: Promise<unknown>")]
    pub fn wait_until(&self, promise: Promise<Ignored>) {
        self.track(promise);
    }

    /// Same as `waitUntil`: a background task the actor keeps running for.
    #[napi(ts_args_type = "promise: Promise<unknown>")]
    pub fn register_task(&self, promise: Promise<Ignored>) {
        self.track(promise);
    }

    /// Whether the `run` handler is running.
    #[napi]
    pub fn run_handler_active(&self) -> bool {
        self.inner.run_handler_active()
    }

    /// Starts the `run` handler again if it has returned.
    #[napi]
    pub fn restart_run_handler(&self) {
        self.inner.restart_run_handler();
    }

    /// Asks the engine to put this actor to sleep. Idempotent.
    #[napi]
    pub fn sleep(&self, env: &Env) -> napi::Result<()> {
        self.inner.sleep().map_err(|e| to_js_error(env, e))
    }

    /// Asks the engine to destroy this actor and its data.
    #[napi]
    pub fn destroy(&self, env: &Env) -> napi::Result<()> {
        self.inner.destroy().map_err(|e| to_js_error(env, e))
    }

    #[napi]
    pub fn destroy_requested(&self) -> bool {
        self.inner.destroy_requested()
    }

    /// True once the generation has begun to stop.
    #[napi]
    pub fn aborted(&self) -> bool {
        self.inner.aborted()
    }

    /// An `AbortSignal` that aborts when the generation begins to stop.
    #[napi(ts_return_type = "AbortSignal")]
    pub fn abort_signal<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        let global = env.get_global()?;
        let constructor: Function<'_, (), Unknown<'_>> = global.get_named_property("AbortController")?;
        let controller: Object<'_> = unsafe { constructor.new_instance(())?.cast()? };
        let signal: Unknown<'env> = controller.get_named_property("signal")?;
        let abort: Function<'_, (), Unknown<'_>> = controller.get_named_property("abort")?;
        let token = self.inner.abort_token().clone();
        if token.is_cancelled() {
            abort.apply(controller, ())?;
            return Ok(signal);
        }
        // Weak: a pending abort never keeps Node alive. Not a `JsCallback`:
        // that calls `f(null, payload)` and awaits the answer, and
        // `abort(null)` would make `signal.reason` null instead of the
        // `AbortError` a bare `abort()` gives; nothing waits for this call.
        let bound = abort.bind(controller)?;
        let tsfn = bound.build_threadsafe_function().weak::<true>().build()?;
        let lost = self.inner.lost_token().clone();
        crate::bridge::runtime::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = lost.cancelled() => {}
            }
            let _ = tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        });
        let _ = signal.value();
        Ok(signal)
    }

    /// Resolves once this generation has stopped (or was lost); after
    /// `destroy()` that is when the destroy is done.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn wait_for_destroy_completion<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let (abort, lost) = (self.inner.abort_token().clone(), self.inner.lost_token().clone());
        spawn_promise(env, async move {
            tokio::select! {
                _ = abort.cancelled() => {}
                _ = lost.cancelled() => {}
            }
            Ok(())
        })
    }

    /// A keep-awake region for a WebSocket callback (as `beginKeepAwake`).
    #[napi]
    pub fn begin_websocket_callback(&self) -> u32 {
        self.inner.activity().begin()
    }

    #[napi(ts_args_type = "regionId: number")]
    pub fn end_websocket_callback(&self, env: &Env, region_id: Unknown<'_>) -> napi::Result<()> {
        let region = region_id_arg(region_id).map_err(|e| throw(env, e))?;
        self.inner.activity().end(region);
        Ok(())
    }
}

/// A keep-awake region id as returned by `beginKeepAwake` (a `u32`).
fn region_id_arg(value: Unknown<'_>) -> ArgResult<u32> {
    let id = args::number("regionId", value)?;
    // Bounded by u32::MAX, so the cast is exact.
    Ok(rivetkit_native_core::error::validate::size("regionId", id, u64::from(u32::MAX))? as u32)
}
