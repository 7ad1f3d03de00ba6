//! The actor's end of a raw WebSocket, the socket `onWebSocket` gets (see
//! docs/wire-formats.md): send, close, and the events the host is
//! told about, in order.
//!
//! The gateway side (the upgrade, the connection, the envoy's handler) is
//! `routing::websocket::raw`, which binds the gateway's sender here and
//! feeds the client's frames and close in; the actor task only passes the
//! socket to the `onWebSocket` hook. Either side's close delivers one close
//! event and runs the finish hook (which ends the connection).
//!
//! # The event queue and its bound
//!
//! Events go to the host's [`EventSink`] in order. An event counts against
//! the socket's bound from the moment it arrives until the host has handled
//! it: while it waits here for a sink to be set, and after it was handed to
//! the sink until the sink drops the event's [`Delivered`] (the JavaScript
//! surface drops it once the JS callback returned, so the bound also covers
//! the queue of calls waiting for the JS thread). At most
//! [`MAX_BUFFERED_EVENTS`] events and [`MAX_BUFFERED_BYTES`] bytes of
//! payload are outstanding. A client message beyond either bound is not
//! delivered: the socket is closed with 1011 [`BUFFER_FULL_REASON`]
//! (`actor.websocket_buffer_full`), and the close event, which is exempt
//! from the bound, is delivered after the events already queued. There is
//! no backpressure on the client: the gateway hands frames over in the
//! envoy's shared loop, which must not wait for one actor's JavaScript.
//!
//! The sink is never called with a lock held: one caller at a time drains
//! the queue, the others only append to it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rivet_envoy_client::config::WebSocketSender;

use super::conn::ConnTransport;
use crate::error::{catalog, RivetError};

/// Events of one socket the host has not handled yet: waiting for a sink,
/// or handed to it and not yet [`Delivered`]. Beyond either bound the
/// socket is closed with 1011 [`BUFFER_FULL_REASON`] (see the module docs).
pub const MAX_BUFFERED_EVENTS: usize = 1024;
/// Bytes of message payload the host has not handled yet (same rule).
pub const MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;
/// Close reason when events pile up faster than the host handles them.
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

impl WebSocketEvent {
    /// Bytes of payload, what [`MAX_BUFFERED_BYTES`] counts.
    fn payload_len(&self) -> usize {
        match self {
            WebSocketEvent::Message { data, .. } => data.len(),
            WebSocketEvent::Close { .. } => 0,
        }
    }
}

/// Receives the events of one socket, in order, one call at a time. Called
/// from runtime threads and never with a lock held: it must not block (the
/// JS surface queues a call and returns). The event counts against the
/// socket's bound until `delivered` is dropped; a sink that handles the
/// event before returning, such as any `Fn(WebSocketEvent)`, just drops it.
pub trait EventSink: Send + Sync + 'static {
    fn deliver(&self, event: WebSocketEvent, delivered: Delivered);
}

impl<F: Fn(WebSocketEvent) + Send + Sync + 'static> EventSink for F {
    fn deliver(&self, event: WebSocketEvent, _delivered: Delivered) {
        self(event)
    }
}

/// One event handed to the sink and not handled yet: it counts against the
/// socket's bound until this is dropped.
#[must_use = "the event counts against the socket's bound until this is dropped"]
pub struct Delivered {
    /// Weak: a call queued for the JS thread must not keep the socket alive.
    inner: Weak<Inner>,
    bytes: usize,
}

impl Drop for Delivered {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut events = lock(&inner.events);
            events.outstanding -= 1;
            events.outstanding_bytes -= self.bytes;
        }
    }
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivered").field("bytes", &self.bytes).finish_non_exhaustive()
    }
}

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
    /// The generation whose output gate holds this socket's frames
    /// (docs/durability.md); unset: frames leave at once.
    gate: OnceLock<Box<dyn GateHandle>>,
}

/// What a frame is told once its save is acknowledged, or why it was not.
pub type Release = Box<dyn FnOnce(Result<(), RivetError>) + Send>;

/// The generation whose output gate holds a socket's frames, held weakly
/// (the context's weak handle implements it, in [`super::outbox`]): the
/// socket neither keeps the generation alive nor needs to know its type.
pub trait GateHandle: Send + Sync + 'static {
    /// The gate, while its generation lives and the gate is on.
    fn upgrade(&self) -> Option<Box<dyn Gate>>;
}

/// A live output gate ([`super::outbox`]).
pub trait Gate {
    /// Runs `release` once the save covering what the generation changed so
    /// far is acknowledged. An `answer` always queues; an event may be
    /// refused (`actor.overloaded`), and `release` is then not called.
    fn after_save(&self, answer: bool, release: Release) -> Result<(), RivetError>;
}

#[derive(Default)]
struct Events {
    sink: Option<Arc<dyn EventSink>>,
    /// Events waiting for the sink (or for the drainer to hand them over).
    queue: VecDeque<WebSocketEvent>,
    /// Events (and their payload bytes) queued or handed to the sink and
    /// not yet [`Delivered`]: what the bounds apply to.
    outstanding: usize,
    outstanding_bytes: usize,
    /// Someone is handing events to the sink; others only queue.
    draining: bool,
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
            gate: OnceLock::new(),
        }))
    }

    /// Holds this socket's frames behind a generation's output gate (once).
    pub fn set_gate(&self, gate: impl GateHandle) {
        let _ = self.0.gate.set(Box::new(gate));
    }

    /// The generation's gate, if it lives and its gate is on.
    fn gate(&self) -> Option<Box<dyn Gate>> {
        self.0.gate.get().and_then(|handle| handle.upgrade())
    }

    /// Binds the gateway's sender (once; later calls are ignored).
    pub fn bind(&self, sender: WebSocketSender) {
        let _ = self.0.sender.set(sender);
    }

    /// Sends one frame. A text frame must be UTF-8. After the socket closed
    /// the frame is dropped, as a browser WebSocket does.
    pub fn send(&self, data: Vec<u8>, binary: bool) -> anyhow::Result<()> {
        if !binary && std::str::from_utf8(&data).is_err() {
            return Err(RivetError::new(
                crate::error_codes::MESSAGE_INVALID_UTF8,
                "A WebSocket text message must be valid UTF-8.",
            )
            .into_anyhow());
        }
        if self.is_closed() {
            tracing::debug!("frame sent on a closed raw websocket dropped");
            return Ok(());
        }
        let Some(sender) = self.0.sender.get() else {
            return Err(catalog::invalid_state("the WebSocket is not open yet").into_anyhow());
        };
        match self.gate() {
            Some(ctx) => {
                let sender = sender.clone();
                ctx.after_save(
                    false,
                    Box::new(move |released| match released {
                        Ok(()) => sender.send(data, binary),
                        Err(err) => tracing::debug!(error = %err.message, "a raw websocket frame was dropped: what it reports was not saved"),
                    }),
                )
                .map_err(RivetError::into_anyhow)
            }
            None => {
                sender.send(data, binary);
                Ok(())
            }
        }
    }

    /// Closes the socket from the actor's side (default code 1000): the
    /// close frame goes to the client (after the frames the output gate
    /// still holds), then the close event is delivered and the connection
    /// ends. Closing twice does nothing. The side that closes first owns
    /// the close event: a client's close that crosses ours (its echo of
    /// our frame, say) does not replace our code.
    pub fn close(&self, code: Option<u16>, reason: Option<String>) {
        if !self.claim_close() {
            return;
        }
        let code = code.unwrap_or(1000);
        let reason = reason.unwrap_or_default();
        let frame = {
            let (ws, reason) = (self.clone(), reason.clone());
            move |_| ws.send_close_frame(code, &reason)
        };
        match self.gate() {
            // An answer always queues; the close goes out whatever the save did.
            Some(gate) => {
                let _ = gate.after_save(true, Box::new(frame));
            }
            None => frame(Ok(())),
        }
        self.finish(code, reason);
    }

    /// True once either side closed the socket.
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }

    /// Sets where events go. Events buffered until now are delivered first,
    /// in order; a later call replaces the sink.
    pub fn set_event_sink(&self, sink: impl EventSink) {
        lock(&self.0.events).sink = Some(Arc::new(sink));
        self.drain();
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
            let hook = lock(&self.0.on_finish).take();
            if let Some(f) = hook {
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
    /// Nothing when our side closed first: its event stands.
    pub(crate) fn on_client_close(&self, code: u16, reason: String) {
        if !self.claim_close() {
            return;
        }
        self.send_close_frame(1000, "hack_force_close");
        self.finish(code, reason);
    }

    /// True for the first side to close, which then sends the close frame
    /// and delivers the close event.
    fn claim_close(&self) -> bool {
        !self.0.closed.swap(true, Ordering::AcqRel)
    }

    fn send_close_frame(&self, code: u16, reason: &str) {
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

    /// Queues the event for the sink, then hands the queue over if nobody
    /// else is. The close event is always queued; a message over the bounds
    /// closes the socket instead.
    fn deliver(&self, event: WebSocketEvent) {
        let size = event.payload_len();
        let overflow = {
            let mut events = lock(&self.0.events);
            let is_close = matches!(event, WebSocketEvent::Close { .. });
            if is_close
                || (events.outstanding < MAX_BUFFERED_EVENTS && events.outstanding_bytes + size <= MAX_BUFFERED_BYTES)
            {
                events.outstanding += 1;
                events.outstanding_bytes += size;
                events.queue.push_back(event);
                false
            } else {
                true
            }
        };
        if overflow {
            tracing::warn!(
                max_events = MAX_BUFFERED_EVENTS,
                max_bytes = MAX_BUFFERED_BYTES,
                "raw websocket events piled up faster than the host handled them; closing"
            );
            self.close(Some(1011), Some(BUFFER_FULL_REASON.to_string()));
            return;
        }
        self.drain();
    }

    /// Hands queued events to the sink, in order, with no lock held during
    /// a call. One drainer at a time: an event queued meanwhile (even by
    /// the sink itself) is handed over by the drainer already running.
    fn drain(&self) {
        let mut events = lock(&self.0.events);
        if events.draining {
            return;
        }
        events.draining = true;
        let _reset = ResetDraining(&self.0.events);
        loop {
            let next = match events.sink.clone() {
                Some(sink) => events.queue.pop_front().map(|event| (sink, event)),
                None => None,
            };
            let Some((sink, event)) = next else {
                events.draining = false;
                return;
            };
            drop(events);
            let bytes = event.payload_len();
            sink.deliver(event, Delivered { inner: Arc::downgrade(&self.0), bytes });
            events = lock(&self.0.events);
        }
    }
}

/// Lets another caller drain if a sink panicked mid-drain.
struct ResetDraining<'a>(&'a Mutex<Events>);

impl Drop for ResetDraining<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            lock(self.0).draining = false;
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
        Err(RivetError::new(crate::error_codes::CONNECTION_NOT_CONFIGURED, "Connection transport is not configured.")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::Conn;

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

    /// A gate that releases at once, after letting the client's close
    /// arrive: the moment between our close frame and our close event.
    struct ClientClosesMeanwhile(RawWebSocket);

    impl GateHandle for ClientClosesMeanwhile {
        fn upgrade(&self) -> Option<Box<dyn Gate>> {
            Some(Box::new(ClientClosesMeanwhile(self.0.clone())))
        }
    }

    impl Gate for ClientClosesMeanwhile {
        fn after_save(&self, _answer: bool, release: Release) -> Result<(), RivetError> {
            release(Ok(()));
            self.0.on_client_close(1000, String::new());
            Ok(())
        }
    }

    #[test]
    fn our_close_owns_the_event_when_the_clients_close_crosses_it() {
        let ws = RawWebSocket::new();
        ws.set_gate(ClientClosesMeanwhile(ws.clone()));
        let got = recorder(&ws);
        ws.close(Some(4001), Some("server says bye".into()));
        assert_eq!(
            got.lock().unwrap().clone(),
            vec![WebSocketEvent::Close { code: 4001, reason: "server says bye".into(), was_clean: false }]
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

    /// A sink that keeps every event's [`Delivered`], like a host that has
    /// not run its callback yet.
    struct Holding {
        got: Arc<Mutex<Vec<WebSocketEvent>>>,
        held: Arc<Mutex<Vec<Delivered>>>,
    }

    impl EventSink for Holding {
        fn deliver(&self, event: WebSocketEvent, delivered: Delivered) {
            self.got.lock().unwrap().push(event);
            self.held.lock().unwrap().push(delivered);
        }
    }

    #[test]
    fn events_the_host_has_not_handled_count_against_the_bound() {
        let ws = RawWebSocket::new();
        let (got, held) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
        ws.set_event_sink(Holding { got: got.clone(), held: held.clone() });
        for i in 0..MAX_BUFFERED_EVENTS {
            ws.on_client_message(b"x".to_vec(), false, i as u16);
        }
        assert!(!ws.is_closed());
        // The host caught up: there is room again.
        held.lock().unwrap().clear();
        for i in 0..MAX_BUFFERED_EVENTS {
            ws.on_client_message(b"y".to_vec(), false, i as u16);
        }
        assert!(!ws.is_closed());
        ws.on_client_message(b"z".to_vec(), false, 0);
        assert!(ws.is_closed());
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 2 * MAX_BUFFERED_EVENTS + 1);
        assert_eq!(
            got.last(),
            Some(&WebSocketEvent::Close { code: 1011, reason: BUFFER_FULL_REASON.into(), was_clean: false })
        );
    }

    #[test]
    fn a_sink_may_close_its_socket_from_inside_a_call() {
        let ws = RawWebSocket::new();
        let got = Arc::new(Mutex::new(Vec::new()));
        let (sink_got, sink_ws) = (got.clone(), ws.clone());
        ws.set_event_sink(move |event: WebSocketEvent| {
            let is_message = matches!(event, WebSocketEvent::Message { .. });
            sink_got.lock().unwrap().push(event);
            if is_message {
                sink_ws.close(Some(4000), Some("seen".into()));
            }
        });
        ws.on_client_message(b"a".to_vec(), false, 1);
        ws.on_client_message(b"b".to_vec(), false, 2);
        assert_eq!(
            got.lock().unwrap().clone(),
            vec![text("a", 1), WebSocketEvent::Close { code: 4000, reason: "seen".into(), was_clean: false }]
        );
    }
}
