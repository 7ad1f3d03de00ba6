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
mod raw;
mod socket_info;
mod transport;

use std::collections::HashMap;
use std::sync::Arc;

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, WebSocketHandler, WebSocketSender};

use crate::dispatcher::Dispatcher;
use socket_info::SocketInfo;

/// Whether the gateway may keep a socket on `path` to `actor_id` open
/// while the actor sleeps (the envoy's `can_hibernate`), by route and the
/// active generation's config: actor-connect (`/connect`) as the contract
/// profile says (`canHibernateConnect`, else 2.3: yes, 3.0: as
/// `canHibernateWebsocket`; docs/versions.md), the inspector's socket
/// never, any other (raw) by `canHibernateWebsocket`. False when
/// `actor_id` has no active generation.
pub fn can_hibernate(dispatcher: &Dispatcher, actor_id: &str, path: &str) -> bool {
    let Ok(handle) = dispatcher.active_actor(actor_id) else {
        return false;
    };
    let config = handle.config();
    match path.split('?').next().unwrap_or("") {
        "/connect" => config.contract.connect_hibernates(config.can_hibernate_connect, config.can_hibernate_websocket),
        "/inspector/connect" => false,
        _ => config.can_hibernate_websocket,
    }
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
