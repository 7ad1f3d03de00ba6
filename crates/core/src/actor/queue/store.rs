//! The queue's records in the actor's KV (docs/storage.md, "Queue `[6]`").
//!
//! | key | value |
//! |---|---|
//! | `[6, 0]` | the next message id, `u64` LE |
//! | `[6, 1, id u64 BE]` | a message's header: `u8` version (1), `i64` LE created at (ms), then the name (UTF-8); or version 2, for a message whose sender had a ray ID: `u8` 2, `i64` LE created at, `u8` ray ID length, the ray ID, then the name |
//! | `[6, 2, id u64 BE]` | the message's body, as sent |
//! | `[6, 3, id u64 BE]` | tries: `u32` LE, generations that took the message and ended without consuming it |
//! | `[6, 4]` | consumed: `u8` version (1), then runs of `u64` LE first id and `u32` LE count |
//!
//! A message is one put of its header, its body and the next id: one
//! engine request (a body is at most one KV value), so it is stored whole
//! or not at all. Ids are big-endian so that the keys sort in send order.
//! Only headers are read when an actor starts; bodies are read when a
//! message is received, so a wake costs a few bytes per queued message
//! whatever their size.

use std::collections::{BTreeSet, HashMap};

use super::super::keys::queue::{
    body_key, consumed_key, header_key, headers_range, id_of, messages_range, next_id_key, tries_key, tries_range,
};
use super::super::kv::{ENGINE_MAX_KEYS, LIST_PAGE_SIZE};
use super::super::link::KvEntries;
use super::super::ActorContext;
use super::header::Header;
use super::records::decode_consumed;
#[cfg(test)]
use super::records::encode_consumed;
pub(crate) use super::records::tries_entry;

const HEADER_VERSION: u8 = 1;
/// A header that also holds the sender's ray ID.
const HEADER_VERSION_WITH_RAY: u8 = 2;
/// Headers asked for per list request while loading (small values).
const HEADER_PAGE: usize = LIST_PAGE_SIZE * 8;

/// Bytes a message takes in its header record (what counts against
/// `maxQueueMessageSize` with the body).
pub(super) fn header_len(name: &str, ray_id: Option<&str>) -> usize {
    9 + name.len() + ray_id.map_or(0, |ray| 1 + ray.len())
}

/// A ray ID longer than a header can hold is not kept (the clients bound
/// it far below that).
fn storable_ray(header: &Header) -> Option<&str> {
    header.ray_id.as_deref().filter(|ray| ray.len() <= u8::MAX as usize)
}

pub(super) fn encode_header(header: &Header) -> Vec<u8> {
    let ray = storable_ray(header);
    let mut out = Vec::with_capacity(header_len(&header.name, ray));
    match ray {
        Some(ray) => {
            out.push(HEADER_VERSION_WITH_RAY);
            out.extend_from_slice(&header.created_at.to_le_bytes());
            out.push(ray.len() as u8);
            out.extend_from_slice(ray.as_bytes());
        }
        None => {
            out.push(HEADER_VERSION);
            out.extend_from_slice(&header.created_at.to_le_bytes());
        }
    }
    out.extend_from_slice(header.name.as_bytes());
    out
}

/// Created at, name and ray ID of a stored header.
pub(super) fn decode_header(value: &[u8]) -> Option<(i64, String, Option<String>)> {
    let (&version, rest) = value.split_first()?;
    let created_at = i64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let rest = &rest[8..];
    let (ray_id, name) = match version {
        HEADER_VERSION => (None, rest),
        HEADER_VERSION_WITH_RAY => {
            let (&len, rest) = rest.split_first()?;
            let ray = rest.get(..len as usize)?;
            (Some(String::from_utf8(ray.to_vec()).ok()?), &rest[len as usize..])
        }
        _ => return None,
    };
    Some((created_at, String::from_utf8(name.to_vec()).ok()?, ray_id))
}

/// What a start reads: every stored header in id order, the stored next
/// id (0 if none), the consumed list and the try counts.
pub(super) struct Loaded {
    pub headers: Vec<Header>,
    pub next_id: u64,
    pub consumed: BTreeSet<u64>,
    pub tries: HashMap<u64, u32>,
}

pub(super) async fn load(ctx: &ActorContext) -> anyhow::Result<Loaded> {
    let link = ctx.link();
    let mut fixed = link.kv_get(ctx.actor_id(), vec![next_id_key(), consumed_key()]).await?.into_iter();
    let stored_next =
        fixed.next().flatten().and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))).unwrap_or(0);
    let consumed = fixed.next().flatten().map(|v| decode_consumed(&v)).unwrap_or_default();
    let mut tries = HashMap::new();
    for (key, value) in list_all(ctx, tries_range()).await? {
        let count = value.get(..4).and_then(|v| v.try_into().ok()).map(u32::from_le_bytes);
        if let (Some(id), Some(count)) = (id_of(&key), count) {
            tries.insert(id, count);
        }
    }
    let mut headers = Vec::new();
    for (key, value) in list_all(ctx, headers_range()).await? {
        match (id_of(&key), decode_header(&value)) {
            (Some(id), Some((created_at, name, ray_id))) => headers.push(Header { id, name, created_at, ray_id }),
            _ => tracing::warn!(key = ?key, "skipping an unreadable queue message header"),
        }
    }
    Ok(Loaded { headers, next_id: stored_next, consumed, tries })
}

/// Every entry of `range` (start inclusive, end exclusive), read
/// `HEADER_PAGE` entries at a time.
async fn list_all(ctx: &ActorContext, (mut start, end): (Vec<u8>, Vec<u8>)) -> anyhow::Result<KvEntries> {
    let mut all = Vec::new();
    loop {
        let page = ctx
            .link()
            .kv_list_range(ctx.actor_id(), start.clone(), end.clone(), false, Some(HEADER_PAGE as u64))
            .await?;
        let full = page.len() >= HEADER_PAGE;
        if let Some((last, _)) = page.last() {
            start = last.clone();
            start.push(0);
        }
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// Stores try counts and headers (renamed dead letters) in one put per
/// engine request, awaited: a message is handed out only once its try is
/// durable, so a generation it kills is counted.
pub(super) async fn put_marks(ctx: &ActorContext, entries: Vec<(Vec<u8>, Vec<u8>)>) -> anyhow::Result<()> {
    for chunk in entries.chunks(ENGINE_MAX_KEYS) {
        ctx.check_writable()?;
        let result = ctx.link().kv_put(ctx.actor_id(), chunk.to_vec(), ctx.write_fence().clone()).await;
        result.or_else(|err| ctx.check_writable().and(Err(err)))?;
    }
    Ok(())
}

/// A header's entry (a dead letter's new name).
pub(super) fn header_entry(header: &Header) -> (Vec<u8>, Vec<u8>) {
    (header_key(header.id), encode_header(header))
}

/// Stores one message (header, body and next id in one put).
pub(super) async fn put(ctx: &ActorContext, header: &Header, body: &[u8], next_id: u64) -> anyhow::Result<()> {
    ctx.check_writable()?;
    let entries = vec![
        (next_id_key(), next_id.to_le_bytes().to_vec()),
        (header_key(header.id), encode_header(header)),
        (body_key(header.id), body.to_vec()),
    ];
    let result = ctx.link().kv_put(ctx.actor_id(), entries, ctx.write_fence().clone()).await;
    // The envoy drops the put of a generation whose fence closed meanwhile:
    // say so rather than pass on its error.
    result.or_else(|err| ctx.check_writable().and(Err(err)))
}

/// The bodies of `ids` (missing ones as `None`).
pub(super) async fn bodies(ctx: &ActorContext, ids: &[u64]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(ENGINE_MAX_KEYS) {
        let keys = chunk.iter().map(|id| body_key(*id)).collect();
        out.extend(ctx.link().kv_get(ctx.actor_id(), keys).await?);
    }
    Ok(out)
}

/// Deletes the records of `ids` (header, body, tries).
pub(super) async fn delete(ctx: &ActorContext, ids: &[u64]) -> anyhow::Result<()> {
    // Three keys per message, at most the engine's keys per request.
    for chunk in ids.chunks(ENGINE_MAX_KEYS / 3) {
        ctx.check_writable()?;
        let keys = chunk.iter().flat_map(|id| [header_key(*id), body_key(*id), tries_key(*id)]).collect();
        ctx.link().kv_delete(ctx.actor_id(), keys).await?;
    }
    Ok(())
}

/// Deletes every message (headers, bodies, tries; the next id and the
/// consumed list stay: ids never come back, so old entries match nothing).
pub(super) async fn delete_all(ctx: &ActorContext) -> anyhow::Result<()> {
    ctx.check_writable()?;
    let (start, end) = messages_range();
    ctx.link().kv_delete_range(ctx.actor_id(), start, end).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_keys_sort_by_id() {
        let header = Header { id: 7, name: "jobs".into(), created_at: 1_700_000_000_000, ray_id: None };
        assert_eq!(decode_header(&encode_header(&header)), Some((header.created_at, header.name.clone(), None)));
        assert_eq!(encode_header(&header).len(), header_len("jobs", None));
        assert_eq!(decode_header(&[3, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(decode_header(&[1, 0]), None);
        assert!(header_key(255) < header_key(256));
        assert!(header_key(u64::MAX) < body_key(0));
        assert_eq!(id_of(&header_key(300)), Some(300));
    }

    #[test]
    fn the_consumed_list_is_kept_as_runs() {
        let ids: BTreeSet<u64> = [1, 2, 3, 7, 9, 10, u64::MAX].into_iter().collect();
        let bytes = encode_consumed(&ids);
        assert_eq!(bytes.len(), 1 + 4 * 12);
        assert_eq!(decode_consumed(&bytes), ids);
        assert_eq!(decode_consumed(&encode_consumed(&BTreeSet::new())), BTreeSet::new());
        assert!(decode_consumed(&[9, 1, 2]).is_empty());
        let many: BTreeSet<u64> = (1..=1000).collect();
        assert_eq!(encode_consumed(&many).len(), 13);
    }

    /// The sender's ray ID is kept with the message; a header written
    /// before (version 1) still reads, with none.
    #[test]
    fn a_header_keeps_the_senders_ray_id() {
        let header = Header { id: 7, name: "jobs".into(), created_at: 5, ray_id: Some("ray-1".into()) };
        let bytes = encode_header(&header);
        assert_eq!(bytes.len(), header_len("jobs", Some("ray-1")));
        assert_eq!(decode_header(&bytes), Some((5, "jobs".to_string(), Some("ray-1".to_string()))));
        assert_eq!(decode_header(&[2, 5, 0, 0, 0, 0, 0, 0, 0, 9, b'r']), None, "a cut ray ID");
        let too_long = Header { ray_id: Some("r".repeat(300)), ..header };
        assert_eq!(decode_header(&encode_header(&too_long)), Some((5, "jobs".to_string(), None)));
    }
}
