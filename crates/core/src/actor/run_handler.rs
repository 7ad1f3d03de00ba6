//! The `run` handler's part of the context: whether it runs, the request
//! to start it again, and the time it asked to be woken by.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

#[derive(Default)]
pub struct RunHandler {
    active: AtomicBool,
    restart: Notify,
    /// When the handler asked to be woken (`setRunWakeAt`), ms since the
    /// epoch; this generation's only, never persisted.
    wake_at: Mutex<Option<i64>>,
}

impl RunHandler {
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
    pub(crate) fn set_active(&self, active: bool) {
        self.active.store(active, Ordering::Release);
    }
    /// Starts the handler again if it is not running.
    pub fn restart(&self) {
        self.restart.notify_one();
    }
    pub(crate) async fn restart_requested(&self) {
        self.restart.notified().await
    }
    pub fn wake_at(&self) -> Option<i64> {
        *self.wake_at.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(crate) fn set_wake_at(&self, timestamp_ms: Option<i64>) {
        *self.wake_at.lock().unwrap_or_else(|p| p.into_inner()) = timestamp_ms;
    }
}
