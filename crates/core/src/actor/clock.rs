//! The wall clock the actor runtime stamps and schedules with. A leaf of
//! its own so that the schedule, cron jobs, the queue and the task's timers
//! can share it without importing each other.

use std::time::Duration;

use tokio::time::Instant;

/// Wall-clock now, ms since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `Instant` of an epoch-ms timestamp (now if it is in the past).
pub(crate) fn instant_of(timestamp_ms: Option<i64>) -> Option<Instant> {
    let ts = timestamp_ms?;
    let delay = u64::try_from(ts.saturating_sub(now_ms())).unwrap_or(0);
    Some(Instant::now() + Duration::from_millis(delay))
}
