//! `Kv`: the actor's own key-value store (`ActorContext.kv()`).
//!
//! A thin napi layer over [`rivetkit_native_core::actor::kv::ActorKv`],
//! which documents the semantics (half-open ranges, keys returned without
//! the internal prefix, size limits, what a lost or stopped generation may
//! do). Every method returns a promise that rejects with a structured error
//! (`err.code` such as `"kv.value_too_large"`).

use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::kv::{ActorKv, ListOptions};
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::error::spawn_promise;

/// Options for KV list operations.
#[napi(object)]
pub struct JsKvListOptions {
    pub reverse: Option<bool>,
    pub limit: Option<u32>,
}

/// A key-value entry returned from KV list operations.
#[napi(object)]
pub struct JsKvEntry {
    pub key: Buffer,
    pub value: Buffer,
}

#[napi]
pub struct Kv {
    pub(crate) ctx: CoreContext,
}

fn list_options(options: Option<JsKvListOptions>) -> ListOptions {
    options.map_or_else(ListOptions::default, |o| ListOptions { reverse: o.reverse.unwrap_or(false), limit: o.limit })
}

fn to_js_entries(entries: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<JsKvEntry> {
    entries
        .into_iter()
        .map(|(key, value)| JsKvEntry { key: key.into(), value: value.into() })
        .collect()
}

impl Kv {
    fn store(&self) -> ActorKv {
        ActorKv::new(self.ctx.clone())
    }
}

#[napi]
impl Kv {
    /// The value stored under `key`, or `null`.
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn get<'env>(&self, env: &'env Env, key: Buffer) -> napi::Result<PromiseRaw<'env, Option<Buffer>>> {
        let (kv, key) = (self.store(), key.to_vec());
        spawn_promise(env, async move { Ok(kv.get(&key).await?.map(Buffer::from)) })
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn put<'env>(&self, env: &'env Env, key: Buffer, value: Buffer) -> napi::Result<PromiseRaw<'env, ()>> {
        let (kv, key, value) = (self.store(), key.to_vec(), value.to_vec());
        spawn_promise(env, async move { kv.put(&key, &value).await })
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete<'env>(&self, env: &'env Env, key: Buffer) -> napi::Result<PromiseRaw<'env, ()>> {
        let (kv, key) = (self.store(), key.to_vec());
        spawn_promise(env, async move { kv.delete(&key).await })
    }

    /// Deletes every key in `[start, end)`; an empty `end` means "to the end".
    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete_range<'env>(&self, env: &'env Env, start: Buffer, end: Buffer) -> napi::Result<PromiseRaw<'env, ()>> {
        let (kv, start, end) = (self.store(), start.to_vec(), end.to_vec());
        spawn_promise(env, async move { kv.delete_range(&start, &end).await })
    }

    /// Entries whose key starts with `prefix`, in key order.
    #[napi(ts_return_type = "Promise<Array<JsKvEntry>>")]
    pub fn list_prefix<'env>(
        &self,
        env: &'env Env,
        prefix: Buffer,
        options: Option<JsKvListOptions>,
    ) -> napi::Result<PromiseRaw<'env, Vec<JsKvEntry>>> {
        let (kv, prefix, options) = (self.store(), prefix.to_vec(), list_options(options));
        spawn_promise(env, async move { Ok(to_js_entries(kv.list_prefix(&prefix, options).await?)) })
    }

    /// Entries with `start <= key < end`, in key order.
    #[napi(ts_return_type = "Promise<Array<JsKvEntry>>")]
    pub fn list_range<'env>(
        &self,
        env: &'env Env,
        start: Buffer,
        end: Buffer,
        options: Option<JsKvListOptions>,
    ) -> napi::Result<PromiseRaw<'env, Vec<JsKvEntry>>> {
        let (kv, start, end, options) = (self.store(), start.to_vec(), end.to_vec(), list_options(options));
        spawn_promise(env, async move { Ok(to_js_entries(kv.list_range(&start, &end, options).await?)) })
    }

    /// Values in the order of `keys`; `null` for a missing key.
    #[napi(ts_return_type = "Promise<Array<Buffer | undefined | null>>")]
    pub fn batch_get<'env>(&self, env: &'env Env, keys: Vec<Buffer>) -> napi::Result<PromiseRaw<'env, Vec<Option<Buffer>>>> {
        let (kv, keys) = (self.store(), keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>());
        spawn_promise(env, async move {
            Ok(kv.batch_get(&keys).await?.into_iter().map(|v| v.map(Buffer::from)).collect())
        })
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn batch_put<'env>(&self, env: &'env Env, entries: Vec<JsKvEntry>) -> napi::Result<PromiseRaw<'env, ()>> {
        let kv = self.store();
        let entries = entries.iter().map(|e| (e.key.to_vec(), e.value.to_vec())).collect();
        spawn_promise(env, async move { kv.batch_put(entries).await })
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn batch_delete<'env>(&self, env: &'env Env, keys: Vec<Buffer>) -> napi::Result<PromiseRaw<'env, ()>> {
        let (kv, keys) = (self.store(), keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>());
        spawn_promise(env, async move { kv.batch_delete(&keys).await })
    }
}
