//! `ActorContext`: JavaScript's handle on one actor generation.
//!
//! Each hook call hands JavaScript a fresh wrapper around the same core
//! context (an `Arc`), so every method reads live state.

use napi::bindgen_prelude::{Buffer, Function, Object, Promise, PromiseRaw, Unknown};
use rivetkit_native_core::actor::save::SaveOptions;

use crate::hooks::Ignored;
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

impl ActorContext {
    /// Holds a keep-awake region until `promise` settles (either way).
    fn track(&self, promise: Promise<Ignored>) {
        let ctx = self.inner.clone();
        let region = ctx.activity().begin();
        crate::runtime::spawn(async move {
            let _ = promise.await;
            ctx.activity().end(region);
        });
    }
}

fn save_options(opts: Option<JsRequestSaveOpts>) -> SaveOptions {
    let opts = opts.unwrap_or_default();
    SaveOptions {
        immediate: opts.immediate.unwrap_or(false),
        max_wait: opts.max_wait_ms.map(|ms| std::time::Duration::from_millis(ms.max(0.0) as u64)),
    }
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

    /// Asks for the state to be saved soon (throttled to the actor's save
    /// interval unless `immediate`, or within `maxWaitMs`).
    #[napi]
    pub fn request_save(&self, opts: Option<JsRequestSaveOpts>) {
        self.inner.request_save(save_options(opts));
    }

    /// Like `requestSave`, and resolves once a save covering this request
    /// has been acknowledged by the engine: what the state held before the
    /// call is then durable.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn request_save_and_wait<'env>(&self, env: &'env Env, opts: Option<JsRequestSaveOpts>) -> napi::Result<PromiseRaw<'env, ()>> {
        let ctx = self.inner.clone();
        let options = save_options(opts);
        spawn_promise(env, async move { ctx.request_save_and_wait(options).await })
    }

    /// Sets the alarm (ms since the epoch), or clears it with no argument.
    /// A sleeping actor is woken for it; `onAlarm` runs when it fires.
    #[napi]
    pub fn set_alarm(&self, timestamp_ms: Option<f64>) {
        self.inner.set_alarm(timestamp_ms.map(|ms| ms as i64));
    }

    /// Opens a keep-awake region; the actor does not sleep until it ends.
    #[napi]
    pub fn begin_keep_awake(&self) -> u32 {
        self.inner.activity().begin()
    }

    #[napi]
    pub fn end_keep_awake(&self, region_id: u32) {
        self.inner.activity().end(region_id);
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

    /// The live connections.
    #[napi]
    pub fn conns(&self) -> Vec<crate::conn::ConnHandle> {
        self.inner.conns().list().iter().map(|c| crate::conn::ConnHandle::new(&self.inner, c)).collect()
    }

    /// Sends an event to every connection subscribed to `name`.
    #[napi]
    pub fn broadcast(&self, name: String, args: Buffer) {
        self.inner.broadcast(&name, &args);
    }

    /// A connection without a socket (RivetKit uses one per raw HTTP
    /// request): the connect hooks run and it is registered until
    /// `conn.disconnect()`.
    #[napi(ts_return_type = "Promise<ConnHandle>")]
    pub fn connect_conn<'env>(
        &self,
        env: &'env Env,
        params: Buffer,
        request: Option<crate::types::JsHttpRequest>,
    ) -> napi::Result<PromiseRaw<'env, crate::conn::ConnHandle>> {
        let ctx = self.inner.clone();
        let params = params.to_vec();
        let request = request.map(|r| rivetkit_native_core::actor::HttpRequest {
            method: r.method,
            uri: r.uri,
            headers: r.headers.unwrap_or_default(),
            body: r.body.map(|b| b.to_vec()).unwrap_or_default(),
        });
        spawn_promise(env, async move {
            let conn = ctx.connect_conn(params, request).await?;
            Ok(crate::conn::ConnHandle::new(&ctx, &conn))
        })
    }

    /// Disconnects the connection `id` (no-op if it is gone).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn disconnect_conn<'env>(&self, env: &'env Env, id: String) -> napi::Result<PromiseRaw<'env, ()>> {
        if let Some(conn) = self.inner.conns().get(&id) {
            crate::conn::disconnect(&self.inner, &conn, None);
        }
        spawn_promise(env, async { Ok(()) })
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
