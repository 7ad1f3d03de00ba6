//! Every environment variable the addon reads, in one table.
//!
//! Code reads the process environment only through [`get`] (or passes it on
//! as a reader, `|name| env::get(name)`, to a function that parses several),
//! always with a name declared here. The README's configuration table lists
//! the same set; `__test__/tables.test.mjs` checks both, and that no other
//! file calls `std::env::var`. Variables we only *set* on a spawned engine
//! (`RIVET__…`, docs/engine.md) are the engine's settings, not ours, and are
//! not listed; the two of those a user may set for us to pass on are.

/// One variable: its name and what it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub what: &'static str,
}

macro_rules! vars {
    ($($(#[$doc:meta])* $konst:ident: $what:literal;)*) => {
        $(
            $(#[$doc])*
            pub const $konst: &str = stringify!($konst);
        )*
        /// Every variable, in the order of the README's table.
        pub const ALL: &[Var] = &[$(Var { name: stringify!($konst), what: $what }),*];
    };
}

vars! {
    RIVET_ENDPOINT: "engine endpoint, or a comma-separated list of a cluster's nodes";
    RIVET_RUN_ENGINE_HOST: "engine host when RIVET_ENDPOINT is unset";
    RIVET_RUN_ENGINE_PORT: "engine port when RIVET_ENDPOINT is unset";
    RIVETKIT_ENGINE_ENDPOINTS: "more nodes of an engine cluster, after RIVET_ENDPOINT";
    RIVET_NAMESPACE: "namespace";
    RIVET_TOKEN: "token";
    RIVET_POOL_NAME: "pool";
    RIVETKIT_ENGINE_SPAWN: "whether to spawn a local engine";
    RIVETKIT_DRAIN_TIMEOUT_MS: "drain bound";
    RIVETKIT_ENGINE_START_TIMEOUT_MS: "engine start wait";
    RIVETKIT_ENVOY_CONNECT_TIMEOUT_MS: "engine accept wait";
    RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR: "requests waiting for one actor";
    RIVET_LOG_LEVEL: "log level (first)";
    LOG_LEVEL: "log level (second)";
    RUST_LOG: "log level (third)";
    RUST_LOG_FORMAT: "log format";
    RIVETKIT_NATIVE_WORKER_THREADS: "tokio worker threads";
    RIVET_ENVOY_VERSION: "envoy protocol version";
    RIVET_ENGINE_BINARY_PATH: "engine binary";
    RIVET_ENGINE_BINARY: "engine binary (second)";
    RIVETKIT_STORAGE_PATH: "engine data and logs";
    HOME: "engine data and logs without RIVETKIT_STORAGE_PATH";
    RIVET__AUTH__ADMIN_TOKEN: "admin token of a spawned engine";
    RIVET__RUNTIME__WORKER_CPU_MAX: "a spawned engine's load-shedding CPU cap";
    RIVET_REGION: "ctx.region()";
    RIVET_EXPOSE_ERRORS: "internal error messages to clients";
    NODE_ENV: "type in /metadata";
    RUST_BACKTRACE: "error backtraces";
    RUST_LIB_BACKTRACE: "error backtraces (the addon sets it to 0 at load)";
    RIVETKIT_OUTPUT_GATE: "the output gate (docs/durability.md)";
    RIVETKIT_QUEUE_MAX_DELIVERIES: "tries before a queue message is a dead letter (docs/queues-cron.md)";
    RIVETKIT_NATIVE_SQLITE_MAX_OPEN: "SQLite databases open at once";
    RIVETKIT_NATIVE_SQLITE_IDLE_CLOSE_MS: "ms before an unused SQLite database closes";
    RIVETKIT_NATIVE_SQLITE_PAGER_CACHE_KIB: "SQLite page cache per database";
    RIVETKIT_SQLITE_OPT_VFS_PAGE_CACHE_MODE: "the page store client's own cache (the addon sets it to off at load)";
    RIVETKIT_SQLITE_OPT_READ_AHEAD_MODE: "the page store client's read-ahead (the addon sets it to off at load)";
    RIVETKIT_SQLITE_PROFILING: "SQLite statements profiled under their own label (JSON)";
    RIVET_ACTOR_RUNTIME_SOCKET_MAX_FRAME_BYTES: "largest runtime-socket frame";
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "where spans go (docs/telemetry.md)";
    OTEL_EXPORTER_OTLP_ENDPOINT: "where spans go, with /v1/traces added";
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: "headers of span export (key=value,...)";
    OTEL_EXPORTER_OTLP_HEADERS: "headers of span export (second)";
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "span export protocol: http/json (http/protobuf sends JSON too)";
    OTEL_EXPORTER_OTLP_PROTOCOL: "span export protocol (second)";
    OTEL_SDK_DISABLED: "true turns span export off";
    OTEL_TRACES_EXPORTER: "none turns span export off";
    OTEL_TRACES_SAMPLER: "the process's sampling rule";
    OTEL_TRACES_SAMPLER_ARG: "its ratio";
    OTEL_SERVICE_NAME: "service.name of exported spans";
    /// Test-only: the inspector token every actor gets (docs/inspector.md).
    _RIVET_TEST_INSPECTOR_TOKEN: "test-only inspector token";
}

/// `name` from the process environment; `None` when unset or not UTF-8.
pub fn get(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// `name` as the OS gives it (a path that is not UTF-8 stays intact).
pub fn get_os(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name)
}

/// Whether `name` is set at all (even to a value that is not UTF-8).
pub fn is_set(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

/// Sets `name` unless it is set: a default the addon gives a variable that
/// a library reads itself. Call it only before other threads run.
pub fn set_default(name: &str, value: &str) {
    if !is_set(name) {
        std::env::set_var(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_declared(name: &str) -> bool {
        ALL.iter().any(|v| v.name == name)
    }

    #[test]
    fn names_are_unique_and_constants_match() {
        let mut names: Vec<_> = ALL.iter().map(|v| v.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(RIVET_ENDPOINT, "RIVET_ENDPOINT");
        assert!(is_declared(_RIVET_TEST_INSPECTOR_TOKEN));
    }
}
