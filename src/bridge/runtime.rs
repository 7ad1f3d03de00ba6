//! Process-wide set-up of the addon: logging, panic hook and the tokio
//! runtime that runs every future of the addon.
//!
//! Set-up runs once, when Node registers the module (`#[napi(module_exports)]`
//! runs inside `napi_register_module_v1`, on the JS thread, after the
//! library is loaded: no threads are started under the dynamic loader's
//! lock). The runtime is handed to napi-rs with
//! [`create_custom_tokio_runtime`], so `async fn` exports, promises from
//! [`crate::bridge::error::spawn_promise`] and [`spawn`] all share it.
//!
//! Exit: napi-rs registers an environment cleanup hook that shuts this
//! runtime down when the last Node environment using the addon goes away,
//! waiting at most 100 ms for its threads; idle or blocked tasks cannot
//! delay the exit longer. What keeps Node's event loop alive is only what
//! JavaScript is waiting for (pending promises of the addon); every
//! threadsafe function of the addon is weak.
//!
//! The library never installs a signal handler: shutting down on a signal
//! is the application's decision.

use std::sync::Once;

use napi::bindgen_prelude::{create_custom_tokio_runtime, Object};
use napi_derive::napi;
use tokio::runtime::{Builder, Runtime};

use crate::bridge::logging;

/// Environment variable: number of tokio worker threads (default 1).
pub const WORKER_THREADS_ENV: &str = rivetkit_native_core::env::RIVETKIT_NATIVE_WORKER_THREADS;
/// One worker by default. Every request or action ends in JavaScript, on
/// the one JS thread, and the native work around it (socket frames, routing,
/// encoding) is a fraction of the JavaScript's, so a second worker has
/// nothing to run in parallel; what it costs is wake-ups. With two, tokio
/// woke the idle worker to look for work to steal whenever a task was
/// scheduled: per sequential WebSocket action the workers made 5.1
/// voluntary context switches and 4 futex calls, against 3.2 and 0.2 with
/// one (bench/profile.mjs). Hosts with CPU-heavy native work (large
/// payloads) may set more.
const DEFAULT_WORKER_THREADS: usize = 1;
/// Threads for blocking work (`spawn_blocking`); tokio's default is 512.
const MAX_BLOCKING_THREADS: usize = 64;

static INIT: Once = Once::new();

/// Module registration hook: logging, panic hook, runtime. Idempotent, so
/// that loading the addon into worker threads does not redo it.
#[napi(module_exports)]
pub fn module_init(_exports: Object<'_>) -> napi::Result<()> {
    INIT.call_once(|| {
        disable_error_backtraces();
        // Same constraints as above: before any thread of ours and before
        // the page store client reads them (docs/sqlite.md, "Resources").
        rivetkit_native_core::sqlite::limits::set_client_cache_defaults();
        logging::init();
        install_panic_hook();
        match build_runtime() {
            Ok(runtime) => create_custom_tokio_runtime(runtime),
            // napi-rs then builds its default runtime on first use.
            Err(err) => {
                tracing::error!(%err, "could not build the tokio runtime; using napi-rs' default")
            }
        }
    });
    Ok(())
}

/// Errors travel as `anyhow::Error`, which captures a backtrace whenever std
/// says so: `RUST_LIB_BACKTRACE`, else `RUST_BACKTRACE`, read once per
/// process. Capturing is cheap (about 3 KB and 8 µs per error); what costs is
/// printing one with `{:?}`, which loads the debug info to symbolise it (about
/// 150 MB of RSS and 130 ms for the first error in a debug build), and
/// `rivet-envoy-client` logs failed actor starts and stops that way.
///
/// There is no other switch: anyhow's `std` feature (enabled by the envoy
/// client and the protocol crates) always asks std, and std only reads the
/// environment. So when `RUST_BACKTRACE` asks for backtraces and
/// `RUST_LIB_BACKTRACE` is unset, this sets `RUST_LIB_BACKTRACE=0` (panics
/// keep their backtraces); otherwise (the usual case) the environment is not
/// touched. It runs once, on the JS thread, before this addon starts a thread
/// or creates an error. Node's own threads may exist by then; none of them
/// reads the environment while a module loads, except a `getaddrinfo` in
/// flight in libuv's pool (glibc's resolver reads `RES_OPTIONS`): set
/// `RUST_LIB_BACKTRACE` yourself if you load the addon while DNS lookups run.
fn disable_error_backtraces() {
    use rivetkit_native_core::env::{self, RUST_BACKTRACE, RUST_LIB_BACKTRACE};
    if needs_lib_backtrace_off(env::is_set(RUST_LIB_BACKTRACE), env::get_os(RUST_BACKTRACE).as_deref()) {
        env::set_default(RUST_LIB_BACKTRACE, "0");
    }
}

/// Whether std would capture library backtraces without our override.
fn needs_lib_backtrace_off(lib_set: bool, rust_backtrace: Option<&std::ffi::OsStr>) -> bool {
    !lib_set && rust_backtrace.is_some_and(|v| v != "0")
}

/// Number of worker threads from [`WORKER_THREADS_ENV`], default 1.
pub fn worker_threads() -> usize {
    parse_worker_threads(rivetkit_native_core::env::get(WORKER_THREADS_ENV).as_deref())
}

fn parse_worker_threads(value: Option<&str>) -> usize {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => DEFAULT_WORKER_THREADS,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                tracing::warn!(
                    value = v,
                    "{WORKER_THREADS_ENV} must be a positive integer; using {DEFAULT_WORKER_THREADS}"
                );
                DEFAULT_WORKER_THREADS
            }
        },
    }
}

fn build_runtime() -> std::io::Result<Runtime> {
    let threads = worker_threads();
    tracing::debug!(worker_threads = threads, "building the tokio runtime");
    Builder::new_multi_thread()
        .worker_threads(threads)
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .thread_name("rivetkit-native")
        .enable_all()
        .build()
}

/// Spawns a task on the addon's runtime, from any thread (also from a
/// synchronous `#[napi]` method on the JS thread).
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.spawn(future),
        Err(_) => napi::bindgen_prelude::within_runtime_if_available(|| tokio::spawn(future)),
    }
}

/// Logs panics through `tracing` instead of printing them. The panic still
/// unwinds as usual (napi-rs turns a panic in a task into a rejection): the
/// hook never aborts the process.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "<non-string panic payload>".to_string());
        let location = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column())).unwrap_or_default();
        let thread = std::thread::current();
        tracing::error!(
            panic = %message,
            %location,
            thread = thread.name().unwrap_or("<unnamed>"),
            "panic in rivetkit-native: this is a bug in rivetkit-native, please report it"
        );
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lib_backtraces_are_turned_off_only_when_std_would_capture() {
        use std::ffi::OsStr;
        assert!(!needs_lib_backtrace_off(false, None));
        assert!(!needs_lib_backtrace_off(false, Some(OsStr::new("0"))));
        assert!(needs_lib_backtrace_off(false, Some(OsStr::new("1"))));
        assert!(needs_lib_backtrace_off(false, Some(OsStr::new("full"))));
        assert!(!needs_lib_backtrace_off(true, Some(OsStr::new("1"))));
    }

    #[test]
    fn worker_threads_parse() {
        assert_eq!(parse_worker_threads(None), 1);
        assert_eq!(parse_worker_threads(Some("")), 1);
        assert_eq!(parse_worker_threads(Some(" 4 ")), 4);
        assert_eq!(parse_worker_threads(Some("0")), 1);
        assert_eq!(parse_worker_threads(Some("many")), 1);
    }
}
