//! Every error identity the addon raises, declared once: what clients branch
//! on (docs/errors.md, "Codes we raise", lists the same set, and
//! `__test__/tables.test.mjs` checks both ways). Code builds an error from a
//! constant here ([`crate::RivetError::new`]); an error whose identity comes
//! from elsewhere (JavaScript, a decoded body) is [`crate::RivetError::foreign`].

/// One error identity: `group.code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode {
    pub group: &'static str,
    pub code: &'static str,
}

macro_rules! codes {
    ($($(#[$doc:meta])* $konst:ident = $group:literal, $code:literal;)*) => {
        $($(#[$doc])* pub const $konst: ErrorCode = ErrorCode { group: $group, code: $code };)*
        /// Every code, grouped as docs/errors.md lists them.
        pub const ALL: &[ErrorCode] = &[$($konst),*];
    };
}

codes! {
    ACTOR_NOT_FOUND = "actor", "not_found";
    ACTOR_NOT_REGISTERED = "actor", "not_registered";
    ACTOR_STARTING = "actor", "starting";
    ACTOR_NOT_READY = "actor", "not_ready";
    ACTOR_STOPPING = "actor", "stopping";
    ACTOR_DESTROYING = "actor", "destroying";
    ACTOR_RESTARTING = "actor", "restarting";
    ACTOR_SAVE_UNCONFIRMED = "actor", "save_unconfirmed";
    ACTOR_DROPPED_REPLY = "actor", "dropped_reply";
    ACTOR_OVERLOADED = "actor", "overloaded";
    ACTOR_CALLBACK_TIMED_OUT = "actor", "callback_timed_out";
    ACTOR_ACTION_TIMED_OUT = "actor", "action_timed_out";
    ACTOR_ACTION_NOT_FOUND = "actor", "action_not_found";
    ACTOR_METHOD_NOT_ALLOWED = "actor", "method_not_allowed";
    ACTOR_WEBSOCKET_NOT_HANDLED = "actor", "websocket_not_handled";
    ACTOR_PANICKED = "actor", "panicked";
    ACTOR_DESTROYED_DUPLICATE_KEY = "actor", "destroyed_duplicate_key";
    ACTOR_STATE_TOO_LARGE = "actor", "state_too_large";
    ACTOR_JS_CALLBACK_UNAVAILABLE = "actor", "js_callback_unavailable";
    ACTOR_ABORTED = "actor", "aborted";
    MESSAGE_INCOMING_TOO_LONG = "message", "incoming_too_long";
    MESSAGE_OUTGOING_TOO_LONG = "message", "outgoing_too_long";
    MESSAGE_INVALID_UTF8 = "message", "invalid_utf8";
    HTTP_STREAM_CLOSED = "http", "stream_closed";
    HTTP_STREAM_ABORTED = "http", "stream_aborted";
    PROTOCOL_INVALID_HTTP_REQUEST = "protocol", "invalid_http_request";
    PROTOCOL_INVALID_ACTOR_CONNECT_REQUEST = "protocol", "invalid_actor_connect_request";
    PROTOCOL_UNSUPPORTED_ENCODING = "protocol", "unsupported_encoding";
    PROTOCOL_INVALID_PERSISTED_DATA = "protocol", "invalid_persisted_data";
    CONNECTION_RECORD_TOO_LARGE = "connection", "record_too_large";
    CONNECTION_NOT_CONFIGURED = "connection", "not_configured";
    SCHEDULE_INVALID_NAME = "schedule", "invalid_name";
    SCHEDULE_MAX_SCHEDULES_EXCEEDED = "schedule", "max_schedules_exceeded";
    SCHEDULE_INVALID_CRON_EXPRESSION = "schedule", "invalid_cron_expression";
    SCHEDULE_INVALID_TIMEZONE = "schedule", "invalid_timezone";
    SCHEDULE_INVALID_INTERVAL = "schedule", "invalid_interval";
    SCHEDULE_INVALID_MAX_HISTORY = "schedule", "invalid_max_history";
    SCHEDULE_INTERRUPTED = "schedule", "interrupted";
    QUEUE_FULL = "queue", "full";
    QUEUE_MESSAGE_TOO_LARGE = "queue", "message_too_large";
    QUEUE_TIMED_OUT = "queue", "timed_out";
    QUEUE_ALREADY_COMPLETED = "queue", "already_completed";
    QUEUE_COMPLETE_NOT_CONFIGURED = "queue", "complete_not_configured";
    QUEUE_COMPLETION_WAITER_DROPPED = "queue", "completion_waiter_dropped";
    KV_KEY_TOO_LARGE = "kv", "key_too_large";
    KV_VALUE_TOO_LARGE = "kv", "value_too_large";
    ENGINE_UNREACHABLE = "engine", "unreachable";
    ENGINE_RUNNER_CONFIG_FAILED = "engine", "runner_config_failed";
    ENGINE_INVALID_ENDPOINT = "engine", "invalid_endpoint";
    ENGINE_BINARY_NOT_FOUND = "engine", "binary_not_found";
    ENGINE_BINARY_UNAVAILABLE = "engine", "binary_unavailable";
    ENGINE_SPAWN_FAILED = "engine", "spawn_failed";
    ENGINE_HEALTH_CHECK_FAILED = "engine", "health_check_failed";
    ENGINE_PORT_OCCUPIED = "engine", "port_occupied";
    ENGINE_WRONG_ARCHITECTURE = "engine", "wrong_architecture";
    ENGINE_POOL_NOT_FOUND = "engine", "pool_not_found";
    CONFIG_INVALID = "config", "invalid";
    REGISTRY_SHUT_DOWN = "registry", "shut_down";
    NAPI_INVALID_STATE = "napi", "invalid_state";
    NAPI_INVALID_ARGUMENT = "napi", "invalid_argument";
    NAPI_INVALID_RETURN = "napi", "invalid_return";
    /// Raised by `load-error.js`, before the addon loads.
    NAPI_BINDING_NOT_FOUND = "napi", "binding_not_found";
    REQUEST_INVALID = "request", "invalid";
    CONFIG_ENDPOINT_MISMATCH = "config", "endpoint_mismatch";
    CONFIG_NAMESPACE_MISMATCH = "config", "namespace_mismatch";
    CONFIG_POOL_MISMATCH = "config", "pool_mismatch";
    SERVERLESS_START_FAILED = "serverless", "start_failed";
    LISTENER_BIND_FAILED = "listener", "bind_failed";
    ACTOR_RUNTIME_SOCKET_NOT_ENABLED = "actor_runtime_socket", "not_enabled";
    ACTOR_RUNTIME_SOCKET_CLOSED = "actor_runtime_socket", "closed";
    ACTOR_RUNTIME_SOCKET_DATABASE_UNAVAILABLE = "actor_runtime_socket", "database_unavailable";
    SQLITE_CLOSED = "sqlite", "closed";
    SQLITE_TRANSACTION_EXPIRED = "sqlite", "transaction_expired";
    SQLITE_TRANSACTION_FINISHED = "sqlite", "transaction_finished";
    SQLITE_OPEN_FAILED = "sqlite", "open_failed";
    SQLITE_UNAVAILABLE = "sqlite", "unavailable";
    INSPECTOR_UNAUTHORIZED = "inspector", "unauthorized";
    INSPECTOR_INVALID_MESSAGE = "inspector", "invalid_message";
    INSPECTOR_UNSUPPORTED_VERSION = "inspector", "unsupported_version";
    INSPECTOR_INVALID_REQUEST = "inspector", "invalid_request";
    INSPECTOR_PATCH_FAILED = "inspector", "patch_failed";
    INSPECTOR_WORKFLOW_TIMED_OUT = "inspector", "workflow_timed_out";
    CORE_INTERNAL_ERROR = "core", "internal_error";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_declared_once() {
        let mut seen: Vec<_> = ALL.iter().map(|c| (c.group, c.code)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), ALL.len());
    }
}
