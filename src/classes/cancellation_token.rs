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
//! task and its threadsafe function until the token is cancelled or the
//! listener is released: `onCancelled` returns a [`CancellationListener`]
//! whose `release()` ends that task and frees the function without calling
//! the callback (RivetKit 3.0 releases every listener when its context is
//! disposed; 2.3 ignores the return; docs/versions.md). Release is explicit
//! only: dropping the listener object does not release it, so a callback
//! still fires for a caller that kept no reference to its registration.
//! Tokens the core hands out are cancelled when their dispatch ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{Function, FunctionRef, JsObjectValue};
use napi::threadsafe_function::{ThreadsafeFunctionCallMode, UnknownReturnValue};
use napi::Env;
use napi_derive::napi;
use tokio_util::sync::CancellationToken as TokioToken;

/// A listener registered through this JS object, for `cancel()` to run
/// directly. `fired` is shared with the waiting task and the listener's
/// `release()`: whoever sets it first decides (runs the callback, or drops
/// it unrun).
struct LocalListener {
    fired: Arc<AtomicBool>,
    function: FunctionRef<(), UnknownReturnValue>,
}

/// The listeners registered through one JS object; only the JS thread
/// locks it (`cancel()`, `onCancelled`, `release()`).
type LocalListeners = Arc<Mutex<Vec<LocalListener>>>;

/// A cancellation signal shared between JavaScript and Rust.
#[napi]
pub struct CancellationToken {
    inner: TokioToken,
    local: LocalListeners,
}

/// The registration `CancellationToken.onCancelled` returns.
///
/// `release()` stops waiting for the cancellation without calling the
/// callback, ends the task that waited and frees its threadsafe function.
/// Dropping this object releases nothing: the callback must still fire when
/// the caller keeps no reference to its registration.
#[napi]
pub struct CancellationListener {
    /// Claimed by whoever comes first: the callback's run or `release()`.
    fired: Arc<AtomicBool>,
    /// Ends the waiting task (`None`: nothing waits, e.g. the token was
    /// already cancelled at registration).
    stop_waiting: Option<TokioToken>,
    local: LocalListeners,
}

#[napi]
impl CancellationListener {
    /// Stops waiting for the cancellation without calling the callback.
    /// Idempotent, and a no-op once the callback has fired.
    #[napi]
    pub fn release(&self) {
        if self.fired.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(stop) = &self.stop_waiting {
            stop.cancel();
        }
        // Its function reference is released here, on the JS thread.
        lock(&self.local).retain(|l| !Arc::ptr_eq(&l.fired, &self.fired));
    }
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
    /// already is), unless the returned listener is released first. Does
    /// not keep the process alive.
    #[napi(ts_args_type = "callback: () => void")]
    pub fn on_cancelled(
        &self,
        env: &Env,
        callback: Function<'_, (), UnknownReturnValue>,
    ) -> napi::Result<CancellationListener> {
        if self.inner.is_cancelled() {
            queue_microtask(env, callback)?;
            // Already fired as far as `release()` is concerned.
            let fired = Arc::new(AtomicBool::new(true));
            return Ok(CancellationListener { fired, stop_waiting: None, local: self.local.clone() });
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
        let stop_waiting = TokioToken::new();
        let (claim, stop) = (fired.clone(), stop_waiting.clone());
        let waiting = Waiting::start();
        crate::bridge::runtime::spawn(async move {
            let _waiting = waiting;
            tokio::select! {
                _ = token.cancelled() => {
                    if !claim.swap(true, Ordering::AcqRel) {
                        tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
                    }
                }
                // Released: the function is freed with this task.
                _ = stop.cancelled() => {}
            }
        });
        Ok(CancellationListener { fired, stop_waiting: Some(stop_waiting), local: self.local.clone() })
    }
}

impl CancellationToken {
    /// A JS object around an existing token (for payloads to JavaScript).
    pub fn from_inner(inner: TokioToken) -> Self {
        Self { inner, local: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The shared token.
    pub fn inner(&self) -> &TokioToken {
        &self.inner
    }

    fn lock_local(&self) -> std::sync::MutexGuard<'_, Vec<LocalListener>> {
        lock(&self.local)
    }
}

fn lock(local: &LocalListeners) -> std::sync::MutexGuard<'_, Vec<LocalListener>> {
    // Only the JS thread locks it; a poisoned lock still holds valid data.
    local.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts the tasks waiting for a cancellation, for the tests that check
/// a release ends its task (`src/testing.rs`).
static WAITING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One waiting task, counted while it lives.
struct Waiting;

impl Waiting {
    fn start() -> Self {
        WAITING.fetch_add(1, Ordering::Relaxed);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many listeners' tasks wait for a cancellation now.
pub fn waiting_listeners() -> usize {
    WAITING.load(Ordering::Relaxed)
}

fn queue_microtask<'a>(env: &Env, callback: Function<'a, (), UnknownReturnValue>) -> napi::Result<()> {
    let queue: Function<'a, Function<'a, (), UnknownReturnValue>, UnknownReturnValue> =
        env.get_global()?.get_named_property("queueMicrotask")?;
    queue.call(callback)?;
    Ok(())
}
