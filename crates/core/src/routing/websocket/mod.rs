//! Gateway WebSockets → actor (spec websocket-actor-connect §1).
//!
//! `/connect` speaks the actor-connect protocol ([`actor_connect`]);
//! other paths are raw WebSockets for the actor's `onWebSocket` (not built
//! yet: refused). An admission failure fails the callback, which the envoy
//! answers with close 1011 "Server Error".

mod actor_connect;
mod transport;

use std::collections::HashMap;
use std::sync::Arc;

use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, WebSocketHandler, WebSocketSender};

use crate::dispatcher::Dispatcher;
use crate::error::catalog;

#[allow(clippy::too_many_arguments)]
pub async fn handle_websocket(
    dispatcher: &Arc<Dispatcher>,
    actor_id: &str,
    _request: EnvoyRequest,
    path: String,
    headers: HashMap<String, String>,
    is_hibernatable: bool,
    _is_restoring_hibernatable: bool,
    sender: WebSocketSender,
) -> anyhow::Result<WebSocketHandler> {
    let handle = dispatcher.active_actor(actor_id)?;
    let route = path.split('?').next().unwrap_or("");
    match route {
        "/connect" => actor_connect::open(dispatcher, handle, path, headers, is_hibernatable, sender).await,
        _ => Err(catalog::unsupported("raw WebSockets (onWebSocket)").into_anyhow()),
    }
}
