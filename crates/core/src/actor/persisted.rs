//! What the actor record persists, a part of the context: the state and
//! the alarm, with the saves that write them and the locks that order the
//! writes (docs/storage.md).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::save::SaveRequests;

/// A 128-bit digest of an actor record: what the engine holds, so that a
/// save of an unchanged record writes nothing ([`super::storage`] computes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(pub(crate) [u64; 2]);

pub struct Persisted {
    /// The state, and the queue's handling mark when it was read: the
    /// messages handled by then are reflected in it (docs/queues-cron.md).
    state: Mutex<(Vec<u8>, u64)>,
    /// Which chunk slot holds a large state (storage detail); 255 = none.
    state_slot: AtomicU8,
    /// Serializes record writes (throttled saves, `saveState`, final save),
    /// and holds the fingerprint of the record the engine has (see
    /// [`super::storage::save_record`]); `None`: not known.
    write_lock: tokio::sync::Mutex<Option<Fingerprint>>,
    saves: SaveRequests,
    save_interval: Duration,
    /// Serializes workflow flushes, state transactions and state saves;
    /// holds the workflow revision last written to KV (`None` until read
    /// this generation).
    workflow_mark: Arc<tokio::sync::Mutex<Option<u64>>>,
    /// The alarm (ms since the epoch), persisted with the actor record.
    alarm: watch::Sender<Option<i64>>,
    /// The wake-up time last pushed to the engine (`None`: nothing pushed yet).
    pushed_alarm: Mutex<Option<Option<i64>>>,
}

impl Persisted {
    pub fn new(save_interval: Duration) -> Self {
        Self {
            state: Mutex::new((Vec::new(), 0)),
            state_slot: AtomicU8::new(u8::MAX),
            write_lock: tokio::sync::Mutex::new(None),
            saves: SaveRequests::default(),
            save_interval,
            workflow_mark: Arc::new(tokio::sync::Mutex::new(None)),
            alarm: watch::channel(None).0,
            pushed_alarm: Mutex::new(None),
        }
    }

    pub fn state(&self) -> Vec<u8> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.clone()
    }
    /// The state and the queue's handling mark it covers.
    pub(crate) fn state_and_mark(&self) -> (Vec<u8>, u64) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// Replaces the state, read when the queue's handling mark was `mark`.
    pub(crate) fn replace_state(&self, state: Vec<u8>, mark: u64) {
        let mut held = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *held = (state, held.1.max(mark));
    }
    /// The host read no state at `mark` (an actor without state): nothing
    /// of it is to keep with the messages handled by then.
    pub(crate) fn raise_mark(&self, mark: u64) {
        let mut held = self.state.lock().unwrap_or_else(|p| p.into_inner());
        held.1 = held.1.max(mark);
    }

    pub(crate) fn state_slot(&self) -> Option<u8> {
        Some(self.state_slot.load(Ordering::Acquire)).filter(|s| *s != u8::MAX)
    }
    pub(crate) fn set_state_slot(&self, slot: u8) {
        self.state_slot.store(slot, Ordering::Release);
    }

    pub(crate) async fn lock_writes(&self) -> tokio::sync::MutexGuard<'_, Option<Fingerprint>> {
        self.write_lock.lock().await
    }

    pub(crate) fn saves(&self) -> &SaveRequests {
        &self.saves
    }
    pub(crate) fn save_interval(&self) -> Duration {
        self.save_interval
    }

    pub(crate) fn workflow_mark(&self) -> &Arc<tokio::sync::Mutex<Option<u64>>> {
        &self.workflow_mark
    }

    /// The alarm that will wake this actor, if any (ms since the epoch).
    pub fn alarm(&self) -> Option<i64> {
        *self.alarm.borrow()
    }
    /// Sets the alarm without telling anyone but its watchers.
    pub(crate) fn replace_alarm(&self, timestamp_ms: Option<i64>) {
        self.alarm.send_replace(timestamp_ms);
    }
    pub(crate) fn subscribe_alarm(&self) -> watch::Receiver<Option<i64>> {
        self.alarm.subscribe()
    }

    /// Records `next` as the wake-up the engine has; false if it already
    /// had it, or if nothing was pushed yet and there is nothing to wake for.
    pub(crate) fn note_pushed_alarm(&self, next: Option<i64>) -> bool {
        let mut pushed = self.pushed_alarm.lock().unwrap_or_else(|p| p.into_inner());
        if *pushed == Some(next) || (pushed.is_none() && next.is_none()) {
            return false;
        }
        *pushed = Some(next);
        true
    }
}
