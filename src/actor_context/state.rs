//! The actor's state: `state`, `saveState`, `requestSave` and
//! `requestSaveAndWait`.

use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::save::SaveOptions;

use super::handle::ActorContext;
use crate::bridge::error::{reject, spawn_promise, throw};
use crate::bridge::types::args::{self, ArgResult};
use crate::bridge::types::StateDeltaPayload;

/// `requestSave`'s options: an object (or nothing) whose `maxWaitMs` is a
/// duration (finite, not negative).
fn save_options(opts: Option<Unknown<'_>>) -> ArgResult<SaveOptions> {
    let opts: JsRequestSaveOpts = args::opt_object("opts", opts)?.unwrap_or_default();
    let max_wait = args::field_duration_ms("opts.maxWaitMs", opts.max_wait_ms)?;
    Ok(SaveOptions {
        immediate: opts.immediate.unwrap_or(false),
        max_wait: max_wait.map(std::time::Duration::from_millis),
    })
}

/// Options of `requestSave` / `requestSaveAndWait`.
#[napi(object)]
#[derive(Default)]
pub struct JsRequestSaveOpts {
    pub immediate: Option<bool>,
    pub max_wait_ms: Option<f64>,
}

#[napi]
impl ActorContext {
    /// The actor's current state bytes (CBOR for the TypeScript runtime).
    #[napi]
    pub fn state(&self) -> Buffer {
        Buffer::from(self.inner.state())
    }

    /// Replaces the state and persists it; resolves once the engine
    /// acknowledged the write.
    /// `payload` must be a `StateDeltaPayload` object (`state`, if given, a
    /// `Buffer`); anything else rejects with `napi.invalid_argument`.
    #[napi(ts_args_type = "payload: StateDeltaPayload", ts_return_type = "Promise<void>")]
    pub fn save_state<'env>(&self, env: &'env Env, payload: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let payload: StateDeltaPayload = match args::object("payload", payload) {
            Ok(payload) => payload,
            Err(err) => return reject(env, err),
        };
        let ctx = self.inner.clone();
        // A handle of a generation that has stopped changes nothing: its
        // promise rejects with the refusal.
        let writable = ctx.check_writable();
        if let (Ok(()), Some(state)) = (&writable, payload.state) {
            ctx.set_state(state.0);
        }
        spawn_promise(env, async move {
            writable?;
            rivetkit_native_core::actor::storage::save_record(&ctx).await
        })
    }

    /// Asks for the state to be saved soon (throttled to the actor's save
    /// interval unless `immediate`, or within `maxWaitMs`).
    #[napi(ts_args_type = "opts?: JsRequestSaveOpts | undefined | null")]
    pub fn request_save(&self, env: &Env, opts: Option<Unknown<'_>>) -> napi::Result<()> {
        let options = save_options(opts).map_err(|e| throw(env, e))?;
        self.inner.request_save(options);
        Ok(())
    }

    /// Like `requestSave`, and resolves once a save covering this request
    /// has been acknowledged by the engine: what the state held before the
    /// call is then durable.
    #[napi(ts_args_type = "opts?: JsRequestSaveOpts | undefined | null", ts_return_type = "Promise<void>")]
    pub fn request_save_and_wait<'env>(
        &self,
        env: &'env Env,
        opts: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let ctx = self.inner.clone();
        let options = match save_options(opts) {
            Ok(options) => options,
            Err(err) => return reject(env, err),
        };
        spawn_promise(env, async move { ctx.request_save_and_wait(options).await })
    }
}
