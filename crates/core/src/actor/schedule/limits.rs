//! The schedule's limit and its structured error: a leaf the config takes
//! its default from without importing the schedule.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::RivetError;

/// The reference's default `maxSchedules`.
pub const DEFAULT_MAX_SCHEDULES: usize = 1000;

/// A generation's `maxSchedules` (at least 1).
pub(super) struct MaxSchedules(AtomicUsize);

impl Default for MaxSchedules {
    fn default() -> Self {
        Self(AtomicUsize::new(DEFAULT_MAX_SCHEDULES))
    }
}

impl MaxSchedules {
    pub(super) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self, limit: usize) {
        self.0.store(limit.max(1), Ordering::Relaxed);
    }
}

/// One more event or cron job would pass `maxSchedules` (`limit`).
pub(super) fn max_schedules_exceeded(limit: usize) -> RivetError {
    RivetError::new(
        crate::error_codes::SCHEDULE_MAX_SCHEDULES_EXCEEDED,
        format!("The actor already has {limit} scheduled events and cron jobs (maxSchedules)."),
    )
    .with_metadata(serde_json::json!({ "maxSchedules": limit }))
}
