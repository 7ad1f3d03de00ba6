//! Messages into the actor task.
//!
//! A leaf of the actor runtime: the context holds the sending end of the
//! traffic queue, so what these commands carry must not lead back to it.

use tokio::sync::oneshot;

use super::conn::Conn;
use super::queue::send_result::QueueSendResult;
use super::request::{HttpRequest, HttpResponse, QueueSendRequest};
use super::websocket::RawWebSocket;

pub type Reply<T> = oneshot::Sender<anyhow::Result<T>>;

/// Why a generation stops, as the actor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownKind {
    Sleep,
    Destroy,
}

/// Commands from the dispatcher that drive the lifecycle. They take
/// priority over client traffic.
pub enum LifecycleCommand {
    Start { reply: Reply<()> },
    Stop { kind: ShutdownKind, reply: Reply<()> },
}

/// Client traffic routed to this generation.
pub enum DispatchCommand {
    Http {
        request: HttpRequest,
        reply: Reply<HttpResponse>,
    },
    /// `args` and the reply are CBOR (opaque to the core).
    Action {
        conn: Option<Conn>,
        /// The client message that carried it, on a hibernatable
        /// connection: recorded on the connection as soon as the action
        /// succeeded, before its reply, so that the save of a stop that
        /// waits for it includes it (docs/wire-formats.md, the actor-connect table).
        message_index: Option<u16>,
        name: String,
        args: Vec<u8>,
        reply: Reply<Vec<u8>>,
    },
    /// An action over HTTP, admitted once: a transient connection is
    /// connected, the action runs on it, and it is disconnected
    /// (`onDisconnect` awaited) before the reply.
    HttpAction {
        params: Vec<u8>,
        request: HttpRequest,
        name: String,
        args: Vec<u8>,
        reply: Reply<Vec<u8>>,
    },
    /// A client's `POST /queue/{name}`, admitted once: a transient
    /// connection is connected, `onQueueSend` runs on it, and it is
    /// disconnected before the reply.
    QueueSend {
        params: Vec<u8>,
        request: HttpRequest,
        send: QueueSendRequest,
        reply: Reply<QueueSendResult>,
    },
    /// Runs the connect hooks and registers the connection.
    Connect {
        conn: Conn,
        request: Option<HttpRequest>,
        reply: Reply<()>,
    },
    /// Runs `onBeforeSubscribe`, then subscribes the connection.
    Subscribe {
        conn: Conn,
        event_name: String,
        reply: Reply<()>,
    },
    /// Runs `onWebSocket` for a raw WebSocket opened on `conn` (the request
    /// is boxed to keep the command small).
    OpenWebSocket {
        conn: Conn,
        ws: RawWebSocket,
        request: Box<Option<HttpRequest>>,
        reply: Reply<()>,
    },
}

impl DispatchCommand {
    /// True when whoever sent it no longer waits for the answer.
    pub(crate) fn caller_gone(&self) -> bool {
        match self {
            DispatchCommand::Http { reply, .. } => reply.is_closed(),
            DispatchCommand::Action { reply, .. } | DispatchCommand::HttpAction { reply, .. } => reply.is_closed(),
            DispatchCommand::QueueSend { reply, .. } => reply.is_closed(),
            DispatchCommand::Connect { reply, .. }
            | DispatchCommand::Subscribe { reply, .. }
            | DispatchCommand::OpenWebSocket { reply, .. } => reply.is_closed(),
        }
    }

    /// Answers the command with `err` without running it.
    pub(crate) fn refuse(self, err: anyhow::Error) {
        match self {
            DispatchCommand::Http { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            DispatchCommand::Action { reply, .. } | DispatchCommand::HttpAction { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            DispatchCommand::QueueSend { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            DispatchCommand::Connect { reply, .. }
            | DispatchCommand::Subscribe { reply, .. }
            | DispatchCommand::OpenWebSocket { reply, .. } => {
                let _ = reply.send(Err(err));
            }
        }
    }
}
