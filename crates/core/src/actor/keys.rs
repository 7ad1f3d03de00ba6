//! Every key the actor runtime writes in the actor's engine KV, in one
//! place: the one-byte prefixes and the functions that build (and take
//! apart) the keys under them. docs/storage.md describes the layout, the
//! values and who writes what; keep the two in step. The stores
//! (`storage`, `conn_store`, `schedule`, `kv`, `queue/store`,
//! `cron/store`, `workflow`, the inspector) import their keys from here.
//!
//! `[8, …]` is never written: the engine treats it as legacy SQLite data.
//! The actor's SQLite database is not in this store (docs/sqlite.md).

/// `[1]`: the actor record (state, alarm, flags).
pub const ACTOR_RECORD_KEY: &[u8] = &[1];
/// `[2, conn id]`: a hibernatable connection's record.
pub const CONN_PREFIX: u8 = 2;
/// `[3]` exactly: the inspector token (docs/inspector.md).
pub const INSPECTOR_TOKEN: &[u8] = &[3];
/// `[3, event id]`: a scheduled action. A scan of the prefix skips the
/// exact key `[3]` ([`INSPECTOR_TOKEN`]).
pub const SCHEDULE_PREFIX: u8 = 3;
/// `[4, key…]`: user KV (`ctx.kv()`).
pub const USER_KV_PREFIX: u8 = 4;
/// `[5, conn id, 0, …]`: chunks of a large connection record.
pub const CONN_CHUNK_PREFIX: u8 = 5;
/// `[6, …]`: the queue.
pub const QUEUE_PREFIX: u8 = 6;
/// `[7, …]`: cron jobs and their history.
pub const CRON_PREFIX: u8 = 7;
/// `[9]` exactly: the revision of the state copy last saved in SQLite
/// with the state (`u64` BE; docs/workflows.md). Present once an actor
/// flushed a workflow batch or ran a state transaction.
pub const WORKFLOW_MARK_KEY: &[u8] = &[9];

/// The actor record's large-state chunks.
pub mod state {
    use super::ACTOR_RECORD_KEY;

    /// `[1, 1 + slot, index u32 BE]`: chunk `index` of a large state in
    /// `slot` (0 or 1).
    pub fn chunk_key(slot: u8, index: u32) -> Vec<u8> {
        let mut key = vec![ACTOR_RECORD_KEY[0], 1 + slot];
        key.extend_from_slice(&index.to_be_bytes());
        key
    }
}

/// Hibernatable-connection records and their chunks.
pub mod conn {
    use super::{CONN_CHUNK_PREFIX, CONN_PREFIX};

    /// `[2, id]`: the record (or the header of a chunked one).
    pub fn record_key(id: &str) -> Vec<u8> {
        let mut key = vec![CONN_PREFIX];
        key.extend_from_slice(id.as_bytes());
        key
    }

    /// `[5, id, 0]`: every chunk of `id`'s record, of every write.
    pub fn chunks_of(id: &str) -> Vec<u8> {
        let mut key = vec![CONN_CHUNK_PREFIX];
        key.extend_from_slice(id.as_bytes());
        key.push(0);
        key
    }

    /// `[5, id, 0, write u32 BE, index u32 BE]`: one chunk.
    pub fn chunk_key(id: &str, write: u32, index: u32) -> Vec<u8> {
        let mut key = chunks_of(id);
        key.extend_from_slice(&write.to_be_bytes());
        key.extend_from_slice(&index.to_be_bytes());
        key
    }

    /// `[5, id, 0, write u32 BE]`: where the chunks of `write` start.
    pub fn write_bound(id: &str, write: u32) -> Vec<u8> {
        let mut key = chunks_of(id);
        key.extend_from_slice(&write.to_be_bytes());
        key
    }

    /// `[5, id, 1]`: the first key after every chunk of `id`.
    pub fn chunks_end(id: &str) -> Vec<u8> {
        let mut key = chunks_of(id);
        *key.last_mut().unwrap_or(&mut 0) = 1;
        key
    }
}

/// Scheduled actions (`schedule.after/at`).
pub mod schedule {
    use super::SCHEDULE_PREFIX;

    /// `[3, event id]`.
    pub fn event_key(id: &str) -> Vec<u8> {
        let mut key = vec![SCHEDULE_PREFIX];
        key.extend_from_slice(id.as_bytes());
        key
    }
}

/// User KV: the user's key bytes after `[4]`.
pub mod user {
    use super::USER_KV_PREFIX;

    /// The engine key of a user key: `[4, key…]`.
    pub fn user_key(key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + 1);
        out.push(USER_KV_PREFIX);
        out.extend_from_slice(key);
        out
    }

    /// `[5]`: the first engine key after the user space.
    pub fn user_space_end() -> Vec<u8> {
        vec![USER_KV_PREFIX + 1]
    }
}

/// The queue: its next id, message headers and bodies.
pub mod queue {
    use super::QUEUE_PREFIX;

    const NEXT_ID: u8 = 0;
    const HEADERS: u8 = 1;
    const BODIES: u8 = 2;
    const TRIES: u8 = 3;
    const CONSUMED: u8 = 4;

    fn key(space: u8, id: u64) -> Vec<u8> {
        let mut key = vec![QUEUE_PREFIX, space];
        key.extend_from_slice(&id.to_be_bytes());
        key
    }

    /// `[6, 0]`: the next message id.
    pub fn next_id_key() -> Vec<u8> {
        vec![QUEUE_PREFIX, NEXT_ID]
    }

    /// `[6, 1, id u64 BE]`: a message's header.
    pub fn header_key(id: u64) -> Vec<u8> {
        key(HEADERS, id)
    }

    /// `[6, 2, id u64 BE]`: a message's body.
    pub fn body_key(id: u64) -> Vec<u8> {
        key(BODIES, id)
    }

    /// The id in a header or body key.
    pub fn id_of(key: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(key.get(2..10)?.try_into().ok()?))
    }

    /// `[6, 1] ..< [6, 2]`: every header.
    pub fn headers_range() -> (Vec<u8>, Vec<u8>) {
        (vec![QUEUE_PREFIX, HEADERS], vec![QUEUE_PREFIX, HEADERS + 1])
    }

    /// `[6, 1] ..< [6, 4]`: every header, body and try count (not the
    /// next id, not the consumed list).
    pub fn messages_range() -> (Vec<u8>, Vec<u8>) {
        (vec![QUEUE_PREFIX, HEADERS], vec![QUEUE_PREFIX, TRIES + 1])
    }

    /// `[6, 3, id u64 BE]`: how many generations took a message and ended
    /// without consuming it (docs/queues-cron.md, "Consumed with the state").
    pub fn tries_key(id: u64) -> Vec<u8> {
        key(TRIES, id)
    }

    /// `[6, 3] ..< [6, 4]`: every try count.
    pub fn tries_range() -> (Vec<u8>, Vec<u8>) {
        (vec![QUEUE_PREFIX, TRIES], vec![QUEUE_PREFIX, TRIES + 1])
    }

    /// `[6, 4]`: the ids of messages consumed by a saved state whose
    /// records may still exist, written in the same put as the actor record.
    pub fn consumed_key() -> Vec<u8> {
        vec![QUEUE_PREFIX, CONSUMED]
    }
}

/// Cron jobs and their history.
pub mod cron {
    use super::CRON_PREFIX;

    const JOBS: u8 = 0;
    const HISTORY: u8 = 1;

    /// `[7, 0, name]`: a job.
    pub fn job_key(name: &str) -> Vec<u8> {
        let mut key = vec![CRON_PREFIX, JOBS];
        key.extend_from_slice(name.as_bytes());
        key
    }

    /// `[7, 0] ..< [7, 1]`: every job.
    pub fn jobs_range() -> (Vec<u8>, Vec<u8>) {
        (vec![CRON_PREFIX, JOBS], vec![CRON_PREFIX, JOBS + 1])
    }

    /// `[7, 1, name length u8, name]`: the start of a job's history. The
    /// length keeps one job's history apart from another whose name starts
    /// with the same bytes.
    pub fn history_prefix(name: &str) -> Vec<u8> {
        // Names are at most 128 bytes (checked before anything is stored).
        let mut key = vec![CRON_PREFIX, HISTORY, name.len() as u8];
        key.extend_from_slice(name.as_bytes());
        key
    }

    /// `[7, 1, name length u8, name, seq u64 BE]`: one fire of a job.
    pub fn history_key(name: &str, seq: u64) -> Vec<u8> {
        let mut key = history_prefix(name);
        key.extend_from_slice(&seq.to_be_bytes());
        key
    }

    /// After every history key of `name`.
    pub fn history_end(name: &str) -> Vec<u8> {
        let mut key = history_prefix(name);
        key.extend_from_slice(&[0xff; 9]);
        key
    }

    /// The `seq` in a history key of `name`.
    pub fn seq_of(name: &str, key: &[u8]) -> Option<u64> {
        let start = history_prefix(name).len();
        Some(u64::from_be_bytes(key.get(start..start + 8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of every key are a stored format: pinned here.
    #[test]
    fn key_bytes_are_pinned() {
        assert_eq!(ACTOR_RECORD_KEY, &[1]);
        assert_eq!(CONN_PREFIX, 2);
        assert_eq!(INSPECTOR_TOKEN, &[3]);
        assert_eq!(SCHEDULE_PREFIX, 3);
        assert_eq!(USER_KV_PREFIX, 4);
        assert_eq!(CONN_CHUNK_PREFIX, 5);
        assert_eq!(QUEUE_PREFIX, 6);
        assert_eq!(CRON_PREFIX, 7);
        assert_eq!(WORKFLOW_MARK_KEY, &[9]);

        assert_eq!(state::chunk_key(0, 2), [1, 1, 0, 0, 0, 2]);
        assert_eq!(state::chunk_key(1, 0x0102_0304), [1, 2, 1, 2, 3, 4]);

        assert_eq!(conn::record_key("ab"), [2, b'a', b'b']);
        assert_eq!(conn::chunks_of("ab"), [5, b'a', b'b', 0]);
        assert_eq!(conn::chunk_key("ab", 1, 2), [5, b'a', b'b', 0, 0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(conn::write_bound("ab", 1), [5, b'a', b'b', 0, 0, 0, 0, 1]);
        assert_eq!(conn::chunks_end("ab"), [5, b'a', b'b', 1]);

        assert_eq!(schedule::event_key("e1"), [3, b'e', b'1']);

        assert_eq!(user::user_key(b"k"), [4, b'k']);
        assert_eq!(user::user_space_end(), [5]);

        assert_eq!(queue::next_id_key(), [6, 0]);
        assert_eq!(queue::header_key(0x0102), [6, 1, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(queue::body_key(7), [6, 2, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(queue::id_of(&queue::body_key(300)), Some(300));
        assert_eq!(queue::headers_range(), (vec![6, 1], vec![6, 2]));
        assert_eq!(queue::messages_range(), (vec![6, 1], vec![6, 4]));
        assert_eq!(queue::tries_key(9), [6, 3, 0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(queue::tries_range(), (vec![6, 3], vec![6, 4]));
        assert_eq!(queue::consumed_key(), [6, 4]);

        assert_eq!(cron::job_key("j"), [7, 0, b'j']);
        assert_eq!(cron::jobs_range(), (vec![7, 0], vec![7, 1]));
        assert_eq!(cron::history_prefix("ab"), [7, 1, 2, b'a', b'b']);
        assert_eq!(cron::history_key("ab", 3), [7, 1, 2, b'a', b'b', 0, 0, 0, 0, 0, 0, 0, 3]);
        assert_eq!(
            cron::history_end("ab"),
            [7, 1, 2, b'a', b'b', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(cron::seq_of("ab", &cron::history_key("ab", 77)), Some(77));
    }
}
