//! Gateway WebSockets → actor (docs/wire-formats.md).
//!
//! `/connect` speaks the actor-connect protocol ([`actor_connect`]); any
//! other path is a raw WebSocket for the actor's `onWebSocket` ([`raw`]),
//! except `/inspector/connect` ([`crate::inspector::ws`]).
//! An admission failure fails the callback, which the envoy answers with
//! close 1011 "Server Error".

mod actor_connect;
#[cfg(test)]
mod proptests;
pub mod raw;
mod socket_info;
mod transport;

use std::collections::HashMap;
use std::sync::Arc;

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, WebSocketHandler, WebSocketSender};

use crate::dispatcher::Dispatcher;
use socket_info::SocketInfo;

/// Whether the gateway may keep a socket on `path` open while the actor
/// sleeps, as far as the path tells: always for actor-connect (raw sockets
/// ask the actor's config, [`raw::can_hibernate`]).
pub fn can_hibernate(path: &str) -> bool {
    path.split('?').next() == Some("/connect")
}

#[allow(clippy::too_many_arguments)]
pub async fn handle_websocket(
    dispatcher: &Arc<Dispatcher>,
    actor_id: &str,
    gateway_id: [u8; 4],
    request_id: [u8; 4],
    _request: EnvoyRequest,
    path: String,
    headers: HashMap<String, String>,
    is_hibernatable: bool,
    is_restoring_hibernatable: bool,
    sender: WebSocketSender,
) -> anyhow::Result<WebSocketHandler> {
    let handle = dispatcher.active_actor(actor_id)?;
    let route = path.split('?').next().unwrap_or("");
    if route == "/inspector/connect" {
        return Ok(crate::inspector::ws::open(dispatcher, handle, &path, &headers));
    }
    let socket = SocketInfo {
        gateway_id,
        request_id,
        path: path.clone(),
        headers,
        is_hibernatable,
        is_restoring: is_restoring_hibernatable,
    };
    match route {
        "/connect" => actor_connect::open(dispatcher, handle, socket, sender).await,
        _ => raw::open(dispatcher, handle, _request, socket).await,
    }
}
