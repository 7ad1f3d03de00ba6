//! What keeps an actor awake: keep-awake regions (`beginKeepAwake` /
//! `endKeepAwake`, `keepAwake(promise)`), tracked work (`waitUntil`,
//! `registerTask`). In-flight requests and actions are counted by the task
//! itself. The task watches the count to arm or disarm its sleep timer and
//! to know when a shutdown may finish.

use std::collections::HashSet;
use std::sync::Mutex;

use tokio::sync::watch;

/// Keep-awake regions of one generation.
pub struct Activity {
    /// Number of open regions; the task subscribes to changes.
    count: watch::Sender<usize>,
    open: Mutex<Regions>,
}

#[derive(Default)]
struct Regions {
    next_id: u32,
    ids: HashSet<u32>,
}

/// A region that ends when dropped (used for promises tracked from Rust).
pub struct KeepAwakeGuard<'a> {
    activity: &'a Activity,
    id: u32,
}

impl Drop for KeepAwakeGuard<'_> {
    fn drop(&mut self) {
        self.activity.end(self.id);
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self { count: watch::channel(0).0, open: Mutex::default() }
    }
}

impl Activity {
    /// Opens a region; returns its id for [`Activity::end`].
    pub fn begin(&self) -> u32 {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.next_id = open.next_id.wrapping_add(1).max(1);
        while open.ids.contains(&open.next_id) {
            open.next_id = open.next_id.wrapping_add(1).max(1);
        }
        let id = open.next_id;
        open.ids.insert(id);
        self.count.send_replace(open.ids.len());
        id
    }

    /// Closes a region. Unknown or already closed ids are ignored, so a
    /// double `endKeepAwake` cannot wake the count below zero.
    pub fn end(&self, id: u32) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.ids.remove(&id) {
            self.count.send_replace(open.ids.len());
        }
    }

    pub fn guard(&self) -> KeepAwakeGuard<'_> {
        KeepAwakeGuard { activity: self, id: self.begin() }
    }

    pub fn open_regions(&self) -> usize {
        *self.count.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::Activity;

    #[test]
    fn regions_count_and_ignore_double_end() {
        let a = Activity::default();
        let one = a.begin();
        let two = a.begin();
        assert_ne!(one, two);
        assert_eq!(a.open_regions(), 2);
        a.end(one);
        a.end(one);
        assert_eq!(a.open_regions(), 1);
        {
            let _g = a.guard();
            assert_eq!(a.open_regions(), 2);
        }
        assert_eq!(a.open_regions(), 1);
    }
}
