//! Waiting, from any thread, for a promise a JavaScript callback returned.
//!
//! napi-rs' `Promise<T>` attaches two native functions to every promise
//! (`then` and `catch`), each created with `napi_create_function` and a
//! finalizer, and chains two promises; the finalizers are weak handles the
//! garbage collector must process. That was a few percent of a host's CPU per
//! action. Here one small JavaScript function, compiled once per JS thread,
//! does `promise.then(v => settle(id, true, v), e => settle(id, false, e))`
//! with plain closures; `settle` is one native function created at the same
//! time. The caller registers a settler under `id`; the settler converts the
//! value on the JS thread and hands it to the waiting task directly, so the
//! JS thread wakes that task once per call, with the final answer.
//!
//! A waiter that gives up (its future dropped, e.g. by a timeout) removes
//! its entry with [`forget`]: a promise that never settles leaves nothing
//! behind.

use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use napi::{check_status, sys};

/// How a watched promise ended, as its settler sees it (on the JS thread).
pub(crate) enum Settlement {
    Fulfilled(sys::napi_env, sys::napi_value),
    Rejected(sys::napi_env, sys::napi_value),
    /// The watch could not be set up.
    Failed(napi::Error),
}

/// The waiter's end of a watch.
pub(crate) trait Settle: Send {
    /// True once the waiter gave up: nothing needs its outcome.
    fn abandoned(&self) -> bool;
    /// Called once, on the JS thread, with how the promise ended.
    fn settle(self: Box<Self>, settlement: Settlement);
}

type Settler = Box<dyn Settle>;

static PENDING: LazyLock<Mutex<HashMap<u64, Settler>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
/// Ids stay below 2^53 (a JavaScript number holds them exactly) for as long
/// as a process could run.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

const WATCH_SOURCE: &str = "(function (settle) { return function watch(promise, id) { \
    promise.then(function (value) { settle(id, true, value); }, function (reason) { settle(id, false, reason); }); \
}; })";

thread_local! {
    /// This JS thread's `watch` function and the env it belongs to (a strong
    /// reference, kept for the life of the environment).
    static WATCH: std::cell::Cell<(sys::napi_env, sys::napi_ref)> =
        const { std::cell::Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

fn pending() -> std::sync::MutexGuard<'static, HashMap<u64, Settler>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh watch id.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Drops the settler registered under `id`, if any: its waiter gave up.
/// The waiter must have made its settler's `abandoned` true before.
pub(crate) fn forget(id: u64) {
    pending().remove(&id);
}

/// Watches `promise` (a native promise of `env`): `settler` runs once it
/// settles, on the JS thread, unless its waiter has given up by then. It is
/// not registered at all when it is already abandoned: checked under the
/// same lock [`forget`] takes, so a waiter that gives up (abandoning the
/// settler, then forgetting its id) never leaves a settler behind.
///
/// # Safety
///
/// Must run on the JS thread of `env`, with `promise` a live value of it.
pub(crate) unsafe fn watch(env: sys::napi_env, promise: sys::napi_value, id: u64, settler: Settler) {
    {
        let mut pending = pending();
        if settler.abandoned() {
            return;
        }
        pending.insert(id, settler);
    }
    if let Err(err) = unsafe { call_watch(env, promise, id) } {
        let settler = pending().remove(&id);
        if let Some(settler) = settler {
            settler.settle(Settlement::Failed(err));
        }
    }
}

unsafe fn call_watch(env: sys::napi_env, promise: sys::napi_value, id: u64) -> napi::Result<()> {
    let watch_fn = unsafe { watch_function(env) }?;
    let mut id_value = ptr::null_mut();
    check_status!(unsafe { sys::napi_create_double(env, id as f64, &mut id_value) })?;
    let mut undefined = ptr::null_mut();
    check_status!(unsafe { sys::napi_get_undefined(env, &mut undefined) })?;
    let args = [promise, id_value];
    let mut result = ptr::null_mut();
    check_status!(unsafe { sys::napi_call_function(env, undefined, watch_fn, 2, args.as_ptr(), &mut result) })
}

/// This thread's `watch` function, compiled on first use.
unsafe fn watch_function(env: sys::napi_env) -> napi::Result<sys::napi_value> {
    let (owner, existing) = WATCH.with(|w| w.get());
    let mut value = ptr::null_mut();
    if owner == env && !existing.is_null() {
        check_status!(unsafe { sys::napi_get_reference_value(env, existing, &mut value) })?;
        if !value.is_null() {
            return Ok(value);
        }
    }
    let mut source = ptr::null_mut();
    check_status!(unsafe {
        sys::napi_create_string_utf8(env, WATCH_SOURCE.as_ptr().cast(), WATCH_SOURCE.len() as isize, &mut source)
    })?;
    let mut factory = ptr::null_mut();
    check_status!(unsafe { sys::napi_run_script(env, source, &mut factory) })?;
    let mut settle = ptr::null_mut();
    const NAME: &[u8] = b"settle";
    check_status!(unsafe {
        sys::napi_create_function(
            env,
            NAME.as_ptr().cast(),
            NAME.len() as isize,
            Some(settle_cb),
            ptr::null_mut(),
            &mut settle,
        )
    })?;
    let mut undefined = ptr::null_mut();
    check_status!(unsafe { sys::napi_get_undefined(env, &mut undefined) })?;
    check_status!(unsafe { sys::napi_call_function(env, undefined, factory, 1, [settle].as_ptr(), &mut value) })?;
    let mut reference = ptr::null_mut();
    check_status!(unsafe { sys::napi_create_reference(env, value, 1, &mut reference) })?;
    WATCH.with(|w| w.set((env, reference)));
    Ok(value)
}

/// `settle(id, fulfilled, value)`: runs the settler registered under `id`,
/// if its waiter is still there.
unsafe extern "C" fn settle_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let mut argc = 3usize;
    let mut argv = [ptr::null_mut(); 3];
    let status =
        unsafe { sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()) };
    if status != sys::Status::napi_ok || argc < 3 {
        return ptr::null_mut();
    }
    let mut id = 0f64;
    let mut fulfilled = false;
    if unsafe { sys::napi_get_value_double(env, argv[0], &mut id) } != sys::Status::napi_ok
        || unsafe { sys::napi_get_value_bool(env, argv[1], &mut fulfilled) } != sys::Status::napi_ok
    {
        return ptr::null_mut();
    }
    // Taken out of the map before it runs: the conversion may run JS.
    let settler = pending().remove(&(id as u64));
    if let Some(settler) = settler {
        settler.settle(if fulfilled {
            Settlement::Fulfilled(env, argv[2])
        } else {
            Settlement::Rejected(env, argv[2])
        });
    }
    ptr::null_mut()
}
