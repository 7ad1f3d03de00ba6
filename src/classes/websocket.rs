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
//! Events that arrive before the callback is set are kept and delivered
//! first, in order. The callback is a *weak* threadsafe function: an open
//! socket never keeps Node's event loop alive. A throw from the callback is
//! logged and does not reach the process.
//!
//! The queue of calls waiting for the JS thread is bounded by the core's
//! bound on events the host has not handled (`MAX_BUFFERED_EVENTS` events,
//! `MAX_BUFFERED_BYTES` bytes, in `rivetkit_native_core::actor::websocket`):
//! an event counts until the callback has returned for it. When JavaScript
//! falls that far behind, the socket is closed with 1011
//! `actor.websocket_buffer_full`, and the close event is still delivered,
//! after the events already queued.

use napi::bindgen_prelude::{Buffer, Either, Function, PromiseRaw, ToNapiValue, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode, UnknownReturnValue};
use napi::{sys, Env, Status};
use napi_derive::napi;
use rivetkit_native_core::actor::websocket::{
    Delivered, EventSink, RawWebSocket, WebSocketData, WebSocketEvent as CoreEvent,
};

use crate::bridge::error::{reject, spawn_promise, throw, to_js_error};
use crate::bridge::types::args::{self, ArgResult};
use rivetkit_native_core::error::validate;

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
    Close {
        code: u32,
        reason: String,
        was_clean: bool,
    },
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

/// A close frame's payload is at most 125 bytes: the code's 2 and the reason.
const MAX_CLOSE_REASON_BYTES: usize = 123;

/// A close code a server may put in a close frame (RFC 6455 §7.4): not the
/// reserved 1004-1006 and 1015, nor anything outside 1000-4999 but the
/// registered 1000-1014.
fn close_code(code: f64) -> ArgResult<u16> {
    let code = validate::size("code", code, 4999)?;
    match code {
        1000..=1003 | 1007..=1014 | 3000..=4999 => Ok(code as u16),
        _ => Err(validate::invalid("code", format!("{code} is not a close code an endpoint may send"))),
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
    #[napi(ts_args_type = "data: Buffer, binary: boolean")]
    pub fn send(&self, env: &Env, data: Unknown<'_>, binary: Unknown<'_>) -> napi::Result<()> {
        let read =
            || -> ArgResult<(Vec<u8>, bool)> { Ok((args::bytes("data", data)?, args::boolean("binary", binary)?)) };
        let (data, binary) = read().map_err(|e| throw(env, e))?;
        self.inner.send(data, binary).map_err(|e| to_js_error(env, e))
    }

    /// Closes the socket (code 1000 by default); the close event follows and
    /// the connection ends (`onDisconnect`). Closing twice does nothing.
    /// `code` must be one a server may send (1000-1003, 1007-1014,
    /// 3000-4999) and `reason` at most 123 bytes, else the promise rejects
    /// with `napi.invalid_argument` and the socket stays open.
    #[napi(
        ts_args_type = "code?: number | undefined | null, reason?: string | undefined | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn close<'env>(
        &self,
        env: &'env Env,
        code: Option<Unknown<'env>>,
        reason: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let read = || -> ArgResult<(Option<u16>, Option<String>)> {
            let code = args::opt_number("code", code)?.map(close_code).transpose()?;
            let reason = args::opt_string("reason", reason)?;
            if let Some(reason) = &reason {
                if reason.len() > MAX_CLOSE_REASON_BYTES {
                    return Err(validate::invalid(
                        "reason",
                        format!("a close reason is at most {MAX_CLOSE_REASON_BYTES} bytes, got {}", reason.len()),
                    ));
                }
            }
            Ok((code, reason))
        };
        let (code, reason) = match read() {
            Ok(read) => read,
            Err(err) => return reject(env, err),
        };
        self.inner.close(code, reason);
        spawn_promise(env, async { Ok(()) })
    }

    /// Sets the callback that receives the socket's events (replacing any
    /// previous one); events received before are delivered first, in order.
    #[napi(ts_args_type = "callback: (event: WebSocketEvent) => void")]
    pub fn set_event_callback(&self, callback: Function<'_, EventArg, UnknownReturnValue>) -> napi::Result<()> {
        let tsfn = callback.build_threadsafe_function::<EventArg>().callee_handled::<false>().weak::<true>().build()?;
        self.inner.set_event_sink(JsEventSink(tsfn));
        Ok(())
    }
}

/// The event callback as the core's event sink.
///
/// Not a `JsCallback`: that calls `f(null, payload)` and awaits the answer
/// (a returned promise included), while this callback is called `f(event)`,
/// the `@rivetkit/rivetkit-napi` convention for it, and is not awaited; its
/// throw is only logged, and a promise it returns is left alone.
struct JsEventSink(ThreadsafeFunction<EventArg, UnknownReturnValue, EventArg, Status, false, true>);

impl EventSink for JsEventSink {
    fn deliver(&self, event: CoreEvent, delivered: Delivered) {
        // `delivered` travels with the call: the event stops counting against
        // the socket's bound once the callback returned (or the call was
        // dropped, e.g. the environment is closing).
        self.0.call_with_return_value(EventArg(event), ThreadsafeFunctionCallMode::NonBlocking, move |result, _env| {
            drop(delivered);
            if let Err(err) = result {
                tracing::warn!(error = %err.reason, "a websocket event callback threw");
            }
            Ok(())
        });
    }
}
