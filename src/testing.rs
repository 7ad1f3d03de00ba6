//! Test-only exports: [`JsCallback`] driven from JavaScript, and a
//! socket-option probe. Only in a build with the `testing` feature
//! (`npm run build:testing`), never in the shipped addon. At the top of the
//! module order: it uses the callback type and the `CancellationToken`
//! class, and nothing uses it.

use std::sync::Mutex;

use napi::bindgen_prelude::{Function, PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;

use crate::bridge::error;
use crate::bridge::js_callback::JsCallback;
use crate::classes::cancellation_token::CancellationToken;

/// Payload of `__testCallCallback`: a plain field and a class instance.
#[napi(object, object_from_js = false)]
pub struct TestCallbackPayload {
    pub value: String,
    /// A `#[napi]` class value inside a `#[napi(object)]` payload.
    pub token: CancellationToken,
}

/// Result of `__testCallCallback`.
#[napi(object)]
pub struct TestCallbackResult {
    /// What the callback answered.
    pub value: String,
    /// Whether the callback cancelled the token it was given.
    pub token_cancelled: bool,
}

/// Options of `__testCallCallback`.
#[napi(object)]
#[derive(Default)]
pub struct TestCallbackOptions {
    /// Close the callback before calling it.
    pub abort_first: Option<bool>,
    /// Keep the callback alive in Rust for the rest of the process (to
    /// check that a live callback does not hold the event loop).
    pub retain: Option<bool>,
}

static RETAINED: Mutex<Vec<JsCallback<TestCallbackPayload, String>>> = Mutex::new(Vec::new());

/// @internal Calls `callback(null, {value, token})` through a
/// `JsCallback<TestCallbackPayload, String>` from a runtime task, then
/// cancels `token` from Rust (as a dispatch does when it ends). The
/// value `"__panic__"` makes the task panic instead.
#[napi(
    js_name = "__testCallCallback",
    ts_args_type = "callback: (err: null, payload: TestCallbackPayload) => string | Promise<string>, value: string, options?: TestCallbackOptions",
    ts_return_type = "Promise<TestCallbackResult>"
)]
pub fn test_call_callback<'env>(
    env: &'env Env,
    callback: Function<'_, Unknown<'_>, Unknown<'_>>,
    value: String,
    options: Option<TestCallbackOptions>,
) -> napi::Result<PromiseRaw<'env, TestCallbackResult>> {
    let options = options.unwrap_or_default();
    let callback: JsCallback<TestCallbackPayload, String> = JsCallback::from_function("testCallback", &callback)?;
    if options.abort_first.unwrap_or(false) {
        callback.abort()?;
    }
    if options.retain.unwrap_or(false) {
        RETAINED.lock().unwrap_or_else(|e| e.into_inner()).push(callback.clone());
    }
    let token = tokio_util::sync::CancellationToken::new();
    error::spawn_promise(env, async move {
        // Called from another task, as the core does.
        let call = crate::bridge::runtime::spawn(async move {
            // A bug in a task: logged by the panic hook, a rejection here.
            assert_ne!(value, "__panic__", "test panic requested");
            let payload = TestCallbackPayload { value, token: CancellationToken::from_inner(token.clone()) };
            let answer = callback.call(payload).await;
            let token_cancelled = token.is_cancelled();
            // Like a dispatch that ends: listeners registered by the
            // callback then run through the weak threadsafe function.
            token.cancel();
            Ok::<_, anyhow::Error>(TestCallbackResult { value: answer?, token_cancelled })
        });
        call.await?
    })
}

/// @internal How many `onCancelled` listeners have a task waiting for
/// their token now (a released or fired listener has none).
#[napi(js_name = "__testWaitingCancellationListeners")]
pub fn test_waiting_cancellation_listeners() -> u32 {
    crate::classes::cancellation_token::waiting_listeners() as u32
}

/// @internal Whether `TCP_NODELAY` is set on the socket `fd` of this process
/// (`getsockopt`; Node has no way to read it). For the test that the addon
/// leaves sockets it did not open alone. Unix only.
#[napi(js_name = "testingSocketNoDelay")]
pub fn testing_socket_no_delay(fd: i32) -> napi::Result<bool> {
    if fd < 0 {
        return Err(napi::Error::new(napi::Status::InvalidArg, format!("not a file descriptor: {fd}")));
    }
    socket_no_delay(fd).map_err(|e| napi::Error::from_reason(format!("getsockopt(TCP_NODELAY) on fd {fd}: {e}")))
}

#[cfg(unix)]
fn socket_no_delay(fd: i32) -> std::io::Result<bool> {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` is only borrowed for one `getsockopt`: `ManuallyDrop`
    // never closes it, and an fd that is not an open socket makes the call
    // fail (EBADF, ENOTSOCK) rather than misbehave.
    let stream = std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd) });
    stream.nodelay()
}

#[cfg(not(unix))]
fn socket_no_delay(_fd: i32) -> std::io::Result<bool> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "file descriptors are Unix only"))
}
