//! Leases: a client's transaction spanning several requests
//! (docs/runtime-socket.md, "Leases").
//!
//! `Begin` names a lease with a key chosen by the client; the key is this
//! connection's only (another connection cannot use it). Each lease gets a
//! worker task that owns its [`SqliteTransaction`] and runs the lease's
//! requests one at a time in the order they arrived, so a client may
//! pipeline `Begin`, statements and `Commit` without waiting. Requests of
//! other leases and statements outside leases run beside it (and wait for
//! the database's gate, which the transaction holds, as the actor's own
//! statements do).
//!
//! The lease ends with its commit, its rollback, its timeout (the
//! transaction's own; the next request learns it as `LeaseExpired`), the
//! end of its connection or of the socket (rolled back). A key is not
//! reused on a connection; the keys of ended leases are remembered up to
//! [`REMEMBERED_ENDED_LEASES`], the oldest forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::responder::Responder;
use super::sql::{answer_error, invalid_lease, Statement};
use super::wire::ResponsePayload;
use crate::sqlite::{ActorDatabase, SqliteTransaction};

/// Ended lease keys a connection remembers (to refuse their reuse and to
/// say why a late request is refused).
pub const REMEMBERED_ENDED_LEASES: usize = 1024;

/// The longest timeout a `Begin` may ask for (one hour).
pub const MAX_LEASE_TIMEOUT_MS: u64 = 3_600_000;

/// One request for a lease's worker. Its permit is the connection's
/// in-flight bound, released once it is answered.
pub(super) struct LeaseOp {
    pub request_id: u32,
    pub kind: LeaseOpKind,
    pub permit: OwnedSemaphorePermit,
}

pub(super) enum LeaseOpKind {
    Statement(Statement),
    Commit,
    Rollback,
}

/// How a lease ended.
#[derive(Clone, Copy, Debug)]
pub(super) enum Ended {
    Committed,
    RolledBack,
    Expired(u64),
    Closed,
}

impl Ended {
    fn answer(self) -> ResponsePayload {
        match self {
            Ended::Committed => invalid_lease("the lease is already committed"),
            Ended::RolledBack => invalid_lease("the lease is already rolled back"),
            Ended::Expired(timeout_ms) => ResponsePayload::LeaseExpired {
                timeout_ms,
                message: format!("The lease's transaction was rolled back after its timeout of {timeout_ms} ms."),
            },
            Ended::Closed => ResponsePayload::EndpointClosed,
        }
    }
}

enum Entry {
    /// Its worker's queue. Unbounded, but every item holds one of the
    /// connection's in-flight permits, so it holds at most that many.
    Open(mpsc::UnboundedSender<LeaseOp>),
    Ended(Ended),
}

#[derive(Default)]
struct Table {
    entries: HashMap<String, Entry>,
    ended: VecDeque<String>,
    closed: bool,
}

/// The leases of one connection.
#[derive(Default)]
pub(super) struct Leases(Mutex<Table>);

impl Leases {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new lease `key`: its worker's queue, or the refusal.
    pub(super) fn open(&self, key: &str) -> Result<mpsc::UnboundedReceiver<LeaseOp>, ResponsePayload> {
        let mut table = self.table();
        if table.closed {
            return Err(ResponsePayload::EndpointClosed);
        }
        if table.entries.contains_key(key) {
            return Err(invalid_lease("the lease key was already used on this connection"));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        table.entries.insert(key.to_string(), Entry::Open(tx));
        Ok(rx)
    }

    /// Hands `op` to lease `key`'s worker. When the lease is not open, `op`
    /// comes back with the answer it gets instead.
    pub(super) fn route(&self, key: &str, op: LeaseOp) -> Option<(LeaseOp, ResponsePayload)> {
        let table = self.table();
        if table.closed {
            return Some((op, ResponsePayload::EndpointClosed));
        }
        match table.entries.get(key) {
            Some(Entry::Open(tx)) => tx.send(op).err().map(|e| (e.0, ResponsePayload::EndpointClosed)),
            Some(Entry::Ended(ended)) => Some((op, ended.answer())),
            None => Some((op, invalid_lease("the lease key is unknown on this connection"))),
        }
    }

    /// Marks `key` ended (unless it already is), which closes its queue.
    fn end(&self, key: &str, how: Ended) {
        let mut table = self.table();
        if matches!(table.entries.get(key), Some(Entry::Open(_))) {
            table.entries.insert(key.to_string(), Entry::Ended(how));
            table.ended.push_back(key.to_string());
            while table.ended.len() > REMEMBERED_ENDED_LEASES {
                if let Some(old) = table.ended.pop_front() {
                    table.entries.remove(&old);
                }
            }
        }
    }

    /// Forgets `key` (its `Begin` failed: the key may be tried again).
    fn forget(&self, key: &str) {
        let mut table = self.table();
        if matches!(table.entries.get(key), Some(Entry::Open(_))) {
            table.entries.remove(key);
        }
    }

    /// Refuses new leases and requests; closes every queue.
    pub(super) fn close(&self) {
        let mut table = self.table();
        table.closed = true;
        for entry in table.entries.values_mut() {
            if matches!(entry, Entry::Open(_)) {
                *entry = Entry::Ended(Ended::Closed);
            }
        }
    }
}

/// Everything a lease's worker needs.
pub(super) struct LeaseWorker {
    pub key: String,
    pub begin_id: u32,
    /// Released once the `Begin` is answered.
    pub begin_permit: Option<OwnedSemaphorePermit>,
    pub timeout: Option<Duration>,
    pub db: ActorDatabase,
    pub leases: Arc<Leases>,
    pub responder: Arc<Responder>,
    pub ops: mpsc::UnboundedReceiver<LeaseOp>,
    /// Fires when the connection or the socket ends: roll back and stop.
    pub cancel: CancellationToken,
    /// How the lease ended, once it did.
    pub ended: Option<Ended>,
}

impl LeaseWorker {
    /// Begins, then serves the lease's requests in order, until the lease
    /// ends or `cancel` fires. It is never aborted while its connection
    /// lives (see [`super::server`]): every wait in it either ends when
    /// `cancel` fires (the wait for the database, the writes to the client)
    /// or is a statement, so a `BEGIN`, `COMMIT` or `ROLLBACK` is never
    /// dropped half way and the database never left inside a transaction
    /// nobody owns.
    pub(super) async fn run(mut self) {
        let tx = match self.db.begin_transaction_unless(self.timeout, &self.cancel).await {
            Ok(tx) => tx,
            Err(err) => {
                self.leases.forget(&self.key);
                self.responder.respond(self.begin_id, answer_error(&err)).await;
                self.begin_permit.take();
                self.refuse_rest(invalid_lease("the lease's transaction did not begin")).await;
                return;
            }
        };
        if self.cancel.is_cancelled() {
            self.finish(&tx, Ended::Closed).await;
            self.responder.respond(self.begin_id, ResponsePayload::EndpointClosed).await;
            self.refuse_rest(ResponsePayload::EndpointClosed).await;
            return;
        }
        self.responder.respond(self.begin_id, ResponsePayload::BeginOk).await;
        self.begin_permit.take();
        loop {
            let op = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                op = self.ops.recv() => op,
            };
            let Some(op) = op else { break };
            let answer = self.serve(&tx, op.kind).await;
            self.responder.respond(op.request_id, answer).await;
            drop(op.permit);
        }
        self.finish(&tx, Ended::Closed).await;
        self.refuse_rest(ResponsePayload::EndpointClosed).await;
    }

    async fn serve(&mut self, tx: &SqliteTransaction, kind: LeaseOpKind) -> ResponsePayload {
        if let Some(ended) = self.ended {
            // Queued behind the request that ended it.
            return ended.answer();
        }
        let result = match kind {
            LeaseOpKind::Statement(statement) => statement.run_in(tx).await,
            LeaseOpKind::Commit => match tx.commit().await {
                Ok(()) => {
                    self.mark(Ended::Committed);
                    Ok(ResponsePayload::CommitOk)
                }
                Err(err) => {
                    // A failed commit is rolled back by the transaction.
                    if !is_expired(&err) {
                        self.mark(Ended::RolledBack);
                    }
                    Err(err)
                }
            },
            LeaseOpKind::Rollback => match tx.rollback().await {
                Ok(()) => {
                    self.mark(Ended::RolledBack);
                    Ok(ResponsePayload::RollbackOk)
                }
                Err(err) => Err(err),
            },
        };
        match result {
            Ok(answer) => answer,
            Err(err) => {
                let answer = answer_error(&err);
                if let ResponsePayload::LeaseExpired { timeout_ms, .. } = &answer {
                    self.mark(Ended::Expired(*timeout_ms));
                }
                answer
            }
        }
    }

    /// The lease ended: later requests are answered `how` says.
    fn mark(&mut self, how: Ended) {
        self.ended = Some(how);
        self.leases.end(&self.key, how);
    }

    /// Rolls back if still open (a no-op otherwise) and marks it ended.
    async fn finish(&self, tx: &SqliteTransaction, how: Ended) {
        // Refused (a no-op) when it already ended: committed, expired.
        if let Err(err) = tx.rollback().await {
            if !matches!(crate::error::RivetError::extract(&err).code.as_str(), "transaction_finished") {
                tracing::debug!(error = %format!("{err:#}"), "runtime socket lease: rollback at its end");
            }
        }
        self.leases.end(&self.key, how);
    }

    /// Answers what is still queued (the queue is closed: the lease ended).
    async fn refuse_rest(&mut self, answer: ResponsePayload) {
        self.ops.close();
        while let Some(op) = self.ops.recv().await {
            self.responder.respond(op.request_id, answer.clone()).await;
        }
    }
}

fn is_expired(err: &anyhow::Error) -> bool {
    crate::error::RivetError::extract(err).code == "transaction_expired"
}
