//! `WebSocket`: JavaScript's handle on one raw WebSocket (`onWebSocket`).
//!
//! `send(data, binary)` sends a frame, `close(code?, reason?)` closes the
//! socket, and `setEventCallback(callback)` sets where the socket's events
//! go: `callback(event)` (one argument, no error first, as in
//! `@rivetkit/rivetkit-napi`) with
//!
//! - `{kind: "message", data, binary, messageIndex}`: `data` is a string
//!   for a text frame and a `Buffer` for a binary one;
//! - `{kind: "close", code, reason, wasClean}`: the last event, once.
//!
//! Events that arrive before the callback is set are kept (bounded) and
//! delivered first, in order. The callback is a *weak* threadsafe function:
//! an open socket never keeps Node's event loop alive. A throw from the
//! callback is logged and does not reach the process.

use napi::bindgen_prelude::{Buffer, Either, Function, PromiseRaw, ToNapiValue};
use napi::threadsafe_function::{ThreadsafeFunctionCallMode, UnknownReturnValue};
use napi::{sys, Env};
use napi_derive::napi;
use rivetkit_native_core::routing::websocket::raw::{
    RawWebSocket, WebSocketData, WebSocketEvent as CoreEvent,
};

use crate::actor_context::ActorContext;
use crate::conn::ConnHandle;
use crate::error::{spawn_promise, to_js_error};
use crate::types::JsHttpRequest;

/// Payload of `onWebSocket`.
#[napi(object, object_from_js = false)]
pub struct WebSocketPayload {
    pub ctx: ActorContext,
    /// The connection the socket belongs to (its params are the
    /// `rivet_conn_params.*` subprotocol).
    pub conn: ConnHandle,
    pub ws: WebSocket,
    /// The upgrade request: method, path (with query) and headers.
    pub request: Option<JsHttpRequest>,
}

/// An event of a raw WebSocket, given to the `setEventCallback` callback:
/// a frame from the client (`data` is a string for a text frame, a
/// `Buffer` for a binary one; `messageIndex` is the gateway's index), or
/// the close of the socket by either side (the last event; `wasClean` is
/// `code === 1000`).
#[napi(discriminant = "kind", discriminant_case = "lowercase", object_from_js = false)]
pub enum WebSocketEvent {
    Message {
        #[napi(ts_type = "string | Buffer")]
        data: Either<String, Buffer>,
        binary: bool,
        message_index: Option<u32>,
    },
    Close { code: u32, reason: String, was_clean: bool },
}

impl From<CoreEvent> for WebSocketEvent {
    fn from(event: CoreEvent) -> Self {
        match event {
            CoreEvent::Message { data, message_index } => {
                let (data, binary) = match data {
                    WebSocketData::Text(text) => (Either::A(text), false),
                    WebSocketData::Binary(bytes) => (Either::B(Buffer::from(bytes)), true),
                };
                WebSocketEvent::Message { data, binary, message_index: message_index.map(u32::from) }
            }
            CoreEvent::Close { code, reason, was_clean } => {
                WebSocketEvent::Close { code: u32::from(code), reason, was_clean }
            }
        }
    }
}

/// A core event, converted to a JS `WebSocketEvent` on the JS thread.
#[doc(hidden)]
pub struct EventArg(CoreEvent);

impl ToNapiValue for EventArg {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        unsafe { WebSocketEvent::to_napi_value(env, WebSocketEvent::from(val.0)) }
    }
}

/// A raw WebSocket of an actor, given to `onWebSocket`.
#[napi]
pub struct WebSocket {
    inner: RawWebSocket,
}

impl WebSocket {
    pub(crate) fn new(inner: RawWebSocket) -> Self {
        Self { inner }
    }
}

#[napi]
impl WebSocket {
    /// Sends a frame: binary, or text (`data` must then be UTF-8, else
    /// `message.invalid_utf8`). Frames sent after the socket closed are
    /// dropped.
    #[napi]
    pub fn send(&self, env: &Env, data: Buffer, binary: bool) -> napi::Result<()> {
        self.inner.send(data.to_vec(), binary).map_err(|e| to_js_error(env, e))
    }

    /// Closes the socket (code 1000 by default); the close event follows and
    /// the connection ends (`onDisconnect`). Closing twice does nothing.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(
        &self,
        env: &'env Env,
        code: Option<u16>,
        reason: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        self.inner.close(code, reason);
        spawn_promise(env, async { Ok(()) })
    }

    /// Sets the callback that receives the socket's events (replacing any
    /// previous one); events received before are delivered first, in order.
    #[napi(ts_args_type = "callback: (event: WebSocketEvent) => void")]
    pub fn set_event_callback(
        &self,
        callback: Function<'_, EventArg, UnknownReturnValue>,
    ) -> napi::Result<()> {
        let tsfn = callback
            .build_threadsafe_function::<EventArg>()
            .callee_handled::<false>()
            .weak::<true>()
            .build()?;
        self.inner.set_event_sink(Box::new(move |event| {
            tsfn.call_with_return_value(
                EventArg(event),
                ThreadsafeFunctionCallMode::NonBlocking,
                |result, _env| {
                    if let Err(err) = result {
                        tracing::warn!(error = %err.reason, "a websocket event callback threw");
                    }
                    Ok(())
                },
            );
        }));
        Ok(())
    }
}
