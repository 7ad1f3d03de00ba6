//! The lifecycle of one generation, as its task runs it.
//!
//! The task is the only writer: it publishes its [`Phase`] in the
//! generation's context (a `watch`), and everyone else (the dispatcher's
//! admission, the context's own methods, the drain) reads it there instead
//! of keeping a copy. What the dispatcher keeps per generation (starting,
//! parked stops, started, failed) is in `dispatcher/state.rs`; the engine's
//! lost signal and the sleep/destroy *requests* are kept beside the phase,
//! because they can arrive in any phase.
//!
//! | from | event | to |
//! |------|-------|----|
//! | `Created` | start command | `Starting` (hooks run; `ctx.sleep()` is allowed) |
//! | `Starting` | hooks succeeded | `Started` |
//! | `Starting` | hooks failed, or lost | `Stopped` |
//! | `Started` | stop command (sleep or destroy) | `Stopping(kind)` |
//! | `Stopping(kind)` | hook, in-flight work and saves done, or the grace period elapsed | `Finalizing` |
//! | `Finalizing` | final save done, write fence closed | `Stopped` |
//! | any | lost | `Stopped` (no hooks, no writes) |
//!
//! Admission of client traffic is decided by [`admit`] from the phase and
//! three signals (lost, destroy requested, stop hook resolved); the
//! dispatcher asks it when routing, the task again when the command
//! arrives (the phase may have moved in between). A sleep's grace serves
//! traffic only until `onSleep` has resolved: RivetKit clears the
//! generation's JS state in it (docs/versions.md), so later work goes to
//! the next generation (`actor.restarting`, which the client retries).

use crate::error::{catalog, RivetError};

use super::commands::ShutdownKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The task exists; its start command has not arrived.
    Created,
    /// The start hooks run.
    Starting,
    /// Serving traffic.
    Started,
    /// `onSleep`/`onDestroy` and in-flight work, within the grace period;
    /// a sleep still serves traffic.
    Stopping(ShutdownKind),
    /// The final save runs.
    Finalizing,
    /// Finished: nothing runs and nothing is written any more.
    Stopped,
}

impl Phase {
    /// Between the start hooks and the final save: the generation may ask
    /// the engine to sleep or destroy it, and wait for saves.
    pub fn is_running(self) -> bool {
        matches!(self, Phase::Starting | Phase::Started | Phase::Stopping(_))
    }

    /// Whether `self → to` is a transition of the table above.
    pub fn can_become(self, to: Phase) -> bool {
        use Phase::*;
        matches!(
            (self, to),
            (Created, Starting)
                | (Starting, Started)
                | (Started, Stopping(_))
                | (Stopping(_), Finalizing)
                | (Finalizing, Stopped)
                | (Created | Starting | Started | Stopping(_), Stopped)
        )
    }
}

/// Whether client traffic may run in a generation in `phase`;
/// `stop_hook_resolved`: its `onSleep`/`onDestroy` has settled.
pub fn admit(phase: Phase, lost: bool, destroy_requested: bool, stop_hook_resolved: bool) -> Result<(), RivetError> {
    if lost {
        return Err(catalog::actor_stopping(None));
    }
    if destroy_requested {
        return Err(catalog::actor_destroying());
    }
    match phase {
        Phase::Stopping(ShutdownKind::Sleep) if stop_hook_resolved => {
            Err(catalog::actor_restarting("the generation finished its onSleep"))
        }
        Phase::Started | Phase::Stopping(ShutdownKind::Sleep) => Ok(()),
        Phase::Stopping(ShutdownKind::Destroy) => Err(catalog::actor_destroying()),
        Phase::Created | Phase::Starting => Err(catalog::actor_starting()),
        Phase::Finalizing | Phase::Stopped => Err(catalog::actor_stopping(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_allows_only_its_transitions() {
        use Phase::*;
        let sleep = Stopping(ShutdownKind::Sleep);
        assert!(Created.can_become(Starting));
        assert!(Starting.can_become(Started));
        assert!(Started.can_become(sleep));
        assert!(sleep.can_become(Finalizing));
        assert!(Finalizing.can_become(Stopped));
        assert!(Started.can_become(Stopped), "lost");
        assert!(!Started.can_become(Starting));
        assert!(!Stopped.can_become(Started));
        assert!(!Created.can_become(Started));
        assert!(!Finalizing.can_become(sleep));
    }

    #[test]
    fn admission_follows_the_phase_and_the_signals() {
        let code = |r: Result<(), RivetError>| r.err().map(|e| e.qualified_code());
        let sleep = Phase::Stopping(ShutdownKind::Sleep);
        assert_eq!(code(admit(Phase::Started, false, false, false)), None);
        assert_eq!(code(admit(sleep, false, false, false)), None);
        assert_eq!(code(admit(sleep, false, false, true)).as_deref(), Some("actor.restarting"));
        assert_eq!(
            code(admit(Phase::Stopping(ShutdownKind::Destroy), false, false, false)).as_deref(),
            Some("actor.destroying")
        );
        assert_eq!(code(admit(Phase::Started, false, true, false)).as_deref(), Some("actor.destroying"));
        assert_eq!(code(admit(Phase::Started, true, false, false)).as_deref(), Some("actor.stopping"));
        assert_eq!(code(admit(Phase::Starting, false, false, false)).as_deref(), Some("actor.starting"));
        assert_eq!(code(admit(Phase::Stopped, false, false, false)).as_deref(), Some("actor.stopping"));
    }
}
