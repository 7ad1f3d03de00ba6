//! `CancellationToken`: a JavaScript handle on a
//! [`tokio_util::sync::CancellationToken`].
//!
//! Rust hands tokens to JavaScript (e.g. an action's `cancelToken`, which
//! the dispatcher cancels when the dispatch ends) and JavaScript hands them
//! to Rust; both sides see the same token. Listeners registered with
//! `onCancelled` run once on the JS thread after cancellation:
//!
//! - cancelled by `cancel()` on the same JS object: they run in a microtask
//!   queued by `cancel()`, so they run even if nothing else keeps the event
//!   loop alive;
//! - cancelled elsewhere (Rust, another JS object around the same token): a
//!   runtime task waiting for the token calls them through a *weak*
//!   threadsafe function, which never keeps the event loop alive;
//! - already cancelled at registration: in a microtask.
//!
//! A listener's errors behave like any JavaScript exception raised from a
//! task (an uncaught exception), as for `AbortSignal` listeners.
//!
//! Each listener waiting for a token that is never cancelled keeps one idle
//! task; tokens the core hands out are cancelled when their dispatch ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{Function, FunctionRef, JsObjectValue};
use napi::threadsafe_function::{ThreadsafeFunctionCallMode, UnknownReturnValue};
use napi::Env;
use napi_derive::napi;
use tokio_util::sync::CancellationToken as TokioToken;

/// A listener registered through this JS object, for `cancel()` to run
/// directly. `fired` is shared with the waiting task: whoever sets it first
/// runs the listener.
struct LocalListener {
    fired: Arc<AtomicBool>,
    function: FunctionRef<(), UnknownReturnValue>,
}

/// A cancellation signal shared between JavaScript and Rust.
#[napi]
pub struct CancellationToken {
    inner: TokioToken,
    local: Mutex<Vec<LocalListener>>,
}

#[napi]
impl CancellationToken {
    /// A new token, not cancelled.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self::from_inner(TokioToken::new())
    }

    /// Whether the token has been cancelled.
    #[napi]
    pub fn aborted(&self) -> bool {
        self.inner.is_cancelled()
    }

    /// Cancels the token (idempotent). Listeners run soon after, never
    /// inside this call.
    #[napi]
    pub fn cancel(&self, env: &Env) -> napi::Result<()> {
        // Claim this object's listeners before cancelling, so that the
        // waiting tasks leave them to us and none is lost at exit.
        let claimed: Vec<_> =
            self.lock_local().drain(..).filter(|l| !l.fired.swap(true, Ordering::AcqRel)).map(|l| l.function).collect();
        self.inner.cancel();
        for function in claimed {
            queue_microtask(env, function.borrow_back(env)?)?;
        }
        Ok(())
    }

    /// Runs `callback` once, after the token is cancelled (soon, if it
    /// already is). Does not keep the process alive.
    #[napi(ts_args_type = "callback: () => void")]
    pub fn on_cancelled(&self, env: &Env, callback: Function<'_, (), UnknownReturnValue>) -> napi::Result<()> {
        if self.inner.is_cancelled() {
            return queue_microtask(env, callback);
        }
        // Not a `JsCallback`: that calls `f(null, payload)` and catches a
        // throw to hand it to an awaiting caller. A listener is called with
        // no argument, nobody awaits it, and its throw must stay an uncaught
        // exception (see the module docs), which a direct call gives.
        let tsfn = callback.build_threadsafe_function::<()>().callee_handled::<false>().weak::<true>().build()?;
        let fired = Arc::new(AtomicBool::new(false));
        let mut local = self.lock_local();
        // Drop listeners that a waiting task already ran.
        local.retain(|l| !l.fired.load(Ordering::Acquire));
        local.push(LocalListener { fired: fired.clone(), function: callback.create_ref()? });
        drop(local);
        let token = self.inner.clone();
        crate::bridge::runtime::spawn(async move {
            token.cancelled().await;
            if !fired.swap(true, Ordering::AcqRel) {
                tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
            }
        });
        Ok(())
    }
}

impl CancellationToken {
    /// A JS object around an existing token (for payloads to JavaScript).
    pub fn from_inner(inner: TokioToken) -> Self {
        Self { inner, local: Mutex::new(Vec::new()) }
    }

    /// The shared token.
    pub fn inner(&self) -> &TokioToken {
        &self.inner
    }

    fn lock_local(&self) -> std::sync::MutexGuard<'_, Vec<LocalListener>> {
        // Only the JS thread locks it; a poisoned lock still holds valid data.
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn queue_microtask<'a>(env: &Env, callback: Function<'a, (), UnknownReturnValue>) -> napi::Result<()> {
    let queue: Function<'a, Function<'a, (), UnknownReturnValue>, UnknownReturnValue> =
        env.get_global()?.get_named_property("queueMicrotask")?;
    queue.call(callback)?;
    Ok(())
}
