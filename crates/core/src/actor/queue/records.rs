//! The consumed list and try counts as stored values (docs/storage.md,
//! "Queue `[6]`"): a leaf that the queue and its store share, so that what
//! the context holds imports no code that uses the context.

use std::collections::BTreeSet;

use super::super::keys::queue::{consumed_key, tries_key};

const CONSUMED_VERSION: u8 = 1;

/// The consumed list's value: runs of consecutive ids.
pub(super) fn encode_consumed(ids: &BTreeSet<u64>) -> Vec<u8> {
    let mut out = vec![CONSUMED_VERSION];
    let mut run: Option<(u64, u32)> = None;
    let push = |out: &mut Vec<u8>, (first, count): (u64, u32)| {
        out.extend_from_slice(&first.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    };
    for &id in ids {
        run = match run {
            Some((first, count)) if first.checked_add(u64::from(count)) == Some(id) && count < u32::MAX => {
                Some((first, count + 1))
            }
            Some(done) => {
                push(&mut out, done);
                Some((id, 1))
            }
            None => Some((id, 1)),
        };
    }
    if let Some(done) = run {
        push(&mut out, done);
    }
    out
}

/// The ids of a consumed list (an unreadable one reads as empty, with a
/// warning: its messages are then delivered again, never lost).
pub(super) fn decode_consumed(value: &[u8]) -> BTreeSet<u64> {
    let mut ids = BTreeSet::new();
    let Some((&CONSUMED_VERSION, mut rest)) = value.split_first() else {
        tracing::warn!("ignoring an unreadable consumed-message list");
        return ids;
    };
    while rest.len() >= 12 {
        let first = u64::from_le_bytes(rest[..8].try_into().unwrap_or_default());
        let count = u32::from_le_bytes(rest[8..12].try_into().unwrap_or_default());
        ids.extend((0..u64::from(count)).filter_map(|i| first.checked_add(i)));
        rest = &rest[12..];
    }
    ids
}

/// The consumed list's entry, for the put of the actor record.
pub(crate) fn consumed_entry(ids: &BTreeSet<u64>) -> (Vec<u8>, Vec<u8>) {
    (consumed_key(), encode_consumed(ids))
}

/// A try count's entry.
pub(crate) fn tries_entry(id: u64, tries: u32) -> (Vec<u8>, Vec<u8>) {
    (tries_key(id), tries.to_le_bytes().to_vec())
}
