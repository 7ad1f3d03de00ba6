//! Save requests: `requestSave` asks the task to persist the state soon
//! (throttled to one save per `state_save_interval` unless immediate or
//! bounded by `maxWaitMs`); `requestSaveAndWait` also waits until a save
//! that began after the request has reached the engine.
//!
//! Requests carry a revision; the task records the revision each save
//! covered, so a waiter knows exactly when its data is durable.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::RivetError;

#[derive(Debug, Clone, Copy, Default)]
pub struct SaveOptions {
    pub immediate: bool,
    pub max_wait: Option<Duration>,
}

/// What the finished saves covered: the newest revision any save (or the
/// end of the generation) answered, the newest one a successful save made
/// durable, the newest failure, how many saves failed, and whether no save
/// will run again.
#[derive(Debug, Clone, Default)]
pub struct SaveOutcome {
    pub revision: u64,
    pub ok_through: u64,
    pub error: Option<RivetError>,
    pub failures: u64,
    pub closed: bool,
}

/// How many failed saves a waiter sits through before it gives up: the
/// task tries a failed save again 100 ms later, and the engine's store
/// fails some writes under load ("transaction failed") that pass on the
/// next try. An answer refused for one such failure would be a 503 for
/// work that was about to be durable.
pub const WAIT_FAILED_SAVES: u64 = 4;

/// Failures no later save can mend: the generation may no longer write,
/// or what it holds is over a storage limit. Neither a waiter nor the
/// final save's retries sit through them.
pub(crate) fn is_permanent(error: &RivetError) -> bool {
    matches!(
        (error.group.as_str(), error.code.as_str()),
        ("actor", "stopping" | "state_too_large") | ("connection", "record_too_large")
    )
}

pub struct SaveRequests {
    pending: Mutex<Pending>,
    wake: Notify,
    outcome: watch::Sender<SaveOutcome>,
}

#[derive(Default)]
struct Pending {
    requested: u64,
    deadline: Option<Instant>,
    last_save: Option<Instant>,
    /// The generation stopped: no task will save again.
    closed: bool,
}

impl Default for SaveRequests {
    fn default() -> Self {
        Self { pending: Mutex::default(), wake: Notify::new(), outcome: watch::channel(SaveOutcome::default()).0 }
    }
}

impl SaveRequests {
    /// Records a request and returns its revision. The deadline is now for
    /// an immediate request, else one interval after the last save, capped
    /// by `max_wait`.
    /// `None` once closed: nobody would ever save it.
    pub fn request(&self, options: SaveOptions, interval: Duration) -> Option<u64> {
        let now = Instant::now();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.closed {
            return None;
        }
        p.requested += 1;
        let mut deadline = if options.immediate {
            now
        } else {
            p.last_save.map(|t| (t + interval).max(now)).unwrap_or(now + interval)
        };
        if let Some(max_wait) = options.max_wait {
            deadline = deadline.min(now + max_wait);
        }
        // The task only needs waking when the deadline moves earlier: for an
        // unchanged one its timer is already set. (RivetKit asks for a save
        // after every state change, so most requests change nothing, and a
        // wake from the JS thread costs the task's worker a context switch.)
        let earlier = p.deadline.is_none_or(|d| deadline < d);
        if earlier {
            p.deadline = Some(deadline);
        }
        let revision = p.requested;
        drop(p);
        if earlier {
            self.wake.notify_one();
        }
        Some(revision)
    }

    /// When the task should save next, if anything is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).deadline
    }

    pub async fn changed(&self) {
        self.wake.notified().await
    }

    /// Called by the task as a save begins: takes the pending request and
    /// returns the revision this save covers.
    pub fn begin_save(&self) -> u64 {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.deadline = None;
        p.last_save = Some(Instant::now());
        p.requested
    }

    /// Called by the task when a save finished.
    pub fn finish_save(&self, revision: u64, result: &anyhow::Result<()>) {
        let error = result.as_ref().err().map(RivetError::extract);
        if error.is_some() {
            // Retry soon: the data is not durable yet.
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.deadline = Some(Instant::now() + Duration::from_millis(100));
            drop(p);
            self.wake.notify_one();
        }
        self.outcome.send_modify(|o| {
            o.revision = o.revision.max(revision);
            match error {
                None => o.ok_through = o.ok_through.max(revision),
                Some(error) => {
                    o.failures += 1;
                    o.error = Some(error);
                }
            }
        });
    }

    /// Waits until a save covering `revision` is acknowledged. Fails once
    /// no save will cover it: the generation ended first, a covering save
    /// failed for good ([`is_permanent`]), or [`WAIT_FAILED_SAVES`] saves
    /// failed in a row while it waited; the newest failure says why.
    pub async fn wait_for(&self, revision: u64) -> anyhow::Result<()> {
        let mut rx = self.outcome.subscribe();
        let failures_before = rx.borrow().failures;
        let outcome = rx
            .wait_for(|o| {
                o.ok_through >= revision
                    || o.closed
                    || (o.revision >= revision
                        && o.error
                            .as_ref()
                            .is_some_and(|e| is_permanent(e) || o.failures - failures_before >= WAIT_FAILED_SAVES))
            })
            .await
            .map(|o| o.clone())
            .map_err(|_| crate::error::catalog::actor_stopping(None).into_anyhow())?;
        if outcome.ok_through >= revision {
            return Ok(());
        }
        Err(outcome.error.unwrap_or_else(|| crate::error::catalog::actor_stopping(None)).into_anyhow())
    }

    /// Fails every waiter (the generation ends without a final save).
    pub fn abandon(&self, error: RivetError) {
        let requested = self.pending.lock().unwrap_or_else(|e| e.into_inner()).requested;
        self.outcome.send_modify(|o| {
            o.closed = true;
            if requested > o.ok_through {
                o.revision = o.revision.max(requested);
                o.error = Some(error);
            }
        });
    }

    /// No save will run again: later requests are refused, and waiters
    /// whose request no save covered get `error` (none is left waiting).
    pub fn close(&self, error: RivetError) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.closed = true;
        p.deadline = None;
        drop(p);
        self.abandon(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn throttles_to_the_interval_unless_immediate_or_bounded() {
        let s = SaveRequests::default();
        let interval = Duration::from_secs(1);
        let start = Instant::now();
        s.request(SaveOptions::default(), interval);
        assert_eq!(s.deadline(), Some(start + interval));
        s.request(SaveOptions { max_wait: Some(Duration::from_millis(100)), ..Default::default() }, interval);
        assert_eq!(s.deadline(), Some(start + Duration::from_millis(100)));
        s.request(SaveOptions { immediate: true, ..Default::default() }, interval);
        assert_eq!(s.deadline(), Some(start));
    }

    #[tokio::test(start_paused = true)]
    async fn only_an_earlier_deadline_wakes_the_task() {
        use futures::FutureExt;
        let s = SaveRequests::default();
        let interval = Duration::from_secs(1);
        s.request(SaveOptions::default(), interval);
        s.changed().await;
        // Same deadline: the task's timer already covers it.
        assert!(s.request(SaveOptions::default(), interval).is_some());
        assert!(s.changed().now_or_never().is_none());
        s.request(SaveOptions { immediate: true, ..Default::default() }, interval);
        assert!(s.changed().now_or_never().is_some());
        // A save began: the next request sets a deadline again.
        s.begin_save();
        s.request(SaveOptions::default(), interval);
        assert!(s.changed().now_or_never().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_resolve_when_their_revision_is_saved() {
        let s = std::sync::Arc::new(SaveRequests::default());
        let rev = s.request(SaveOptions { immediate: true, ..Default::default() }, Duration::from_secs(1)).unwrap();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.wait_for(rev).await })
        };
        let covered = s.begin_save();
        s.finish_save(covered, &Ok(()));
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_sits_through_passing_failures_but_not_lasting_or_permanent_ones() {
        use futures::FutureExt;
        let s = SaveRequests::default();
        let busy = || Err(anyhow::anyhow!("transaction failed"));
        let rev = s.request(SaveOptions { immediate: true, ..Default::default() }, Duration::from_secs(1)).unwrap();
        let mut waiter = Box::pin(s.wait_for(rev));
        assert!(waiter.as_mut().now_or_never().is_none());
        s.finish_save(s.begin_save(), &busy());
        assert!(waiter.as_mut().now_or_never().is_none(), "one failure: the retry may land");
        s.finish_save(s.begin_save(), &Ok(()));
        waiter.await.unwrap();

        let rev = s.request(SaveOptions { immediate: true, ..Default::default() }, Duration::from_secs(1)).unwrap();
        let mut waiter = Box::pin(s.wait_for(rev));
        for _ in 0..WAIT_FAILED_SAVES {
            assert!(waiter.as_mut().now_or_never().is_none());
            s.finish_save(s.begin_save(), &busy());
        }
        assert!(waiter.await.is_err(), "failed in a row: refused");

        let rev = s.request(SaveOptions { immediate: true, ..Default::default() }, Duration::from_secs(1)).unwrap();
        let waiter = s.wait_for(rev);
        s.finish_save(
            s.begin_save(),
            &Err(RivetError::new(crate::error_codes::ACTOR_STATE_TOO_LARGE, "big").into_anyhow()),
        );
        let err = waiter.await.unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "actor.state_too_large", "no retry mends it");
    }

    #[tokio::test(start_paused = true)]
    async fn closing_answers_every_waiter_and_refuses_later_requests() {
        let s = std::sync::Arc::new(SaveRequests::default());
        let interval = Duration::from_secs(1);
        let covered = s.request(SaveOptions { immediate: true, ..Default::default() }, interval).unwrap();
        let revision = s.begin_save();
        let uncovered = s.request(SaveOptions::default(), interval).unwrap();
        let waiters: Vec<_> = [covered, uncovered]
            .into_iter()
            .map(|rev| {
                let s = s.clone();
                tokio::spawn(async move { s.wait_for(rev).await })
            })
            .collect();
        s.finish_save(revision, &Ok(()));
        s.close(RivetError::new(crate::error_codes::ACTOR_STOPPING, "stopped"));
        let mut results = Vec::new();
        for w in waiters {
            results.push(w.await.unwrap());
        }
        assert!(results[0].is_ok(), "the saved request stays saved");
        assert_eq!(RivetError::extract(results[1].as_ref().unwrap_err()).qualified_code(), "actor.stopping");
        assert_eq!(s.request(SaveOptions::default(), interval), None);
        assert_eq!(s.deadline(), None);
    }
}
