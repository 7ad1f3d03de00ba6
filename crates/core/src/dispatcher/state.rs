//! What the dispatcher knows of each generation: one [`Generation`] per
//! (actor id, generation), and the routing pointer per actor id.
//!
//! A generation is in exactly one of these states; the combinations the
//! older four-map layout allowed by accident (a start and a started record
//! for one key, a parked stop beside a running generation, a failed start
//! beside a newer running one) cannot be written down.
//!
//! | from | event | to |
//! |------|-------|----|
//! | (none) | start begins | `Starting { parked: None }` |
//! | (none) | stop for a generation not seen yet, not older than the current one | `StopBeforeStart` |
//! | (none) | stop for a generation older than the current one | (none): completed at once |
//! | `StopBeforeStart` | start begins | `Starting { parked: Some }` |
//! | `StopBeforeStart` | a newer generation starts | (none): completed (it will never start) |
//! | `Starting { parked: None }` | stop | `Starting { parked: Some }` (I6) |
//! | `Starting { parked: Some }` | another stop | unchanged: the duplicate completes at once |
//! | `Starting` | start hooks succeed | `Started(Active)`, or `Started(Stopping)` with the parked stop applied |
//! | `Starting` | start hooks fail | `Failed`, or (none) when lost, fenced or stopped meanwhile (the parked stop completes) |
//! | `Started(Active)` | stop | `Started(Stopping { kind })` |
//! | `Started(Stopping)` | generation finished | (none); the routing pointer goes if it pointed here (I7) |
//! | `Failed` | stop, or a newer start | (none) |
//!
//! The routing pointer (`current`) only moves forward (I3) and only to a
//! started generation.

use std::collections::{BTreeMap, HashMap};

use tokio::sync::watch;

use super::failed_start::FailedStart;
use super::records::{InstanceKey, InstanceRecord, PendingStop};
use crate::actor::ActorContext;
use crate::RivetError;

/// One generation, as the dispatcher knows it.
pub(super) enum Generation {
    /// Its start is under way. A stop that arrives meanwhile waits in
    /// `parked` and applies as soon as the start ends.
    Starting { ctx: ActorContext, parked: Option<PendingStop> },
    /// A stop arrived before any start of this generation.
    StopBeforeStart(PendingStop),
    /// Started: serving, or stopping with its kind.
    Started(InstanceRecord),
    /// Its start hooks failed; the engine was told it started, and its
    /// traffic gets the start error until it is stopped.
    Failed(FailedStart),
}

/// Generations per state ([`State::census`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Census {
    pub starting: usize,
    pub stop_before_start: usize,
    pub active: usize,
    pub stopping: usize,
    pub failed: usize,
    /// Stopped here, the engine's stop not come yet.
    pub awaiting_engine: usize,
}

/// The outcome of a stop made here ([`super::Dispatcher::stop_here`]),
/// once known: what the engine's own stop for it is answered with.
pub(super) type HereOutcome = watch::Sender<Option<Result<(), RivetError>>>;

#[derive(Default)]
pub(super) struct State {
    generations: BTreeMap<InstanceKey, Generation>,
    current: HashMap<String, u32>,
    /// Generations stopped here whose stop from the engine has not come
    /// yet, with their context (to ask the engine again).
    here: HashMap<InstanceKey, (HereOutcome, ActorContext)>,
}

impl State {
    pub fn get(&self, key: &InstanceKey) -> Option<&Generation> {
        self.generations.get(key)
    }

    pub fn get_mut(&mut self, key: &InstanceKey) -> Option<&mut Generation> {
        self.generations.get_mut(key)
    }

    pub fn insert(&mut self, key: InstanceKey, generation: Generation) -> Option<Generation> {
        self.generations.insert(key, generation)
    }

    pub fn remove(&mut self, key: &InstanceKey) -> Option<Generation> {
        self.generations.remove(key)
    }

    /// No generation in any state.
    pub fn is_empty(&self) -> bool {
        self.generations.is_empty() && self.here.is_empty()
    }

    pub fn here(&self, key: &InstanceKey) -> Option<&HereOutcome> {
        self.here.get(key).map(|(outcome, _)| outcome)
    }

    pub fn here_contexts(&self) -> Vec<ActorContext> {
        self.here.values().map(|(_, ctx)| ctx.clone()).collect()
    }

    pub fn insert_here(&mut self, key: InstanceKey, outcome: HereOutcome, ctx: ActorContext) {
        self.here.insert(key, (outcome, ctx));
    }

    pub fn remove_here(&mut self, key: &InstanceKey) {
        self.here.remove(key);
    }

    /// How many generations are in each state, for the logs.
    pub fn census(&self) -> Census {
        let mut census = Census { awaiting_engine: self.here.len(), ..Census::default() };
        for generation in self.generations.values() {
            match generation {
                Generation::Starting { .. } => census.starting += 1,
                Generation::StopBeforeStart(_) => census.stop_before_start += 1,
                Generation::Started(InstanceRecord::Active(_)) => census.active += 1,
                Generation::Started(InstanceRecord::Stopping { .. }) => census.stopping += 1,
                Generation::Failed(_) => census.failed += 1,
            }
        }
        census
    }

    /// Every generation of `actor_id`, oldest first.
    pub fn of_actor<'a>(
        &'a self,
        actor_id: &str,
    ) -> impl DoubleEndedIterator<Item = (&'a InstanceKey, &'a Generation)> + 'a {
        self.generations.range(InstanceKey::new(actor_id, 0)..=InstanceKey::new(actor_id, u32::MAX))
    }

    /// The started generations.
    pub fn generations(&self) -> impl Iterator<Item = (&InstanceKey, &Generation)> {
        self.generations.iter()
    }

    pub fn started(&self) -> impl Iterator<Item = (&InstanceKey, &InstanceRecord)> {
        self.generations.iter().filter_map(|(k, g)| match g {
            Generation::Started(record) => Some((k, record)),
            _ => None,
        })
    }

    pub fn started_record(&self, key: &InstanceKey) -> Option<&InstanceRecord> {
        match self.generations.get(key) {
            Some(Generation::Started(record)) => Some(record),
            _ => None,
        }
    }

    /// A generation of `actor_id` newer than `key` that starts or runs.
    pub fn has_newer_live(&self, key: &InstanceKey) -> bool {
        self.of_actor(&key.actor_id).any(|(k, g)| {
            k.generation > key.generation && matches!(g, Generation::Starting { .. } | Generation::Started(_))
        })
    }

    /// Contexts of the older generations of `key`'s actor that start or run.
    pub fn older_live_contexts(&self, key: &InstanceKey) -> Vec<ActorContext> {
        self.of_actor(&key.actor_id)
            .filter(|(k, _)| k.generation < key.generation)
            .filter_map(|(_, g)| match g {
                Generation::Starting { ctx, .. } => Some(ctx.clone()),
                Generation::Started(record) => Some(record.context().clone()),
                _ => None,
            })
            .collect()
    }

    /// Takes the stops parked for generations of `key`'s actor older than
    /// `key` (they will never apply) and drops failed older starts.
    pub fn take_older_parked_stops(&mut self, key: &InstanceKey) -> Vec<PendingStop> {
        let older: Vec<InstanceKey> = self
            .of_actor(&key.actor_id)
            .filter(|(k, _)| k.generation < key.generation)
            .map(|(k, _)| k.clone())
            .collect();
        let mut stops = Vec::new();
        for k in older {
            match self.generations.get_mut(&k) {
                Some(Generation::StopBeforeStart(_)) => {
                    if let Some(Generation::StopBeforeStart(stop)) = self.generations.remove(&k) {
                        stops.push(stop);
                    }
                }
                Some(Generation::Starting { parked, .. }) => stops.extend(parked.take()),
                _ => {}
            }
        }
        stops
    }

    /// Drops the failed starts of `key`'s actor older than `key`.
    pub fn forget_older_failed(&mut self, key: &InstanceKey) {
        let older: Vec<InstanceKey> = self
            .of_actor(&key.actor_id)
            .filter(|(k, g)| k.generation < key.generation && matches!(g, Generation::Failed(_)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in older {
            if let Some(Generation::Failed(failed)) = self.generations.remove(&k) {
                failed.forget();
            }
        }
    }

    /// The newest failed start of `actor_id` that no started generation
    /// superseded.
    pub fn unsuperseded_failed(&self, actor_id: &str) -> Option<&FailedStart> {
        let current = self.current.get(actor_id).copied();
        self.of_actor(actor_id).rev().find_map(|(k, g)| match g {
            Generation::Failed(failed) if current.is_none_or(|c| c < k.generation) => Some(failed),
            _ => None,
        })
    }

    pub fn current(&self, actor_id: &str) -> Option<u32> {
        self.current.get(actor_id).copied()
    }

    /// Records a started generation and moves the routing pointer forward,
    /// never back (I3).
    pub fn register(&mut self, key: &InstanceKey, record: InstanceRecord) {
        self.generations.insert(key.clone(), Generation::Started(record));
        let current = self.current.entry(key.actor_id.clone()).or_insert(key.generation);
        *current = (*current).max(key.generation);
    }

    /// Removes a finished generation; the routing pointer goes with it
    /// only if it still points at it.
    pub fn unregister(&mut self, key: &InstanceKey) {
        self.generations.remove(key);
        if self.current.get(&key.actor_id) == Some(&key.generation) {
            self.current.remove(&key.actor_id);
        }
    }
}
