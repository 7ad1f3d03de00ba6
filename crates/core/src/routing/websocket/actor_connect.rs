//! The actor-connect WebSocket (docs/wire-formats.md):
//! handshake and connection setup, then actions (concurrently) and
//! subscriptions (in order) over one socket.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::FutureExt;
use rivet_envoy_client::config::{WebSocketHandler, WebSocketMessage, WebSocketSender};

use super::socket_info::SocketInfo;
use super::transport::SocketTransport;
use crate::actor::outbox::Kind;
use crate::actor::output_gate::unconfirmed;
use crate::actor::save::SaveOptions;
use crate::actor::{conn, ActorTaskHandle, Conn, ConnTransport, Hibernation, HttpRequest};
use crate::dispatcher::Dispatcher;
use crate::error::RivetError;
use crate::protocol::actor_connect::{
    decode_to_server, error_message, outgoing_too_long_message, parse_conn_params, parse_encoding,
    protocol_header_values, setup_timed_out_message, ToClient, ToServer,
};
use crate::routing::failure::{self, Call, Transport};

/// Sets the connection up (hooks bounded by `on_connect_timeout`) and
/// returns the socket's handler; its `on_open` sends `Init`, or the setup
/// error and a 1011 close.
pub(super) async fn open(
    dispatcher: &Arc<Dispatcher>,
    handle: ActorTaskHandle,
    socket: SocketInfo,
    sender: WebSocketSender,
) -> anyhow::Result<WebSocketHandler> {
    let SocketInfo { gateway_id, request_id, path, headers, is_hibernatable, is_restoring } = socket;
    let values = protocol_header_values(&headers);
    let encoding = match parse_encoding(&values) {
        Ok(encoding) => encoding,
        Err(err) => match err.close() {
            Some((code, reason)) => {
                // Any encoding will do: nothing is sent before the close.
                let transport = Arc::new(SocketTransport::new(sender, crate::protocol::encoding::Encoding::Json, 0));
                return Ok(close_on_open(transport, code, reason));
            }
            None => return Err(err.into_anyhow()),
        },
    };
    let config = handle.config();
    let transport = Arc::new(SocketTransport::new(sender, encoding, config.max_outgoing_message_size));
    let max_incoming = config.max_incoming_message_size;

    if is_restoring {
        // A socket that survived the previous generation's sleep: take over
        // its connection. No hooks run and no `Init` is sent.
        let Some(conn) = handle.context().conns().find_hibernated(gateway_id, request_id) else {
            return Ok(close_on_open(transport, 1011, "connection.restore_not_found"));
        };
        conn.attach_transport(transport.clone());
        tracing::debug!(conn = conn.id(), "hibernated connection restored");
        return Ok(handler(Socket { dispatcher: dispatcher.clone(), handle, conn, transport, max_incoming }, None));
    }

    let params = match parse_conn_params(&values) {
        Ok(params) => params,
        // The reference fails the callback here, which the gateway retries
        // for ~20 s before the client sees an opaque error. Accepting and
        // closing with the reason fails fast and says why.
        Err(err) => {
            tracing::debug!(error = %err, "invalid connection params");
            return Ok(close_on_open(transport, 1011, "protocol.invalid_actor_connect_request"));
        }
    };
    let headers_lower: HashMap<String, String> =
        headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    let hibernation = is_hibernatable.then(|| Hibernation {
        gateway_id,
        request_id,
        client_message_index: 0,
        path: path.clone(),
        headers: headers_lower.clone(),
    });
    let conn = Conn::new(conn::new_id(), params, Some(transport.clone() as Arc<dyn ConnTransport>), hibernation);
    conn.note_caller(&headers_lower);
    let request =
        HttpRequest { method: "GET".into(), uri: path, headers: headers_lower, body: Vec::new(), ..Default::default() };

    let setup = tokio::time::timeout(config.on_connect_timeout, handle.connect(conn.clone(), Some(request))).await;
    let first: (ToClient, Option<String>) = match setup {
        Ok(Ok(())) => (
            ToClient::Init { actor_id: handle.context().actor_id().to_string(), connection_id: conn.id().to_string() },
            None,
        ),
        Ok(Err(err)) => {
            let e = RivetError::extract(&err).with_actor_if_missing(handle.context().specifier());
            tracing::debug!(error = %e, "actor-connect setup refused");
            (error_message(&e, None, false), Some(e.qualified_code()))
        }
        Err(_) => {
            // The hooks may still finish: closing the transport first makes
            // a late registration refuse itself.
            transport.close(1011, "actor.callback_timed_out");
            handle.disconnect(conn.clone());
            (setup_timed_out_message(config.on_connect_timeout.as_millis()), Some("actor.callback_timed_out".into()))
        }
    };

    if first.1.is_none() && conn.is_hibernatable() {
        // Its record must exist before the actor can sleep.
        handle.context().request_save(SaveOptions::default());
    }
    let on_open_transport = transport.clone();
    let on_open: OnOpen = Box::new(move |_sender| {
        async move {
            match first {
                (init, None) => {
                    if let Err(err) = on_open_transport.send(&init) {
                        let e = RivetError::extract(&err);
                        let reason = if e.qualified_code() == "message.outgoing_too_long" {
                            e.qualified_code()
                        } else {
                            "actor.init_error".into()
                        };
                        on_open_transport.close(1011, &reason);
                    }
                }
                (error, Some(reason)) => {
                    on_open_transport.send_unchecked(&error);
                    on_open_transport.close(1011, &reason);
                }
            }
        }
        .boxed()
    });

    Ok(handler(Socket { dispatcher: dispatcher.clone(), handle, conn, transport, max_incoming }, Some(on_open)))
}

type OnOpen = Box<dyn FnOnce(WebSocketSender) -> rivet_envoy_client::config::BoxFuture<()> + Send>;

fn handler(socket: Socket, on_open: Option<OnOpen>) -> WebSocketHandler {
    let socket = Arc::new(socket);
    let on_message_socket = socket.clone();
    let on_close_socket = socket;
    WebSocketHandler {
        on_message: Box::new(move |message: WebSocketMessage| {
            let socket = on_message_socket.clone();
            async move { socket.on_message(message).await }.boxed()
        }),
        on_close: Box::new(move |_code, _reason| {
            let socket = on_close_socket.clone();
            async move { socket.handle.context().disconnect(&socket.conn) }.boxed()
        }),
        on_open,
    }
}

/// Accepts the socket only to close it (unsupported encoding, bad params,
/// unknown restore target).
fn close_on_open(transport: Arc<SocketTransport>, code: u16, reason: &'static str) -> WebSocketHandler {
    WebSocketHandler {
        on_message: Box::new(|_| async {}.boxed()),
        on_close: Box::new(|_, _| async {}.boxed()),
        on_open: Some(Box::new(move |_| async move { transport.close(code, reason) }.boxed())),
    }
}

/// Why an inbound frame closes the socket before it is decoded: over the
/// size limit (1011 `message.incoming_too_long`), or a text frame that is
/// not UTF-8 (1007 `message.invalid_utf8`, the close code RFC 6455 gives
/// data inconsistent with its frame type).
fn frame_refusal(data: &[u8], binary: bool, max_incoming: usize) -> Option<(u16, &'static str)> {
    if data.len() > max_incoming {
        return Some((1011, "message.incoming_too_long"));
    }
    if !binary && std::str::from_utf8(data).is_err() {
        return Some((1007, crate::actor::websocket::INVALID_UTF8_REASON));
    }
    None
}

struct Socket {
    dispatcher: Arc<Dispatcher>,
    handle: ActorTaskHandle,
    conn: Conn,
    transport: Arc<SocketTransport>,
    max_incoming: usize,
}

impl Socket {
    /// Closes the socket from our side and ends its connection at once
    /// (`onDisconnect` included; idempotent). Engine 2.3 answers our close
    /// with a close of its own, which ended the connection before; engine
    /// 3.0 does not, and the connection waited for a close that never came
    /// (docs/engine.md).
    fn close(&self, code: u16, reason: &str) {
        self.transport.close(code, reason);
        self.handle.context().disconnect(&self.conn);
    }

    async fn on_message(self: Arc<Self>, message: WebSocketMessage) {
        if self.transport.is_closed() {
            return;
        }
        if let Some((code, reason)) = frame_refusal(&message.data, message.binary, self.max_incoming) {
            self.close(code, reason);
            return;
        }
        let request = match decode_to_server(self.transport_encoding(), &message.data) {
            Ok(request) => request,
            Err(err) => {
                tracing::debug!(error = %format!("{err:#}"), "undecodable actor-connect frame");
                self.close(1011, "actor.invalid_request");
                return;
            }
        };
        let index = message.message_index;
        match request {
            // Subscriptions are handled in order, inline (acknowledged first).
            ToServer::SubscriptionRequest { .. } if self.conn.is_hibernatable() && !self.ack(index) => {}
            ToServer::SubscriptionRequest { event_name, subscribe: true } => {
                if let Err(err) = self.handle.subscribe(self.conn.clone(), event_name).await {
                    let e = RivetError::extract(&err);
                    self.close(1011, &e.qualified_code());
                }
            }
            ToServer::SubscriptionRequest { event_name, subscribe: false } => self.conn.unsubscribe(&event_name),
            // Actions run concurrently; answers may come out of order.
            ToServer::ActionRequest { id, name, args_cbor } => {
                if self.replay_later() {
                    return;
                }
                let socket = self.clone();
                self.dispatcher.tracker().spawn(async move { socket.run_action(id, name, args_cbor, index).await });
            }
        }
    }

    /// A hibernatable connection's action that arrives (or fails) while the
    /// actor is going to sleep is dropped unacknowledged: the gateway
    /// replays it to the next generation.
    fn replay_later(&self) -> bool {
        self.conn.is_hibernatable() && (self.handle.context().sleep_requested() || self.handle.context().aborted())
    }

    /// Records and acknowledges client message `index` of a hibernatable
    /// connection (the record is saved with the next, throttled, save).
    fn ack(&self, index: u16) -> bool {
        let Some((gateway_id, request_id)) = self.conn.hibernation_ids() else { return true };
        self.conn.set_client_message_index(index);
        let ctx = self.handle.context();
        ctx.link().ack_hibernatable_message(gateway_id, request_id, index);
        ctx.request_save(SaveOptions::default());
        true
    }

    async fn run_action(self: Arc<Self>, id: u64, name: String, args: Vec<u8>, index: u16) {
        let hibernating_index = self.conn.is_hibernatable().then_some(index);
        let result = self.handle.action_on(Some(self.conn.clone()), hibernating_index, name.clone(), args).await;
        if let Err(err) = &result {
            failure::log_failed_call(self.handle.context(), Transport::WebSocket, Call::Action(&name), err);
        }
        if result.is_ok() {
            // Answered (and acknowledged) only once what it changed is saved,
            // in order with the events before it (docs/durability.md); a
            // refused one may be replayed below.
            let socket = self.clone();
            let ctx = self.handle.context().clone();
            let _ = ctx.after_save(Kind::Answer, move |released| {
                let result = match released {
                    Ok(()) => result,
                    Err(err) => Err(unconfirmed(&err).into_anyhow()),
                };
                socket.answer(id, index, result);
            });
            return;
        }
        self.answer(id, index, result);
    }

    /// Acknowledges and answers action `id` (client message `index`).
    fn answer(&self, id: u64, index: u16, result: anyhow::Result<Vec<u8>>) {
        if result.is_err() && self.replay_later() {
            return;
        }
        if self.conn.is_hibernatable() {
            self.ack(index);
        }
        let reply = match result {
            Ok(output) => ToClient::ActionResponse { id, output_cbor: output },
            Err(err) => {
                let e = RivetError::extract(&err).with_actor_if_missing(self.handle.context().specifier());
                self.transport.send_unchecked(&error_message(&e, Some(id), true));
                return;
            }
        };
        if let Err(err) = self.transport.send(&reply) {
            let e = RivetError::extract(&err);
            if e.qualified_code() == "message.outgoing_too_long" {
                self.transport.send_unchecked(&outgoing_too_long_message(id));
            } else {
                tracing::warn!(error = %format!("{err:#}"), "could not encode an action response");
                self.close(1011, "actor.send_failed");
            }
        }
    }

    fn transport_encoding(&self) -> crate::protocol::encoding::Encoding {
        self.transport.encoding()
    }
}

#[cfg(test)]
mod frame_tests {
    use super::frame_refusal;

    #[test]
    fn invalid_utf8_text_closes_with_1007() {
        assert_eq!(frame_refusal(&[0x68, 0xc3, 0x28], false, 100), Some((1007, "message.invalid_utf8")));
    }

    #[test]
    fn binary_frames_are_not_checked_for_utf8() {
        assert_eq!(frame_refusal(&[0xc3, 0x28], true, 100), None);
        assert_eq!(frame_refusal("héllo".as_bytes(), false, 100), None);
    }

    #[test]
    fn size_is_checked_first() {
        assert_eq!(frame_refusal(&[0xff; 101], false, 100), Some((1011, "message.incoming_too_long")));
    }
}
