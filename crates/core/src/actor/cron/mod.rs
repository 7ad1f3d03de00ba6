//! Cron jobs (`schedule.cronSet/cronEvery/cronGet/cronList/cronDelete/
//! cronHistory`, RivetKit's `c.cron`): named, repeating scheduled actions
//! with a history of their fires (docs/queues-cron.md).
//!
//! A job is persisted ([`store`]) before the call resolves and lives beside
//! the one-shot scheduled actions: it counts against `maxSchedules`, and the
//! actor's next wake-up (the engine alarm that starts a sleeping actor) is
//! the earliest of its alarm, its events and its jobs' next runs. When a job
//! is due, the actor task advances it to its next run *before* running its
//! action (a fire is at most once; fires missed while the actor could not
//! run collapse into one), records the fire in the job's history as
//! `running` (or `skipped` when the job's previous run is still going),
//! runs the action as tracked work bounded by the action timeout, and
//! records `ok` or `error`. A fire left `running` by a generation that died
//! reads as `error` (`schedule.interrupted`) from the next generation on.
//! A job keeps its last `maxHistory` fires (default 100, at most 1,000).
//!
//! Mutations and history writes are serialized per actor; every write goes
//! through the generation's write fence.
//!
//! The actor's `Schedule` holds the [`CronJobs`] (this file); the
//! operations over the context (`ops.rs`) and the records ([`record`]) are
//! files of their own, so that what the context holds imports no code that
//! uses the context.

pub mod expr;
mod ops;
pub mod record;
pub mod store;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

pub use expr::Cadence;
pub(crate) use ops::{begin, finish, load, take_due};
pub use ops::{delete, history, set, CronDispatch};
pub use record::{CronFire, CronJob, FireResult, ScheduleErrorInfo};

/// The next run of a job whose expression has no further occurrence.
pub const NEVER: i64 = i64::MAX;

/// The cron jobs of one generation (held by the actor's `Schedule`).
#[derive(Default)]
pub struct CronJobs {
    state: Mutex<State>,
    /// Serializes job mutations and history writes.
    writes: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Entry>,
    /// Jobs whose action runs now, by name, with the incarnation it runs for.
    running: HashMap<String, u64>,
    next_incarnation: u64,
}

struct Entry {
    job: CronJob,
    /// Tells this job from a later one of the same name (deleted, then set
    /// again) while a fire of the first finishes.
    incarnation: u64,
    /// The sequence numbers of the stored history, oldest first, once
    /// this generation has read them.
    seqs: Option<VecDeque<u64>>,
}

impl State {
    fn insert(&mut self, job: CronJob) {
        self.next_incarnation += 1;
        let incarnation = self.next_incarnation;
        self.jobs.insert(job.name.clone(), Entry { job, incarnation, seqs: None });
    }
}

impl CronJobs {
    fn state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn len(&self) -> usize {
        self.state(|s| s.jobs.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The earliest next run (a job with no next run, [`NEVER`], is left out).
    pub fn earliest(&self) -> Option<i64> {
        self.state(|s| s.jobs.values().map(|e| e.job.next_run_at).filter(|t| *t != NEVER).min())
    }

    /// `cronGet(name)`.
    pub fn get(&self, name: &str) -> Option<CronJob> {
        self.state(|s| s.jobs.get(name).map(|e| e.job.clone()))
    }

    /// `cronList()`: by next run, then name.
    pub fn list(&self) -> Vec<CronJob> {
        let mut jobs: Vec<CronJob> = self.state(|s| s.jobs.values().map(|e| e.job.clone()).collect());
        jobs.sort_by(|a, b| a.next_run_at.cmp(&b.next_run_at).then_with(|| a.name.cmp(&b.name)));
        jobs
    }
}

#[cfg(test)]
mod tests;
