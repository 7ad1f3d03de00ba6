//! Scheduled actions: `ctx.schedule().after(ms, action, args)` and `.at`.
//! The actor's cron jobs live beside them ([`super::cron`]).
//!
//! An event is persisted under `[3, id]` before the call returns, so a
//! schedule survives sleep, restart and crashes. The actor's next wake-up is
//! the earliest of its events and its `setAlarm` alarm; the engine holds that
//! time as the actor's alarm, so a sleeping actor is started for it.
//!
//! Delivery is at least once: a due event leaves the in-memory schedule when
//! it fires (so it is not fired twice by this generation), and its record is
//! deleted only once its action has finished. A generation that dies while the
//! action runs leaves the record, and the next generation fires it again.
//!
//! The context holds the [`Schedule`] (this file); the operations over the
//! context (`ops.rs`) and the limit ([`limits`]) are files of their own, so
//! that neither the context nor the config imports code that uses the context.

pub mod limits;
mod ops;

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::watch;

// Their old paths (`schedule::now_ms`, `schedule::ScheduledFire`) stay valid.
pub use super::clock::now_ms;
pub use super::scheduled_fire::ScheduledFire;

pub use super::keys::SCHEDULE_PREFIX;
pub use limits::DEFAULT_MAX_SCHEDULES;
pub use ops::{cancel, schedule_at};
pub(crate) use ops::{forget, load};

/// One pending scheduled action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledEvent {
    pub id: String,
    pub action: String,
    /// CBOR-encoded argument array, passed to the action as is.
    pub args: Vec<u8>,
    /// When it is due, ms since the epoch.
    pub run_at: i64,
}

/// The pending events and the cron jobs of one generation.
pub struct Schedule {
    events: Mutex<BTreeMap<String, ScheduledEvent>>,
    /// The earliest `run_at` of the events and the jobs, watched by the
    /// actor task.
    next: watch::Sender<Option<i64>>,
    limit: limits::MaxSchedules,
    cron: super::cron::CronJobs,
    /// Moves on every change of the events or the jobs (the inspector
    /// watches it).
    changes: watch::Sender<u64>,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            events: Mutex::default(),
            next: watch::channel(None).0,
            limit: limits::MaxSchedules::default(),
            cron: super::cron::CronJobs::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl Schedule {
    /// At most `limit` pending events (`maxSchedules`).
    pub(crate) fn with_limit(limit: usize) -> Self {
        let schedule = Self::default();
        schedule.set_limit(limit);
        schedule
    }

    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.set(limit);
    }

    fn read<R>(&self, f: impl FnOnce(&BTreeMap<String, ScheduledEvent>) -> R) -> R {
        f(&self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Changes the events and publishes the new earliest time.
    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, ScheduledEvent>) -> R) -> R {
        let out = f(&mut self.events.lock().unwrap_or_else(|p| p.into_inner()));
        self.publish_next();
        out
    }

    /// Watches changes of the events and the jobs.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Publishes the earliest time of the events and the cron jobs (after
    /// any change of either).
    pub(crate) fn publish_next(&self) {
        self.changes.send_modify(|n| *n += 1);
        let events = self.read(|events| events.values().map(|e| e.run_at).min());
        let next = match (events, self.cron.earliest()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.next.send_if_modified(|current| {
            let changed = *current != next;
            *current = next;
            changed
        });
    }

    /// The cron jobs.
    pub fn cron(&self) -> &super::cron::CronJobs {
        &self.cron
    }

    /// `Ok` while one more event or job fits under `maxSchedules` (events
    /// and cron jobs count together, as in the reference).
    pub(crate) fn check_capacity(&self) -> anyhow::Result<()> {
        let limit = self.limit.get();
        if self.len() + self.cron.len() < limit {
            return Ok(());
        }
        Err(limits::max_schedules_exceeded(limit).into_anyhow())
    }

    /// The earliest time an event or a cron job is due.
    pub fn next(&self) -> Option<i64> {
        *self.next.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<i64>> {
        self.next.subscribe()
    }

    pub fn get(&self, id: &str) -> Option<ScheduledEvent> {
        self.read(|events| events.get(id).cloned())
    }

    /// Pending events, earliest first.
    pub fn list(&self) -> Vec<ScheduledEvent> {
        let mut out: Vec<_> = self.read(|events| events.values().cloned().collect());
        out.sort_by(|a, b| a.run_at.cmp(&b.run_at).then_with(|| a.id.cmp(&b.id)));
        out
    }

    /// Pending events (cron jobs not included).
    pub fn len(&self) -> usize {
        self.read(|events| events.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes and returns the events due at `now_ms`, earliest first.
    pub(crate) fn take_due(&self, now_ms: i64) -> Vec<ScheduledEvent> {
        let mut due: Vec<_> = self.with(|events| {
            let ids: Vec<String> = events.values().filter(|e| e.run_at <= now_ms).map(|e| e.id.clone()).collect();
            ids.iter().filter_map(|id| events.remove(id)).collect()
        });
        due.sort_by(|a, b| a.run_at.cmp(&b.run_at).then_with(|| a.id.cmp(&b.id)));
        due
    }

    pub(crate) fn restore(&self, restored: Vec<ScheduledEvent>) {
        self.with(|events| {
            for event in restored {
                events.insert(event.id.clone(), event);
            }
        });
    }
}
