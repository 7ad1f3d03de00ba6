//! [`EngineLink`] over an envoy handle.

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};
use rivet_envoy_client::handle::EnvoyHandle;
use tokio_util::sync::CancellationToken;

use super::key_index::KeyIndex;
use crate::actor::link::{EngineLink, KeyOwner, KvEntries};

/// The envoy's handle, and the engine's key index where it can be asked.
pub struct EnvoyLink(pub EnvoyHandle, pub Option<Arc<KeyIndex>>);

impl EngineLink for EnvoyLink {
    fn request_sleep(&self, actor_id: &str, generation: u32) {
        self.0.sleep_actor(actor_id.to_string(), Some(generation), None);
    }
    fn key_owner(&self, actor_id: &str, name: &str, key: &str) -> BoxFuture<'static, anyhow::Result<KeyOwner>> {
        let Some(index) = self.1.clone() else {
            return async { Ok(KeyOwner::Unknown) }.boxed();
        };
        let (id, name, key) = (actor_id.to_owned(), name.to_owned(), key.to_owned());
        async move { index.owner(&id, &name, &key).await }.boxed()
    }
    fn responses_sent(&self, actor_id: &str, generation: u32) -> BoxFuture<'static, ()> {
        let counter = self.0.http_request_counter(actor_id, Some(generation));
        async move {
            if let Some(counter) = counter {
                counter.wait_zero_unbounded().await;
            }
        }
        .boxed()
    }
    fn sleep_and_stop(&self, actor_id: &str, generation: u32) {
        self.0.sleep_and_stop_actor(actor_id.to_string(), generation);
    }
    fn report_crash(&self, actor_id: &str, generation: u32, message: String) {
        // The engine stores the message; keep it short.
        let message: String = message.chars().take(1024).collect();
        self.0.sleep_actor(actor_id.to_string(), Some(generation), Some(message));
    }
    fn request_destroy(&self, actor_id: &str, generation: u32) {
        self.0.stop_actor(actor_id.to_string(), Some(generation));
    }
    fn kv_get(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<Vec<Option<Vec<u8>>>>> {
        let (h, id) = (self.0.clone(), actor_id.to_string());
        async move { h.kv_get(id, keys).await }.boxed()
    }
    fn kv_put(
        &self,
        actor_id: &str,
        entries: KvEntries,
        lost: CancellationToken,
    ) -> BoxFuture<'static, anyhow::Result<()>> {
        let (h, id) = (self.0.clone(), actor_id.to_string());
        async move { h.kv_put_fenced(id, entries, lost).await }.boxed()
    }
    fn kv_delete(&self, actor_id: &str, keys: Vec<Vec<u8>>) -> BoxFuture<'static, anyhow::Result<()>> {
        let (h, id) = (self.0.clone(), actor_id.to_string());
        async move { h.kv_delete(id, keys).await }.boxed()
    }
    fn kv_delete_range(&self, actor_id: &str, start: Vec<u8>, end: Vec<u8>) -> BoxFuture<'static, anyhow::Result<()>> {
        let (h, id) = (self.0.clone(), actor_id.to_string());
        async move { h.kv_delete_range(id, start, end).await }.boxed()
    }
    fn kv_list_prefix(
        &self,
        actor_id: &str,
        prefix: Vec<u8>,
        reverse: bool,
        limit: Option<u64>,
    ) -> BoxFuture<'static, anyhow::Result<KvEntries>> {
        let (h, id) = (self.0.clone(), actor_id.to_string());
        async move { h.kv_list_prefix(id, prefix, Some(reverse), limit).await }.boxed()
    }
    fn kv_list_range(
        &self,
        actor_id: &str,
        start: Vec<u8>,
        end: Vec<u8>,
        reverse: bool,
        limit: Option<u64>,
    ) -> BoxFuture<'static, anyhow::Result<KvEntries>> {
        let (h, id) = (self.0.clone(), actor_id.to_string());
        async move {
            // `[start, end)` on both engine architectures (docs/storage.md,
            // "Ranges"): the engines agree on the inclusive range only.
            // Engine 2.3 reads `exclusive` as "leave out `end`", engine 3.0
            // as "leave out both ends", so the inclusive range is asked for,
            // one entry more than the limit, and `end` is dropped here.
            let asked = limit.map(|l| l.saturating_add(1));
            let entries = h.kv_list_range(id, start, end.clone(), false, Some(reverse), asked).await?;
            Ok(half_open(entries, &end, limit))
        }
        .boxed()
    }
    fn set_alarm(&self, actor_id: &str, generation: u32, timestamp_ms: Option<i64>) {
        self.0.set_alarm(actor_id.to_string(), timestamp_ms, Some(generation));
    }
    fn ack_hibernatable_message(&self, gateway_id: [u8; 4], request_id: [u8; 4], index: u16) {
        self.0.send_hibernatable_ws_message_ack(gateway_id, request_id, index);
    }
    fn sqlite_transport(&self) -> Option<crate::sqlite::SqliteTransportHandle> {
        Some(std::sync::Arc::new(super::EnvoyPages(self.0.clone())))
    }
    fn restore_hibernating_sockets(&self, actor_id: &str, sockets: Vec<crate::actor::Hibernation>) {
        let metas = sockets
            .into_iter()
            .map(|h| rivet_envoy_client::tunnel::HibernatingWebSocketMetadata {
                gateway_id: h.gateway_id,
                request_id: h.request_id,
                // The envoy checks inbound indexes against `rivet_message_index`;
                // its own outgoing count restarts (as the reference does).
                envoy_message_index: 0,
                rivet_message_index: h.client_message_index,
                path: h.path,
                headers: h.headers,
            })
            .collect();
        self.0.restore_hibernating_requests(actor_id.to_string(), metas);
    }
}

/// The entries of an inclusive range answer without the one at `end`, at
/// most `limit` of them (in the answer's order, forward or reverse).
fn half_open(mut entries: KvEntries, end: &[u8], limit: Option<u64>) -> KvEntries {
    entries.retain(|(key, _)| key.as_slice() != end);
    if let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) {
        entries.truncate(limit);
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::half_open;

    fn entries(keys: &[&str]) -> super::KvEntries {
        keys.iter().map(|k| (k.as_bytes().to_vec(), Vec::new())).collect()
    }

    #[test]
    fn an_inclusive_answer_becomes_half_open() {
        let keys = |e: super::KvEntries| e.into_iter().map(|(k, _)| String::from_utf8(k).unwrap()).collect::<Vec<_>>();
        assert_eq!(keys(half_open(entries(&["b", "c", "d"]), b"d", Some(2))), ["b", "c"]);
        assert_eq!(keys(half_open(entries(&["b", "c"]), b"d", Some(2))), ["b", "c"]);
        // Reverse: `end` comes first and is dropped; the limit counts the rest.
        assert_eq!(keys(half_open(entries(&["d", "c", "b"]), b"d", Some(2))), ["c", "b"]);
        assert_eq!(keys(half_open(entries(&["e", "d"]), b"d", None)), ["e"]);
        assert_eq!(keys(half_open(entries(&["d"]), b"d", Some(0))), Vec::<String>::new());
    }
}
