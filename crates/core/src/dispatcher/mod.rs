//! The dispatcher: generation bookkeeping for every actor on this host.
//!
//! The engine may run one actor id many times; each run is a generation.
//! Starts, stops and client traffic for different generations can arrive in
//! any order (start callbacks run in independent tasks, stops can beat their
//! start). The dispatcher keeps one state per (actor id, generation)
//! (starting with its parked stop, stop before start, started, failed:
//! [`state`] has the transition table) and the routing pointer per actor
//! id, and applies the rules of `docs/generations.md` so that no command
//! meant for one generation ever affects another. The generation's own
//! phase is not kept here: its task publishes it in the context
//! ([`crate::actor::lifecycle`]).
//!
//! The state lives behind one `std::sync::Mutex` that is never held across an
//! `.await`; every background job is spawned on a `TaskTracker` so shutdown
//! can wait for it.

mod admission;
mod failed_start;
mod here;
mod records;
mod start;
mod state;
mod stop;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

pub use records::{InstanceKey, InstanceRecord, PendingStop, StopHandle, StopReason};
pub use state::Census;

use crate::actor::{ActorContext, ActorFactory};

/// How long a new generation waits for older local generations to finish
/// before it fails closed (10 s).
pub const OLDER_GENERATION_STOP_TIMEOUT: Duration = Duration::from_secs(10);

use state::State;

/// A test hook that can hold `start_actor` right after it waited for older
/// generations (to make races deterministic).
pub type StartGate = Arc<dyn Fn(&InstanceKey) -> BoxFuture<'static, ()> + Send + Sync>;

pub struct Dispatcher {
    factories: HashMap<String, ActorFactory>,
    state: Mutex<State>,
    tracker: TaskTracker,
    start_gate: Option<StartGate>,
    /// Counts the stops answered, for the drain to wait on.
    stops_answered: tokio::sync::watch::Sender<u64>,
}

impl Dispatcher {
    pub fn new(factories: HashMap<String, ActorFactory>) -> Arc<Self> {
        Self::build(factories, None)
    }

    /// Like [`Dispatcher::new`] with a start gate, for deterministic race tests.
    pub fn with_start_gate(factories: HashMap<String, ActorFactory>, gate: StartGate) -> Arc<Self> {
        Self::build(factories, Some(gate))
    }

    fn build(factories: HashMap<String, ActorFactory>, start_gate: Option<StartGate>) -> Arc<Self> {
        Arc::new(Self {
            factories,
            state: Mutex::default(),
            tracker: TaskTracker::new(),
            start_gate,
            stops_answered: tokio::sync::watch::Sender::new(0),
        })
    }

    pub fn factory(&self, name: &str) -> Option<&ActorFactory> {
        self.factories.get(name)
    }

    pub fn factories(&self) -> &HashMap<String, ActorFactory> {
        &self.factories
    }

    /// Background jobs (stops, waiters). Closed and awaited at shutdown.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Number of generations that are started and not yet removed.
    pub fn instance_count(&self) -> usize {
        self.lock().started().count()
    }

    /// Contexts of the generations that are started and not stopping.
    pub fn active_contexts(&self) -> Vec<ActorContext> {
        self.lock()
            .started()
            .filter_map(|(_, r)| match r {
                InstanceRecord::Active(handle) => Some(handle.context().clone()),
                InstanceRecord::Stopping { .. } => None,
            })
            .collect()
    }

    /// Active generations that may be put to sleep when the host shuts
    /// down (docs/drain.md, step 2): not `noSleep`, no `run` handler
    /// running, no destroy asked for. The others are left to the engine,
    /// which moves them to another host.
    pub fn sleepable_contexts(&self) -> Vec<ActorContext> {
        self.lock()
            .started()
            .filter_map(|(_, r)| match r {
                InstanceRecord::Active(handle) => Some(handle),
                InstanceRecord::Stopping { .. } => None,
            })
            .filter(|handle| {
                let ctx = handle.context();
                !handle.config().no_sleep && !ctx.run_handler_active() && !ctx.destroy_requested()
            })
            .map(|handle| handle.context().clone())
            .collect()
    }

    /// The generations not stopping or stopped yet: starting, or started
    /// and active (the drain's "still to stop here", docs/drain.md).
    pub fn unstopped_keys(&self) -> Vec<InstanceKey> {
        self.lock()
            .generations()
            .filter(|(_, g)| {
                matches!(g, state::Generation::Starting { .. } | state::Generation::Started(InstanceRecord::Active(_)))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Every started generation, stopping ones included, whose writes are
    /// still open: what the drain saves before it gives up.
    pub fn live_contexts(&self) -> Vec<ActorContext> {
        self.lock().started().map(|(_, r)| r.context().clone()).filter(|ctx| !ctx.writes_closed()).collect()
    }

    /// The newest registered generation of an actor.
    pub fn current_generation(&self, actor_id: &str) -> Option<u32> {
        self.lock().current(actor_id)
    }

    /// Record state for tests and diagnostics.
    pub fn record(&self, key: &InstanceKey) -> Option<InstanceRecord> {
        self.lock().started_record(key).cloned()
    }

    pub fn is_active(&self, key: &InstanceKey) -> bool {
        matches!(self.lock().started_record(key), Some(InstanceRecord::Active(_)))
    }

    pub fn is_starting(&self, key: &InstanceKey) -> bool {
        matches!(self.lock().get(key), Some(state::Generation::Starting { .. }))
    }

    /// Holds no generation at all: none starting, started, failed, with a
    /// parked stop, or stopped here and waiting for the engine's stop.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// How many generations are in each state (for the logs).
    pub fn census(&self) -> Census {
        self.lock().census()
    }

    pub fn has_pending_stop(&self, key: &InstanceKey) -> bool {
        matches!(
            self.lock().get(key),
            Some(state::Generation::StopBeforeStart(_) | state::Generation::Starting { parked: Some(_), .. })
        )
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-update of
        // plain maps; the maps themselves stay consistent per operation.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn_tracked(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(fut);
    }
}
