//! The wall clock the actor runtime stamps and schedules with. A leaf of
//! its own so that the schedule, cron jobs and the queue can share it
//! without importing each other.

/// Wall-clock now, ms since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
