//! The actor's durable message queue (`ctx.queue()`, and `POST
//! /queue/{name}` from clients through the factory's `onQueueSend`).
//!
//! Messages are persisted ([`store`]) before `send` resolves and are
//! received in send order, each at most once unless it is *completable*: a
//! completable message stays queued until `complete` (or is received again
//! by a later receive, and by the next generation if this one dies first).
//! A message sent while the actor sleeps wakes it (the gateway starts the
//! actor for the request) and waits in storage for its consumer.
//!
//! In memory the queue keeps only the headers of its messages (id, name,
//! time), at most `maxQueueSize` of them; bodies are read when received.
//! Sends are serialized (one put at a time) so that ids, storage and
//! visibility follow one order; receives are serialized so that two
//! receivers never take the same message. A receive blocked waiting for a
//! message ends when one arrives, at its timeout, when the caller's signal
//! fires, or when the actor begins to stop (`actor.aborted`). The waiters of
//! `enqueueAndWait` are one per queued message at most.
//!
//! Every write goes through the generation's write fence: a stopped or lost
//! generation can neither add nor remove messages (`actor.stopping`).
//!
//! The context holds the [`Queue`] (this file); the operations over the
//! context (`ops.rs`) and the stored header ([`header`]) are files of their
//! own, so that what the context holds imports no code that uses the context.

pub mod header;
pub mod limits;
mod ops;
pub mod send_result;
pub mod store;
mod wait;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;

pub use header::Header;
pub use limits::Limits;
pub(crate) use ops::load;
pub use ops::{
    complete_persisted, enqueue_and_wait, enqueue_and_wait_from, next_batch, reset, send, send_from, try_next_batch,
    wait_for_names, wait_for_names_available, QueueMessage,
};
pub use send_result::{QueueSendResult, QueueSendStatus};

/// Which messages a receive takes, and how.
#[derive(Debug, Clone, Default)]
pub struct Receive {
    /// Only messages with one of these names (`None`: any).
    pub names: Option<BTreeSet<String>>,
    /// At most this many (at least 1).
    pub count: usize,
    /// How long to wait for a first message (`None`: until one arrives).
    pub timeout: Option<Duration>,
    /// Leave them queued until `complete`.
    pub completable: bool,
    /// The caller's cancellation signal.
    pub signal: Option<CancellationToken>,
}

impl Receive {
    /// `names` as the reference reads them: an empty list means any name.
    pub fn names(names: Option<Vec<String>>) -> Option<BTreeSet<String>> {
        names.map(|n| n.into_iter().collect::<BTreeSet<_>>()).filter(|n| !n.is_empty())
    }
}

/// The queue of one generation.
pub struct Queue {
    limits: Limits,
    state: Mutex<State>,
    /// One send at a time: ids, puts and visibility in one order.
    sending: tokio::sync::Mutex<()>,
    /// One receive at a time: no message is taken twice.
    receiving: tokio::sync::Mutex<()>,
    arrived: Notify,
    /// Receives blocked waiting for a message.
    waits: watch::Sender<usize>,
    /// `enqueueAndWait` callers by message id.
    completions: Mutex<HashMap<u64, oneshot::Sender<Option<Vec<u8>>>>>,
    /// Messages queued, for watchers (the inspector).
    size: watch::Sender<usize>,
}

#[derive(Default)]
struct State {
    index: BTreeMap<u64, Header>,
    next_id: u64,
}

impl Default for Queue {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Queue {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: Mutex::new(State { index: BTreeMap::new(), next_id: 1 }),
            sending: tokio::sync::Mutex::new(()),
            receiving: tokio::sync::Mutex::new(()),
            arrived: Notify::new(),
            waits: watch::channel(0).0,
            completions: Mutex::default(),
            size: watch::channel(0).0,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.state(|s| s.index.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queued messages' headers, in order (the inspector's view).
    pub fn headers(&self) -> Vec<Header> {
        self.state(|s| s.index.values().cloned().collect())
    }

    /// Receives blocked waiting for a message right now.
    pub fn blocked_receives(&self) -> usize {
        *self.waits.borrow()
    }

    pub(crate) fn subscribe_waits(&self) -> watch::Receiver<usize> {
        self.waits.subscribe()
    }

    /// Watches the number of messages queued.
    pub fn subscribe_size(&self) -> watch::Receiver<usize> {
        self.size.subscribe()
    }

    fn state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(&mut state);
        let len = state.index.len();
        drop(state);
        self.size.send_if_modified(|size| std::mem::replace(size, len) != len);
        out
    }

    fn completions<R>(&self, f: impl FnOnce(&mut HashMap<u64, oneshot::Sender<Option<Vec<u8>>>>) -> R) -> R {
        f(&mut self.completions.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests;
