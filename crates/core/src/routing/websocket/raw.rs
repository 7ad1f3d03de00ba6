//! Raw WebSockets for the actor's `onWebSocket` (docs/wire-formats.md): every path but `/connect`. The gateway plumbing only; the socket
//! the actor sees, its events and their bound are [`RawWebSocket`] in
//! `actor::websocket`.
//!
//! The upgrade becomes a connection (its params from the
//! `rivet_conn_params.*` subprotocol, the connect hooks run as for any
//! connection) whose transport is a [`RawWebSocket`]. Once the gateway has
//! the socket open, the sender is bound to the `RawWebSocket` and
//! `onWebSocket({ctx, conn, ws, request})` runs in the actor; frames are
//! then delivered, in order, to the event sink the host sets on it (events
//! that arrive before the sink is set are buffered). Either side's close
//! delivers one close event and ends the connection (→ `onDisconnect`).
//!
//! With `canHibernateWebsocket` the gateway keeps a raw socket open while
//! the actor sleeps (docs/storage.md, hibernatable connections): its
//! connection is recorded, each client frame is acknowledged once handed
//! to the actor, and the next generation takes the socket over from the
//! record (no connect hooks) and runs `onWebSocket` again on it. A frame
//! that arrives while the actor is going to sleep is left unacknowledged:
//! the gateway replays it to the next generation.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::FutureExt;
use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, WebSocketHandler, WebSocketMessage, WebSocketSender};

use super::socket_info::SocketInfo;
use crate::actor::save::SaveOptions;
use crate::actor::websocket::RawWebSocket;
use crate::actor::{conn, ActorTaskHandle, Conn, ConnTransport, Hibernation, HttpRequest};
use crate::dispatcher::Dispatcher;
use crate::error::RivetError;
use crate::protocol::actor_connect::{parse_conn_params, protocol_header_values};

/// Sets the connection up and returns the socket's handler. Any failure
/// before the socket opens closes it with 1011 `<group>.<code>`.
pub(super) async fn open(
    dispatcher: &Arc<Dispatcher>,
    handle: ActorTaskHandle,
    request: EnvoyRequest,
    socket: SocketInfo,
) -> anyhow::Result<WebSocketHandler> {
    if socket.is_restoring {
        return Ok(restore(dispatcher, handle, socket));
    }
    let SocketInfo { gateway_id, request_id, path, headers, is_hibernatable, .. } = socket;
    let values = protocol_header_values(&headers);
    let params = match parse_conn_params(&values) {
        Ok(params) => params,
        Err(err) => return Ok(close_on_open(1011, err.to_rivet_error().qualified_code())),
    };
    let request = HttpRequest {
        method: request.method,
        uri: path,
        headers: headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect(),
        body: request.body.unwrap_or_default(),
        ..Default::default()
    };
    let hibernation = is_hibernatable.then(|| Hibernation {
        gateway_id,
        request_id,
        client_message_index: 0,
        path: request.uri.clone(),
        headers: request.headers.clone(),
    });
    let ws = RawWebSocket::new();
    ws.set_gate(handle.context().downgrade());
    let conn = Conn::new(conn::new_id(), params, Some(Arc::new(ws.clone()) as Arc<dyn ConnTransport>), hibernation);
    conn.note_caller(&request.headers);
    if let Err(err) = handle.connect(conn.clone(), Some(request.clone())).await {
        let e = RivetError::extract(&err);
        tracing::debug!(error = %e, "raw websocket connection refused");
        return Ok(close_on_open(1011, e.qualified_code()));
    }
    if conn.is_hibernatable() {
        // Its record must exist before the actor can sleep.
        handle.context().request_save(SaveOptions::default());
    }
    Ok(socket_handler(dispatcher, handle, conn, ws, request))
}

/// A socket that survived the previous generation's sleep: its connection
/// (read back from the record) gets a fresh [`RawWebSocket`], and
/// `onWebSocket` runs again once the envoy reopened it.
fn restore(dispatcher: &Arc<Dispatcher>, handle: ActorTaskHandle, socket: SocketInfo) -> WebSocketHandler {
    let Some(conn) = handle.context().conns().find_hibernated(socket.gateway_id, socket.request_id) else {
        return close_on_open(1011, "connection.restore_not_found".into());
    };
    let hibernation = conn.hibernation().unwrap_or_else(|| Hibernation {
        gateway_id: socket.gateway_id,
        request_id: socket.request_id,
        client_message_index: 0,
        path: socket.path.clone(),
        headers: HashMap::new(),
    });
    let request =
        HttpRequest { method: "GET".into(), uri: hibernation.path, headers: hibernation.headers, ..Default::default() };
    let ws = RawWebSocket::new();
    ws.set_gate(handle.context().downgrade());
    conn.attach_transport(Arc::new(ws.clone()) as Arc<dyn ConnTransport>);
    tracing::debug!(conn = conn.id(), "hibernated raw websocket restored");
    socket_handler(dispatcher, handle, conn, ws, request)
}

/// The handler of an accepted socket: on open, binds the sender and runs
/// `onWebSocket`; frames and the close go to `ws`, and the connection ends
/// with the socket.
fn socket_handler(
    dispatcher: &Arc<Dispatcher>,
    handle: ActorTaskHandle,
    conn: Conn,
    ws: RawWebSocket,
    request: HttpRequest,
) -> WebSocketHandler {
    {
        let handle = handle.clone();
        let conn = conn.clone();
        ws.set_on_finish(move || handle.disconnect(conn));
    }

    let ack_handle = handle.clone();
    let ack_conn = conn.clone();
    let open_ws = ws.clone();
    let tracker = dispatcher.tracker().clone();
    let on_open: Box<dyn FnOnce(WebSocketSender) -> rivet_envoy_client::config::BoxFuture<()> + Send> =
        Box::new(move |sender| {
            open_ws.bind(sender);
            // `onWebSocket` runs in the actor; the envoy's loop goes on
            // meanwhile (frames are buffered until the host takes them).
            tracker.spawn(async move {
                if let Err(err) = handle.open_websocket(conn, open_ws.clone(), Some(request)).await {
                    let e = RivetError::extract(&err);
                    tracing::debug!(error = %e, "onWebSocket failed");
                    open_ws.close(Some(1011), Some(e.qualified_code()));
                }
            });
            async {}.boxed()
        });

    let message_ws = ws.clone();
    let close_ws = ws;
    WebSocketHandler {
        on_message: Box::new(move |message: WebSocketMessage| {
            if ack_conn.is_hibernatable() && !acknowledge(&ack_handle, &ack_conn, message.message_index) {
                return async {}.boxed();
            }
            message_ws.on_client_message(message.data, message.binary, message.message_index);
            async {}.boxed()
        }),
        on_close: Box::new(move |code, reason| {
            close_ws.on_client_close(code, reason);
            async {}.boxed()
        }),
        on_open: Some(on_open),
    }
}

/// Records and acknowledges client message `index` of a hibernatable raw
/// socket (the record is saved with the next, throttled, save). False,
/// without acknowledging, while the actor is going to sleep or stopping:
/// the gateway replays the frame to the next generation.
fn acknowledge(handle: &ActorTaskHandle, conn: &Conn, index: u16) -> bool {
    let ctx = handle.context();
    if ctx.sleep_requested() || ctx.aborted() {
        return false;
    }
    let Some(h) = conn.hibernation() else { return true };
    conn.set_client_message_index(index);
    ctx.link().ack_hibernatable_message(h.gateway_id, h.request_id, index);
    ctx.request_save(SaveOptions::default());
    true
}

/// Accepts the socket only to close it with `code` and `reason`.
fn close_on_open(code: u16, reason: String) -> WebSocketHandler {
    WebSocketHandler {
        on_message: Box::new(|_| async {}.boxed()),
        on_close: Box::new(|_, _| async {}.boxed()),
        on_open: Some(Box::new(move |sender| async move { sender.close(Some(code), Some(reason)) }.boxed())),
    }
}
