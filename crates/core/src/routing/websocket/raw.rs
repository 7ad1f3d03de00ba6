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
//! Hibernation of raw sockets is not supported: a raw socket always ends
//! with its generation.

use std::sync::Arc;

use futures::future::FutureExt;
use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, WebSocketHandler, WebSocketMessage, WebSocketSender};

use super::SocketInfo;
use crate::actor::websocket::RawWebSocket;
use crate::actor::{conn, ActorTaskHandle, Conn, ConnTransport, HttpRequest};
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
    let SocketInfo { path, headers, .. } = socket;
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
    let ws = RawWebSocket::new();
    let conn = Conn::new(conn::new_id(), params, Some(Arc::new(ws.clone()) as Arc<dyn ConnTransport>), None);
    if let Err(err) = handle.connect(conn.clone(), Some(request.clone())).await {
        let e = RivetError::extract(&err);
        tracing::debug!(error = %e, "raw websocket connection refused");
        return Ok(close_on_open(1011, e.qualified_code()));
    }
    {
        let handle = handle.clone();
        let conn = conn.clone();
        ws.set_on_finish(move || handle.disconnect(conn));
    }

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
    Ok(WebSocketHandler {
        on_message: Box::new(move |message: WebSocketMessage| {
            message_ws.on_client_message(message.data, message.binary, message.message_index);
            async {}.boxed()
        }),
        on_close: Box::new(move |code, reason| {
            close_ws.on_client_close(code, reason);
            async {}.boxed()
        }),
        on_open: Some(on_open),
    })
}

/// Accepts the socket only to close it with `code` and `reason`.
fn close_on_open(code: u16, reason: String) -> WebSocketHandler {
    WebSocketHandler {
        on_message: Box::new(|_| async {}.boxed()),
        on_close: Box::new(|_, _| async {}.boxed()),
        on_open: Some(Box::new(move |sender| async move { sender.close(Some(code), Some(reason)) }.boxed())),
    }
}
