//! `ActorContext`: JavaScript's handle on one actor generation.
//!
//! Each hook call hands JavaScript a fresh wrapper around the same core
//! context (an `Arc`), so every method reads live state.

use napi::bindgen_prelude::{Buffer, Function, Object, PromiseRaw, Unknown};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::bindgen_prelude::JsObjectValue;
use napi::{Env, JsValue};
use napi_derive::napi;
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::error::{spawn_promise, to_js_error};
use crate::types::StateDeltaPayload;
use crate::types::JsActorKeySegment;

#[napi]
pub struct ActorContext {
    pub(crate) inner: CoreContext,
}

impl From<CoreContext> for ActorContext {
    fn from(inner: CoreContext) -> Self {
        Self { inner }
    }
}

#[napi]
impl ActorContext {
    /// The actor's current state bytes (CBOR for the TypeScript runtime).
    #[napi]
    pub fn state(&self) -> Buffer {
        Buffer::from(self.inner.state())
    }

    #[napi]
    pub fn actor_id(&self) -> String {
        self.inner.actor_id().to_string()
    }

    #[napi]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// The key's segments. Every segment is a string on the wire.
    #[napi]
    pub fn key(&self) -> Vec<JsActorKeySegment> {
        self.inner
            .key()
            .segments()
            .iter()
            .map(|s| JsActorKeySegment { kind: "string".into(), string_value: Some(s.clone()), number_value: None })
            .collect()
    }

    #[napi]
    pub fn region(&self) -> String {
        self.inner.region().to_string()
    }

    /// Replaces the state and persists it; resolves once the engine
    /// acknowledged the write.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn save_state<'env>(&self, env: &'env Env, payload: StateDeltaPayload) -> napi::Result<PromiseRaw<'env, ()>> {
        let ctx = self.inner.clone();
        if let Some(state) = payload.state {
            ctx.set_state(state.to_vec());
        }
        spawn_promise(env, async move { rivetkit_native_core::actor::storage::save_record(&ctx).await })
    }

    /// The actor's key-value store, kept apart from the runtime's own data.
    #[napi]
    pub fn kv(&self) -> crate::kv::Kv {
        crate::kv::Kv { ctx: self.inner.clone() }
    }

    /// The generation number (1 for the first start; higher on every wake).
    #[napi]
    pub fn generation(&self) -> u32 {
        self.inner.generation()
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

    /// True when both handles refer to the same generation.
    #[napi]
    pub fn same_actor_instance(&self, other: &ActorContext) -> bool {
        self.inner.same_instance(&other.inner)
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
        // Weak: a pending abort never keeps Node alive.
        let bound = abort.bind(controller)?;
        let tsfn = bound.build_threadsafe_function().weak::<true>().build()?;
        let lost = self.inner.lost_token().clone();
        crate::runtime::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = lost.cancelled() => {}
            }
            let _ = tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        });
        let _ = signal.value();
        Ok(signal)
    }
}
