//! How an actor's data is laid out in its engine KV.
//!
//! The engine gives every actor a private, ordered byte-key store (the
//! envoy's KV). rivetkit-native keeps its own records under one-byte
//! prefixes and gives user code a separate prefix, so `ctx.kv()` can never
//! read or clobber runtime data:
//!
//! | key                         | value |
//! |-----------------------------|-------|
//! | `[1]`                       | actor record header (below) |
//! | `[1, 1 + slot, index u32 BE]` | state chunks of a large state, in one of two slots |
//! | `[2, conn id]`              | hibernatable connection records (JSON: id, params, state, subscriptions, gateway and request ids, last client message index, path, headers), or the header of a chunked one |
//! | `[3, event id]`             | scheduled actions (binary, see [`super::schedule`]) |
//! | `[4, key..]`                | user KV (`ActorContext.kv()`), key bytes appended as-is |
//! | `[5, conn id, 0, write, index]` | chunks of connection records too large for one value ([`super::conn_store`]) |
//! | `[6, ..]`                   | the actor's message queue ([`super::queue::store`]) |
//! | `[7, ..]`                   | cron jobs and their history ([`super::cron::store`]) |
//!
//! The header is `u16 LE version (1)`, `u8 flags` (bit 0 initialized, bit 1
//! alarm set, bit 2 state chunked), the alarm as `i64 LE` ms since the
//! epoch when bit 1 is set, then either the state bytes (small states) or,
//! when chunked, `u8 slot`, `u32 LE state length`, `u32 LE chunk count`.
//!
//! The engine takes values up to 128 KiB and puts up to about 976 KiB, so a
//! large state is split into chunks. Chunks go to the slot the header does
//! *not* point at, then one put of the header switches slots: a crash in
//! between leaves the previous state whole. Stale chunks of the other slot
//! are never read (the header says how many chunks count).
//!
//! Input is not stored: the engine delivers it on every start. Writes of a
//! lost generation are fenced by its lost signal (they are dropped before
//! they leave the host), and so are the writes of a generation that has
//! stopped ([`ActorContext::write_fence`]): a stale handle kept by user
//! code can never overwrite its successor's data.

use crate::error::RivetError;

use super::keys::state::chunk_key;
use super::keys::ACTOR_RECORD_KEY;
use super::persisted::Fingerprint;
use super::ActorContext;

const RECORD_VERSION: u16 = 1;
const FLAG_INITIALIZED: u8 = 1;
const FLAG_ALARM: u8 = 2;
const FLAG_CHUNKED: u8 = 4;

/// States up to this size are stored inline in the header.
const INLINE_STATE_MAX: usize = 120 * 1024;
const CHUNK_SIZE: usize = 120 * 1024;
/// Chunks per put (the engine refuses puts over about 976 KiB).
const CHUNKS_PER_PUT: usize = 7;
/// Keys per get (the engine's limit is 128).
const KEYS_PER_GET: usize = 128;
/// The largest state we store (16 MiB): beyond it a save fails with a
/// structured error rather than an opaque engine one.
pub const MAX_STATE_SIZE: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ActorRecord {
    pub initialized: bool,
    pub alarm: Option<i64>,
    pub state: Vec<u8>,
}

/// Where a chunked state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunked {
    slot: u8,
    len: u32,
    chunks: u32,
}

/// The decoded header: the record (with an inline state) and, for a large
/// state, where its chunks are.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    record: ActorRecord,
    chunked: Option<Chunked>,
}

impl ActorRecord {
    /// The header with the state inline.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_header(None)
    }

    fn encode_header(&self, chunked: Option<Chunked>) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + if chunked.is_some() { 0 } else { self.state.len() });
        out.extend_from_slice(&RECORD_VERSION.to_le_bytes());
        let mut flags = 0;
        if self.initialized {
            flags |= FLAG_INITIALIZED;
        }
        if self.alarm.is_some() {
            flags |= FLAG_ALARM;
        }
        if chunked.is_some() {
            flags |= FLAG_CHUNKED;
        }
        out.push(flags);
        if let Some(alarm) = self.alarm {
            out.extend_from_slice(&alarm.to_le_bytes());
        }
        match chunked {
            Some(c) => {
                out.push(c.slot);
                out.extend_from_slice(&c.len.to_le_bytes());
                out.extend_from_slice(&c.chunks.to_le_bytes());
            }
            None => out.extend_from_slice(&self.state),
        }
        out
    }

    /// Decodes a header with an inline state.
    pub fn decode(bytes: &[u8]) -> anyhow::Result<Self> {
        let header = decode_header(bytes)?;
        if header.chunked.is_some() {
            return Err(invalid("actor record state is chunked"));
        }
        Ok(header.record)
    }
}

fn decode_header(bytes: &[u8]) -> anyhow::Result<Header> {
    {
        if bytes.len() < 3 {
            return Err(invalid("actor record is shorter than its header"));
        }
        let version = u16::from_le_bytes([bytes[0], bytes[1]]);
        if version != RECORD_VERSION {
            return Err(invalid(&format!("actor record version {version} is not supported")));
        }
        let flags = bytes[2];
        let mut rest = &bytes[3..];
        let alarm = if flags & FLAG_ALARM != 0 {
            let raw: [u8; 8] = rest
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| invalid("actor record alarm is truncated"))?;
            rest = &rest[8..];
            Some(i64::from_le_bytes(raw))
        } else {
            None
        };
        let initialized = flags & FLAG_INITIALIZED != 0;
        if flags & FLAG_CHUNKED != 0 {
            if rest.len() != 9 {
                return Err(invalid("actor record chunk header is malformed"));
            }
            let chunked = Chunked {
                slot: rest[0],
                len: u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]),
                chunks: u32::from_le_bytes([rest[5], rest[6], rest[7], rest[8]]),
            };
            return Ok(Header {
                record: ActorRecord { initialized, alarm, state: Vec::new() },
                chunked: Some(chunked),
            });
        }
        Ok(Header { record: ActorRecord { initialized, alarm, state: rest.to_vec() }, chunked: None })
    }
}

fn invalid(reason: &str) -> anyhow::Error {
    RivetError::new(crate::error_codes::PROTOCOL_INVALID_PERSISTED_DATA, format!("Invalid persisted data: {reason}"))
        .into_anyhow()
}

/// Reads the actor record; `None` for an actor that never started.
pub async fn load_record(ctx: &ActorContext) -> anyhow::Result<Option<ActorRecord>> {
    let mut values = ctx.link().kv_get(ctx.actor_id(), vec![ACTOR_RECORD_KEY.to_vec()]).await?;
    let Some(bytes) = values.pop().flatten() else { return Ok(None) };
    let Header { mut record, chunked } = decode_header(&bytes)?;
    if let Some(c) = chunked {
        record.state = load_chunks(ctx, c).await?;
        ctx.persisted().set_state_slot(c.slot);
    }
    *ctx.persisted().lock_writes().await = Some(fingerprint(&record));
    Ok(Some(record))
}

/// The [`Fingerprint`] of an actor record: two SipHash digests with keys
/// drawn once per process.
fn fingerprint(record: &ActorRecord) -> Fingerprint {
    use std::hash::BuildHasher;
    static KEYS: std::sync::OnceLock<[std::hash::RandomState; 2]> = std::sync::OnceLock::new();
    let keys = KEYS.get_or_init(|| [std::hash::RandomState::new(), std::hash::RandomState::new()]);
    Fingerprint(keys.each_ref().map(|key| key.hash_one(record)))
}

async fn load_chunks(ctx: &ActorContext, c: Chunked) -> anyhow::Result<Vec<u8>> {
    let keys: Vec<Vec<u8>> = (0..c.chunks).map(|i| chunk_key(c.slot, i)).collect();
    let mut state = Vec::with_capacity(c.len as usize);
    for batch in keys.chunks(KEYS_PER_GET) {
        for value in ctx.link().kv_get(ctx.actor_id(), batch.to_vec()).await? {
            state.extend_from_slice(&value.ok_or_else(|| invalid("a state chunk is missing"))?);
        }
    }
    if state.len() != c.len as usize {
        return Err(invalid("the state chunks do not add up to the recorded length"));
    }
    Ok(state)
}

/// Writes the actor record with the context's current state and alarm,
/// unless the engine already holds exactly that record (as read at the
/// start, or as last written): an actor that sleeps with its state saved,
/// and RivetKit's save right before the final one, write nothing.
pub async fn save_record(ctx: &ActorContext) -> anyhow::Result<()> {
    // Never between a workflow flush's SQLite commit and its KV put, whose
    // state copy would otherwise win over this save after a crash
    // (docs/workflows.md).
    let _flush = ctx.persisted().workflow_mark().lock().await;
    save_record_with(ctx, Vec::new()).await
}

/// [`save_record`], with `extra` entries written in the same put as the
/// record (its header for a chunked state), so they land together. With
/// `extra`, the record is written even when the engine already holds it.
///
/// The queue messages handled before the state was read are consumed in
/// the same put (docs/queues-cron.md, "Consumed with the state"): they and
/// the state they changed land together or not at all.
pub async fn save_record_with(ctx: &ActorContext, mut extra: Vec<(Vec<u8>, Vec<u8>)>) -> anyhow::Result<()> {
    let mut persisted = ctx.persisted().lock_writes().await;
    ctx.check_writable()?;
    let (state, mark) = ctx.persisted().state_and_mark();
    let record = ActorRecord { initialized: true, alarm: ctx.alarm(), state };
    let fingerprint = fingerprint(&record);
    let final_save = ctx.phase() == super::lifecycle::Phase::Finalizing;
    let mut commit = ctx.queue().commit_plan(mark, final_save);
    if let Some(commit) = commit.as_mut() {
        extra.append(&mut commit.entries);
    }
    if extra.is_empty() && *persisted == Some(fingerprint) {
        return Ok(());
    }
    // Unknown until this write is acknowledged (a failed put may or may not
    // have landed).
    *persisted = None;
    write_record(ctx, record, extra).await?;
    *persisted = Some(fingerprint);
    if let Some(commit) = commit {
        ctx.queue().committed(commit);
    }
    Ok(())
}

async fn write_record(ctx: &ActorContext, record: ActorRecord, extra: Vec<(Vec<u8>, Vec<u8>)>) -> anyhow::Result<()> {
    let lost = ctx.write_fence().clone();
    if record.state.len() <= INLINE_STATE_MAX {
        let mut entries = vec![(ACTOR_RECORD_KEY.to_vec(), record.encode())];
        entries.extend(extra);
        return ctx.link().kv_put(ctx.actor_id(), entries, lost).await;
    }
    if record.state.len() > MAX_STATE_SIZE {
        return Err(RivetError::new(
            crate::error_codes::ACTOR_STATE_TOO_LARGE,
            format!("The actor state is {} bytes; at most {MAX_STATE_SIZE} bytes can be saved.", record.state.len()),
        )
        .with_metadata(serde_json::json!({ "size": record.state.len(), "limit": MAX_STATE_SIZE }))
        .into_anyhow());
    }
    // Chunks into the slot the current header does not use, then the header.
    let slot = ctx.persisted().state_slot().map_or(0, |s| 1 - s);
    let chunks: Vec<(Vec<u8>, Vec<u8>)> = record
        .state
        .chunks(CHUNK_SIZE)
        .enumerate()
        .map(|(i, chunk)| (chunk_key(slot, i as u32), chunk.to_vec()))
        .collect();
    let header = Chunked { slot, len: record.state.len() as u32, chunks: chunks.len() as u32 };
    for batch in chunks.chunks(CHUNKS_PER_PUT) {
        ctx.link().kv_put(ctx.actor_id(), batch.to_vec(), lost.clone()).await?;
    }
    let mut entries = vec![(ACTOR_RECORD_KEY.to_vec(), record.encode_header(Some(header)))];
    entries.extend(extra);
    ctx.link().kv_put(ctx.actor_id(), entries, lost).await?;
    ctx.persisted().set_state_slot(slot);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn record_round_trips() {
        let r = ActorRecord { initialized: true, alarm: None, state: vec![1, 2, 3] };
        assert_eq!(ActorRecord::decode(&r.encode()).unwrap(), r);
        let r = ActorRecord { initialized: true, alarm: Some(1_796_000_000_000), state: vec![] };
        assert_eq!(ActorRecord::decode(&r.encode()).unwrap(), r);
        assert!(ActorRecord::decode(&[9, 9, 1]).is_err());
        assert!(ActorRecord::decode(&[1]).is_err());
    }

    #[tokio::test]
    async fn large_states_are_chunked_and_switch_slots() {
        let ctx = ActorContext::for_test("a", 1);
        let big: Vec<u8> = (0..(3 * CHUNK_SIZE + 17)).map(|i| (i % 251) as u8).collect();
        ctx.set_state(big.clone());
        save_record(&ctx).await.unwrap();
        assert_eq!(ctx.state_slot(), Some(0));
        assert_eq!(load_record(&ctx).await.unwrap().unwrap().state, big);

        let bigger: Vec<u8> = big.iter().rev().copied().chain(std::iter::repeat_n(7, CHUNK_SIZE)).collect();
        ctx.set_state(bigger.clone());
        save_record(&ctx).await.unwrap();
        assert_eq!(ctx.state_slot(), Some(1));
        assert_eq!(load_record(&ctx).await.unwrap().unwrap().state, bigger);

        ctx.set_state(b"small again".to_vec());
        save_record(&ctx).await.unwrap();
        assert_eq!(load_record(&ctx).await.unwrap().unwrap().state, b"small again");
    }

    #[tokio::test]
    async fn an_unchanged_record_is_not_written_again() {
        use crate::actor::link::MemoryLink;
        use std::sync::atomic::Ordering;
        let link = Arc::new(MemoryLink::default());
        let ctx = ActorContext::for_test_with("a", 1, link.clone());
        ctx.set_state(b"one".to_vec());
        save_record(&ctx).await.unwrap();
        save_record(&ctx).await.unwrap();
        assert_eq!(link.puts.load(Ordering::SeqCst), 1);
        ctx.set_state(b"two".to_vec());
        save_record(&ctx).await.unwrap();
        assert_eq!(link.puts.load(Ordering::SeqCst), 2);
        ctx.restore_alarm(Some(1_796_000_000_000));
        save_record(&ctx).await.unwrap();
        assert_eq!(link.puts.load(Ordering::SeqCst), 3, "the alarm is part of the record");

        // The next generation knows what the engine holds from its start.
        let next = ActorContext::for_test_with("a", 2, link.clone());
        let loaded = load_record(&next).await.unwrap().unwrap();
        next.set_state(loaded.state);
        next.restore_alarm(loaded.alarm);
        save_record(&next).await.unwrap();
        assert_eq!(link.puts.load(Ordering::SeqCst), 3);
        next.set_state(b"three".to_vec());
        save_record(&next).await.unwrap();
        assert_eq!(
            load_record(&ActorContext::for_test_with("a", 3, link.clone())).await.unwrap().unwrap().state,
            b"three"
        );
    }

    #[tokio::test]
    async fn a_state_over_the_limit_is_a_structured_error() {
        let ctx = ActorContext::for_test("a", 1);
        ctx.set_state(vec![0; MAX_STATE_SIZE + 1]);
        let err = save_record(&ctx).await.unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "actor.state_too_large");
    }
}
