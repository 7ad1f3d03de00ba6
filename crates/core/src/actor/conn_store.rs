//! Hibernatable-connection records in the actor's KV.
//!
//! A record is JSON ([`ConnRecord`]). One that fits an engine value
//! ([`MAX_VALUE_SIZE`]) is stored whole at `[2, conn id]`. A larger one
//! (a big connection state, many long subscriptions) is split:
//!
//! | key | value |
//! |-----|-------|
//! | `[2, conn id]` | header: `0x00`, `u32 LE write`, `u32 LE length`, `u32 LE chunk count` |
//! | `[5, conn id, 0x00, write u32 BE, index u32 BE]` | the record's bytes, in chunks |
//!
//! A JSON record starts with `{`, so a header is never mistaken for one.
//! Each write of a large record uses a new `write` number: its chunks go
//! first, then the header switches to them, then the previous write's
//! chunks are deleted. A crash in between leaves the previous record whole;
//! chunks left behind are deleted by the next write or when the
//! connection ends.
//!
//! Every request respects the engine's limits (keys per call, bytes per
//! put), so any number of connections can change or end in one save.

use super::keys::conn::{chunk_key, chunks_end, chunks_of, record_key, write_bound};
use super::keys::CONN_PREFIX;
use super::kv::{put_chunks, ENGINE_MAX_KEYS, MAX_VALUE_SIZE};
use super::{ActorContext, ConnRecord};
use crate::error::RivetError;

/// The largest record we store (16 MiB, like the actor state).
pub const MAX_CONN_RECORD_SIZE: usize = 16 * 1024 * 1024;
const CHUNK_SIZE: usize = 120 * 1024;
/// Chunks per get: answers stay a few MiB (large answers stall the link).
const CHUNKS_PER_GET: usize = 32;
const HEADER_MARKER: u8 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    write: u32,
    len: u32,
    chunks: u32,
}

impl Header {
    fn encode(self) -> Vec<u8> {
        let mut out = vec![HEADER_MARKER];
        out.extend_from_slice(&self.write.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.chunks.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let u32_at = |i: usize| bytes.get(i..i + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
        (bytes.len() == 13 && bytes[0] == HEADER_MARKER)
            .then(|| Some(Header { write: u32_at(1)?, len: u32_at(5)?, chunks: u32_at(9)? }))
            .flatten()
    }
}

/// `connection.record_too_large`: the record cannot be stored; the
/// connection keeps working, and is not saved until it shrinks.
pub fn record_too_large(id: &str, size: usize) -> RivetError {
    RivetError::new(
        crate::error_codes::CONNECTION_RECORD_TOO_LARGE,
        format!(
            "Connection {id} cannot be persisted: its record (params, state and subscriptions) is {size} bytes; \
             at most {MAX_CONN_RECORD_SIZE} bytes can be saved."
        ),
    )
    .with_metadata(serde_json::json!({ "connId": id, "size": size, "limit": MAX_CONN_RECORD_SIZE }))
}

/// Writes changed records and deletes those of ended connections.
///
/// A record over [`MAX_CONN_RECORD_SIZE`] is skipped and reported with
/// [`record_too_large`] after everything else was written.
pub async fn write(ctx: &ActorContext, records: &[ConnRecord], forgotten: &[String]) -> anyhow::Result<()> {
    ctx.check_writable()?;
    let fence = ctx.write_fence().clone();
    let mut whole = Vec::new();
    let mut too_large = None;
    let mut large = Vec::new();
    for record in records {
        let bytes = serde_json::to_vec(record)?;
        if bytes.len() > MAX_CONN_RECORD_SIZE {
            too_large.get_or_insert_with(|| record_too_large(&record.id, bytes.len()));
        } else if bytes.len() <= MAX_VALUE_SIZE {
            whole.push((record_key(&record.id), bytes));
        } else {
            large.push((record.id.as_str(), bytes));
        }
    }
    let was_chunked = |id: &str| ctx.conns().chunked_write(id);

    for batch in put_chunks(whole.clone()) {
        ctx.link().kv_put(ctx.actor_id(), batch, fence.clone()).await?;
    }
    for (key, _) in &whole {
        let id = String::from_utf8_lossy(&key[1..]).into_owned();
        if was_chunked(&id).is_some() {
            delete_chunks(ctx, &id, None).await?;
            ctx.conns().set_chunked_write(&id, None);
        }
    }
    for (id, bytes) in large {
        let write = was_chunked(id).map_or(0, |w| w.wrapping_add(1));
        let chunks: Vec<(Vec<u8>, Vec<u8>)> = bytes
            .chunks(CHUNK_SIZE)
            .enumerate()
            .map(|(i, chunk)| (chunk_key(id, write, i as u32), chunk.to_vec()))
            .collect();
        let header = Header { write, len: bytes.len() as u32, chunks: chunks.len() as u32 };
        for batch in put_chunks(chunks) {
            ctx.link().kv_put(ctx.actor_id(), batch, fence.clone()).await?;
        }
        ctx.link().kv_put(ctx.actor_id(), vec![(record_key(id), header.encode())], fence.clone()).await?;
        ctx.conns().set_chunked_write(id, Some(write));
        delete_chunks(ctx, id, Some(write)).await?;
    }

    if !forgotten.is_empty() {
        let keys: Vec<Vec<u8>> = forgotten.iter().map(|id| record_key(id)).collect();
        for batch in keys.chunks(ENGINE_MAX_KEYS) {
            ctx.check_writable()?;
            ctx.link().kv_delete(ctx.actor_id(), batch.to_vec()).await?;
        }
        for id in forgotten {
            if was_chunked(id).is_some() {
                delete_chunks(ctx, id, None).await?;
                ctx.conns().set_chunked_write(id, None);
            }
        }
    }
    match too_large {
        Some(err) => Err(err.into_anyhow()),
        None => Ok(()),
    }
}

/// Deletes `id`'s chunks, all of them or all but those of write `keep`.
/// Deletes have no envoy fence, so the fence is checked before each.
async fn delete_chunks(ctx: &ActorContext, id: &str, keep: Option<u32>) -> anyhow::Result<()> {
    let ranges = match keep {
        None => vec![(chunks_of(id), chunks_end(id))],
        Some(w) => {
            let mut ranges = vec![(chunks_of(id), write_bound(id, w))];
            if let Some(next) = w.checked_add(1) {
                ranges.push((write_bound(id, next), chunks_end(id)));
            }
            ranges
        }
    };
    for (start, end) in ranges {
        ctx.check_writable()?;
        ctx.link().kv_delete_range(ctx.actor_id(), start, end).await?;
    }
    Ok(())
}

/// Reads every record; unreadable ones are reported and skipped (their
/// sockets are then closed as stale).
pub async fn load(ctx: &ActorContext) -> anyhow::Result<Vec<ConnRecord>> {
    let entries = ctx.link().kv_list_prefix(ctx.actor_id(), vec![CONN_PREFIX], false, None).await?;
    let mut records = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let id = String::from_utf8_lossy(&key[1..]).into_owned();
        let bytes = match Header::decode(&value) {
            Some(header) => match load_chunks(ctx, &id, header).await? {
                Some(bytes) => {
                    ctx.conns().set_chunked_write(&id, Some(header.write));
                    bytes
                }
                None => {
                    tracing::warn!(conn = %id, "skipping a connection record with missing chunks");
                    continue;
                }
            },
            None => value,
        };
        match serde_json::from_slice(&bytes) {
            Ok(record) => records.push(record),
            Err(err) => tracing::warn!(conn = %id, %err, "skipping an unreadable connection record"),
        }
    }
    Ok(records)
}

async fn load_chunks(ctx: &ActorContext, id: &str, header: Header) -> anyhow::Result<Option<Vec<u8>>> {
    let keys: Vec<Vec<u8>> = (0..header.chunks).map(|i| chunk_key(id, header.write, i)).collect();
    let mut bytes = Vec::with_capacity(header.len as usize);
    for batch in keys.chunks(CHUNKS_PER_GET) {
        for value in ctx.link().kv_get(ctx.actor_id(), batch.to_vec()).await? {
            match value {
                Some(chunk) => bytes.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
    Ok((bytes.len() == header.len as usize).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::conn::Hibernation;
    use crate::actor::keys::CONN_CHUNK_PREFIX;
    use crate::actor::link::MemoryLink;
    use std::sync::Arc;

    fn record(id: &str, subscriptions: Vec<String>) -> ConnRecord {
        ConnRecord {
            id: id.into(),
            params: vec![1, 2, 3],
            state: vec![],
            subscriptions,
            hibernation: Hibernation {
                gateway_id: [1; 4],
                request_id: [2; 4],
                client_message_index: 0,
                path: "/connect".into(),
                headers: Default::default(),
            },
        }
    }

    fn engine_keys(link: &MemoryLink, prefix: u8) -> usize {
        link.kv.lock().unwrap().keys().filter(|(_, k)| k.first() == Some(&prefix)).count()
    }

    fn chunk_count(record: &ConnRecord) -> usize {
        serde_json::to_vec(record).unwrap().len().div_ceil(CHUNK_SIZE)
    }

    #[tokio::test]
    async fn many_records_end_in_one_save_within_the_engine_limits() {
        let ctx = ActorContext::for_test("a", 1);
        let records: Vec<_> = (0..400).map(|i| record(&format!("c{i:03}"), vec!["tick".into()])).collect();
        write(&ctx, &records, &[]).await.unwrap();
        assert_eq!(load(&ctx).await.unwrap().len(), 400);
        let forgotten: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        write(&ctx, &[], &forgotten).await.unwrap();
        assert!(load(&ctx).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn large_records_are_chunked_rewritten_and_forgotten() {
        let link = Arc::new(MemoryLink::default());
        let ctx = ActorContext::for_test_with("a", 1, link.clone());
        let long: Vec<String> = (0..3).map(|i| format!("{i}{}", "x".repeat(60_000))).collect();
        let big = record("big", long.clone());
        write(&ctx, std::slice::from_ref(&big), &[]).await.unwrap();
        assert_eq!(ctx.conns().chunked_write("big"), Some(0));
        assert_eq!(engine_keys(&link, CONN_CHUNK_PREFIX), chunk_count(&big));

        // The next generation reads it back whole.
        let next = ActorContext::for_test_with("a", 2, link.clone());
        assert_eq!(load(&next).await.unwrap(), vec![big.clone()]);
        assert_eq!(next.conns().chunked_write("big"), Some(0));

        // Rewritten larger: only the new write's chunks remain.
        let mut more = long.clone();
        more.push("y".repeat(60_000));
        let bigger = record("big", more);
        write(&next, std::slice::from_ref(&bigger), &[]).await.unwrap();
        assert_eq!(next.conns().chunked_write("big"), Some(1));
        assert_eq!(engine_keys(&link, CONN_CHUNK_PREFIX), chunk_count(&bigger));
        assert_eq!(load(&ActorContext::for_test_with("a", 3, link.clone())).await.unwrap(), vec![bigger]);

        // Small again: stored whole, chunks deleted; then forgotten.
        write(&next, &[record("big", vec![])], &[]).await.unwrap();
        assert_eq!(engine_keys(&link, CONN_CHUNK_PREFIX), 0);
        assert_eq!(next.conns().chunked_write("big"), None);
        write(&next, &[bigger_again(&long)], &[]).await.unwrap();
        write(&next, &[], &["big".into()]).await.unwrap();
        assert_eq!(engine_keys(&link, CONN_PREFIX), 0);
        assert_eq!(engine_keys(&link, CONN_CHUNK_PREFIX), 0);
    }

    fn bigger_again(long: &[String]) -> ConnRecord {
        record("big", long.to_vec())
    }

    #[tokio::test]
    async fn an_oversized_record_is_reported_and_others_are_still_written() {
        let ctx = ActorContext::for_test("a", 1);
        let mut huge = record("huge", vec![]);
        huge.state = vec![0; MAX_CONN_RECORD_SIZE];
        let ok = record("ok", vec![]);
        let err = write(&ctx, &[huge, ok.clone()], &[]).await.unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "connection.record_too_large");
        assert_eq!(load(&ctx).await.unwrap(), vec![ok]);
    }

    #[tokio::test]
    async fn a_stopped_generation_writes_no_record() {
        let ctx = ActorContext::for_test("a", 1);
        ctx.end_writes().await;
        let err = write(&ctx, &[record("c", vec![])], &[]).await.unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "actor.stopping");
        assert!(load(&ctx).await.unwrap().is_empty());
    }
}
