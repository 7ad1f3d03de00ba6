//! What an actor needs from the engine, as a trait so that the actor task
//! and the dispatcher can be tested without an engine.
//!
//! The envoy implementation lives in [`crate::envoy::link`].

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::sqlite::SqliteLink;

pub type KvEntries = Vec<(Vec<u8>, Vec<u8>)>;

pub trait EngineLink: Send + Sync + 'static {
    /// Asks the engine to put this generation to sleep (`ActorIntent::Sleep`).
    fn request_sleep(&self, actor_id: &str, generation: u32);
    /// Puts a generation that this host has already stopped (hooks run,
    /// state saved) to sleep without waiting for the engine: its sleep
    /// intent and, right behind it, its `Stopped` (docs/drain.md). The
    /// envoy answers the stop through the dispatcher as if the engine had
    /// sent it.
    fn sleep_and_stop(&self, actor_id: &str, generation: u32);
    /// Reports a crash: the engine records the error and puts the actor to
    /// sleep (`ActorIntent::Sleep` with an error).
    fn report_crash(&self, actor_id: &str, generation: u32, message: String);
    /// Asks the engine to destroy the actor (`ActorIntent::Stop`).
    fn request_destroy(&self, actor_id: &str, generation: u32);
    fn kv_get(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<Vec<Option<Vec<u8>>>>>;
    /// Writes entries; dropped before transmission once `lost` fires, so a
    /// lost generation never overwrites what its successor wrote.
    fn kv_put(
        &self,
        actor_id: &str,
        entries: KvEntries,
        lost: CancellationToken,
    ) -> BoxFuture<'static, anyhow::Result<()>>;
    fn kv_delete(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<()>>;
    fn kv_delete_range(&self, actor_id: &str, start: Vec<u8>, end: Vec<u8>) -> BoxFuture<'static, anyhow::Result<()>>;
    fn kv_list_prefix(
        &self,
        actor_id: &str,
        prefix: Vec<u8>,
        reverse: bool,
        limit: Option<u64>,
    ) -> BoxFuture<'static, anyhow::Result<KvEntries>>;
    fn kv_list_range(
        &self,
        actor_id: &str,
        start: Vec<u8>,
        end: Vec<u8>,
        reverse: bool,
        limit: Option<u64>,
    ) -> BoxFuture<'static, anyhow::Result<KvEntries>>;
    /// Sets (or clears, with `None`) the engine alarm that wakes the actor.
    fn set_alarm(&self, actor_id: &str, generation: u32, timestamp_ms: Option<i64>);
    /// Resolves once the envoy has no HTTP request of this generation in
    /// flight: every response the handlers returned has been written to
    /// the engine (invariant I11 in docs/generations.md). A stop must not
    /// end before: the envoy drops a stopped generation's requests.
    fn responses_sent(&self, _actor_id: &str, _generation: u32) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    /// Acknowledges client message `index` on a hibernatable socket (the
    /// gateway then stops buffering it for replay).
    fn ack_hibernatable_message(&self, _gateway_id: [u8; 4], _request_id: [u8; 4], _index: u16) {}
    /// Hands the envoy the sockets this generation takes over from its
    /// predecessor; it reopens the live ones once the start succeeded.
    fn restore_hibernating_sockets(&self, _actor_id: &str, _sockets: Vec<super::Hibernation>) {}
    /// The engine's SQLite page store for this actor's database (fenced by
    /// generation there); `None` where there is none (test doubles).
    fn sqlite_transport(&self) -> Option<crate::sqlite::SqliteTransportHandle> {
        None
    }
    /// Which actor the engine's key index names for `name` and `key`
    /// (docs/generations.md, I13). `Unknown` where the link cannot ask.
    fn key_owner(&self, _actor_id: &str, _name: &str, _key: &str) -> BoxFuture<'static, anyhow::Result<KeyOwner>> {
        Box::pin(async { Ok(KeyOwner::Unknown) })
    }
}

/// The database sees a shared engine link through the narrow trait SQLite
/// defines for itself ([`SqliteLink`]): SQLite does not import the actor
/// layer.
impl<L: EngineLink + ?Sized> SqliteLink for Arc<L> {
    fn sqlite_transport(&self) -> Option<crate::sqlite::SqliteTransportHandle> {
        EngineLink::sqlite_transport(&**self)
    }

    fn report_crash(&self, actor_id: &str, generation: u32, message: String) {
        EngineLink::report_crash(&**self, actor_id, generation, message)
    }
}

/// What the engine's key index says of a key (docs/generations.md, I13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOwner {
    /// This link cannot ask the engine (a test double, an `https` engine).
    Unknown,
    /// No live actor holds the key yet: its reservation is still open.
    Pending,
    /// The live actor that holds the key.
    Actor(String),
}

/// Every actor's KV in a [`MemoryLink`], by (actor id, key).
#[cfg(test)]
pub type MemoryKv = std::collections::BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// In-memory link for tests: intents are counted, KV is a sorted map.
/// Compiled only into the core's own unit tests.
#[cfg(test)]
#[derive(Default)]
pub struct MemoryLink {
    pub kv: std::sync::Mutex<MemoryKv>,
    /// SQLite pages (with the engine's generation fence).
    pub pages: std::sync::Arc<crate::sqlite::memory::MemoryPages>,
    pub sleeps: std::sync::atomic::AtomicUsize,
    pub destroys: std::sync::atomic::AtomicUsize,
    /// The last engine alarm pushed (`None` inside: cleared).
    pub alarm: std::sync::Mutex<Option<Option<i64>>>,
    /// Every sleep intent, in order: `(actor id, generation)`.
    pub sleep_requests: std::sync::Mutex<Vec<(String, u32)>>,
    /// How many puts were made.
    pub puts: std::sync::atomic::AtomicUsize,
    /// Every generation put to sleep here, in order.
    pub slept_here: std::sync::Mutex<Vec<(String, u32)>>,
    /// HTTP responses the envoy has not written yet (all generations).
    pub unsent_responses: tokio::sync::watch::Sender<usize>,
    /// The next this many puts fail as the engine's store fails them
    /// under load ("transaction failed").
    pub failing_puts: std::sync::atomic::AtomicUsize,
    /// The engine's answers to key-owner questions, in order (then `Unknown`).
    pub key_owners: std::sync::Mutex<std::collections::VecDeque<KeyOwner>>,
}

#[cfg(test)]
impl MemoryLink {
    fn with_kv<R>(&self, f: impl FnOnce(&mut std::collections::BTreeMap<(String, Vec<u8>), Vec<u8>>) -> R) -> R {
        let mut guard = self.kv.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn list(&self, actor_id: &str, keep: impl Fn(&[u8]) -> bool, reverse: bool, limit: Option<u64>) -> KvEntries {
        let mut out: KvEntries = self.with_kv(|kv| {
            kv.iter().filter(|((a, k), _)| a == actor_id && keep(k)).map(|((_, k), v)| (k.clone(), v.clone())).collect()
        });
        if reverse {
            out.reverse();
        }
        if let Some(limit) = limit {
            out.truncate(limit as usize);
        }
        out
    }
}

#[cfg(test)]
impl EngineLink for MemoryLink {
    fn request_sleep(&self, actor_id: &str, generation: u32) {
        self.sleeps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.sleep_requests.lock().unwrap_or_else(|p| p.into_inner()).push((actor_id.to_string(), generation));
    }
    fn sleep_and_stop(&self, actor_id: &str, generation: u32) {
        self.slept_here.lock().unwrap_or_else(|p| p.into_inner()).push((actor_id.to_string(), generation));
    }
    fn request_destroy(&self, _actor_id: &str, _generation: u32) {
        self.destroys.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn report_crash(&self, _actor_id: &str, _generation: u32, _message: String) {
        self.sleeps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn kv_get(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<Vec<Option<Vec<u8>>>>> {
        let out = self.with_kv(|kv| keys.into_iter().map(|k| kv.get(&(actor_id.to_string(), k)).cloned()).collect());
        Box::pin(async move { Ok(out) })
    }
    fn kv_put(
        &self,
        actor_id: &str,
        entries: KvEntries,
        lost: CancellationToken,
    ) -> BoxFuture<'static, anyhow::Result<()>> {
        self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let failing = self.failing_puts.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |n| n.checked_sub(1),
        );
        if failing.is_ok() {
            return Box::pin(async { Err(anyhow::anyhow!("transaction failed")) });
        }
        if !lost.is_cancelled() {
            self.with_kv(|kv| {
                for (k, v) in entries {
                    kv.insert((actor_id.to_string(), k), v);
                }
            });
        }
        Box::pin(async { Ok(()) })
    }
    fn kv_delete(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<()>> {
        self.with_kv(|kv| {
            for k in keys {
                kv.remove(&(actor_id.to_string(), k));
            }
        });
        Box::pin(async { Ok(()) })
    }
    fn kv_delete_range(&self, actor_id: &str, start: Vec<u8>, end: Vec<u8>) -> BoxFuture<'static, anyhow::Result<()>> {
        self.with_kv(|kv| kv.retain(|(a, k), _| !(a == actor_id && *k >= start && *k < end)));
        Box::pin(async { Ok(()) })
    }
    fn kv_list_prefix(
        &self,
        actor_id: &str,
        prefix: Vec<u8>,
        reverse: bool,
        limit: Option<u64>,
    ) -> BoxFuture<'static, anyhow::Result<KvEntries>> {
        let out = self.list(actor_id, |k| k.starts_with(&prefix), reverse, limit);
        Box::pin(async move { Ok(out) })
    }
    fn kv_list_range(
        &self,
        actor_id: &str,
        start: Vec<u8>,
        end: Vec<u8>,
        reverse: bool,
        limit: Option<u64>,
    ) -> BoxFuture<'static, anyhow::Result<KvEntries>> {
        let out = self.list(actor_id, |k| k >= start.as_slice() && k < end.as_slice(), reverse, limit);
        Box::pin(async move { Ok(out) })
    }
    fn responses_sent(&self, _actor_id: &str, _generation: u32) -> BoxFuture<'static, ()> {
        let mut unsent = self.unsent_responses.subscribe();
        Box::pin(async move {
            let _ = unsent.wait_for(|n| *n == 0).await;
        })
    }
    fn set_alarm(&self, _actor_id: &str, _generation: u32, timestamp_ms: Option<i64>) {
        *self.alarm.lock().unwrap_or_else(|p| p.into_inner()) = Some(timestamp_ms);
    }
    fn key_owner(&self, _actor_id: &str, _name: &str, _key: &str) -> BoxFuture<'static, anyhow::Result<KeyOwner>> {
        let answer = self.key_owners.lock().unwrap_or_else(|p| p.into_inner()).pop_front().unwrap_or(KeyOwner::Unknown);
        Box::pin(async move { Ok(answer) })
    }
    fn sqlite_transport(&self) -> Option<crate::sqlite::SqliteTransportHandle> {
        Some(self.pages.clone())
    }
}
