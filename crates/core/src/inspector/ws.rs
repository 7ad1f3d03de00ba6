//! The inspector WebSocket, `/inspector/connect` (docs/inspector.md).
//!
//! The client authenticates with the subprotocol
//! `rivet_inspector_token.<token>` and names its protocol version with
//! `?protocol_version=6` (or 5). On open it gets `Init` (the saved state and the
//! queue size), then `StateUpdated` after every state write; it may ask for
//! the state, the connections, the queue, and run actions.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use rivet_envoy_client::config::{WebSocketHandler, WebSocketMessage, WebSocketSender};
use tokio_util::sync::CancellationToken;

use super::wire::{self, Message, Request};
use crate::actor::ActorTaskHandle;
use crate::dispatcher::Dispatcher;
use crate::error::RivetError;

/// Close code and reason of a refused socket.
const POLICY: u16 = 1008;

/// The bearer token offered as `rivet_inspector_token.<token>`.
fn offered_token(headers: &HashMap<String, String>) -> Option<&str> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("sec-websocket-protocol"))
        .and_then(|(_, value)| value.split(',').map(str::trim).find_map(|p| p.strip_prefix("rivet_inspector_token.")))
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

/// Checks the token and the version, and returns the socket's handler.
pub fn open(
    dispatcher: &Arc<Dispatcher>,
    handle: ActorTaskHandle,
    path: &str,
    headers: &HashMap<String, String>,
) -> WebSocketHandler {
    if let Err(err) = super::verify(handle.context(), offered_token(headers)) {
        tracing::debug!(error = %err, "inspector socket refused");
        return close_on_open(POLICY, "inspector.unauthorized");
    }
    let version = match asked_version(path).and_then(|v| v.parse::<u16>().ok()) {
        Some(v) if (wire::OLDEST..=wire::VERSION).contains(&v) => v,
        _ => return close_on_open(POLICY, "inspector.unsupported_version"),
    };
    let socket = Arc::new(Socket { dispatcher: dispatcher.clone(), handle, closed: CancellationToken::new(), version });
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
    /// The version the client asked for.
    version: u16,
}

/// Sends `message` in `version`.
fn send(sender: &WebSocketSender, version: u16, message: &Message) {
    match wire::downgrade_message(&wire::encode_message(message), version) {
        Ok(bytes) => sender.send(bytes, true),
        Err(err) => tracing::warn!(error = %format!("{err:#}"), "could not encode an inspector message"),
    }
}

impl Socket {
    /// Sends `Init`, then pushes `StateUpdated` after each state write
    /// until the socket closes or the generation ends.
    fn on_open(self: Arc<Self>, sender: WebSocketSender) {
        let ctx = self.handle.context().clone();
        let mut revisions = ctx.inspector().subscribe_state();
        revisions.borrow_and_update();
        send(&sender, self.version, &Message::Init { state: Some(ctx.state()), queue_size: ctx.queue().len() as u64 });
        let closed = self.closed.clone();
        let version = self.version;
        let fence = ctx.write_fence().clone();
        self.dispatcher.tracker().spawn(async move {
            let _client = super::ClientGuard::new(&ctx);
            loop {
                tokio::select! {
                    _ = closed.cancelled() => break,
                    _ = fence.cancelled() => break,
                    changed = revisions.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        revisions.borrow_and_update();
                        send(&sender, version, &Message::StateUpdated { state: ctx.state() });
                    }
                }
            }
        });
    }

    fn on_message(self: Arc<Self>, message: WebSocketMessage) {
        let ctx = self.handle.context();
        // Version 5 requests are version 6 requests (checked on the way).
        let upgraded = wire::upgrade_request(&message.data, self.version);
        let request = match upgraded.and_then(|bytes| wire::decode_request(&bytes)) {
            Ok(request) => request,
            Err(err) => {
                tracing::debug!(error = %format!("{err:#}"), "undecodable inspector frame");
                message.sender.close(Some(1011), Some("inspector.invalid_request".into()));
                return;
            }
        };
        let reply = match request {
            Request::State { id } => Message::State { rid: id, state: Some(ctx.state()) },
            Request::Connections { id } => Message::Connections {
                rid: id,
                // Details: an empty CBOR map (params and state live in JavaScript).
                connections: ctx.conns().list().iter().map(|c| (c.id().to_string(), vec![0xa0])).collect(),
            },
            Request::Rpcs { id } => Message::Rpcs { rid: id, rpcs: Vec::new() },
            Request::Queue { id, limit: _ } => Message::Queue {
                rid: id,
                size: ctx.queue().len() as u64,
                max_size: ctx.queue().limits().max_size as u64,
            },
            Request::Action { id, name, args } => {
                let handle = self.handle.clone();
                let sender = message.sender.clone();
                let version = self.version;
                self.dispatcher.tracker().spawn(async move {
                    let reply = match handle.action_on(None, name, args).await {
                        Ok(output) => Message::Action { rid: id, output },
                        Err(err) => Message::Error { message: RivetError::extract(&err).to_string() },
                    };
                    send(&sender, version, &reply);
                });
                return;
            }
            Request::Other { tag } => {
                Message::Error { message: format!("inspector.unsupported_request: request kind {tag} is not served") }
            }
        };
        send(&message.sender, self.version, &reply);
    }
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
        assert_eq!(asked_version("/inspector/connect?x=1&protocol_version=6"), Some("6"));
        assert_eq!(asked_version("/inspector/connect"), None);
    }
}
