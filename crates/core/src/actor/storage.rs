//! How an actor's data is laid out in its engine KV.
//!
//! The engine gives every actor a private, ordered byte-key store (the
//! envoy's KV). rivetkit-native keeps its own records under one-byte
//! prefixes and gives user code a separate prefix, so `ctx.kv()` can never
//! read or clobber runtime data:
//!
//! | key            | value                                                    |
//! |----------------|----------------------------------------------------------|
//! | `[1]`          | actor record: `u16 LE version (1)`, `u8 flags` (bit 0 = initialized), then the state bytes |
//! | `[2, conn id]` | hibernatable connection records                          |
//! | `[4, key..]`   | user KV (`ActorContext.kv()`), key bytes appended as-is  |
//!
//! Input is not stored: the engine delivers it on every start. Writes of a
//! lost generation are fenced by its lost signal (they are dropped before
//! they leave the host).

use crate::error::RivetError;

use super::ActorContext;

pub const ACTOR_RECORD_KEY: &[u8] = &[1];
pub const CONN_PREFIX: u8 = 2;
pub const USER_KV_PREFIX: u8 = 4;

const RECORD_VERSION: u16 = 1;
const FLAG_INITIALIZED: u8 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorRecord {
    pub initialized: bool,
    pub state: Vec<u8>,
}

impl ActorRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.state.len());
        out.extend_from_slice(&RECORD_VERSION.to_le_bytes());
        out.push(if self.initialized { FLAG_INITIALIZED } else { 0 });
        out.extend_from_slice(&self.state);
        out
    }

    pub fn decode(bytes: &[u8]) -> anyhow::Result<Self> {
        if bytes.len() < 3 {
            return Err(invalid("actor record is shorter than its header"));
        }
        let version = u16::from_le_bytes([bytes[0], bytes[1]]);
        if version != RECORD_VERSION {
            return Err(invalid(&format!("actor record version {version} is not supported")));
        }
        Ok(Self { initialized: bytes[2] & FLAG_INITIALIZED != 0, state: bytes[3..].to_vec() })
    }
}

fn invalid(reason: &str) -> anyhow::Error {
    RivetError::new("protocol", "invalid_persisted_data", format!("Invalid persisted data: {reason}"))
        .into_anyhow()
}

/// Reads the actor record; `None` for an actor that never started.
pub async fn load_record(ctx: &ActorContext) -> anyhow::Result<Option<ActorRecord>> {
    let mut values = ctx.link().kv_get(ctx.actor_id(), vec![ACTOR_RECORD_KEY.to_vec()]).await?;
    match values.pop().flatten() {
        Some(bytes) => Ok(Some(ActorRecord::decode(&bytes)?)),
        None => Ok(None),
    }
}

/// Writes the actor record with the context's current state.
pub async fn save_record(ctx: &ActorContext) -> anyhow::Result<()> {
    let record = ActorRecord { initialized: true, state: ctx.state() };
    ctx.link()
        .kv_put(ctx.actor_id(), vec![(ACTOR_RECORD_KEY.to_vec(), record.encode())], ctx.lost_token().clone())
        .await
}

/// The engine key of a user KV key.
pub fn user_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(USER_KV_PREFIX);
    out.extend_from_slice(key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips() {
        let r = ActorRecord { initialized: true, state: vec![1, 2, 3] };
        assert_eq!(ActorRecord::decode(&r.encode()).unwrap(), r);
        assert!(ActorRecord::decode(&[9, 9, 1]).is_err());
        assert!(ActorRecord::decode(&[1]).is_err());
    }
}
