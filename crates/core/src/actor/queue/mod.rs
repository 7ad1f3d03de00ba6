//! The actor's durable message queue (`ctx.queue()`, and `POST
//! /queue/{name}` from clients through the factory's `onQueueSend`).
//!
//! Messages are persisted ([`store`]) before `send` resolves and are
//! received in send order. A receive does not delete: the message stays in
//! storage, taken by this generation, and is consumed by the state save
//! that follows its handling, in the same put as the state ([`receipts`]
//! has its way; docs/queues-cron.md, "Consumed with the state"). A
//! generation that ends before that save hands it to the next one again,
//! in its place; one that kept ending while holding it
//! (`maxQueueDeliveries` times) makes it a dead letter. A completable
//! message stays queued until `complete` (or is received again by a later
//! receive); its sender is answered once the completion is saved.
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
pub mod receipts;
mod records;
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
    complete_persisted, enqueue_and_wait, enqueue_and_wait_from, mark_handled, next_batch, reset, send, send_from,
    try_next_batch, wait_for_names, wait_for_names_available, QueueMessage,
};
pub use receipts::DEAD_LETTER_PREFIX;
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
    /// Messages a receive may take, by id (completable ones taken and not
    /// completed stay here).
    index: BTreeMap<u64, Header>,
    next_id: u64,
    receipts: receipts::Receipts,
}

/// What a save consumes: the messages, and the entries to put with the
/// actor record (see [`Queue::commit_plan`]).
#[derive(Debug, Default)]
pub struct Commit {
    ids: Vec<u64>,
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
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
            state: Mutex::new(State { next_id: 1, ..State::default() }),
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

    /// The handling sequence number: a state read now reflects every
    /// message handled so far (docs/queues-cron.md).
    pub fn handled_mark(&self) -> u64 {
        self.state(|s| s.receipts.mark())
    }

    /// Taken messages handled at or before `mark` and not consumed yet
    /// (test helper and log detail).
    pub fn handled_through(&self, mark: u64) -> Vec<u64> {
        self.state(|s| s.receipts.covered(mark))
    }

    /// What a save of a state read at `mark` consumes, with its entries:
    /// the consumed list (and, for the final save, the tries of messages
    /// taken and not handled put back). `None`: nothing to add.
    pub fn commit_plan(&self, mark: u64, final_save: bool) -> Option<Commit> {
        self.state(|s| {
            let ids = s.receipts.covered(mark);
            let restore = if final_save { s.receipts.unhandled() } else { Vec::new() };
            if ids.is_empty() && restore.is_empty() {
                return None;
            }
            let mut entries = Vec::new();
            if !ids.is_empty() {
                entries.push(records::consumed_entry(&s.receipts.consumed_with(&ids)));
            }
            entries.extend(restore.into_iter().map(|(id, tries)| records::tries_entry(id, tries)));
            Some(Commit { ids, entries })
        })
    }

    /// The save carrying `commit` was acknowledged: its messages are
    /// consumed and their `enqueueAndWait` senders answered.
    pub fn committed(&self, commit: Commit) {
        if commit.ids.is_empty() {
            return;
        }
        let answers = self.state(|s| s.receipts.consume(&commit.ids));
        tracing::debug!(messages = commit.ids.len(), "queue messages consumed with the state");
        for (id, answer) in answers {
            if let Some(waiter) = self.completions(|c| c.remove(&id)) {
                let _ = waiter.send(answer);
            }
        }
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
mod test_consumed;
#[cfg(test)]
mod tests;
