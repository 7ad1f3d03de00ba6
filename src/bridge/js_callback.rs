//! One typed wrapper for every JavaScript function the core calls.
//!
//! [`JsCallback<Args, Ret>`] holds a napi-rs threadsafe function and can be
//! called from any thread or task:
//!
//! - The JavaScript side is called as `callback(null, payload)`, the
//!   callee-handled convention of `@rivetkit/rivetkit-napi` that the
//!   `rivetkit` TypeScript runtime unwraps with `unwrapTsfnPayload(err,
//!   payload)`. `Args` is converted on the JS thread: any `ToNapiValue`,
//!   typically a `#[napi(object)]` struct, whose fields may be `#[napi]`
//!   class values (each call then creates a fresh JS instance of the class
//!   around the Rust value, e.g. an `ActorContext` holding an `Arc`).
//! - The function may return a promise or a plain value; either way the
//!   value is converted to `Ret` on the JS thread. A value of the wrong type
//!   is an ordinary error, `napi.invalid_return`, never a process abort.
//! - A throw or a rejection becomes [`crate::bridge::error::from_js_error`] (the
//!   structured error it carries, or an internal error); a function whose
//!   environment is closing becomes `actor.js_callback_unavailable`.
//! - The threadsafe function is *weak*: it never keeps Node's event loop
//!   alive, so an idle host exits once JavaScript has nothing left to do.
//!
//! Three functions are called through threadsafe functions built by hand
//! instead, because they are called without the leading `null` and nobody
//! awaits them: the `abort` behind `ctx.abortSignal()`, `CancellationToken`
//! listeners, and a raw WebSocket's event callback. Each says why there.
//!
//! The call queue is unbounded (`MaxQueueSize = 0`). napi-rs' `call_async`
//! always queues non-blocking, so a bounded queue would not push back: a
//! full queue fails the call at once (`QueueFull`). The number of queued
//! calls is instead bounded where the work comes from: each actor's task
//! reads its bounded inbox and runs at most its own in-flight callbacks.

use std::any::type_name;
use std::ptr;
use std::sync::Arc;

use futures::channel::oneshot;
use napi::bindgen_prelude::{FromNapiValue, Function, JsValuesTupleIntoVec, Object, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{sys, JsValue, Status, ValueType};

use crate::bridge::error;
use crate::bridge::settle::{self, Settlement};

/// The threadsafe function behind a [`JsCallback`]: callee-handled
/// (`(err, payload)`), weak, unbounded queue.
type Tsfn<Args, Ret> = ThreadsafeFunction<Args, Returned<Ret>, Args, Status, true, true, 0>;

/// A JavaScript function `(err: null, payload: Args) => Ret | Promise<Ret>`
/// that Rust can await from any thread. Cheap to clone.
///
/// ```ignore
/// #[napi(object, object_from_js = false)]
/// pub struct RequestPayload {
///     pub ctx: ActorContext,          // a #[napi] class, by value
///     pub request: JsHttpRequest,     // a #[napi(object)]
/// }
///
/// let on_request: JsCallback<RequestPayload, JsHttpResponse> =
///     JsCallback::from_function("onRequest", &function)?;   // on the JS thread
/// // later, in any task:
/// let response = on_request.call(RequestPayload { ctx, request }).await?;
/// ```
pub struct JsCallback<Args, Ret>
where
    Args: JsValuesTupleIntoVec + 'static,
    Ret: FromNapiValue + Send + 'static,
{
    name: &'static str,
    tsfn: Arc<Tsfn<Args, Ret>>,
}

impl<Args, Ret> Clone for JsCallback<Args, Ret>
where
    Args: JsValuesTupleIntoVec + 'static,
    Ret: FromNapiValue + Send + 'static,
{
    fn clone(&self) -> Self {
        Self { name: self.name, tsfn: self.tsfn.clone() }
    }
}

impl<Args, Ret> std::fmt::Debug for JsCallback<Args, Ret>
where
    Args: JsValuesTupleIntoVec + 'static,
    Ret: FromNapiValue + Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsCallback").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<Args, Ret> JsCallback<Args, Ret>
where
    Args: JsValuesTupleIntoVec + Send + 'static,
    Ret: FromNapiValue + Send + 'static,
{
    /// Wraps a JavaScript function. Must run on the JS thread (inside a
    /// `#[napi]` function). `name` is the hook's name, used in errors.
    ///
    /// The `Function`'s own type parameters only shape the generated
    /// TypeScript; the call signature is `JsCallback`'s.
    pub fn from_function<A: JsValuesTupleIntoVec, R>(
        name: &'static str,
        function: &Function<'_, A, R>,
    ) -> napi::Result<Self> {
        let value = function.value();
        // Same conversion napi-rs applies to a `ThreadsafeFunction` argument.
        let tsfn = unsafe { Tsfn::<Args, Ret>::from_napi_value(value.env, value.value) }?;
        Ok(Self { name, tsfn: Arc::new(tsfn) })
    }

    /// Wraps `value` if it is a function, `None` otherwise.
    pub fn from_unknown(name: &'static str, value: Unknown<'_>) -> napi::Result<Option<Self>> {
        if value.get_type()? != ValueType::Function {
            return Ok(None);
        }
        let function: Function<'_, Unknown<'_>, Unknown<'_>> = unsafe { value.cast()? };
        Self::from_function(name, &function).map(Some)
    }

    /// Wraps the property `key` of `object` if it is a function, `None` if
    /// it is missing or not a function (the reference adapter's rule for
    /// optional hooks).
    pub fn from_property(name: &'static str, object: &Object<'_>, key: &str) -> napi::Result<Option<Self>> {
        use napi::bindgen_prelude::JsObjectValue;
        let value: Unknown<'_> = object.get_named_property(key)?;
        Self::from_unknown(name, value)
    }

    /// The hook's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Calls the function on the JS thread and waits for its answer (the
    /// resolution if it returned a promise). The JS thread hands the final
    /// answer over once: a value at once, a promise's outcome when it
    /// settles ([`crate::bridge::settle`]).
    pub async fn call(&self, args: Args) -> anyhow::Result<Ret> {
        self.call_then(args, || {}).await
    }

    /// [`Self::call`], running `returned` on the JS thread as soon as the
    /// function has returned (before any other JavaScript runs): what it
    /// reads is in step with what the function's synchronous part saw.
    pub async fn call_then(&self, args: Args, returned: impl FnOnce() + Send + 'static) -> anyhow::Result<Ret> {
        let (tx, rx) = oneshot::channel::<Answer<Ret>>();
        let id = settle::next_id();
        let on_return = returned;
        let status = self.tsfn.call_with_return_value(
            Ok(args),
            ThreadsafeFunctionCallMode::NonBlocking,
            move |returned: napi::Result<Returned<Ret>>, env: napi::Env| {
                on_return();
                match returned {
                    Err(err) => {
                        let _ = tx.send(Answer::Threw(err));
                    }
                    Ok(Returned::Ready(converted)) => {
                        let _ = tx.send(Answer::Value(converted));
                    }
                    Ok(Returned::Pending(promise)) => {
                        unsafe { settle::watch(env.raw(), promise, id, Box::new(AnswerOnSettle(tx))) };
                    }
                }
                Ok(())
            },
        );
        if status != Status::Ok {
            return Err(self.call_failed(napi::Error::from_status(status)));
        }
        let answer = Waiting { id, rx: Some(rx) }.await;
        let converted = match answer {
            Some(Answer::Value(converted)) => converted,
            Some(Answer::Threw(err)) => return Err(self.call_failed(err)),
            Some(Answer::Rejected(err, stack)) => return Err(error::from_js_error_with_stack(self.name, err, stack)),
            Some(Answer::Failed(err)) => return Err(error::js_callback_unavailable(self.name, &err.reason)),
            // The call left the queue unanswered: the environment was torn
            // down, or the payload could not be converted.
            None => {
                return Err(error::js_callback_unavailable(
                    self.name,
                    "the call was dropped before JavaScript answered",
                ))
            }
        };
        converted.0.map_err(|detail| error::invalid_return(self.name, &detail))
    }

    fn call_failed(&self, err: napi::Error) -> anyhow::Error {
        match err.status {
            // A throw from the function itself.
            Status::PendingException => error::from_js_error(self.name, err),
            Status::Closing => error::js_callback_unavailable(self.name, "the JavaScript environment is closing"),
            // The call left the queue without an answer: the environment
            // was torn down, or the payload could not be converted.
            _ => error::js_callback_unavailable(self.name, &err.reason),
        }
    }

    /// Closes the threadsafe function now: later calls fail with
    /// `actor.js_callback_unavailable`. Dropping the last clone releases it
    /// gracefully instead; this is for tests.
    #[cfg(feature = "testing")]
    pub fn abort(&self) -> napi::Result<()> {
        let handle = &self.tsfn.handle;
        handle.with_write_aborted(|mut aborted| {
            if !*aborted {
                let status = unsafe {
                    sys::napi_release_threadsafe_function(handle.get_raw(), sys::ThreadsafeFunctionReleaseMode::abort)
                };
                if status != sys::Status::napi_ok {
                    return Err(napi::Error::new(Status::from(status), "could not abort the threadsafe function"));
                }
                *aborted = true;
            }
            Ok(())
        })
    }
}

/// The resolution of a callback whose value is ignored (`void` hooks,
/// promises awaited only for their settling): any value is accepted, so a
/// hook that happens to return something still works.
pub struct Ignored;

impl FromNapiValue for Ignored {
    unsafe fn from_napi_value(_env: sys::napi_env, _value: sys::napi_value) -> napi::Result<Self> {
        Ok(Ignored)
    }
}

/// What the function returned, read on the JS thread: a value already
/// converted, or a promise (a handle valid for the rest of the call, when
/// its watch is set up).
pub(crate) enum Returned<Ret: FromNapiValue + Send + 'static> {
    Ready(Converted<Ret>),
    Pending(sys::napi_value),
}

impl<Ret: FromNapiValue + Send + 'static> FromNapiValue for Returned<Ret> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        let mut is_promise = false;
        let status = unsafe { sys::napi_is_promise(env, value, &mut is_promise) };
        if status == sys::Status::napi_ok && is_promise {
            Ok(Returned::Pending(value))
        } else {
            Ok(Returned::Ready(unsafe { Converted::from_napi_value(env, value) }?))
        }
    }
}

/// The final answer of a call, sent once from the JS thread.
enum Answer<Ret> {
    Value(Converted<Ret>),
    /// The function threw.
    Threw(napi::Error),
    /// Its promise rejected (with the reason's JavaScript stack, if any).
    Rejected(napi::Error, Option<String>),
    /// Its promise could not be watched.
    Failed(napi::Error),
}

/// Sends a promise's outcome as the call's answer (on the JS thread).
struct AnswerOnSettle<Ret>(oneshot::Sender<Answer<Ret>>);

impl<Ret: FromNapiValue + Send + 'static> settle::Settle for AnswerOnSettle<Ret> {
    fn abandoned(&self) -> bool {
        self.0.is_canceled()
    }

    fn settle(self: Box<Self>, settlement: Settlement) {
        let answer = match settlement {
            Settlement::Fulfilled(env, value) => Answer::Value(
                // Never fails: a wrong type is kept as the detail of
                // `napi.invalid_return`.
                unsafe { Converted::from_napi_value(env, value) }
                    .unwrap_or_else(|err| Converted(Err(format!("could not read the value ({})", err.reason)))),
            ),
            Settlement::Rejected(env, reason) => {
                let stack = error_stack(env, reason);
                let err = match unsafe { Unknown::from_napi_value(env, reason) } {
                    Ok(reason) => napi::Error::from_unknown_without_coercion(reason),
                    Err(err) => err,
                };
                Answer::Rejected(err, stack)
            }
            Settlement::Failed(err) => Answer::Failed(err),
        };
        let _ = self.0.send(answer);
    }
}

/// The caller's end of a call: the answer, or `None` if the call was
/// dropped unanswered. Dropping it (the caller gave up) forgets the
/// promise's settler, if one was registered.
struct Waiting<Ret> {
    id: u64,
    rx: Option<oneshot::Receiver<Answer<Ret>>>,
}

impl<Ret> std::future::Future for Waiting<Ret> {
    type Output = Option<Answer<Ret>>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let Some(rx) = self.rx.as_mut() else { return std::task::Poll::Ready(None) };
        std::pin::Pin::new(rx).poll(cx).map(Result::ok)
    }
}

impl<Ret> Drop for Waiting<Ret> {
    fn drop(&mut self) {
        // The receiver goes first, so that a settler registered from now on
        // sees its waiter gone (`settle::watch` checks under the lock).
        drop(self.rx.take());
        settle::forget(self.id);
    }
}

/// A JS value converted to `Ret`, or why it could not be. Never fails to
/// convert itself, so that a wrong type is reported as `napi.invalid_return`
/// and not mixed up with a rejection.
pub(crate) struct Converted<Ret>(Result<Ret, String>);

impl<Ret: FromNapiValue> FromNapiValue for Converted<Ret> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        match unsafe { Ret::from_napi_value(env, value) } {
            Ok(ret) => Ok(Converted(Ok(ret))),
            Err(err) => {
                // A conversion can run JS (getters) that throws: leave no
                // exception pending behind an answer we return normally.
                clear_pending_exception(env);
                let got = js_type_name(env, value);
                Ok(Converted(Err(format!("expected {}, got {got} ({})", short_type_name::<Ret>(), err.reason))))
            }
        }
    }
}

fn clear_pending_exception(env: sys::napi_env) {
    let mut pending = false;
    if unsafe { sys::napi_is_exception_pending(env, &mut pending) } == sys::Status::napi_ok && pending {
        let mut exception = ptr::null_mut();
        unsafe { sys::napi_get_and_clear_last_exception(env, &mut exception) };
    }
}

/// The stack of a rejection's reason, for the log: that of its `cause` when
/// it has one (RivetKit wraps the user's error in a bridge error whose
/// `cause` is the original), else its own. Reads only own-or-inherited
/// string properties; a throwing getter is ignored.
fn error_stack(env: sys::napi_env, reason: sys::napi_value) -> Option<String> {
    let read = |object: sys::napi_value, key: &str| -> Option<sys::napi_value> {
        let mut kind = 0;
        if unsafe { sys::napi_typeof(env, object, &mut kind) } != sys::Status::napi_ok
            || kind != sys::ValueType::napi_object
        {
            return None;
        }
        let key = std::ffi::CString::new(key).ok()?;
        let mut value = ptr::null_mut();
        let status = unsafe { sys::napi_get_named_property(env, object, key.as_ptr(), &mut value) };
        if status != sys::Status::napi_ok {
            clear_pending_exception(env);
            return None;
        }
        Some(value)
    };
    let string = |value: sys::napi_value| -> Option<String> {
        let mut kind = 0;
        if unsafe { sys::napi_typeof(env, value, &mut kind) } != sys::Status::napi_ok
            || kind != sys::ValueType::napi_string
        {
            return None;
        }
        unsafe { String::from_napi_value(env, value) }.ok()
    };
    read(reason, "cause")
        .and_then(|cause| read(cause, "stack"))
        .and_then(string)
        .or_else(|| read(reason, "stack").and_then(string))
}

fn js_type_name(env: sys::napi_env, value: sys::napi_value) -> &'static str {
    let mut kind = 0;
    if unsafe { sys::napi_typeof(env, value, &mut kind) } != sys::Status::napi_ok {
        return "an unknown value";
    }
    match kind {
        sys::ValueType::napi_undefined => "undefined",
        sys::ValueType::napi_null => "null",
        sys::ValueType::napi_boolean => "a boolean",
        sys::ValueType::napi_number => "a number",
        sys::ValueType::napi_string => "a string",
        sys::ValueType::napi_symbol => "a symbol",
        sys::ValueType::napi_object => "an object",
        sys::ValueType::napi_function => "a function",
        sys::ValueType::napi_external => "an external",
        sys::ValueType::napi_bigint => "a bigint",
        _ => "an unknown value",
    }
}

/// `alloc::string::String` → `String`, keeping generic arguments readable;
/// [`crate::bridge::types::JsBytes`] is named after what JavaScript must return.
fn short_type_name<T>() -> String {
    short_rust_type_name::<T>().replace("JsBytes", "Buffer")
}

fn short_rust_type_name<T>() -> String {
    let full = type_name::<T>();
    // Keep the text after the last `::` of each path between delimiters.
    let mut result = String::with_capacity(full.len());
    let mut segment = String::new();
    for ch in full.chars() {
        match ch {
            '<' | '>' | ',' | ' ' | '(' | ')' | '[' | ']' | ';' | '&' => {
                result.push_str(segment.rsplit("::").next().unwrap_or(&segment));
                segment.clear();
                result.push(ch);
            }
            _ => segment.push(ch),
        }
    }
    result.push_str(segment.rsplit("::").next().unwrap_or(&segment));
    result
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn type_names_are_short() {
        assert_eq!(short_type_name::<String>(), "String");
        assert_eq!(short_type_name::<Option<Vec<u8>>>(), "Option<Vec<u8>>");
    }
}
