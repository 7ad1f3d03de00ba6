//! The actor's own key-value store (`ActorContext.kv()`).
//!
//! User keys live in the engine KV under [`USER_KV_PREFIX`]
//! (see [`super::storage`]); this module adds the prefix on the way in and
//! strips it on the way out, so user code can neither see nor touch the
//! runtime's records. Every range is clamped to the user space
//! `[USER_KV_PREFIX] ..< [USER_KV_PREFIX + 1]`.
//!
//! # Semantics
//!
//! - Ranges are half-open: `start` is included, `end` is not. An empty
//!   `end`, or one made only of `0xff` bytes, means "to the end of the user
//!   space". `start >= end` is an empty range.
//! - `list_prefix(p)` returns every key that starts with `p` (an empty `p`
//!   lists every user key), keys without the internal prefix, in ascending
//!   order, or descending with `reverse`. `limit` caps the number of
//!   entries after ordering (so `reverse` + `limit: n` gives the last `n`).
//!   Without a limit every matching entry is returned (the engine caps one
//!   answer, so long listings are fetched page by page).
//! - `batch_*` accept any number of entries: they are sent in chunks the
//!   engine accepts (at most [`ENGINE_MAX_KEYS`] keys and
//!   [`ENGINE_MAX_PUT_PAYLOAD`] bytes per put). A batch that needs several
//!   chunks is not atomic; one that fits in a chunk is. Every entry is
//!   validated before anything is sent, so a size error writes nothing. If a
//!   key appears twice in a batch put, the last value wins.
//!
//! # Limits (`kv.*` errors, public, status 400)
//!
//! - `kv.key_too_large`: `put`/`batch_put` of a key longer than
//!   [`MAX_KEY_SIZE`] (2043) bytes, each zero byte counting twice
//!   ([`stored_len`]). The engine allows 2048 bytes of *encoded* key: the
//!   key plus its framing (two bytes on engine 2.3, four on 3.0, which also
//!   escapes every zero byte) plus our one-byte prefix.
//! - `kv.value_too_large`: a value longer than [`MAX_VALUE_SIZE`] (128 KiB).
//!   Empty values are stored as such.
//!
//! Both carry `{size, limit}` metadata and are checked before anything is
//! sent; without them the engine would answer with an unstructured error.
//! Like the SQLite-backed store of `rivetkit-core`, only writes check key
//! sizes: a key too long to be stored reads as missing and deletes as a
//! no-op, and prefixes and range bounds may have any length (they are
//! mapped to equivalent bounds the engine accepts).
//!
//! # What the engine does (Engine 2.3.19, envoy protocol v8, measured)
//!
//! - `KvListRangeQuery.exclusive = true` lists `[start, end)`; `false` would
//!   include `end`. `start` is always included. The envoy link sends `true`.
//! - A list without `limit` stops at 16384 entries; an explicit limit is
//!   honoured.
//! - Large answers stall the envoy connection: the engine's pings queue
//!   behind them, and once pings are late by the envoy's margin every actor
//!   on the connection is declared lost. With a debug build of this addon
//!   and the test engine's 7 s lost threshold, one 32 MiB answer (260 values
//!   of 128 KiB) did that every time and pages of 16 MiB (1.5 s each) did it
//!   sometimes; a release build receives 16 MiB in about 0.2 s. Lists are
//!   therefore fetched in pages of [`LIST_PAGE_SIZE`] entries and gets in
//!   chunks of [`ENGINE_MAX_KEYS`] keys, at most about 16.3 MiB each. A round
//!   trip with small entries costs about 10 ms on a local engine.
//! - Its prefix query misses keys whose byte after the prefix is `0xff`, so
//!   `list_prefix` is sent as the range `[prefix, prefix + 1)`.
//! - get, put and delete take at most 128 keys ([`ENGINE_MAX_KEYS`]); a put
//!   at most 976 KiB of keys and values ([`ENGINE_MAX_PUT_PAYLOAD`]); a range
//!   with `start >= end` is empty.
//! - A key asked twice in one get, or written twice in one put, is not
//!   defined behaviour of the engine (it writes the entries of one put
//!   concurrently); both are deduplicated here.
//!
//! # Generations
//!
//! Reads work whenever the engine answers: while the actor starts (in
//! `createState`, `onCreate`, `onWake`), while it runs, while it stops
//! (`onSleep`, `onDestroy`) and after.
//!
//! Writes (`put`, `delete`, `delete_range` and their batches) are accepted
//! from the first hook to the end of the generation, including while it
//! stops. They are refused with `actor.stopping` once the generation was
//! declared lost (a newer generation may own the data; a put already queued
//! when the signal fires is dropped before it leaves the host) and once the
//! generation is finished (its last hold dropped: a write from a stray timer
//! must not land after a successor started). Deletes are checked before they
//! are sent: unlike puts, the envoy has no fence for them.

use std::collections::HashMap;

use serde_json::json;

use super::keys::user::{user_key, user_space_end};
use super::keys::USER_KV_PREFIX;
use super::link::KvEntries;
use super::ActorContext;
use crate::error::{catalog, RivetError};

pub use super::kv_limits::{
    ENGINE_KEY_OVERHEAD, ENGINE_MAX_KEYS, ENGINE_MAX_KEY_SIZE, ENGINE_MAX_PUT_PAYLOAD, MAX_KEY_SIZE, MAX_VALUE_SIZE,
};

/// Entries asked for per list request: at most about 16 MiB with the
/// largest values (see the module doc).
pub const LIST_PAGE_SIZE: usize = 128;

/// Options of the list operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOptions {
    pub reverse: bool,
    pub limit: Option<u32>,
}

/// `ActorContext.kv()`: the generation's view of its actor's user KV.
#[derive(Debug, Clone)]
pub struct ActorKv {
    ctx: ActorContext,
}

impl ActorKv {
    pub fn new(ctx: ActorContext) -> Self {
        Self { ctx }
    }

    pub async fn get(&self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        let mut values = self.batch_get(&[key.to_vec()]).await?;
        Ok(values.pop().flatten())
    }

    pub async fn put(&self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        self.batch_put(vec![(key.to_vec(), value.to_vec())]).await
    }

    pub async fn delete(&self, key: &[u8]) -> anyhow::Result<()> {
        self.batch_delete(&[key.to_vec()]).await
    }

    /// Deletes every user key in `[start, end)` (see the module doc for an
    /// empty or all-`0xff` `end`).
    pub async fn delete_range(&self, start: &[u8], end: &[u8]) -> anyhow::Result<()> {
        self.check_writable()?;
        let Some((start, end)) = range_bounds(start, end) else {
            return Ok(());
        };
        let result = self.ctx.link().kv_delete_range(self.ctx.actor_id(), start, end).await;
        self.write_result(result, "delete range")
    }

    /// Entries whose key starts with `prefix`, keys without the internal prefix.
    pub async fn list_prefix(&self, prefix: &[u8], options: ListOptions) -> anyhow::Result<KvEntries> {
        if prefix.len() > MAX_KEY_SIZE {
            // No stored key is that long.
            return Ok(Vec::new());
        }
        let start = user_key(prefix);
        let end = prefix_end(&start);
        self.list(start, end, options).await
    }

    /// Entries with `start <= key < end`, keys without the internal prefix.
    pub async fn list_range(&self, start: &[u8], end: &[u8], options: ListOptions) -> anyhow::Result<KvEntries> {
        match range_bounds(start, end) {
            Some((start, end)) => self.list(start, end, options).await,
            None => Ok(Vec::new()),
        }
    }

    /// Values in the order of `keys`; `None` for a missing key.
    pub async fn batch_get(&self, keys: &[Vec<u8>]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
        // Each key is asked once (the engine merges the answers for a key
        // asked twice) and the answers are fanned back out. A key too long
        // to be stored is not asked.
        let mut unique: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
        let mut seen = HashMap::with_capacity(keys.len());
        for key in keys.iter().filter(|k| storable(k)) {
            seen.entry(key.as_slice()).or_insert_with(|| {
                unique.push(user_key(key));
                unique.len() - 1
            });
        }
        let mut values = Vec::with_capacity(unique.len());
        for chunk in unique.chunks(ENGINE_MAX_KEYS) {
            let answer = self.ctx.link().kv_get(self.ctx.actor_id(), chunk.to_vec()).await?;
            anyhow::ensure!(
                answer.len() == chunk.len(),
                "the engine answered a KV get with the wrong number of values"
            );
            values.extend(answer);
        }
        Ok(keys.iter().map(|key| seen.get(key.as_slice()).and_then(|&i| values[i].clone())).collect())
    }

    pub async fn batch_put(&self, entries: KvEntries) -> anyhow::Result<()> {
        for (key, value) in &entries {
            check_key(key)?;
            check_value(value)?;
        }
        self.check_writable()?;
        // Last write wins for a repeated key; the engine must not see one
        // key twice in a request (it writes both concurrently).
        let mut index = HashMap::with_capacity(entries.len());
        let mut unique: KvEntries = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            match index.get(&key) {
                Some(&i) => unique[i] = (user_key(&key), value),
                None => {
                    index.insert(key.clone(), unique.len());
                    unique.push((user_key(&key), value));
                }
            }
        }
        for chunk in put_chunks(unique) {
            let result = self.ctx.link().kv_put(self.ctx.actor_id(), chunk, self.ctx.write_fence().clone()).await;
            self.write_result(result, "put")?;
        }
        Ok(())
    }

    pub async fn batch_delete(&self, keys: &[Vec<u8>]) -> anyhow::Result<()> {
        self.check_writable()?;
        let mut unique: Vec<Vec<u8>> = keys.iter().filter(|k| storable(k)).map(|k| user_key(k)).collect();
        unique.sort();
        unique.dedup();
        for chunk in unique.chunks(ENGINE_MAX_KEYS) {
            let result = self.ctx.link().kv_delete(self.ctx.actor_id(), chunk.to_vec()).await;
            self.write_result(result, "delete")?;
        }
        Ok(())
    }

    /// Lists the engine range `[start, end)` (both inside the user space),
    /// page by page, and strips the prefix.
    async fn list(&self, mut start: Vec<u8>, mut end: Vec<u8>, options: ListOptions) -> anyhow::Result<KvEntries> {
        let wanted = options.limit.map(|l| l as usize);
        let mut out: KvEntries = Vec::new();
        loop {
            let remaining = wanted.map(|w| w - out.len());
            if remaining == Some(0) || start >= end {
                break;
            }
            let page = remaining.map_or(LIST_PAGE_SIZE, |r| r.min(LIST_PAGE_SIZE));
            let entries = self
                .ctx
                .link()
                .kv_list_range(self.ctx.actor_id(), start.clone(), end.clone(), options.reverse, Some(page as u64))
                .await?;
            let full = entries.len() >= page;
            if let Some((last, _)) = entries.last() {
                if options.reverse {
                    end = last.clone();
                } else {
                    start = after(last);
                }
            }
            for (key, value) in entries {
                // The range is inside the user space; anything else would be
                // an engine bug, and must never reach user code.
                if key.first() == Some(&USER_KV_PREFIX) {
                    out.push((key[1..].to_vec(), value));
                }
            }
            if !full {
                break;
            }
        }
        if let Some(w) = wanted {
            out.truncate(w);
        }
        Ok(out)
    }

    fn check_writable(&self) -> anyhow::Result<()> {
        if self.ctx.is_lost() {
            return Err(lost_error(&self.ctx));
        }
        self.ctx.check_writable()?;
        if self.ctx.is_generation_finished() {
            return Err(catalog::actor_stopping(Some("the actor generation has stopped; its KV is read-only"))
                .with_actor(self.ctx.specifier())
                .into_anyhow());
        }
        Ok(())
    }

    /// A write that failed because the generation was declared lost meanwhile
    /// (the envoy drops such a put before sending it) is reported as such.
    fn write_result(&self, result: anyhow::Result<()>, what: &str) -> anyhow::Result<()> {
        match result {
            Ok(()) => Ok(()),
            Err(_) if self.ctx.is_lost() => Err(lost_error(&self.ctx)),
            Err(err) => Err(err.context(format!("KV {what} failed"))),
        }
    }
}

fn lost_error(ctx: &ActorContext) -> anyhow::Error {
    catalog::actor_stopping(Some("this actor generation was declared lost; its KV writes are refused"))
        .with_actor(ctx.specifier())
        .into_anyhow()
}

/// `kv.key_too_large` unless `key` fits: its [`stored_len`] at most
/// [`MAX_KEY_SIZE`].
pub fn check_key(key: &[u8]) -> anyhow::Result<()> {
    if stored_len(key) > MAX_KEY_SIZE {
        return Err(too_large(crate::error_codes::KV_KEY_TOO_LARGE, "key", stored_len(key), MAX_KEY_SIZE));
    }
    Ok(())
}

/// The bytes a user key takes against the engine's key limit: its length,
/// plus one for each zero byte, which engine 3.0 escapes to two bytes
/// (measured: 1021 zero bytes are stored, 1022 refused). Engine 2.3 does not
/// count them; the stricter rule keeps a stored key storable on both.
pub fn stored_len(key: &[u8]) -> usize {
    key.len() + key.iter().filter(|b| **b == 0).count()
}

/// Whether `key` can be stored at all (a longer one reads as missing).
fn storable(key: &[u8]) -> bool {
    stored_len(key) <= MAX_KEY_SIZE
}

/// `kv.value_too_large` unless `value` fits.
pub fn check_value(value: &[u8]) -> anyhow::Result<()> {
    if value.len() > MAX_VALUE_SIZE {
        return Err(too_large(crate::error_codes::KV_VALUE_TOO_LARGE, "value", value.len(), MAX_VALUE_SIZE));
    }
    Ok(())
}

fn too_large(code: crate::error_codes::ErrorCode, what: &str, size: usize, limit: usize) -> anyhow::Error {
    RivetError::new(code, format!("KV {what} too large ({size} bytes). Limit is {limit} bytes."))
        .with_metadata(json!({ "size": size, "limit": limit }))
        .into_anyhow()
}

/// The smallest key greater than every key that starts with `prefix`
/// (`prefix` starts with [`USER_KV_PREFIX`], so one always exists).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while end.last() == Some(&0xff) {
        end.pop();
    }
    match end.last_mut() {
        Some(last) => *last += 1,
        None => return user_space_end(),
    }
    end
}

/// The smallest engine key the engine accepts that is greater than the
/// engine key `key` (engine keys are one byte longer than user keys).
fn after(key: &[u8]) -> Vec<u8> {
    if key.len() < MAX_KEY_SIZE + 1 {
        [key, &[0]].concat()
    } else {
        // No longer key can be stored, so none starts with `key`.
        prefix_end(key)
    }
}

/// Engine bounds of the user range `[start, end)`, or `None` if it is empty.
fn range_bounds(start: &[u8], end: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let end = if end.iter().all(|b| *b == 0xff) { user_space_end() } else { bound(end) };
    let start = bound(start);
    (start < end).then_some((start, end))
}

/// The engine key `b` such that, for every key `k` that can be stored,
/// `k >= user` exactly when `user_key(k) >= b`. A bound longer than any key
/// (`user` = `s + rest`, `s` of [`MAX_KEY_SIZE`] bytes) becomes the first
/// key after every key that starts with `s`: no storable key starts with
/// `user`, and a storable key is above `user` exactly when it is above `s`
/// without starting with it.
fn bound(user: &[u8]) -> Vec<u8> {
    if user.len() <= MAX_KEY_SIZE {
        user_key(user)
    } else {
        prefix_end(&user_key(&user[..MAX_KEY_SIZE]))
    }
}

/// Splits a put into requests the engine accepts.
pub(crate) fn put_chunks(entries: KvEntries) -> Vec<KvEntries> {
    let mut chunks = Vec::new();
    let mut chunk: KvEntries = Vec::new();
    let mut bytes = 0;
    for (key, value) in entries {
        let size = key.len() + ENGINE_KEY_OVERHEAD + value.len();
        if !chunk.is_empty() && (chunk.len() == ENGINE_MAX_KEYS || bytes + size > ENGINE_MAX_PUT_PAYLOAD) {
            chunks.push(std::mem::take(&mut chunk));
            bytes = 0;
        }
        bytes += size;
        chunk.push((key, value));
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::actor::context::{ActorIdentity, GenerationHold};
    use crate::actor::keys::{ACTOR_RECORD_KEY, CONN_PREFIX};
    use crate::actor::link::{EngineLink, MemoryLink};
    use crate::actor::ActorKey;

    const ACTOR: &str = "actor-a";

    /// What one request to the engine looked like.
    #[derive(Debug, Clone, PartialEq)]
    enum Call {
        Get(usize),
        Put { keys: usize, payload: usize },
        Delete(usize),
        DeleteRange,
        ListPrefix,
        ListRange { limit: Option<u64> },
    }

    /// A [`MemoryLink`] that refuses what Engine 2.3.19 refuses and records
    /// every request.
    #[derive(Default)]
    struct EngineLike {
        mem: MemoryLink,
        calls: Mutex<Vec<Call>>,
    }

    fn refuse<T: Send + 'static>(message: &str) -> BoxFuture<'static, anyhow::Result<T>> {
        let message = message.to_string();
        Box::pin(async move { Err(anyhow::anyhow!(message)) })
    }

    impl EngineLike {
        fn record(&self, call: Call) {
            self.calls.lock().unwrap().push(call);
        }
        fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }
        fn key_ok(key: &[u8]) -> bool {
            key.len() + ENGINE_KEY_OVERHEAD <= ENGINE_MAX_KEY_SIZE
        }
        fn raw_keys(&self) -> Vec<Vec<u8>> {
            self.mem.kv.lock().unwrap().keys().map(|(_, k)| k.clone()).collect()
        }
        fn insert_raw(&self, key: &[u8], value: &[u8]) {
            self.mem.kv.lock().unwrap().insert((ACTOR.to_string(), key.to_vec()), value.to_vec());
        }
    }

    impl EngineLink for EngineLike {
        fn request_sleep(&self, _: &str, _: u32) {}
        fn sleep_and_stop(&self, _: &str, _: u32) {}
        fn report_crash(&self, _: &str, _: u32, _: String) {}
        fn request_destroy(&self, _: &str, _: u32) {}
        fn kv_get(
            &self,
            actor_id: &str,
            keys: Vec<Vec<u8>>,
        ) -> BoxFuture<'static, anyhow::Result<Vec<Option<Vec<u8>>>>> {
            self.record(Call::Get(keys.len()));
            if keys.len() > ENGINE_MAX_KEYS || !keys.iter().all(|k| Self::key_ok(k)) {
                return refuse("get refused");
            }
            self.mem.kv_get(actor_id, keys)
        }
        fn kv_put(
            &self,
            actor_id: &str,
            entries: KvEntries,
            lost: CancellationToken,
        ) -> BoxFuture<'static, anyhow::Result<()>> {
            let payload = entries.iter().map(|(k, v)| k.len() + ENGINE_KEY_OVERHEAD + v.len()).sum();
            self.record(Call::Put { keys: entries.len(), payload });
            if entries.len() > ENGINE_MAX_KEYS
                || payload > ENGINE_MAX_PUT_PAYLOAD
                || !entries.iter().all(|(k, v)| Self::key_ok(k) && v.len() <= MAX_VALUE_SIZE)
            {
                return refuse("transaction failed");
            }
            if lost.is_cancelled() {
                return refuse("actor generation was declared lost; kv request dropped before sending");
            }
            self.mem.kv_put(actor_id, entries, lost)
        }
        fn kv_delete(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<()>> {
            self.record(Call::Delete(keys.len()));
            if keys.len() > ENGINE_MAX_KEYS || !keys.iter().all(|k| Self::key_ok(k)) {
                return refuse("delete refused");
            }
            self.mem.kv_delete(actor_id, keys)
        }
        fn kv_delete_range(
            &self,
            actor_id: &str,
            start: Vec<u8>,
            end: Vec<u8>,
        ) -> BoxFuture<'static, anyhow::Result<()>> {
            self.record(Call::DeleteRange);
            if !Self::key_ok(&start) || !Self::key_ok(&end) {
                return refuse("start key is too long (max 2048 bytes)");
            }
            self.mem.kv_delete_range(actor_id, start, end)
        }
        fn kv_list_prefix(
            &self,
            actor_id: &str,
            prefix: Vec<u8>,
            reverse: bool,
            limit: Option<u64>,
        ) -> BoxFuture<'static, anyhow::Result<KvEntries>> {
            self.record(Call::ListPrefix);
            self.mem.kv_list_prefix(actor_id, prefix, reverse, limit)
        }
        fn kv_list_range(
            &self,
            actor_id: &str,
            start: Vec<u8>,
            end: Vec<u8>,
            reverse: bool,
            limit: Option<u64>,
        ) -> BoxFuture<'static, anyhow::Result<KvEntries>> {
            self.record(Call::ListRange { limit });
            if !Self::key_ok(&start) || !Self::key_ok(&end) {
                return refuse("start key is too long (max 2048 bytes)");
            }
            // The engine caps an unlimited answer at 16384 entries.
            self.mem.kv_list_range(actor_id, start, end, reverse, Some(limit.unwrap_or(16384)))
        }
        fn set_alarm(&self, _: &str, _: u32, _: Option<i64>) {}
    }

    struct Fixture {
        link: Arc<EngineLike>,
        ctx: ActorContext,
        kv: ActorKv,
        _hold: GenerationHold,
    }

    /// A generation that is running (holds taken like the dispatcher does).
    fn fixture() -> Fixture {
        let link = Arc::new(EngineLike::default());
        let (ctx, _inbox) = ActorContext::new(
            ActorIdentity {
                actor_id: ACTOR.into(),
                generation: 1,
                name: "test".into(),
                key: ActorKey::default(),
                region: String::new(),
                input: None,
            },
            CancellationToken::new(),
            link.clone(),
            &crate::actor::ActorConfig::default(),
            None,
        );
        let hold = ctx.hold_generation();
        Fixture { link, kv: ActorKv::new(ctx.clone()), ctx, _hold: hold }
    }

    fn b(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    fn keys(entries: &KvEntries) -> Vec<Vec<u8>> {
        entries.iter().map(|(k, _)| k.clone()).collect()
    }

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    async fn put_all(kv: &ActorKv, names: &[&str]) {
        kv.batch_put(names.iter().map(|n| (b(n), b(&format!("v-{n}")))).collect()).await.unwrap();
    }

    #[tokio::test]
    async fn put_get_delete_round_trip_under_the_user_prefix() {
        let f = fixture();
        assert_eq!(f.kv.get(b"k").await.unwrap(), None);
        f.kv.put(b"k", b"v").await.unwrap();
        assert_eq!(f.kv.get(b"k").await.unwrap(), Some(b("v")));
        assert_eq!(f.link.raw_keys(), vec![vec![USER_KV_PREFIX, b'k']]);
        f.kv.put(b"k", b"w").await.unwrap();
        assert_eq!(f.kv.get(b"k").await.unwrap(), Some(b("w")));
        f.kv.delete(b"k").await.unwrap();
        assert_eq!(f.kv.get(b"k").await.unwrap(), None);
        assert!(f.link.raw_keys().is_empty());
        // The empty key and the empty value are ordinary.
        f.kv.put(b"", b"").await.unwrap();
        assert_eq!(f.kv.get(b"").await.unwrap(), Some(Vec::new()));
    }

    #[tokio::test]
    async fn runtime_records_are_unreachable() {
        let f = fixture();
        f.link.insert_raw(ACTOR_RECORD_KEY, b"record");
        f.link.insert_raw(&[CONN_PREFIX, 1], b"conn");
        f.link.insert_raw(&[3], b"three");
        f.link.insert_raw(&[5, 0], b"after");
        f.link.insert_raw(&[0xff], b"end");
        put_all(&f.kv, &["a", "b"]).await;

        assert_eq!(keys(&f.kv.list_prefix(b"", ListOptions::default()).await.unwrap()), vec![b("a"), b("b")]);
        assert_eq!(keys(&f.kv.list_range(b"", b"", ListOptions::default()).await.unwrap()), vec![b("a"), b("b")]);
        assert_eq!(
            keys(&f.kv.list_range(b"", &[0xff, 0xff], ListOptions { reverse: true, limit: None }).await.unwrap()),
            vec![b("b"), b("a")]
        );
        // The record key [1] seen from user space is the user key [1], which does not exist.
        assert_eq!(f.kv.get(&[1]).await.unwrap(), None);
        assert_eq!(f.kv.get(&[]).await.unwrap(), None);

        f.kv.delete_range(b"", b"").await.unwrap();
        f.kv.delete_range(&[0], &[0xff]).await.unwrap();
        let raw = f.link.raw_keys();
        assert_eq!(raw, vec![vec![1], vec![CONN_PREFIX, 1], vec![3], vec![5, 0], vec![0xff]]);
    }

    #[tokio::test]
    async fn ranges_are_half_open_and_clamped() {
        let f = fixture();
        put_all(&f.kv, &["a", "b", "c", "d"]).await;
        f.kv.put(&[0xff, 1], b"high").await.unwrap();
        let all = ListOptions::default();

        assert_eq!(keys(&f.kv.list_range(b"a", b"c", all).await.unwrap()), vec![b("a"), b("b")]);
        assert_eq!(keys(&f.kv.list_range(b"b", b"b", all).await.unwrap()), Vec::<Vec<u8>>::new());
        assert_eq!(keys(&f.kv.list_range(b"c", b"a", all).await.unwrap()), Vec::<Vec<u8>>::new());
        assert_eq!(keys(&f.kv.list_range(b"c", b"", all).await.unwrap()), vec![b("c"), b("d"), vec![0xff, 1]]);
        assert_eq!(keys(&f.kv.list_range(b"d", &[0xff], all).await.unwrap()), vec![b("d"), vec![0xff, 1]]);
        // A non-0xff end is a real bound.
        assert_eq!(keys(&f.kv.list_range(b"d", &[0xff, 0], all).await.unwrap()), vec![b("d")]);
        // Values come back with their keys.
        assert_eq!(f.kv.list_range(b"a", b"b", all).await.unwrap(), vec![(b("a"), b("v-a"))]);

        f.kv.delete_range(b"c", b"a").await.unwrap();
        assert_eq!(f.link.raw_keys().len(), 5, "an empty range deletes nothing");
        f.kv.delete_range(b"b", b"d").await.unwrap();
        assert_eq!(keys(&f.kv.list_prefix(b"", all).await.unwrap()), vec![b("a"), b("d"), vec![0xff, 1]]);
        f.kv.delete_range(b"b", b"").await.unwrap();
        assert_eq!(keys(&f.kv.list_prefix(b"", all).await.unwrap()), vec![b("a")]);
    }

    #[tokio::test]
    async fn list_prefix_strips_the_prefix_and_includes_ff_continuations() {
        let f = fixture();
        for key in [&b"p"[..], &[b'p', 0], b"pa", &[b'p', 0xff], &[b'p', 0xff, 0xff], b"q", b"o"] {
            f.kv.put(key, b"x").await.unwrap();
        }
        let listed = keys(&f.kv.list_prefix(b"p", ListOptions::default()).await.unwrap());
        assert_eq!(listed, vec![b("p"), vec![b'p', 0], vec![b'p', b'a'], vec![b'p', 0xff], vec![b'p', 0xff, 0xff]]);
        let listed = keys(&f.kv.list_prefix(&[b'p', 0xff], ListOptions::default()).await.unwrap());
        assert_eq!(listed, vec![vec![b'p', 0xff], vec![b'p', 0xff, 0xff]]);
        // Sent as a range: the engine's prefix query misses 0xff continuations.
        assert!(f.link.calls().iter().all(|c| *c != Call::ListPrefix));
    }

    #[tokio::test]
    async fn reverse_and_limit() {
        let f = fixture();
        put_all(&f.kv, &["a", "b", "c", "d", "e"]).await;
        let list = |reverse, limit| f.kv.list_prefix(b"", ListOptions { reverse, limit });
        assert_eq!(keys(&list(false, Some(2)).await.unwrap()), vec![b("a"), b("b")]);
        assert_eq!(keys(&list(true, Some(2)).await.unwrap()), vec![b("e"), b("d")]);
        assert_eq!(keys(&list(true, None).await.unwrap()), vec![b("e"), b("d"), b("c"), b("b"), b("a")]);
        assert_eq!(keys(&list(false, Some(0)).await.unwrap()), Vec::<Vec<u8>>::new());
        assert_eq!(keys(&list(false, Some(99)).await.unwrap()).len(), 5);
        let range = f.kv.list_range(b"b", b"e", ListOptions { reverse: true, limit: Some(2) }).await.unwrap();
        assert_eq!(keys(&range), vec![b("d"), b("c")]);
    }

    #[tokio::test]
    async fn long_lists_are_paged() {
        let f = fixture();
        let names: Vec<String> = (0..300).map(|i| format!("k{i:03}")).collect();
        f.kv.batch_put(names.iter().map(|n| (b(n), b(n))).collect()).await.unwrap();
        let expect = |range: std::ops::Range<usize>| names[range].iter().map(|n| b(n)).collect::<Vec<_>>();

        assert_eq!(keys(&f.kv.list_prefix(b"k", ListOptions::default()).await.unwrap()), expect(0..300));
        assert_eq!(
            keys(&f.kv.list_prefix(b"k", ListOptions { reverse: false, limit: Some(200) }).await.unwrap()),
            expect(0..200)
        );
        let mut last = expect(150..300);
        last.reverse();
        assert_eq!(keys(&f.kv.list_prefix(b"k", ListOptions { reverse: true, limit: Some(150) }).await.unwrap()), last);
        let mut middle = expect(10..290);
        middle.reverse();
        assert_eq!(
            keys(&f.kv.list_range(b"k010", b"k290", ListOptions { reverse: true, limit: None }).await.unwrap()),
            middle
        );

        for call in f.link.calls() {
            if let Call::ListRange { limit } = call {
                assert!(matches!(limit, Some(l) if l as usize <= LIST_PAGE_SIZE), "{call:?}");
            }
        }
    }

    #[tokio::test]
    async fn batches_are_chunked_ordered_and_deduplicated() {
        let f = fixture();
        let names: Vec<String> = (0..300).map(|i| format!("b{i:03}")).collect();
        f.kv.batch_put(names.iter().map(|n| (b(n), b(n))).collect()).await.unwrap();
        let puts: Vec<_> = f.link.calls().into_iter().filter(|c| matches!(c, Call::Put { .. })).collect();
        assert_eq!(puts.len(), 3);

        let mut wanted: Vec<Vec<u8>> = names.iter().rev().map(|n| b(n)).collect();
        wanted.insert(1, b("missing"));
        wanted.push(b("b000"));
        let values = f.kv.batch_get(&wanted).await.unwrap();
        assert_eq!(values.len(), wanted.len());
        assert_eq!(values[0], Some(b("b299")));
        assert_eq!(values[1], None);
        assert_eq!(values.last().unwrap(), &Some(b("b000")));
        assert!(f.link.calls().iter().all(|c| !matches!(c, Call::Get(n) if *n > ENGINE_MAX_KEYS)));

        // Payload chunks: ten values of 128 KiB do not fit in one put.
        let big: KvEntries = (0..10).map(|i| (b(&format!("big{i}")), vec![i as u8; MAX_VALUE_SIZE])).collect();
        f.kv.batch_put(big).await.unwrap();
        assert_eq!(f.kv.get(b"big9").await.unwrap(), Some(vec![9; MAX_VALUE_SIZE]));

        // Last write wins; the engine sees the key once.
        f.kv.batch_put(vec![(b("dup"), b("first")), (b("other"), b("o")), (b("dup"), b("second"))]).await.unwrap();
        assert_eq!(f.link.calls().last(), Some(&Call::Put { keys: 2, payload: 4 + 4 + 6 + 6 + 4 + 1 }));
        assert_eq!(f.kv.get(b"dup").await.unwrap(), Some(b("second")));

        f.kv.batch_delete(&names.iter().map(|n| b(n)).chain([b("b000"), b("nope")]).collect::<Vec<_>>()).await.unwrap();
        assert_eq!(f.kv.list_prefix(b"b", ListOptions::default()).await.unwrap().len(), 10);
        assert!(f.link.calls().iter().all(|c| !matches!(c, Call::Delete(n) if *n > ENGINE_MAX_KEYS)));

        // Empty batches are fine and send nothing.
        let before = f.link.calls().len();
        f.kv.batch_put(Vec::new()).await.unwrap();
        f.kv.batch_delete(&[]).await.unwrap();
        assert_eq!(f.kv.batch_get(&[]).await.unwrap(), Vec::<Option<Vec<u8>>>::new());
        assert_eq!(f.link.calls().len(), before);
    }

    #[tokio::test]
    async fn size_limits_are_structured_errors_and_write_nothing() {
        let f = fixture();
        f.kv.put(&vec![1; MAX_KEY_SIZE], b"x").await.unwrap();
        f.kv.put(b"v", &vec![1; MAX_VALUE_SIZE]).await.unwrap();
        assert_eq!(MAX_KEY_SIZE, 2043);

        let err = f.kv.put(&vec![1; MAX_KEY_SIZE + 1], b"x").await.unwrap_err();
        assert_eq!(code(&err), "kv.key_too_large");
        let e = RivetError::extract(&err);
        assert_eq!(e.metadata, Some(json!({ "size": 2044, "limit": 2043 })));
        assert!(e.is_public());
        // Zero bytes count twice: engine 3.0 escapes them.
        f.kv.put(&[vec![0; 1021], vec![1]].concat(), b"x").await.unwrap();
        let err = f.kv.put(&vec![0; 1022], b"x").await.unwrap_err();
        assert_eq!(RivetError::extract(&err).metadata, Some(json!({ "size": 2044, "limit": 2043 })));

        let err = f.kv.put(b"v2", &vec![1; MAX_VALUE_SIZE + 1]).await.unwrap_err();
        assert_eq!(code(&err), "kv.value_too_large");
        assert_eq!(RivetError::extract(&err).metadata, Some(json!({ "size": 131073, "limit": 131072 })));

        // Only writes check key sizes: a key too long to be stored is missing.
        let long = vec![1; MAX_KEY_SIZE + 1];
        let before = f.link.calls().len();
        assert_eq!(f.kv.get(&long).await.unwrap(), None);
        assert_eq!(f.kv.batch_get(std::slice::from_ref(&long)).await.unwrap(), vec![None]);
        f.kv.delete(&long).await.unwrap();
        f.kv.batch_delete(std::slice::from_ref(&long)).await.unwrap();
        assert!(f.kv.list_prefix(&long, ListOptions::default()).await.unwrap().is_empty());
        assert_eq!(f.link.calls().len(), before, "nothing was sent");
        assert_eq!(f.kv.batch_get(&[b("v"), long.clone()]).await.unwrap(), vec![Some(vec![1; MAX_VALUE_SIZE]), None]);
        assert_eq!(f.link.calls().last(), Some(&Call::Get(1)));
        let before = f.link.calls().len();
        // A batch with one bad entry writes none of the good ones.
        let err =
            f.kv.batch_put(
                (0..200)
                    .map(|i| (b(&format!("g{i}")), if i == 150 { vec![0; MAX_VALUE_SIZE + 1] } else { b("x") }))
                    .collect(),
            )
            .await
            .unwrap_err();
        assert_eq!(code(&err), "kv.value_too_large");
        assert_eq!(f.link.calls().len(), before, "nothing was sent");
        assert!(f.kv.list_prefix(b"g", ListOptions::default()).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn range_bounds_longer_than_any_key_are_exact() {
        let f = fixture();
        let head = vec![7u8; MAX_KEY_SIZE - 1];
        let key = |last: &[u8]| [head.as_slice(), last].concat();
        // No zero bytes: they count twice against the limit.
        let (k0, k1, k2) = (key(&[1]), key(&[7]), key(&[8]));
        let k_ff = key(&[0xff]);
        for k in [&k0, &k1, &k2, &k_ff] {
            f.kv.put(k, b"x").await.unwrap();
        }
        let all = ListOptions::default();
        // k1 + [1] is one byte too long: above k1, below k2.
        let between = [k1.as_slice(), &[1]].concat();
        assert_eq!(keys(&f.kv.list_range(&between, b"", all).await.unwrap()), vec![k2.clone(), k_ff.clone()]);
        assert_eq!(keys(&f.kv.list_range(b"", &between, all).await.unwrap()), vec![k0.clone(), k1.clone()]);
        assert_eq!(
            keys(&f.kv.list_range(&between, &[k2.as_slice(), &[1, 1]].concat(), all).await.unwrap()),
            vec![k2.clone()]
        );
        // Above the last storable key with this head: nothing is left.
        let after_ff = [k_ff.as_slice(), &[1]].concat();
        assert!(f.kv.list_range(&after_ff, b"", all).await.unwrap().is_empty());
        assert_eq!(keys(&f.kv.list_range(b"", &after_ff, all).await.unwrap()).len(), 4);
        f.kv.delete_range(&between, b"").await.unwrap();
        assert_eq!(keys(&f.kv.list_prefix(b"", all).await.unwrap()), vec![k0, k1]);
    }

    #[tokio::test]
    async fn pages_continue_after_keys_of_the_longest_size() {
        let f = fixture();
        let longest: Vec<Vec<u8>> = (0..300u16)
            .map(|i| [vec![9u8; MAX_KEY_SIZE - 2], vec![1 + (i / 255) as u8, 1 + (i % 255) as u8]].concat())
            .collect();
        f.kv.batch_put(longest.iter().map(|k| (k.clone(), b("x"))).collect()).await.unwrap();
        assert_eq!(keys(&f.kv.list_prefix(&[9], ListOptions::default()).await.unwrap()), longest);
        assert_eq!(keys(&f.kv.list_range(b"", b"", ListOptions::default()).await.unwrap()), longest);
        let mut reversed = longest.clone();
        reversed.reverse();
        assert_eq!(keys(&f.kv.list_prefix(&[9], ListOptions { reverse: true, limit: None }).await.unwrap()), reversed);
    }

    #[tokio::test]
    async fn a_lost_generation_reads_but_does_not_write() {
        let f = fixture();
        f.kv.put(b"k", b"v").await.unwrap();
        f.ctx.mark_lost();
        assert_eq!(f.kv.get(b"k").await.unwrap(), Some(b("v")));
        assert_eq!(f.kv.list_prefix(b"", ListOptions::default()).await.unwrap().len(), 1);
        let before = f.link.calls().len();
        for err in [
            f.kv.put(b"k", b"w").await.unwrap_err(),
            f.kv.delete(b"k").await.unwrap_err(),
            f.kv.delete_range(b"", b"").await.unwrap_err(),
            f.kv.batch_put(vec![(b("x"), b("y"))]).await.unwrap_err(),
            f.kv.batch_delete(&[b("k")]).await.unwrap_err(),
        ] {
            let e = RivetError::extract(&err);
            assert_eq!(e.qualified_code(), "actor.stopping");
            assert!(e.message.contains("declared lost"), "{}", e.message);
            assert_eq!(e.actor.as_ref().map(|a| a.generation), Some(1));
        }
        assert_eq!(f.link.calls().len(), before, "nothing was sent");
        assert_eq!(f.kv.get(b"k").await.unwrap(), Some(b("v")));
        // Validation still comes first.
        assert_eq!(code(&f.kv.put(b"k", &vec![0; MAX_VALUE_SIZE + 1]).await.unwrap_err()), "kv.value_too_large");
    }

    #[tokio::test]
    async fn a_put_dropped_by_the_fence_reports_the_loss() {
        // The loss lands between the check and the transmission: the envoy
        // drops the put with a plain error, reported as the loss.
        let f = fixture();
        let result = f.kv.write_result(Err(anyhow::anyhow!("dropped before sending")), "put");
        assert_eq!(code(&result.unwrap_err()), "core.internal_error", "a plain failure stays internal");
        f.ctx.mark_lost();
        let result = f.kv.write_result(Err(anyhow::anyhow!("dropped before sending")), "put");
        assert_eq!(code(&result.unwrap_err()), "actor.stopping");
    }

    #[tokio::test]
    async fn writes_work_before_start_and_stop_after_the_generation_finished() {
        let f = fixture();
        assert!(!f.ctx.started());
        f.kv.put(b"early", b"1").await.unwrap();
        let Fixture { link: _link, ctx, kv, _hold } = f;
        drop(_hold);
        assert!(ctx.is_generation_finished());
        assert_eq!(kv.get(b"early").await.unwrap(), Some(b("1")));
        let err = kv.put(b"late", b"2").await.unwrap_err();
        assert_eq!(code(&err), "actor.stopping");
        assert!(RivetError::extract(&err).message.contains("stopped"));
        assert_eq!(code(&kv.delete(b"early").await.unwrap_err()), "actor.stopping");
        assert_eq!(kv.get(b"early").await.unwrap(), Some(b("1")));
    }

    #[test]
    fn prefix_end_and_put_chunks() {
        assert_eq!(prefix_end(&[4]), vec![5]);
        assert_eq!(prefix_end(&[4, 1, 0xff, 0xff]), vec![4, 2]);
        assert_eq!(prefix_end(&[4, 0xff]), vec![5]);
        let entries: KvEntries = (0..300u32).map(|i| (i.to_be_bytes().to_vec(), vec![0; 10])).collect();
        let chunks = put_chunks(entries);
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), vec![128, 128, 44]);
        let entries: KvEntries = (0..8u8).map(|i| (vec![4, i], vec![0; MAX_VALUE_SIZE])).collect();
        let chunks = put_chunks(entries);
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), vec![7, 1]);
    }
}
