//! Raw WebSockets for the actor's `onWebSocket` (spec websocket-actor-connect
//! §6): every path but `/connect`.
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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::FutureExt;
use rivet_envoy_client::config::{HttpRequest as EnvoyRequest, WebSocketHandler, WebSocketMessage, WebSocketSender};

use super::SocketInfo;
use crate::actor::{conn, ActorTaskHandle, Conn, ConnTransport, HttpRequest};
use crate::dispatcher::Dispatcher;
use crate::error::{catalog, RivetError};
use crate::protocol::actor_connect::{parse_conn_params, protocol_header_values};

/// Events kept for a socket whose host has not set its event sink yet.
/// Beyond either bound the socket is closed with 1011 [`BUFFER_FULL_REASON`].
pub const MAX_BUFFERED_EVENTS: usize = 1024;
/// Bytes of message payload kept before the event sink is set.
pub const MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;
/// Close reason when events pile up with no event sink to take them.
pub const BUFFER_FULL_REASON: &str = "actor.websocket_buffer_full";
/// Close reason of an inbound text frame that is not UTF-8.
pub const INVALID_UTF8_REASON: &str = "message.invalid_utf8";

/// The payload of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebSocketData {
    Text(String),
    Binary(Vec<u8>),
}

impl WebSocketData {
    fn len(&self) -> usize {
        match self {
            WebSocketData::Text(text) => text.len(),
            WebSocketData::Binary(bytes) => bytes.len(),
        }
    }
}

/// What the host is told about a raw socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebSocketEvent {
    /// A frame from the client; `message_index` is the gateway's index.
    Message { data: WebSocketData, message_index: Option<u16> },
    /// The socket closed (either side); always the last event, sent once.
    Close { code: u16, reason: String, was_clean: bool },
}

/// Receives the events of one socket, in order. Called from runtime
/// threads: it must not block (the JS surface queues a call and returns).
pub type EventSink = Box<dyn Fn(WebSocketEvent) + Send + Sync>;

/// The actor's end of a raw WebSocket: send, close, and the event sink.
/// Cheap to clone; every clone is the same socket.
#[derive(Clone)]
pub struct RawWebSocket(Arc<Inner>);

struct Inner {
    /// Bound when the gateway has the socket open.
    sender: OnceLock<WebSocketSender>,
    /// Our close frame went out (or the client's close arrived).
    closed: AtomicBool,
    /// The close event was delivered and the connection released.
    finished: AtomicBool,
    events: Mutex<Events>,
    /// Runs once when the socket is finished (ends the connection).
    on_finish: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

#[derive(Default)]
struct Events {
    sink: Option<EventSink>,
    buffer: VecDeque<WebSocketEvent>,
    buffered_bytes: usize,
}

impl Default for RawWebSocket {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RawWebSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawWebSocket")
            .field("open", &self.0.sender.get().is_some())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl RawWebSocket {
    /// A socket not bound to the gateway yet (sends fail until it is).
    pub fn new() -> Self {
        Self(Arc::new(Inner {
            sender: OnceLock::new(),
            closed: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            events: Mutex::default(),
            on_finish: Mutex::new(None),
        }))
    }

    /// Binds the gateway's sender (once; later calls are ignored).
    pub fn bind(&self, sender: WebSocketSender) {
        let _ = self.0.sender.set(sender);
    }

    /// Sends one frame. A text frame must be UTF-8. After the socket closed
    /// the frame is dropped, as a browser WebSocket does.
    pub fn send(&self, data: Vec<u8>, binary: bool) -> anyhow::Result<()> {
        if !binary && std::str::from_utf8(&data).is_err() {
            return Err(RivetError::new("message", "invalid_utf8", "A WebSocket text message must be valid UTF-8.")
                .into_anyhow());
        }
        if self.is_closed() {
            tracing::debug!("frame sent on a closed raw websocket dropped");
            return Ok(());
        }
        let Some(sender) = self.0.sender.get() else {
            return Err(catalog::invalid_state("the WebSocket is not open yet").into_anyhow());
        };
        sender.send(data, binary);
        Ok(())
    }

    /// Closes the socket from the actor's side (default code 1000): the
    /// close frame goes to the client, then the close event is delivered and
    /// the connection ends. Closing twice does nothing.
    pub fn close(&self, code: Option<u16>, reason: Option<String>) {
        let code = code.unwrap_or(1000);
        let reason = reason.unwrap_or_default();
        self.send_close(code, &reason);
        self.finish(code, reason);
    }

    /// True once either side closed the socket.
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    /// Sets where events go. Events buffered until now are delivered first,
    /// in order; a later call replaces the sink.
    pub fn set_event_sink(&self, sink: EventSink) {
        let mut events = lock(&self.0.events);
        while let Some(event) = events.buffer.pop_front() {
            sink(event);
        }
        events.buffered_bytes = 0;
        events.sink = Some(sink);
    }

    /// Runs `f` once, when the socket is finished.
    pub(crate) fn set_on_finish(&self, f: impl FnOnce() + Send + 'static) {
        if self.0.finished.load(Ordering::Acquire) {
            f();
            return;
        }
        *lock(&self.0.on_finish) = Some(Box::new(f));
        // Finished meanwhile: `finish` may have missed the hook.
        if self.0.finished.load(Ordering::Acquire) {
            if let Some(f) = lock(&self.0.on_finish).take() {
                f();
            }
        }
    }

    /// A frame from the client: binary as is, text only if UTF-8 (else
    /// close 1007 `message.invalid_utf8`).
    pub(crate) fn on_client_message(&self, data: Vec<u8>, binary: bool, message_index: u16) {
        if self.is_closed() {
            return;
        }
        let data = if binary {
            WebSocketData::Binary(data)
        } else {
            match String::from_utf8(data) {
                Ok(text) => WebSocketData::Text(text),
                Err(_) => {
                    tracing::debug!("raw websocket text frame is not UTF-8");
                    self.close(Some(1007), Some(INVALID_UTF8_REASON.to_string()));
                    return;
                }
            }
        };
        self.deliver(WebSocketEvent::Message { data, message_index: Some(message_index) });
    }

    /// The client closed: our side closes too (1000 `hack_force_close`, as
    /// the reference does), then the close event and the connection's end.
    pub(crate) fn on_client_close(&self, code: u16, reason: String) {
        self.send_close(1000, "hack_force_close");
        self.finish(code, reason);
    }

    fn send_close(&self, code: u16, reason: &str) {
        if self.0.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(sender) = self.0.sender.get() {
            sender.close(Some(code), Some(reason.to_string()));
        }
    }

    fn finish(&self, code: u16, reason: String) {
        if self.0.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        self.deliver(WebSocketEvent::Close { code, reason, was_clean: code == 1000 });
        let hook = lock(&self.0.on_finish).take();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// To the sink, or into the buffer while there is none. The close event
    /// is always buffered; a message over the bounds closes the socket.
    fn deliver(&self, event: WebSocketEvent) {
        let overflow = {
            let mut events = lock(&self.0.events);
            if let Some(sink) = &events.sink {
                sink(event);
                false
            } else {
                let size = match &event {
                    WebSocketEvent::Message { data, .. } => data.len(),
                    WebSocketEvent::Close { .. } => 0,
                };
                let is_close = matches!(event, WebSocketEvent::Close { .. });
                if is_close
                    || (events.buffer.len() < MAX_BUFFERED_EVENTS && events.buffered_bytes + size <= MAX_BUFFERED_BYTES)
                {
                    events.buffered_bytes += size;
                    events.buffer.push_back(event);
                    false
                } else {
                    true
                }
            }
        };
        if overflow {
            tracing::warn!(
                max_events = MAX_BUFFERED_EVENTS,
                max_bytes = MAX_BUFFERED_BYTES,
                "raw websocket events piled up before an event callback was set; closing"
            );
            self.close(Some(1011), Some(BUFFER_FULL_REASON.to_string()));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The connection's transport: `conn.disconnect()` closes the socket. A raw
/// socket has no actor-connect framing, so it cannot carry events.
impl ConnTransport for RawWebSocket {
    fn send_event(&self, _name: &str, _args_cbor: &[u8]) -> anyhow::Result<()> {
        Err(RivetError::new("connection", "not_configured", "Connection transport is not configured.")
            .with_metadata(serde_json::json!({ "component": "event_sender" }))
            .into_anyhow())
    }

    fn close(&self, code: u16, reason: &str) {
        RawWebSocket::close(self, Some(code), Some(reason.to_string()));
    }

    fn is_closed(&self) -> bool {
        RawWebSocket::is_closed(self)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder(ws: &RawWebSocket) -> Arc<Mutex<Vec<WebSocketEvent>>> {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink_got = got.clone();
        ws.set_event_sink(Box::new(move |event| sink_got.lock().unwrap().push(event)));
        got
    }

    fn text(s: &str, index: u16) -> WebSocketEvent {
        WebSocketEvent::Message { data: WebSocketData::Text(s.into()), message_index: Some(index) }
    }

    #[test]
    fn events_before_the_sink_are_delivered_in_order() {
        let ws = RawWebSocket::new();
        ws.on_client_message(b"a".to_vec(), false, 1);
        ws.on_client_message(vec![0xff, 0], true, 2);
        let got = recorder(&ws);
        ws.on_client_message(b"c".to_vec(), false, 3);
        let got = got.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                text("a", 1),
                WebSocketEvent::Message { data: WebSocketData::Binary(vec![0xff, 0]), message_index: Some(2) },
                text("c", 3),
            ]
        );
    }

    #[test]
    fn invalid_utf8_closes_with_1007_once() {
        let ws = RawWebSocket::new();
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        ws.set_on_finish(move || flag.store(true, Ordering::SeqCst));
        let got = recorder(&ws);
        ws.on_client_message(vec![0xc3, 0x28], false, 1);
        ws.on_client_message(b"late".to_vec(), false, 2);
        ws.on_client_close(1000, "bye".into());
        assert!(ws.is_closed());
        assert!(finished.load(Ordering::SeqCst));
        assert_eq!(
            got.lock().unwrap().clone(),
            vec![WebSocketEvent::Close { code: 1007, reason: INVALID_UTF8_REASON.into(), was_clean: false }]
        );
    }

    #[test]
    fn client_close_is_one_event_and_clean_only_for_1000() {
        let ws = RawWebSocket::new();
        let got = recorder(&ws);
        ws.on_client_close(1001, "going away".into());
        ws.close(Some(1000), None);
        assert_eq!(
            got.lock().unwrap().clone(),
            vec![WebSocketEvent::Close { code: 1001, reason: "going away".into(), was_clean: false }]
        );
    }

    #[test]
    fn the_buffer_is_bounded_and_overflow_closes() {
        let ws = RawWebSocket::new();
        for i in 0..=MAX_BUFFERED_EVENTS {
            ws.on_client_message(b"x".to_vec(), false, i as u16);
        }
        assert!(ws.is_closed());
        let got = recorder(&ws);
        let got = got.lock().unwrap();
        assert_eq!(got.len(), MAX_BUFFERED_EVENTS + 1);
        assert_eq!(
            got.last(),
            Some(&WebSocketEvent::Close { code: 1011, reason: BUFFER_FULL_REASON.into(), was_clean: false })
        );
    }

    #[test]
    fn send_checks_text_and_needs_an_open_socket() {
        let ws = RawWebSocket::new();
        let err = ws.send(vec![0xff], false).unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "message.invalid_utf8");
        let err = ws.send(b"hi".to_vec(), false).unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "napi.invalid_state");
        ws.close(None, None);
        assert!(ws.send(b"hi".to_vec(), false).is_ok(), "frames after close are dropped");
    }

    #[test]
    fn closing_through_the_connection_ends_it() {
        let ws = RawWebSocket::new();
        let conn = Conn::new("c".into(), vec![], Some(Arc::new(ws.clone()) as Arc<dyn ConnTransport>), None);
        let got = recorder(&ws);
        conn.close_transport(1000, "done");
        assert!(conn.is_closed());
        assert_eq!(
            got.lock().unwrap().clone(),
            vec![WebSocketEvent::Close { code: 1000, reason: "done".into(), was_clean: true }]
        );
        assert_eq!(
            RivetError::extract(&conn.send("x", &[]).unwrap_err()).qualified_code(),
            "connection.not_configured"
        );
    }
}
