//! The signals of one generation, a part of its context: the phase its
//! task publishes, the engine's lost signal, the write fence, the abort
//! signal, the sleep and destroy requests, and the holds that keep the
//! generation unfinished. Admission ([`Signals::admit`]) reads them here.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::lifecycle::{self, Phase};
use crate::error::RivetError;

pub struct Signals {
    lost: CancellationToken,
    /// Fires when the generation can no longer write: when it is lost, or
    /// once its task finished stopping. Every write of the runtime is
    /// fenced by it.
    writes_closed: CancellationToken,
    abort: CancellationToken,
    /// The task's phase (it is the only writer; see [`super::lifecycle`]).
    phase: watch::Sender<Phase>,
    destroy_requested: AtomicBool,
    sleep_requested: AtomicBool,
    /// `onSleep`/`onDestroy` has settled: no more traffic for this
    /// generation (docs/versions.md).
    stop_hook_resolved: AtomicBool,
    holds: watch::Sender<usize>,
}

/// Keeps a generation "unfinished" while alive. The actor task owns one for
/// its whole life; storage cleanup of a lost generation may take another.
pub struct GenerationHold(watch::Sender<usize>);

impl Drop for GenerationHold {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Signals {
    /// `lost` is the envoy's lost signal for this generation.
    pub fn new(lost: CancellationToken) -> Self {
        Self {
            writes_closed: lost.child_token(),
            lost,
            abort: CancellationToken::new(),
            phase: watch::channel(Phase::Created).0,
            destroy_requested: AtomicBool::new(false),
            sleep_requested: AtomicBool::new(false),
            stop_hook_resolved: AtomicBool::new(false),
            holds: watch::channel(0).0,
        }
    }

    // --- lost, abort, write fence -----------------------------------------

    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
    pub fn mark_lost(&self) {
        self.lost.cancel();
    }
    pub fn lost_token(&self) -> &CancellationToken {
        &self.lost
    }
    pub fn abort_token(&self) -> &CancellationToken {
        &self.abort
    }
    pub fn aborted(&self) -> bool {
        self.abort.is_cancelled()
    }
    pub fn write_fence(&self) -> &CancellationToken {
        &self.writes_closed
    }
    pub fn writes_closed(&self) -> bool {
        self.writes_closed.is_cancelled()
    }
    pub(crate) fn close_writes(&self) {
        self.writes_closed.cancel();
    }

    // --- phase and requests -----------------------------------------------

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }
    pub fn subscribe_phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }
    /// Between the start hooks and the final save.
    pub fn started(&self) -> bool {
        self.phase().is_running()
    }
    /// Moves the phase (the task alone calls it). A move the table does
    /// not allow is a bug: it is logged and not applied.
    pub(crate) fn enter(&self, to: Phase) {
        let from = self.phase();
        if !from.can_become(to) {
            tracing::error!(?from, ?to, "bug: lifecycle transition not in the table; ignored");
            return;
        }
        if to == Phase::Starting {
            self.sleep_requested.store(false, Ordering::Release);
        }
        self.phase.send_replace(to);
    }

    /// Whether client traffic may run now: the admission table of
    /// [`lifecycle::admit`] applied to this generation.
    pub fn admit(&self) -> Result<(), RivetError> {
        lifecycle::admit(self.phase(), self.is_lost(), self.destroy_requested(), self.stop_hook_resolved())
    }

    /// Whether the generation's `onSleep`/`onDestroy` has settled.
    pub fn stop_hook_resolved(&self) -> bool {
        self.stop_hook_resolved.load(Ordering::Acquire)
    }
    /// The task saw its stop hook settle (or abandoned it).
    pub(crate) fn mark_stop_hook_resolved(&self) {
        self.stop_hook_resolved.store(true, Ordering::Release);
    }

    pub fn destroy_requested(&self) -> bool {
        self.destroy_requested.load(Ordering::Acquire)
    }
    pub fn mark_destroy_requested(&self) {
        self.destroy_requested.store(true, Ordering::Release);
    }
    /// Marks the destroy requested; true if it already was.
    pub(crate) fn request_destroy(&self) -> bool {
        self.destroy_requested.swap(true, Ordering::AcqRel)
    }
    pub fn sleep_requested(&self) -> bool {
        self.sleep_requested.load(Ordering::Acquire)
    }
    /// Marks the sleep requested; true if it already was.
    pub(crate) fn request_sleep(&self) -> bool {
        self.sleep_requested.swap(true, Ordering::AcqRel)
    }

    // --- generation holds -------------------------------------------------

    pub fn hold(&self) -> GenerationHold {
        self.holds.send_modify(|n| *n += 1);
        GenerationHold(self.holds.clone())
    }
    pub fn is_finished(&self) -> bool {
        *self.holds.borrow() == 0
    }
    pub async fn wait_finished(&self) {
        let mut rx = self.holds.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}
