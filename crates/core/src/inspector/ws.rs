//! The inspector WebSocket, `/inspector/connect` (docs/inspector.md).
//!
//! The client authenticates with the subprotocol
//! `rivet_inspector_token.<token>` (or `Authorization: Bearer`) and names
//! its protocol version with `?protocol_version=N` (1-6); without it,
//! frames carry their version (the legacy framing). On open it gets
//! `Init`, then `StateUpdated` after every state write,
//! `ConnectionsUpdated` when connections come and go, `QueueUpdated` when
//! the queue grows or shrinks and `SchedulesUpdated` when schedules change.
//! It may ask for the state, connections, queue, schedules, workflow
//! history and database, patch the state and run actions. A frame it
//! cannot read, or a request that fails, gets an `Error` message; the
//! socket stays open.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use rivet_envoy_client::config::{WebSocketHandler, WebSocketMessage, WebSocketSender};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::answers;
use super::versions::Framing;
use super::wire::{Message, Request};
use crate::actor::ActorTaskHandle;
use crate::dispatcher::Dispatcher;
use crate::error::RivetError;

/// Close code and reason of a socket without a valid token.
const POLICY: u16 = 1008;
/// Close code of a socket asking for a version we do not speak.
const PROTOCOL_ERROR: u16 = 1002;
/// Requests of one socket answered at once; more get an `Error`.
const MAX_IN_FLIGHT: usize = 16;

fn header<'a>(headers: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
}

/// The bearer token offered as the subprotocol
/// `rivet_inspector_token.<token>`, else as `Authorization: Bearer`.
fn offered_token(headers: &HashMap<String, String>) -> Option<&str> {
    header(headers, "sec-websocket-protocol")
        .and_then(|value| value.split(',').map(str::trim).find_map(|p| p.strip_prefix("rivet_inspector_token.")))
        .or_else(|| header(headers, "authorization").and_then(|value| value.trim().strip_prefix("Bearer ")))
}

/// The version asked for with `protocol_version`, if any.
fn asked_version(path: &str) -> Option<&str> {
    let query = path.split_once('?')?.1;
    query.split('&').find_map(|pair| pair.strip_prefix("protocol_version="))
}

fn close_on_open(code: u16, reason: &'static str) -> WebSocketHandler {
    WebSocketHandler {
        on_message: Box::new(|_| async {}.boxed()),
        on_close: Box::new(|_, _| async {}.boxed()),
        on_open: Some(Box::new(move |sender| {
            async move { sender.close(Some(code), Some(reason.to_string())) }.boxed()
        })),
    }
}

/// Checks the version and the token, and returns the socket's handler.
pub fn open(
    dispatcher: &Arc<Dispatcher>,
    handle: ActorTaskHandle,
    path: &str,
    headers: &HashMap<String, String>,
) -> WebSocketHandler {
    let Some(framing) = Framing::from_query(asked_version(path)) else {
        return close_on_open(PROTOCOL_ERROR, "inspector.invalid_protocol_version");
    };
    if let Err(err) = super::verify(handle.context(), offered_token(headers)) {
        tracing::debug!(error = %err, "inspector socket refused");
        return close_on_open(POLICY, "inspector.unauthorized");
    }
    let socket = Arc::new(Socket {
        dispatcher: dispatcher.clone(),
        handle,
        closed: CancellationToken::new(),
        framing,
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
    });
    let on_message = socket.clone();
    let on_close = socket.clone();
    WebSocketHandler {
        on_message: Box::new(move |message: WebSocketMessage| {
            let socket = on_message.clone();
            async move { socket.on_message(message) }.boxed()
        }),
        on_close: Box::new(move |_, _| {
            let socket = on_close.clone();
            async move { socket.closed.cancel() }.boxed()
        }),
        on_open: Some(Box::new(move |sender| async move { socket.on_open(sender) }.boxed())),
    }
}

struct Socket {
    dispatcher: Arc<Dispatcher>,
    handle: ActorTaskHandle,
    closed: CancellationToken,
    framing: Framing,
    in_flight: Arc<Semaphore>,
}

/// Sends `message` framed as the client asked.
fn send(sender: &WebSocketSender, framing: Framing, message: Message) {
    match framing.encode(message) {
        Ok(bytes) => sender.send(bytes, true),
        Err(err) => tracing::warn!(error = %format!("{err:#}"), "could not encode an inspector message"),
    }
}

/// `<group>.<code>: <message>`. The inspector is authenticated, so an
/// unstructured failure (SQLite's own message, say) is shown whole rather
/// than masked as it is for clients.
fn error_message(err: &anyhow::Error) -> Message {
    let message = match err.chain().find_map(|e| e.downcast_ref::<RivetError>()) {
        Some(structured) => structured.to_string(),
        None => format!("core.internal_error: {err:#}"),
    };
    Message::Error { message }
}

impl Socket {
    /// Sends `Init`, then pushes `StateUpdated` after each state write,
    /// `ConnectionsUpdated` when the connection count changes,
    /// `QueueUpdated` when the queue's size does, `SchedulesUpdated`
    /// (version 6) when events or cron jobs change and
    /// `WorkflowHistoryUpdated` after a replay, until the socket closes or
    /// the generation ends.
    fn on_open(self: Arc<Self>, sender: WebSocketSender) {
        let ctx = self.handle.context().clone();
        let config = self.handle.config();
        let mut revisions = ctx.inspector().subscribe_state();
        let mut conn_count = ctx.conns().subscribe_count();
        let mut queue_size = ctx.queue().subscribe_size();
        let mut schedules = ctx.schedule().subscribe_changes();
        let mut workflow = ctx.inspector().subscribe_workflow();
        // Versions before 6 have no schedule messages: nothing is pushed.
        let push_schedules = self.framing.version() >= 6;
        let closed = self.closed.clone();
        let framing = self.framing;
        let fence = ctx.write_fence().clone();
        self.dispatcher.tracker().spawn(async move {
            let _client = super::ClientGuard::new(&ctx);
            revisions.borrow_and_update();
            conn_count.borrow_and_update();
            queue_size.borrow_and_update();
            schedules.borrow_and_update();
            workflow.borrow_and_update();
            let init = tokio::select! {
                _ = closed.cancelled() => return,
                _ = fence.cancelled() => return,
                init = answers::init(&ctx, &config) => init,
            };
            send(&sender, framing, Message::Init(Box::new(init)));
            loop {
                tokio::select! {
                    _ = closed.cancelled() => break,
                    _ = fence.cancelled() => break,
                    changed = revisions.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        revisions.borrow_and_update();
                        send(&sender, framing, Message::StateUpdated { state: ctx.state() });
                    }
                    changed = conn_count.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        conn_count.borrow_and_update();
                        send(&sender, framing, Message::ConnectionsUpdated { connections: answers::connections(&ctx) });
                    }
                    changed = queue_size.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let size = *queue_size.borrow_and_update() as u64;
                        send(&sender, framing, Message::QueueUpdated { queue_size: size });
                    }
                    changed = schedules.changed(), if push_schedules => {
                        if changed.is_err() {
                            break;
                        }
                        schedules.borrow_and_update();
                        send(&sender, framing, Message::SchedulesUpdated { schedules: answers::schedules(&ctx) });
                    }
                    changed = workflow.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        workflow.borrow_and_update();
                        match answers::workflow_history(&ctx, config.action_timeout).await {
                            Ok((_, Some(history))) => send(&sender, framing, Message::WorkflowHistoryUpdated { history }),
                            Ok((_, None)) => {}
                            Err(err) => tracing::debug!(error = %format!("{err:#}"), "no workflow history to push"),
                        }
                    }
                }
            }
        });
    }

    fn on_message(self: Arc<Self>, message: WebSocketMessage) {
        let request = match self.framing.decode(&message.data) {
            Ok(request) => request,
            Err(err) => {
                tracing::debug!(error = %format!("{err:#}"), "undecodable inspector frame");
                send(&message.sender, self.framing, error_message(&err));
                return;
            }
        };
        let ctx = self.handle.context();
        let config = self.handle.config();
        let reply = match request {
            Request::State { id } => {
                Message::State { rid: id, state: answers::state(ctx, &config), is_state_enabled: config.has_state }
            }
            Request::Connections { id } => Message::Connections { rid: id, connections: answers::connections(ctx) },
            Request::Rpcs { id } => Message::Rpcs { rid: id, rpcs: config.actions.clone() },
            // No traces are recorded here (the reference answers the same).
            Request::TraceQuery { id, .. } => Message::TraceQuery { rid: id, payload: Vec::new() },
            Request::Queue { id, limit } => Message::Queue { rid: id, status: answers::queue_status(ctx, limit) },
            Request::Schedules { id } => Message::Schedules { rid: id, schedules: answers::schedules(ctx) },
            request => return self.answer_later(message.sender, request),
        };
        send(&message.sender, self.framing, reply);
    }

    /// Answers a request that waits (on user code, storage or the
    /// database) from a task of its own, at most [`MAX_IN_FLIGHT`] at once.
    fn answer_later(&self, sender: WebSocketSender, request: Request) {
        let framing = self.framing;
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            let message = format!("inspector.too_many_requests: at most {MAX_IN_FLIGHT} requests may wait at once");
            send(&sender, framing, Message::Error { message });
            return;
        };
        let handle = self.handle.clone();
        let closed = self.closed.clone();
        self.dispatcher.tracker().spawn(async move {
            let reply = tokio::select! {
                _ = closed.cancelled() => return,
                reply = answer(&handle, request) => reply,
            };
            send(&sender, framing, reply.unwrap_or_else(|err| error_message(&err)));
            drop(permit);
        });
    }
}

async fn answer(handle: &ActorTaskHandle, request: Request) -> anyhow::Result<Message> {
    let ctx = handle.context();
    let config = handle.config();
    let timeout = config.action_timeout;
    Ok(match request {
        Request::PatchState { state } => {
            answers::patch_state(handle, &state).await?;
            Message::StateUpdated { state }
        }
        Request::Action { id, name, args } => {
            Message::Action { rid: id, output: handle.action_on(None, None, name, args).await? }
        }
        Request::WorkflowHistory { id } => {
            let (is_workflow_enabled, history) = answers::workflow_history(ctx, timeout).await?;
            Message::WorkflowHistory { rid: id, history, is_workflow_enabled }
        }
        Request::WorkflowReplay { id, entry_id } => {
            let (is_workflow_enabled, history) = answers::workflow_replay(ctx, entry_id, timeout).await?;
            Message::WorkflowReplay { rid: id, history, is_workflow_enabled }
        }
        Request::DatabaseSchema { id } => {
            Message::DatabaseSchema { rid: id, schema: answers::database_schema(ctx, &config).await? }
        }
        Request::DatabaseTableRows { id, table, limit, offset } => Message::DatabaseTableRows {
            rid: id,
            result: answers::database_rows(ctx, &config, &table, limit, offset).await?,
        },
        Request::ScheduleHistory { id, schedule_id, limit } => {
            let history = answers::schedule_history(ctx, &schedule_id, limit).await?;
            Message::ScheduleHistory { rid: id, schedule_id, history }
        }
        Request::ScheduleDelete { id, schedule_id, kind } => {
            let deleted = answers::schedule_delete(ctx, &schedule_id, &kind).await?;
            Message::ScheduleDelete { rid: id, schedule_id, deleted }
        }
        other => anyhow::bail!("request {other:?} is answered at once"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_and_version_come_from_the_subprotocols_and_the_query() {
        let headers =
            HashMap::from([("Sec-WebSocket-Protocol".to_string(), "rivet, rivet_inspector_token.abc".to_string())]);
        assert_eq!(offered_token(&headers), Some("abc"));
        assert_eq!(offered_token(&HashMap::new()), None);
        let bearer = HashMap::from([("authorization".to_string(), "Bearer xyz".to_string())]);
        assert_eq!(offered_token(&bearer), Some("xyz"));
        assert_eq!(asked_version("/inspector/connect?x=1&protocol_version=6"), Some("6"));
        assert_eq!(asked_version("/inspector/connect"), None);
        assert_eq!(Framing::from_query(Some("3")), Some(Framing::Negotiated(3)));
        assert_eq!(Framing::from_query(None), Some(Framing::Legacy));
        for refused in ["0", "7", "", "six"] {
            assert_eq!(Framing::from_query(Some(refused)), None, "{refused}");
        }
    }
}
