//! The listener and its connections (docs/runtime-socket.md, "Connections").
//!
//! One task accepts connections (at most [`MAX_CONNECTIONS`] at once) and
//! owns a task per connection; a connection's task reads frames and owns a
//! task per request in flight (at most [`MAX_IN_FLIGHT`]; beyond that it
//! stops reading, which pushes back on the client) and per lease. Every one
//! of them is in a `JoinSet` of its parent, so nothing outlives the socket:
//! when a connection ends its lease workers are waited for (they end
//! promptly once cancelled, and must not be cut inside a `BEGIN` or
//! `COMMIT`), its other tasks for at most [`DRAIN_TIMEOUT`] before they are
//! aborted; when the socket closes, its connections are given the same
//! bound, and the generation's stop gives the whole at most 3 s (after
//! which it aborts the rest and closes the database anyway).
//!
//! A client that breaks the protocol (a frame above the limit, a payload
//! that does not decode, a request id already in flight) is sent `GoAway`
//! and disconnected; its leases are rolled back. The actor, and the other
//! connections, are not affected.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::frame::{read_frame, write_frame, Frame};
use super::lease::{LeaseOp, LeaseOpKind, LeaseWorker, Leases, MAX_LEASE_TIMEOUT_MS};
use super::responder::Responder;
use super::socket_file::remove_socket_file;
use super::sql::{invalid_lease, Statement};
use super::wire::{self, GoAwayReason, Request, RequestPayload, ResponsePayload, ServerFrame, ServerHello};
use crate::sqlite::ActorDatabase;

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;

/// Requests of one connection in flight at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// How long a new connection has to send its hello.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the tasks of a connection (or the connections of the socket)
/// are waited for when it ends, before they are aborted.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Accepts connections until `cancel` fires, then ends them and removes
/// the socket file.
pub(super) async fn serve_listener(
    listener: UnixListener,
    path: PathBuf,
    db: ActorDatabase,
    cancel: CancellationToken,
    max_frame_bytes: u32,
) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept(), if connections.len() < MAX_CONNECTIONS => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, db.clone(), cancel.child_token(), max_frame_bytes));
                }
                Err(err) => {
                    // Out of descriptors, most likely: wait instead of spinning.
                    tracing::warn!(%err, "runtime socket: accept failed");
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            },
        }
    }
    drop(listener);
    remove_socket_file(&path);
    drain(&mut connections).await;
}

/// Waits for `tasks` at most [`DRAIN_TIMEOUT`], then aborts the rest.
async fn drain(tasks: &mut JoinSet<()>) {
    if tokio::time::timeout(DRAIN_TIMEOUT, async { while tasks.join_next().await.is_some() {} }).await.is_err() {
        tracing::debug!(left = tasks.len(), "runtime socket: aborting tasks that did not finish in time");
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

/// Serves one connection: the hello, then requests until the client
/// leaves, breaks the protocol, or `cancel` fires.
pub(super) async fn serve_connection(
    mut stream: UnixStream,
    db: ActorDatabase,
    cancel: CancellationToken,
    max_frame_bytes: u32,
) {
    let hello = tokio::select! {
        _ = cancel.cancelled() => return,
        hello = tokio::time::timeout(HANDSHAKE_TIMEOUT, read_frame(&mut stream, max_frame_bytes)) => hello,
    };
    let payload = match hello {
        Ok(Ok(Some(Frame::Payload(payload)))) => payload,
        Ok(Ok(Some(Frame::TooLarge))) => {
            let _ =
                write_frame(&mut stream, &wire::encode_server_frame(&ServerFrame::GoAway(GoAwayReason::FrameTooLarge)))
                    .await;
            return;
        }
        // Closed, failed, or silent for too long.
        _ => return,
    };
    match wire::version_of(&payload) {
        Some(wire::PROTOCOL_VERSION) => {}
        Some(_) => {
            let _ = write_frame(&mut stream, &wire::encode_server_hello(ServerHello::RejectUnsupportedVersion)).await;
            return;
        }
        None => return,
    }
    if wire::decode_client_hello(&payload).is_err() {
        return;
    }
    if write_frame(&mut stream, &wire::encode_server_hello(ServerHello::Ok { max_frame_bytes })).await.is_err() {
        return;
    }

    let (mut reader, writer) = stream.into_split();
    let mut conn = Connection {
        db,
        responder: Arc::new(Responder::new(writer, max_frame_bytes, cancel.clone())),
        leases: Arc::new(Leases::default()),
        cancel,
        tasks: JoinSet::new(),
        lease_workers: JoinSet::new(),
    };
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        while conn.tasks.try_join_next().is_some() {}
        while conn.lease_workers.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = conn.cancel.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        // A frame cut short by the cancellation is lost, which is fine:
        // the connection ends then.
        let frame = tokio::select! {
            _ = conn.cancel.cancelled() => break,
            frame = read_frame(&mut reader, max_frame_bytes) => frame,
        };
        let payload = match frame {
            Ok(Some(Frame::Payload(payload))) => payload,
            Ok(Some(Frame::TooLarge)) => {
                conn.responder.go_away(GoAwayReason::FrameTooLarge).await;
                break;
            }
            Ok(None) => break,
            Err(err) => {
                tracing::debug!(%err, "runtime socket: reading a frame failed");
                break;
            }
        };
        let request = match wire::decode_client_frame(&payload) {
            Ok(request) => request,
            Err(err) => {
                tracing::debug!(%err, "runtime socket: undecodable frame");
                conn.responder.go_away(GoAwayReason::MalformedFrame).await;
                break;
            }
        };
        if !conn.responder.admit(request.request_id) {
            tracing::debug!(request_id = request.request_id, "runtime socket: request id already in flight");
            conn.responder.go_away(GoAwayReason::MalformedFrame).await;
            break;
        }
        conn.dispatch(request, permit);
    }
    // Leases roll back; statements outside leases finish (their answers
    // go nowhere). Lease workers are waited for, not aborted (see
    // [`LeaseWorker::run`]); the socket's own shutdown bounds even that.
    conn.cancel.cancel();
    conn.leases.close();
    while conn.lease_workers.join_next().await.is_some() {}
    drain(&mut conn.tasks).await;
}

struct Connection {
    db: ActorDatabase,
    responder: Arc<Responder>,
    leases: Arc<Leases>,
    cancel: CancellationToken,
    /// Statements outside leases, and immediate answers.
    tasks: JoinSet<()>,
    lease_workers: JoinSet<()>,
}

impl Connection {
    fn dispatch(&mut self, request: Request, permit: OwnedSemaphorePermit) {
        let Request { request_id, lease_key, payload } = request;
        match payload {
            RequestPayload::Exec { script } => {
                self.statement(request_id, lease_key, Statement::Exec { script }, permit);
            }
            RequestPayload::Query { sql, params } => {
                self.statement(request_id, lease_key, Statement::Query { sql, params }, permit);
            }
            RequestPayload::Begin { lease_key: key, timeout_ms } => {
                if lease_key.is_some() || key.is_empty() {
                    let message = "Begin takes a non-empty leaseKey in its payload and none on the request";
                    self.answer(request_id, invalid_lease(message), permit);
                } else {
                    self.begin(request_id, key, timeout_ms, permit);
                }
            }
            RequestPayload::Commit { lease_key: key } => {
                self.end_lease(request_id, lease_key, key, LeaseOpKind::Commit, permit);
            }
            RequestPayload::Rollback { lease_key: key } => {
                self.end_lease(request_id, lease_key, key, LeaseOpKind::Rollback, permit);
            }
        }
    }

    /// A statement: in its lease's order, or on its own task.
    fn statement(&mut self, request_id: u32, key: Option<String>, statement: Statement, permit: OwnedSemaphorePermit) {
        match key {
            Some(key) => self.route(request_id, &key, LeaseOpKind::Statement(statement), permit),
            None => {
                let (db, responder) = (self.db.clone(), self.responder.clone());
                self.tasks.spawn(async move {
                    let answer = statement.run(&db).await;
                    responder.respond(request_id, answer).await;
                    drop(permit);
                });
            }
        }
    }

    fn end_lease(
        &mut self,
        request_id: u32,
        request_key: Option<String>,
        key: String,
        kind: LeaseOpKind,
        permit: OwnedSemaphorePermit,
    ) {
        if request_key.is_some() {
            let message = "Commit and Rollback take their leaseKey in the payload only";
            return self.answer(request_id, invalid_lease(message), permit);
        }
        self.route(request_id, &key, kind, permit);
    }

    fn route(&mut self, request_id: u32, key: &str, kind: LeaseOpKind, permit: OwnedSemaphorePermit) {
        let op = LeaseOp { request_id, kind, permit };
        if let Some((op, answer)) = self.leases.route(key, op) {
            self.answer(request_id, answer, op.permit);
        }
    }

    fn begin(&mut self, request_id: u32, key: String, timeout_ms: Option<u64>, permit: OwnedSemaphorePermit) {
        if let Some(ms) = timeout_ms.filter(|ms| *ms == 0 || *ms > MAX_LEASE_TIMEOUT_MS) {
            let message = format!("timeoutMs {ms} is outside 1..={MAX_LEASE_TIMEOUT_MS}");
            return self.answer(
                request_id,
                ResponsePayload::SqlError { code: -1, statement_index: 0, message },
                permit,
            );
        }
        let ops = match self.leases.open(&key) {
            Ok(ops) => ops,
            Err(answer) => return self.answer(request_id, answer, permit),
        };
        let worker = LeaseWorker {
            key,
            begin_id: request_id,
            begin_permit: Some(permit),
            timeout: timeout_ms.map(Duration::from_millis),
            db: self.db.clone(),
            leases: self.leases.clone(),
            responder: self.responder.clone(),
            ops,
            cancel: self.cancel.clone(),
            ended: None,
        };
        self.lease_workers.spawn(worker.run());
    }

    /// Answers at once (in a task: the writer may be busy).
    fn answer(&mut self, request_id: u32, answer: ResponsePayload, permit: OwnedSemaphorePermit) {
        let responder = self.responder.clone();
        self.tasks.spawn(async move {
            responder.respond(request_id, answer).await;
            drop(permit);
        });
    }
}
