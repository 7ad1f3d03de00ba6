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
//! Record value: `u8 version (1)`, `i64 LE run_at` (ms since the epoch),
//! `u16 LE` action name length, the name, then the CBOR args.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::keys::schedule::event_key;
use super::keys::INSPECTOR_TOKEN;
use super::ActorContext;
use crate::error::RivetError;
// Their old paths (`schedule::now_ms`, `schedule::ScheduledFire`) stay valid.
pub use super::clock::now_ms;
pub use super::scheduled_fire::ScheduledFire;

pub use super::keys::SCHEDULE_PREFIX;
/// The reference's default `maxSchedules`.
pub const DEFAULT_MAX_SCHEDULES: usize = 1000;
const RECORD_VERSION: u8 = 1;

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
    limit: std::sync::atomic::AtomicUsize,
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
            limit: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_SCHEDULES),
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
        self.limit.store(limit.max(1), std::sync::atomic::Ordering::Relaxed);
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
        let limit = self.limit.load(std::sync::atomic::Ordering::Relaxed);
        if self.len() + self.cron.len() < limit {
            return Ok(());
        }
        Err(RivetError::new(
            "schedule",
            "max_schedules_exceeded",
            format!("The actor already has {limit} scheduled events and cron jobs (maxSchedules)."),
        )
        .with_metadata(serde_json::json!({ "maxSchedules": limit }))
        .into_anyhow())
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

/// `schedule.at(run_at, action, args)`: persisted, then pending; returns the id.
pub async fn schedule_at(ctx: &ActorContext, run_at: i64, action: &str, args: Vec<u8>) -> anyhow::Result<String> {
    if action.is_empty() {
        return Err(
            RivetError::new("schedule", "invalid_name", "The scheduled action name must not be empty.").into_anyhow()
        );
    }
    ctx.check_writable()?;
    let schedule = ctx.schedule();
    schedule.check_capacity()?;
    let event = ScheduledEvent { id: super::conn::new_id(), action: action.to_string(), args, run_at };
    ctx.link()
        .kv_put(ctx.actor_id(), vec![(event_key(&event.id), encode_event(&event))], ctx.write_fence().clone())
        .await?;
    let id = event.id.clone();
    schedule.restore(vec![event]);
    ctx.sync_engine_alarm();
    Ok(id)
}

/// `schedule.cancel(id)`: whether a pending event was removed.
pub async fn cancel(ctx: &ActorContext, id: &str) -> anyhow::Result<bool> {
    ctx.check_writable()?;
    let removed = ctx.schedule().with(|events| events.remove(id)).is_some();
    if removed {
        ctx.sync_engine_alarm();
        forget(ctx, id).await?;
    }
    Ok(removed)
}

/// Deletes a fired or cancelled event's record.
pub(crate) async fn forget(ctx: &ActorContext, id: &str) -> anyhow::Result<()> {
    if ctx.writes_closed() {
        return Ok(());
    }
    ctx.link().kv_delete(ctx.actor_id(), vec![event_key(id)]).await
}

/// Loads the persisted events into the context (at start).
pub(crate) async fn load(ctx: &ActorContext) -> anyhow::Result<()> {
    let entries = ctx.link().kv_list_prefix(ctx.actor_id(), vec![SCHEDULE_PREFIX], false, None).await?;
    let events = entries
        .into_iter()
        // The exact key `[3]` is the inspector token, not an event.
        .filter(|(key, _)| key.as_slice() != INSPECTOR_TOKEN)
        .filter_map(|(key, value)| {
            let id = String::from_utf8(key.get(1..)?.to_vec()).ok()?;
            match decode_event(id, &value) {
                Some(event) => Some(event),
                None => {
                    tracing::warn!(key = ?key, "skipping an unreadable scheduled event");
                    None
                }
            }
        })
        .collect();
    ctx.schedule().restore(events);
    Ok(())
}

fn encode_event(event: &ScheduledEvent) -> Vec<u8> {
    let name = event.action.as_bytes();
    let name_len = u16::try_from(name.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(11 + name.len() + event.args.len());
    out.push(RECORD_VERSION);
    out.extend_from_slice(&event.run_at.to_le_bytes());
    out.extend_from_slice(&name_len.to_le_bytes());
    out.extend_from_slice(&name[..usize::from(name_len)]);
    out.extend_from_slice(&event.args);
    out
}

fn decode_event(id: String, bytes: &[u8]) -> Option<ScheduledEvent> {
    let (&version, rest) = bytes.split_first()?;
    if version != RECORD_VERSION || rest.len() < 10 {
        return None;
    }
    let run_at = i64::from_le_bytes(rest[..8].try_into().ok()?);
    let name_len = usize::from(u16::from_le_bytes(rest[8..10].try_into().ok()?));
    let rest = &rest[10..];
    let action = String::from_utf8(rest.get(..name_len)?.to_vec()).ok()?;
    let args = rest[name_len..].to_vec();
    Some(ScheduledEvent { id, action, args, run_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let event = ScheduledEvent {
            id: "abc".into(),
            action: "fire".into(),
            args: vec![0x81, 0x01],
            run_at: 1_700_000_000_123,
        };
        assert_eq!(decode_event("abc".into(), &encode_event(&event)), Some(event));
        assert_eq!(decode_event("x".into(), &[9, 1, 2]), None);
        assert_eq!(decode_event("x".into(), &[]), None);
    }

    #[tokio::test]
    async fn events_persist_fire_in_order_and_cancel() {
        let ctx = ActorContext::for_test("a", 1);
        let late = schedule_at(&ctx, 2_000, "late", vec![0x80]).await.unwrap();
        let early = schedule_at(&ctx, 1_000, "early", vec![0x80]).await.unwrap();
        assert_eq!(ctx.schedule().next(), Some(1_000));
        assert_eq!(ctx.schedule().list().iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["early", "late"]);

        // A new generation over the same storage sees both.
        let other = ActorContext::for_test_sharing(&ctx, 2);
        load(&other).await.unwrap();
        assert_eq!(other.schedule().len(), 2);

        assert!(cancel(&ctx, &late).await.unwrap());
        assert!(!cancel(&ctx, &late).await.unwrap());
        let due = ctx.schedule().take_due(1_500);
        assert_eq!(due.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), std::slice::from_ref(&early));
        assert_eq!(ctx.schedule().next(), None);

        // Fired but not yet finished: still stored, so a crash re-fires it.
        let third = ActorContext::for_test_sharing(&ctx, 3);
        load(&third).await.unwrap();
        assert_eq!(
            third.schedule().list().iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
            std::slice::from_ref(&early)
        );
        forget(&ctx, &early).await.unwrap();
        let fourth = ActorContext::for_test_sharing(&ctx, 4);
        load(&fourth).await.unwrap();
        assert!(fourth.schedule().is_empty());
    }

    #[tokio::test]
    async fn the_limit_is_a_structured_error() {
        let ctx = ActorContext::for_test("a", 1);
        ctx.schedule().set_limit(1);
        schedule_at(&ctx, 1, "a", vec![]).await.unwrap();
        let err = schedule_at(&ctx, 1, "b", vec![]).await.unwrap_err();
        let e = RivetError::extract(&err);
        assert_eq!((e.group.as_str(), e.code.as_str()), ("schedule", "max_schedules_exceeded"));
        let err = schedule_at(&ctx, 1, "", vec![]).await.unwrap_err();
        assert_eq!(RivetError::extract(&err).code, "invalid_name");
    }
}
