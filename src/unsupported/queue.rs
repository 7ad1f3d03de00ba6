//! `Queue` / `QueueMessage` (`ctx.queue()`): declared for compatibility;
//! actor queues are not built yet, so every operation rejects with
//! `rivetkit-native.unsupported` (see [`super`]). `maxSize()` answers 0.

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use super::{fail, reject};
use crate::actor_context::ActorContext;

#[napi(object)]
pub struct JsQueueNextOptions {
    pub names: Option<Vec<String>>,
    pub timeout_ms: Option<f64>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueNextBatchOptions {
    pub names: Option<Vec<String>>,
    pub count: Option<u32>,
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
    pub count: Option<u32>,
    pub completable: Option<bool>,
}

#[napi(object)]
pub struct JsQueueInspectMessage {
    pub id: i64,
    pub name: String,
    pub created_at_ms: f64,
}

#[napi(object)]
pub struct JsQueueSendResult {
    pub status: String,
    pub response: Option<napi::bindgen_prelude::Buffer>,
}

/// The actor's message queue (not supported yet).
#[napi]
pub struct Queue {}

#[napi]
impl Queue {
    #[napi(ts_args_type = "name: string, body: Buffer", ts_return_type = "Promise<QueueMessage>")]
    pub fn send<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.send")
    }

    #[napi(
        ts_args_type = "options?: JsQueueNextOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<QueueMessage | null>"
    )]
    pub fn next<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.next")
    }

    #[napi(
        ts_args_type = "options?: JsQueueNextBatchOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<Array<QueueMessage>>"
    )]
    pub fn next_batch<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.nextBatch")
    }

    #[napi(
        ts_args_type = "names: Array<string>, options?: JsQueueWaitOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<QueueMessage>"
    )]
    pub fn wait_for_names<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.waitForNames")
    }

    #[napi(
        ts_args_type = "names: Array<string>, options?: JsQueueWaitOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn wait_for_names_available<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.waitForNamesAvailable")
    }

    #[napi(
        ts_args_type = "messageId: bigint, expectedName: string, response?: Buffer | undefined | null",
        ts_return_type = "Promise<boolean>"
    )]
    pub fn complete_persisted<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.completePersisted")
    }

    #[napi(
        ts_args_type = "name: string, body: Buffer, options?: JsQueueEnqueueAndWaitOptions | undefined | null, signal?: CancellationToken | undefined | null",
        ts_return_type = "Promise<Buffer | null>"
    )]
    pub fn enqueue_and_wait<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.enqueueAndWait")
    }

    #[napi(ts_args_type = "options?: JsQueueTryNextOptions | undefined | null", ts_return_type = "QueueMessage | null")]
    pub fn try_next(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "Queue.tryNext"))
    }

    #[napi(
        ts_args_type = "options?: JsQueueTryNextBatchOptions | undefined | null",
        ts_return_type = "Array<QueueMessage>"
    )]
    pub fn try_next_batch(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "Queue.tryNextBatch"))
    }

    /// Always 0: nothing can be queued.
    #[napi]
    pub fn max_size(&self) -> u32 {
        0
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn reset<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.reset")
    }

    #[napi(ts_return_type = "Promise<Array<JsQueueInspectMessage>>")]
    pub fn inspect_messages<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Queue.inspectMessages")
    }
}

/// One queue message. Never handed out yet: every method fails.
#[napi]
pub struct QueueMessage {}

#[napi]
impl QueueMessage {
    #[napi(ts_return_type = "bigint")]
    pub fn id(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "QueueMessage.id"))
    }

    #[napi(ts_return_type = "string")]
    pub fn name(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "QueueMessage.name"))
    }

    #[napi(ts_return_type = "Buffer")]
    pub fn body(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "QueueMessage.body"))
    }

    #[napi(ts_return_type = "number")]
    pub fn created_at(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "QueueMessage.createdAt"))
    }

    #[napi(ts_return_type = "boolean")]
    pub fn is_completable(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "QueueMessage.isCompletable"))
    }

    #[napi(ts_args_type = "response?: Buffer | undefined | null", ts_return_type = "Promise<void>")]
    pub fn complete<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "QueueMessage.complete")
    }
}

/// `ctx.queue()`.
#[napi]
impl ActorContext {
    /// The actor's message queue. Not supported yet: the handle exists,
    /// its methods reject with `rivetkit-native.unsupported`.
    #[napi]
    pub fn queue(&self) -> Queue {
        Queue {}
    }
}
