//! `Kv`: the actor's own key-value store (`ActorContext.kv()`).
//!
//! A thin napi layer over [`rivetkit_native_core::actor::kv::ActorKv`],
//! which documents the semantics (half-open ranges, keys returned without
//! the internal prefix, size limits, what a lost or stopped generation may
//! do). Every method returns a promise that rejects with a structured error
//! (`err.code` such as `"kv.value_too_large"`). Keys and values must be
//! `Buffer`s and `limit` a whole number in `0..=2^32-1`; anything else
//! rejects with `napi.invalid_argument` before the engine is asked.

use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::kv::{ActorKv, ListOptions};
use rivetkit_native_core::actor::ActorContext as CoreContext;

use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::types::args::{self, ArgResult};

/// Options for KV list operations.
#[napi(object)]
pub struct JsKvListOptions {
    pub reverse: Option<bool>,
    /// The most entries to return: a whole number in `0..=2^32-1`.
    pub limit: Option<f64>,
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

fn list_options(options: Option<Unknown<'_>>) -> ArgResult<ListOptions> {
    let Some(options) = args::opt_object::<JsKvListOptions>("options", options)? else {
        return Ok(ListOptions::default());
    };
    let limit = args::field_size("options.limit", options.limit, u64::from(u32::MAX))?;
    // Bounded by u32::MAX above.
    Ok(ListOptions { reverse: options.reverse.unwrap_or(false), limit: limit.map(|l| l as u32) })
}

/// One `{key, value}` entry of `batchPut`, both `Buffer`s.
fn entry(argument: &str, value: Unknown<'_>) -> ArgResult<(Vec<u8>, Vec<u8>)> {
    let entry: JsKvEntry = args::object(argument, value)?;
    Ok((entry.key.to_vec(), entry.value.to_vec()))
}

fn to_js_entries(entries: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<JsKvEntry> {
    entries.into_iter().map(|(key, value)| JsKvEntry { key: key.into(), value: value.into() }).collect()
}

impl Kv {
    fn store(&self) -> ActorKv {
        ActorKv::new(self.ctx.clone())
    }
}

/// Reads the arguments with `read`; on failure the method's promise rejects.
macro_rules! read_or_reject {
    ($env:expr, $read:expr) => {{
        let read = || -> ArgResult<_> { $read };
        match read() {
            Ok(value) => value,
            Err(err) => return reject($env, err),
        }
    }};
}

#[napi]
impl Kv {
    /// The value stored under `key`, or `null`.
    #[napi(ts_args_type = "key: Buffer", ts_return_type = "Promise<Buffer | null>")]
    pub fn get<'env>(&self, env: &'env Env, key: Unknown<'env>) -> napi::Result<PromiseRaw<'env, Option<Buffer>>> {
        let key = read_or_reject!(env, args::bytes("key", key));
        let kv = self.store();
        spawn_promise(env, async move { Ok(kv.get(&key).await?.map(Buffer::from)) })
    }

    #[napi(ts_args_type = "key: Buffer, value: Buffer", ts_return_type = "Promise<void>")]
    pub fn put<'env>(
        &self,
        env: &'env Env,
        key: Unknown<'env>,
        value: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (key, value) = read_or_reject!(env, Ok((args::bytes("key", key)?, args::bytes("value", value)?)));
        let kv = self.store();
        spawn_promise(env, async move { kv.put(&key, &value).await })
    }

    #[napi(ts_args_type = "key: Buffer", ts_return_type = "Promise<void>")]
    pub fn delete<'env>(&self, env: &'env Env, key: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let key = read_or_reject!(env, args::bytes("key", key));
        let kv = self.store();
        spawn_promise(env, async move { kv.delete(&key).await })
    }

    /// Deletes every key in `[start, end)`; an empty `end` means "to the end".
    #[napi(ts_args_type = "start: Buffer, end: Buffer", ts_return_type = "Promise<void>")]
    pub fn delete_range<'env>(
        &self,
        env: &'env Env,
        start: Unknown<'env>,
        end: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let (start, end) = read_or_reject!(env, Ok((args::bytes("start", start)?, args::bytes("end", end)?)));
        let kv = self.store();
        spawn_promise(env, async move { kv.delete_range(&start, &end).await })
    }

    /// Entries whose key starts with `prefix`, in key order.
    #[napi(
        ts_args_type = "prefix: Buffer, options?: JsKvListOptions | undefined | null",
        ts_return_type = "Promise<Array<JsKvEntry>>"
    )]
    pub fn list_prefix<'env>(
        &self,
        env: &'env Env,
        prefix: Unknown<'env>,
        options: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, Vec<JsKvEntry>>> {
        let (prefix, options) = read_or_reject!(env, Ok((args::bytes("prefix", prefix)?, list_options(options)?)));
        let kv = self.store();
        spawn_promise(env, async move { Ok(to_js_entries(kv.list_prefix(&prefix, options).await?)) })
    }

    /// Entries with `start <= key < end`, in key order.
    #[napi(
        ts_args_type = "start: Buffer, end: Buffer, options?: JsKvListOptions | undefined | null",
        ts_return_type = "Promise<Array<JsKvEntry>>"
    )]
    pub fn list_range<'env>(
        &self,
        env: &'env Env,
        start: Unknown<'env>,
        end: Unknown<'env>,
        options: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, Vec<JsKvEntry>>> {
        let (start, end, options) =
            read_or_reject!(env, Ok((args::bytes("start", start)?, args::bytes("end", end)?, list_options(options)?)));
        let kv = self.store();
        spawn_promise(env, async move { Ok(to_js_entries(kv.list_range(&start, &end, options).await?)) })
    }

    /// Values in the order of `keys`; `null` for a missing key.
    #[napi(ts_args_type = "keys: Array<Buffer>", ts_return_type = "Promise<Array<Buffer | undefined | null>>")]
    pub fn batch_get<'env>(
        &self,
        env: &'env Env,
        keys: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, Vec<Option<Buffer>>>> {
        let keys = read_or_reject!(env, args::bytes_list("keys", keys));
        let kv = self.store();
        spawn_promise(
            env,
            async move { Ok(kv.batch_get(&keys).await?.into_iter().map(|v| v.map(Buffer::from)).collect()) },
        )
    }

    #[napi(ts_args_type = "entries: Array<JsKvEntry>", ts_return_type = "Promise<void>")]
    pub fn batch_put<'env>(&self, env: &'env Env, entries: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let entries = read_or_reject!(env, args::list("entries", entries, entry));
        let kv = self.store();
        spawn_promise(env, async move { kv.batch_put(entries).await })
    }

    #[napi(ts_args_type = "keys: Array<Buffer>", ts_return_type = "Promise<void>")]
    pub fn batch_delete<'env>(&self, env: &'env Env, keys: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let keys = read_or_reject!(env, args::bytes_list("keys", keys));
        let kv = self.store();
        spawn_promise(env, async move { kv.batch_delete(&keys).await })
    }
}
