//! `ActorContext`: JavaScript's handle on one actor generation.
//!
//! Each hook call hands JavaScript a fresh wrapper around the same core
//! context (an `Arc`), so every method reads live state.
//!
//! The methods of each feature (SQLite state transactions, workflows,
//! tracing, the inspector, the runtime socket, the bookkeeping no-ops) are
//! `impl ActorContext` blocks in the feature's module; napi-rs merges them
//! into the one `ActorContext` class.

use napi::bindgen_prelude::{Buffer, Function, Object, ObjectRef, Promise, PromiseRaw, Unknown};
use rivetkit_native_core::actor::save::SaveOptions;

use crate::js_callback::Ignored;
use napi::bindgen_prelude::JsObjectValue;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::{Env, JsValue};
use napi_derive::napi;
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::error::{reject, spawn_promise, throw, to_js_error};
use crate::types::args::{self, ArgResult};
use crate::types::JsActorKeySegment;
use crate::types::StateDeltaPayload;

#[napi]
pub struct ActorContext {
    pub(crate) inner: CoreContext,
    /// The JavaScript application span this handle acts under
    /// (`withApplicationSpan`), parent of the spans it opens.
    pub(crate) app_span: Option<crate::telemetry::SpanContext>,
    /// True for the handle of a workflow run or step (`WorkflowSpan.ctx`):
    /// only those open step spans.
    pub(crate) in_workflow: bool,
    /// The ray ID of the invocation this handle was given to (the caller's
    /// `x-rivet-ray-id`), or of the last queue message it received,
    /// reported by `invocationTraceContext`.
    pub(crate) ray: crate::telemetry::InvocationRay,
}

impl From<CoreContext> for ActorContext {
    fn from(inner: CoreContext) -> Self {
        Self { inner, app_span: None, in_workflow: false, ray: Default::default() }
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

    /// The actor's key-value store, kept apart from the runtime's own data.
    #[napi]
    pub fn kv(&self) -> crate::kv::Kv {
        crate::kv::Kv { ctx: self.inner.clone() }
    }

    /// The actor's SQLite database, stored on the engine. Opens on its
    /// first statement; an actor that never queries pays nothing.
    #[napi]
    pub fn sql(&self) -> crate::sqlite::JsNativeDatabase {
        crate::sqlite::JsNativeDatabase { db: self.inner.sqlite().clone() }
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

    /// The live connections.
    #[napi]
    pub fn conns(&self) -> Vec<crate::conn::ConnHandle> {
        self.inner.conns().list().iter().map(|c| crate::conn::ConnHandle::new(&self.inner, c)).collect()
    }

    /// Sends an event to every connection subscribed to `name`.
    #[napi(ts_args_type = "name: string, args: Buffer")]
    pub fn broadcast(&self, env: &Env, name: Unknown<'_>, args: Unknown<'_>) -> napi::Result<()> {
        let read = || -> ArgResult<(String, Vec<u8>)> { Ok((args::string("name", name)?, args::bytes("args", args)?)) };
        let (name, args) = read().map_err(|e| throw(env, e))?;
        self.inner.broadcast(&name, &args);
        Ok(())
    }

    /// A connection without a socket (RivetKit uses one per raw HTTP
    /// request): the connect hooks run and it is registered until
    /// `conn.disconnect()`.
    #[napi(
        ts_args_type = "params: Buffer, request?: JsHttpRequest | undefined | null",
        ts_return_type = "Promise<ConnHandle>"
    )]
    pub fn connect_conn<'env>(
        &self,
        env: &'env Env,
        params: Unknown<'env>,
        request: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, crate::conn::ConnHandle>> {
        let ctx = self.inner.clone();
        let read = || -> ArgResult<(Vec<u8>, Option<crate::types::JsHttpRequest>)> {
            Ok((args::bytes("params", params)?, args::opt_object("request", request)?))
        };
        let (params, request) = match read() {
            Ok(read) => read,
            Err(err) => return reject(env, err),
        };
        let request = request.map(|r| rivetkit_native_core::actor::HttpRequest {
            method: r.method,
            uri: r.uri,
            headers: r.headers.unwrap_or_default(),
            body: r.body.map(|b| b.to_vec()).unwrap_or_default(),
            ..Default::default()
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
        // Weak: a pending abort never keeps Node alive. Not a `JsCallback`:
        // that calls `f(null, payload)` and awaits the answer, and
        // `abort(null)` would make `signal.reason` null instead of the
        // `AbortError` a bare `abort()` gives; nothing waits for this call.
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

    /// Scheduled actions (`after`, `at`, `cancel`, `get`, `list`) and cron
    /// jobs (`cronSet`, `cronEvery`, ...).
    #[napi]
    pub fn schedule(&self) -> crate::schedule::Schedule {
        crate::schedule::Schedule { ctx: self.inner.clone() }
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

    /// Calls `predicate(conn)` for every live connection (synchronously,
    /// now) and disconnects those for which it returns a truthy value. A
    /// throw from the predicate is thrown from this call.
    #[napi(ts_args_type = "predicate: (conn: ConnHandle) => unknown", ts_return_type = "Promise<void>")]
    pub fn disconnect_conns<'env>(
        &self,
        env: &'env Env,
        predicate: Function<'env, crate::conn::ConnHandle, Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        for conn in self.inner.conns().list() {
            if predicate.call(crate::conn::ConnHandle::new(&self.inner, &conn))?.coerce_to_bool()? {
                crate::conn::disconnect(&self.inner, &conn, None);
            }
        }
        spawn_promise(env, async { Ok(()) })
    }

    /// A plain object private to this generation: the same object on every
    /// call (and every handle) until `clearRuntimeState()`.
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn runtime_state<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let generation = self.inner.generation();
        RUNTIME_STATE.with(|map| {
            let mut map = map.borrow_mut();
            // Looked up by `&str`: RivetKit calls this about ten times per
            // action, and a lookup should not allocate.
            if let Some((_, existing)) =
                map.get(self.inner.actor_id()).and_then(|gens| gens.iter().find(|(g, _)| *g == generation))
            {
                return existing.get_value(env);
            }
            let object = Object::new(env)?;
            let reference = object.create_ref::<false>()?;
            map.entry(self.inner.actor_id().to_string()).or_default().push((generation, reference));
            Ok(object)
        })
    }

    /// Forgets this generation's `runtimeState()` object.
    #[napi]
    pub fn clear_runtime_state(&self, env: &Env) -> napi::Result<()> {
        let generation = self.inner.generation();
        let removed = RUNTIME_STATE.with(|map| {
            let mut map = map.borrow_mut();
            let gens = map.get_mut(self.inner.actor_id())?;
            let at = gens.iter().position(|(g, _)| *g == generation)?;
            let (_, reference) = gens.swap_remove(at);
            if gens.is_empty() {
                map.remove(self.inner.actor_id());
            }
            Some(reference)
        });
        match removed {
            Some(reference) => reference.unref(env),
            None => Ok(()),
        }
    }
}

/// A keep-awake region id as returned by `beginKeepAwake` (a `u32`).
fn region_id_arg(value: Unknown<'_>) -> ArgResult<u32> {
    let id = args::number("regionId", value)?;
    // Bounded by u32::MAX, so the cast is exact.
    Ok(rivetkit_native_core::error::validate::size("regionId", id, u64::from(u32::MAX))? as u32)
}

type RuntimeStates = std::collections::HashMap<String, Vec<(u32, ObjectRef<false>)>>;

thread_local! {
    /// `runtimeState()` objects by actor id, then generation. JS thread
    /// only: references must be created and released there.
    static RUNTIME_STATE: std::cell::RefCell<RuntimeStates> = std::cell::RefCell::new(RuntimeStates::new());
}
