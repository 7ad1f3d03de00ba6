//! `Queue` and `QueueMessage` (from `ctx.queue()`): the actor's durable message
//! queue, a thin layer over `rivetkit_native_core::actor::queue`, which
//! documents the semantics (order, completion, waits, limits, what a
//! stopped generation may do).
//!
//! Arguments are read by hand: names must be strings, bodies `Buffer`s,
//! `timeoutMs` a duration, `count` a whole number, `signal` a
//! `CancellationToken`; anything else rejects (or, for the synchronous
//! `tryNext*`, throws) `napi.invalid_argument`. Errors of the queue itself
//! are structured (`queue.full`, `queue.message_too_large`,
//! `queue.timed_out`, `actor.aborted` when the actor stops during a wait).

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Buffer, ClassInstance, PromiseRaw, Unknown};
use napi::{Env, ValueType};
use napi_derive::napi;

use rivetkit_native_core::actor::queue::{self, Receive};
use rivetkit_native_core::actor::ActorContext as CoreContext;
use rivetkit_native_core::error::validate::invalid;
use tokio_util::sync::CancellationToken as TokioToken;

use crate::bridge::error::{reject, spawn_promise, throw, to_js_error};
use crate::bridge::types::args::{self, ArgResult};
use crate::classes::cancellation_token::CancellationToken;
use crate::classes::telemetry::InvocationRay;

#[napi(object)]
pub struct JsQueueNextOptions {
    pub names: Option<Vec<String>>,
    pub timeout_ms: Option<f64>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueNextBatchOptions {
    pub names: Option<Vec<String>>,
    pub count: Option<f64>,
    pub timeout_ms: Option<f64>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueWaitOptions {
    pub timeout_ms: Option<f64>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueEnqueueAndWaitOptions {
    pub timeout_ms: Option<f64>,
}

#[napi(object)]
pub struct JsQueueTryNextOptions {
    pub names: Option<Vec<String>>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueTryNextBatchOptions {
    pub names: Option<Vec<String>>,
    pub count: Option<f64>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueInspectMessage {
    /// Queue message id. Stored as the raw u64 reinterpreted as i64 so JS
    /// sees a plain number; ids are monotonic and fit comfortably in i64.
    pub id: i64,
    pub name: String,
    pub created_at_ms: f64,
}

/// What `onQueueSend` resolves to: `status` is `"completed"` or `"timedOut"`.
#[napi(object)]
pub struct JsQueueSendResult {
    pub status: String,
    pub response: Option<Buffer>,
}

/// The most messages one receive takes (a batch is read in one trip).
const MAX_BATCH: u64 = 1_000_000;

/// The actor's message queue.
#[napi]
pub struct Queue {
    ctx: CoreContext,
    /// The ray of the handle it came from: sends carry it, receives
    /// may set it (docs/telemetry.md).
    ray: InvocationRay,
}

/// One message, as sent or received. Completable messages (received with
/// `completable: true`) stay queued until `complete`.
#[napi]
pub struct QueueMessage {
    inner: Arc<queue::QueueMessage>,
}

impl From<queue::QueueMessage> for QueueMessage {
    fn from(message: queue::QueueMessage) -> Self {
        Self { inner: Arc::new(message) }
    }
}

/// Received messages, their senders' ray taken by the handle.
fn messages(ray: &InvocationRay, list: Vec<queue::QueueMessage>) -> Vec<QueueMessage> {
    ray.received(list.iter().map(|m| m.ray_id.as_deref()));
    list.into_iter().map(QueueMessage::from).collect()
}

/// The shared token inside a `CancellationToken` instance; `undefined` or
/// `null` is no signal.
fn signal(value: Option<Unknown<'_>>) -> ArgResult<Option<TokioToken>> {
    let Some(value) = value.filter(|v| !args::is_nullish(v)) else {
        return Ok(None);
    };
    if value.get_type().ok() != Some(ValueType::Object) {
        return Err(invalid("signal", format!("expected a CancellationToken, got {}", args::type_name(&value))));
    }
    // SAFETY: a live handle of the current scope; the class check refuses
    // any other object.
    let instance = unsafe { value.cast::<ClassInstance<CancellationToken>>() }
        .map_err(|_| invalid("signal", "expected a CancellationToken"))?;
    Ok(Some(instance.inner().clone()))
}

fn timeout(argument: &str, value: Option<f64>) -> ArgResult<Option<Duration>> {
    Ok(args::field_duration_ms(argument, value)?.map(Duration::from_millis))
}

fn count(argument: &str, value: Option<f64>) -> ArgResult<usize> {
    // Bounded by MAX_BATCH.
    Ok(args::field_size(argument, value, MAX_BATCH)?.map_or(1, |c| c.max(1) as usize))
}

impl Queue {
    pub(crate) fn new(ctx: CoreContext, ray: InvocationRay) -> Self {
        Self { ctx, ray }
    }

    fn next_batch_receive(options: Option<Unknown<'_>>, sig: Option<Unknown<'_>>) -> ArgResult<Receive> {
        let options: Option<JsQueueNextBatchOptions> = args::opt_object("options", options)?;
        let signal = signal(sig)?;
        Ok(match options {
            None => Receive { count: 1, signal, ..Receive::default() },
            Some(o) => Receive {
                names: Receive::names(o.names),
                count: count("options.count", o.count)?,
                timeout: timeout("options.timeoutMs", o.timeout_ms)?,
                completable: o.completable.unwrap_or(false),
                signal,
            },
        })
    }

    fn wait_receive(names: Unknown<'_>, options: Option<Unknown<'_>>, sig: Option<Unknown<'_>>) -> ArgResult<Receive> {
        let names = args::list("names", names, args::string)?;
        let options: Option<JsQueueWaitOptions> = args::opt_object("options", options)?;
        let (timeout_ms, completable) = options.map_or((None, None), |o| (o.timeout_ms, o.completable));
        Ok(Receive {
            names: Receive::names(Some(names)),
            count: 1,
            timeout: timeout("options.timeoutMs", timeout_ms)?,
            completable: completable.unwrap_or(false),
            signal: signal(sig)?,
        })
    }

    /// Runs a receive that must not wait, blocking the JS thread until the
    /// storage answers (the contract's `tryNext*` are synchronous).
    fn try_receive(&self, env: &Env, receive: ArgResult<Receive>) -> napi::Result<Vec<QueueMessage>> {
        let receive = receive.map_err(|e| throw(env, e))?;
        queue::mark_handled(&self.ctx);
        let ctx = self.ctx.clone();
        let task = crate::bridge::runtime::spawn(async move {
            queue::try_next_batch(&ctx, receive.names, receive.count, receive.completable).await
        });
        let result = futures::executor::block_on(task)
            .map_err(|err| anyhow::anyhow!("queue receive task failed: {err}"))
            .and_then(|r| r);
        result.map(|list| messages(&self.ray, list)).map_err(|err| to_js_error(env, err))
    }
}

#[napi]
impl Queue {
    /// Queues a message (persisted before the promise resolves).
    #[napi(ts_args_type = "name: string, body: Buffer", ts_return_type = "Promise<QueueMessage>")]
    pub fn send<'env>(
        &self,
        env: &'env Env,
        name: Unknown<'env>,
        body: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, QueueMessage>> {
        let read =
            || Ok::<_, rivetkit_native_core::RivetError>((args::string("name", name)?, args::bytes("body", body)?));
        let (name, body) = match read() {
            Ok(read) => read,
            Err(err) => return reject(env, err),
        };
        let (ctx, ray) = (self.ctx.clone(), self.ray.current());
        spawn_promise(env, async move { queue::send_from(&ctx, &name, body, ray).await.map(QueueMessage::from) })
    }

    /// The next message, waiting for one up to `timeoutMs` (`null` then).
    #[napi(
        ts_args_type = "options?: JsQueueNextOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<QueueMessage | null>"
    )]
    pub fn next<'env>(
        &self,
        env: &'env Env,
        options: Option<Unknown<'env>>,
        sig: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, Option<QueueMessage>>> {
        let read = || -> ArgResult<Receive> {
            let options: Option<JsQueueNextOptions> = args::opt_object("options", options)?;
            let signal = signal(sig)?;
            Ok(match options {
                None => Receive { count: 1, signal, ..Receive::default() },
                Some(o) => Receive {
                    names: Receive::names(o.names),
                    count: 1,
                    timeout: timeout("options.timeoutMs", o.timeout_ms)?,
                    completable: o.completable.unwrap_or(false),
                    signal,
                },
            })
        };
        let receive = match read() {
            Ok(receive) => receive,
            Err(err) => return reject(env, err),
        };
        // A receive begins: what was taken before is handled, here on the
        // JavaScript thread, in order with the state changes before it
        // (docs/queues-cron.md, "Consumed with the state").
        queue::mark_handled(&self.ctx);
        let (ctx, ray) = (self.ctx.clone(), self.ray.clone());
        spawn_promise(
            env,
            async move { Ok(messages(&ray, queue::next_batch(&ctx, receive).await?).into_iter().next()) },
        )
    }

    /// Up to `count` messages, waiting for a first one up to `timeoutMs`
    /// (an empty array then).
    #[napi(
        ts_args_type = "options?: JsQueueNextBatchOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<Array<QueueMessage>>"
    )]
    pub fn next_batch<'env>(
        &self,
        env: &'env Env,
        options: Option<Unknown<'env>>,
        sig: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, Vec<QueueMessage>>> {
        let receive = match Self::next_batch_receive(options, sig) {
            Ok(receive) => receive,
            Err(err) => return reject(env, err),
        };
        // A receive begins: what was taken before is handled, here on the
        // JavaScript thread, in order with the state changes before it
        // (docs/queues-cron.md, "Consumed with the state").
        queue::mark_handled(&self.ctx);
        let (ctx, ray) = (self.ctx.clone(), self.ray.clone());
        spawn_promise(env, async move { Ok(messages(&ray, queue::next_batch(&ctx, receive).await?)) })
    }

    /// The first message named one of `names`; `queue.timed_out` after `timeoutMs`.
    #[napi(
        ts_args_type = "names: Array<string>, options?: JsQueueWaitOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<QueueMessage>"
    )]
    pub fn wait_for_names<'env>(
        &self,
        env: &'env Env,
        names: Unknown<'env>,
        options: Option<Unknown<'env>>,
        sig: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, QueueMessage>> {
        let receive = match Self::wait_receive(names, options, sig) {
            Ok(receive) => receive,
            Err(err) => return reject(env, err),
        };
        // A receive begins: what was taken before is handled, here on the
        // JavaScript thread, in order with the state changes before it
        // (docs/queues-cron.md, "Consumed with the state").
        queue::mark_handled(&self.ctx);
        let (ctx, ray) = (self.ctx.clone(), self.ray.clone());
        spawn_promise(env, async move {
            let message = queue::wait_for_names(&ctx, receive).await?;
            ray.received(std::iter::once(message.ray_id.as_deref()));
            Ok(QueueMessage::from(message))
        })
    }

    /// Resolves once a message named one of `names` is queued (taking
    /// nothing); `queue.timed_out` after `timeoutMs`.
    #[napi(
        ts_args_type = "names: Array<string>, options?: JsQueueWaitOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn wait_for_names_available<'env>(
        &self,
        env: &'env Env,
        names: Unknown<'env>,
        options: Option<Unknown<'env>>,
        sig: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let receive = match Self::wait_receive(names, options, sig) {
            Ok(receive) => receive,
            Err(err) => return reject(env, err),
        };
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { queue::wait_for_names_available(&ctx, receive).await })
    }

    /// Completes the queued message `messageId` if it is still queued under
    /// `expectedName`; resolves to whether it was.
    #[napi(
        ts_args_type = "messageId: bigint, expectedName: string, response?: Buffer | undefined | null",
        ts_return_type = "Promise<boolean>"
    )]
    pub fn complete_persisted<'env>(
        &self,
        env: &'env Env,
        message_id: Unknown<'env>,
        expected_name: Unknown<'env>,
        response: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let read = || -> ArgResult<(u64, String, Option<Vec<u8>>)> {
            Ok((
                message_id_of(message_id)?,
                args::string("expectedName", expected_name)?,
                opt_bytes("response", response)?,
            ))
        };
        let (id, name, response) = match read() {
            Ok(read) => read,
            Err(err) => return reject(env, err),
        };
        // Recorded now, on the JavaScript thread (see `next_batch`).
        let completed = queue::complete_persisted(&self.ctx, id, &name, response);
        spawn_promise(env, async move { completed })
    }

    /// Queues a message and waits for its consumer's `complete(response)`;
    /// `queue.timed_out` after `timeoutMs`.
    #[napi(
        ts_args_type = "name: string, body: Buffer, options?: JsQueueEnqueueAndWaitOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<Buffer | null>"
    )]
    pub fn enqueue_and_wait<'env>(
        &self,
        env: &'env Env,
        name: Unknown<'env>,
        body: Unknown<'env>,
        options: Option<Unknown<'env>>,
        sig: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, Option<Buffer>>> {
        type Read = (String, Vec<u8>, Option<Duration>, Option<TokioToken>);
        let read = || -> ArgResult<Read> {
            let options: Option<JsQueueEnqueueAndWaitOptions> = args::opt_object("options", options)?;
            Ok((
                args::string("name", name)?,
                args::bytes("body", body)?,
                timeout("options.timeoutMs", options.and_then(|o| o.timeout_ms))?,
                signal(sig)?,
            ))
        };
        let (name, body, timeout, signal) = match read() {
            Ok(read) => read,
            Err(err) => return reject(env, err),
        };
        let (ctx, ray) = (self.ctx.clone(), self.ray.current());
        spawn_promise(env, async move {
            Ok(queue::enqueue_and_wait_from(&ctx, &name, body, ray, timeout, signal.as_ref()).await?.map(Buffer::from))
        })
    }

    /// The next message if one is queued now, else `null` (synchronous).
    #[napi(ts_args_type = "options?: JsQueueTryNextOptions | undefined | null", ts_return_type = "QueueMessage | null")]
    pub fn try_next(&self, env: &Env, options: Option<Unknown<'_>>) -> napi::Result<Option<QueueMessage>> {
        let receive = args::opt_object::<JsQueueTryNextOptions>("options", options).map(|o| {
            let (names, completable) = o.map_or((None, None), |o| (o.names, o.completable));
            Receive {
                names: Receive::names(names),
                count: 1,
                completable: completable.unwrap_or(false),
                ..Receive::default()
            }
        });
        Ok(self.try_receive(env, receive)?.into_iter().next())
    }

    /// Up to `count` messages queued now (synchronous).
    #[napi(
        ts_args_type = "options?: JsQueueTryNextBatchOptions | undefined | null",
        ts_return_type = "Array<QueueMessage>"
    )]
    pub fn try_next_batch(&self, env: &Env, options: Option<Unknown<'_>>) -> napi::Result<Vec<QueueMessage>> {
        let receive = args::opt_object::<JsQueueTryNextBatchOptions>("options", options).and_then(|o| {
            Ok(match o {
                None => Receive { count: 1, ..Receive::default() },
                Some(o) => Receive {
                    names: Receive::names(o.names),
                    count: count("options.count", o.count)?,
                    completable: o.completable.unwrap_or(false),
                    ..Receive::default()
                },
            })
        });
        self.try_receive(env, receive)
    }

    /// `maxQueueSize`: the most messages the queue holds.
    #[napi]
    pub fn max_size(&self) -> u32 {
        u32::try_from(self.ctx.queue().limits().max_size).unwrap_or(u32::MAX)
    }

    /// Removes every message.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn reset<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let ctx = self.ctx.clone();
        spawn_promise(env, async move { queue::reset(&ctx).await })
    }

    /// The queued messages (id, name, time), in order.
    #[napi(ts_return_type = "Promise<Array<JsQueueInspectMessage>>")]
    pub fn inspect_messages<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Vec<JsQueueInspectMessage>>> {
        let headers = self.ctx.queue().headers();
        spawn_promise(env, async move {
            Ok(headers
                .into_iter()
                .map(|h| JsQueueInspectMessage {
                    id: i64::try_from(h.id).unwrap_or(i64::MAX),
                    name: h.name,
                    created_at_ms: h.created_at as f64,
                })
                .collect())
        })
    }
}

/// A message id: a non-negative `bigint` (or a safe integer number).
fn message_id_of(value: Unknown<'_>) -> ArgResult<u64> {
    match value.get_type() {
        Ok(ValueType::BigInt) => {
            let big = unsafe { value.cast::<BigInt>() }.map_err(|e| invalid("messageId", e.reason.clone()))?;
            match big.get_u64() {
                (false, id, true) => Ok(id),
                _ => Err(invalid("messageId", "expected a bigint in 0..2^64")),
            }
        }
        Ok(ValueType::Number) => {
            let max = rivetkit_native_core::error::validate::MAX_SAFE_INTEGER as u64;
            rivetkit_native_core::error::validate::size("messageId", args::number("messageId", value)?, max)
        }
        _ => Err(invalid("messageId", format!("expected a bigint, got {}", args::type_name(&value)))),
    }
}

/// An optional `Buffer` (`undefined` or `null`: none).
fn opt_bytes(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<Vec<u8>>> {
    value.filter(|v| !args::is_nullish(v)).map(|v| args::bytes(argument, v)).transpose()
}

#[napi]
impl QueueMessage {
    #[napi(ts_return_type = "bigint")]
    pub fn id(&self) -> BigInt {
        BigInt::from(self.inner.id)
    }

    #[napi]
    pub fn name(&self) -> String {
        self.inner.name.clone()
    }

    /// The body as sent (CBOR for the TypeScript runtime).
    #[napi]
    pub fn body(&self) -> Buffer {
        Buffer::from(self.inner.body.clone())
    }

    /// The ray ID of the invocation that sent it (its caller's
    /// `x-rivet-ray-id`), if it had one.
    #[napi]
    pub fn ray_id(&self) -> Option<String> {
        self.inner.ray_id.clone()
    }

    /// When it was sent, ms since the epoch.
    #[napi]
    pub fn created_at(&self) -> f64 {
        self.inner.created_at as f64
    }

    #[napi]
    pub fn is_completable(&self) -> bool {
        self.inner.is_completable()
    }

    /// Completes a completable message: the next save consumes it, then
    /// its sender is answered with `response`. `queue.complete_not_configured` for a message received
    /// without `completable`; `queue.already_completed` the second time.
    #[napi(ts_args_type = "response?: Buffer | undefined | null", ts_return_type = "Promise<void>")]
    pub fn complete<'env>(
        &self,
        env: &'env Env,
        response: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let response = match opt_bytes("response", response) {
            Ok(response) => response,
            Err(err) => return reject(env, err),
        };
        // Recorded now, on the JavaScript thread (see `Queue.nextBatch`).
        let completed = self.inner.complete(response);
        spawn_promise(env, async move { completed })
    }
}
