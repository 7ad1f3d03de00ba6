//! A generation whose start hooks failed (see [`super::start`]). A leaf of
//! its own: the dispatcher's state holds it, `start` creates it, and
//! neither imports the other for it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::error::RivetError;

/// A generation whose start hooks failed, accepted so that its traffic
/// gets the start error (docs of [`super::start`]).
pub(super) struct FailedStart {
    error: RivetError,
    /// Cancelled once the generation is stopped or superseded.
    done: CancellationToken,
    /// Signalled when the error is handed to traffic.
    served: Arc<tokio::sync::Notify>,
}

impl FailedStart {
    pub(super) fn new(error: RivetError, done: CancellationToken, served: Arc<tokio::sync::Notify>) -> Self {
        Self { error, done, served }
    }

    /// Hands the start error to traffic (signals `served`).
    pub(super) fn serve(&self) -> RivetError {
        self.served.notify_one();
        self.error.clone()
    }

    /// It is over (stopped, or a newer generation starts): no crash report.
    pub(super) fn forget(&self) {
        self.done.cancel();
    }
}
