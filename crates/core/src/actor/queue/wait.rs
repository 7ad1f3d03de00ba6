//! Waiting for messages: how a blocked receive ends, and the count of
//! receives blocked right now, which the actor task reads for its sleep
//! rule (a `run` handler blocked on the queue does not keep the actor
//! awake; see docs/queues-cron.md).

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::catalog;

/// Why a wait for a message ended.
pub(super) enum Woken {
    /// A message arrived (or may have): look again.
    Arrived,
    TimedOut,
    /// The actor began to stop, or the caller's signal fired.
    Aborted,
}

/// Counts a blocked receive while alive.
pub(super) struct WaitGuard<'a>(&'a watch::Sender<usize>);

impl<'a> WaitGuard<'a> {
    pub(super) fn new(waits: &'a watch::Sender<usize>) -> Self {
        waits.send_modify(|n| *n += 1);
        Self(waits)
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Waits for `arrived` (already enabled by the caller, so an arrival
/// between its look and this wait is not missed), bounded by `remaining`,
/// the actor's abort signal and the caller's.
pub(super) async fn wait(
    arrived: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    remaining: Option<Duration>,
    abort: &CancellationToken,
    signal: Option<&CancellationToken>,
) -> Woken {
    if abort.is_cancelled() || signal.is_some_and(CancellationToken::is_cancelled) {
        return Woken::Aborted;
    }
    let signalled = async {
        match signal {
            Some(signal) => signal.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let timer = async {
        match remaining {
            Some(remaining) => tokio::time::sleep(remaining).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = arrived => Woken::Arrived,
        _ = abort.cancelled() => Woken::Aborted,
        _ = signalled => Woken::Aborted,
        _ = timer => Woken::TimedOut,
    }
}

/// The error of an aborted wait: `actor.aborted`, which RivetKit's
/// `queue.iter()` treats as the end of the loop.
pub(super) fn aborted() -> anyhow::Error {
    catalog::actor_aborted().into_anyhow()
}

/// Time left before `deadline` (`None`: no deadline).
pub(super) fn remaining(deadline: Option<tokio::time::Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
}
