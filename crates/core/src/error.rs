//! Structured errors: every failure that can reach a client or JavaScript is a
//! [`RivetError`] with a `group`, a `code` and a human message.
//!
//! Errors travel inside `anyhow::Error` chains; [`RivetError::extract`] finds
//! the first structured error in a chain, or synthesises
//! `core.internal_error` so that nothing ever reaches a caller unclassified.
//! anyhow captures a backtrace per error when `RUST_BACKTRACE` is set, which
//! costs megabytes on a burst of failures; the addon sets
//! `RUST_LIB_BACKTRACE=0` at load when that would happen (see the addon's
//! `runtime.rs`).

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::error_codes::ErrorCode;

/// Identifies the actor generation that produced an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorSpecifier {
    pub actor_id: String,
    pub generation: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A structured error. Clients branch on `(group, code)` only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RivetError {
    pub group: String,
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<ActorSpecifier>,
}

impl fmt::Display for RivetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}: {}", self.group, self.code, self.message)
    }
}

impl std::error::Error for RivetError {}

impl RivetError {
    /// An error of ours: its identity from the table (crate::error_codes).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::foreign(code.group, code.code, message)
    }

    /// An error whose identity comes from elsewhere: JavaScript (a hook's
    /// throw), a decoded error body, a test.
    pub fn foreign(group: impl Into<String>, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { group: group.into(), code: code.into(), message: message.into(), metadata: None, actor: None }
    }

    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    pub fn with_actor(mut self, actor: ActorSpecifier) -> Self {
        self.actor = Some(actor);
        self
    }

    pub fn with_actor_if_missing(mut self, actor: ActorSpecifier) -> Self {
        self.actor.get_or_insert(actor);
        self
    }

    /// `group.code`, the form used in WebSocket close reasons and headers.
    pub fn qualified_code(&self) -> String {
        format!("{}.{}", self.group, self.code)
    }

    /// Converts into an `anyhow::Error`.
    pub fn into_anyhow(self) -> anyhow::Error {
        anyhow::Error::new(self)
    }

    /// The first structured error in the chain, else `core.internal_error`
    /// carrying the whole chain in its metadata. An [`ActorSpecifier`]
    /// attached as context anywhere in the chain is copied onto the result.
    pub fn extract(err: &anyhow::Error) -> RivetError {
        let mut found = err
            .downcast_ref::<RivetError>()
            .cloned()
            .or_else(|| err.chain().find_map(|e| e.downcast_ref::<RivetError>().cloned()))
            .unwrap_or_else(|| {
                let mut e = RivetError::new(crate::error_codes::CORE_INTERNAL_ERROR, internal_message(err));
                e.metadata = Some(serde_json::json!({ "error": format!("{err:#}") }));
                e
            });
        if found.actor.is_none() {
            found.actor = err.downcast_ref::<ActorSpecifier>().cloned();
        }
        found
    }

    /// True when `(group, code)` may be shown to clients unmasked.
    pub fn is_public(&self) -> bool {
        public_status(&self.group, &self.code).is_some()
    }
}

/// Context on an error that JavaScript raised (a hook's throw or
/// rejection): whether JavaScript marked it public, its HTTP status, and
/// the JavaScript stack when there was one. The stack is for the log (at
/// debug level, see crate::routing::failure); it never reaches a client
/// and is not part of the chain's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsOrigin {
    pub public: bool,
    pub status_code: u16,
    pub stack: Option<String>,
}

impl fmt::Display for JsOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error raised in JavaScript (public: {}, status {})", self.public, self.status_code)
    }
}

impl std::error::Error for JsOrigin {}

impl JsOrigin {
    /// The JavaScript stack of the error in `err`'s chain, if any.
    pub fn stack_of(err: &anyhow::Error) -> Option<&str> {
        // anyhow's downcast looks through every context layer.
        err.downcast_ref::<JsOrigin>().and_then(|o| o.stack.as_deref())
    }
}

impl fmt::Display for ActorSpecifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "actor {} generation {}", self.actor_id, self.generation)
    }
}

impl std::error::Error for ActorSpecifier {}

fn internal_message(err: &anyhow::Error) -> String {
    if crate::env::get(crate::env::RIVET_EXPOSE_ERRORS).as_deref() == Some("1") {
        format!("Internal error: {err:#}")
    } else {
        "An internal error occurred".to_string()
    }
}

/// The status a public error is promoted to; `None` for non-public errors.
pub fn public_status(group: &str, code: &str) -> Option<u16> {
    Some(match (group, code) {
        ("auth", "forbidden") => 403,
        ("actor", "not_found" | "action_not_found") => 404,
        ("actor", "method_not_allowed") => 405,
        ("actor", "action_timed_out") => 408,
        ("actor", "aborted") => 400,
        ("actor", "save_unconfirmed" | "restarting") => 503,
        ("actor_runtime_socket", "unsupported" | "not_enabled" | "closed" | "database_unavailable") => 400,
        ("message", "incoming_too_long" | "outgoing_too_long") => 400,
        ("schedule" | "kv" | "user", _) => 400,
        (
            "queue",
            "full"
            | "message_too_large"
            | "message_invalid"
            | "invalid_payload"
            | "invalid_completion_payload"
            | "already_completed"
            | "previous_message_not_completed"
            | "complete_not_configured"
            | "timed_out",
        ) => 400,
        _ => return None,
    })
}

/// Constructors for the catalogue of errors this crate raises.
pub mod catalog {
    use super::RivetError;
    use serde_json::json;

    pub fn actor_starting() -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_STARTING, "Actor is starting.")
    }
    pub fn actor_not_ready() -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_NOT_READY, "Actor is not ready.")
    }
    pub fn actor_stopping(context: Option<&str>) -> RivetError {
        let message = match context {
            Some(c) => format!("Actor is stopping: {c}."),
            None => "Actor is stopping.".to_string(),
        };
        RivetError::new(crate::error_codes::ACTOR_STOPPING, message)
    }
    /// A new actor whose key the engine gave to another actor
    /// (docs/generations.md, I13). The code starts with `destroyed_`
    /// because the engine destroys such an actor, and RivetKit's client
    /// treats `actor.destroyed_*` on a key's handle as a stale resolution:
    /// it resolves the key again and retries, reaching the owner.
    pub fn actor_duplicate_key(key: &str, owner: &str) -> RivetError {
        RivetError::new(
            crate::error_codes::ACTOR_DESTROYED_DUPLICATE_KEY,
            format!(
                "Another actor ({owner}) holds key {key:?}; this one was created in a race, does not start, and is \
                 destroyed by the engine."
            ),
        )
        .with_metadata(serde_json::json!({ "existing_actor_id": owner }))
    }
    /// The output gate withheld an answer (docs/durability.md).
    pub fn actor_save_unconfirmed(reason: &str) -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_SAVE_UNCONFIRMED, format!("The work ran, but the engine did not confirm the save of what it changed ({reason}); it may not have taken effect."),
        )
    }
    /// RivetKit's "retry on the next generation" (the client retries it at
    /// once): the work did not run here.
    pub fn actor_restarting(reason: &str) -> RivetError {
        RivetError::new(
            crate::error_codes::ACTOR_RESTARTING,
            format!("Actor is restarting ({reason}). Retry the request."),
        )
        .with_metadata(serde_json::json!({ "retryable": true }))
    }
    pub fn actor_destroying() -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_DESTROYING, "Actor is destroying.")
    }
    pub fn actor_dropped_reply() -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_DROPPED_REPLY, "Actor reply channel was dropped without a response.")
    }
    pub fn actor_overloaded(channel: &str, operation: &str, capacity: usize) -> RivetError {
        RivetError::new(
            crate::error_codes::ACTOR_OVERLOADED,
            format!("Actor channel '{channel}' is overloaded while attempting to {operation} (capacity {capacity})."),
        )
        .with_metadata(json!({ "channel": channel, "operation": operation, "capacity": capacity }))
    }
    pub fn actor_not_found(resource: &str, id: &str) -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_NOT_FOUND, format!("Actor {resource} '{id}' was not found."))
            .with_metadata(json!({ "resource": resource, "id": id }))
    }
    pub fn actor_not_registered(actor_name: &str) -> RivetError {
        RivetError::new(
            crate::error_codes::ACTOR_NOT_REGISTERED,
            format!("Actor factory '{actor_name}' is not registered."),
        )
        .with_metadata(json!({ "actor_name": actor_name }))
    }
    pub fn callback_timed_out(callback_name: &str, duration_ms: u64) -> RivetError {
        RivetError::new(
            crate::error_codes::ACTOR_CALLBACK_TIMED_OUT,
            format!("callback `{callback_name}` timed out after {duration_ms} ms"),
        )
        .with_metadata(json!({ "callback_name": callback_name, "duration_ms": duration_ms }))
    }
    pub fn action_timed_out() -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_ACTION_TIMED_OUT, "Action timed out")
    }
    pub fn actor_aborted() -> RivetError {
        RivetError::new(crate::error_codes::ACTOR_ABORTED, "Actor aborted")
    }
    pub fn invalid_state(message: impl Into<String>) -> RivetError {
        RivetError::new(crate::error_codes::NAPI_INVALID_STATE, message)
    }
    pub fn invalid_argument(message: impl Into<String>) -> RivetError {
        RivetError::new(crate::error_codes::NAPI_INVALID_ARGUMENT, message)
    }
    pub fn registry_shut_down() -> RivetError {
        RivetError::new(crate::error_codes::REGISTRY_SHUT_DOWN, "The registry is shut down.")
    }
}

/// Checks of numbers that arrive from JavaScript (times and sizes), as
/// `napi.invalid_argument` errors naming the argument.
///
/// A JavaScript number may be `NaN`, `±Infinity`, fractional or far beyond
/// what the engine stores (its alarm and schedule times are `i64` ms); a
/// plain `as` cast would silently turn those into 0, a saturated value or a
/// wrapped one. Every time is checked against the range of a JavaScript
/// `Date` (±8.64e15 ms), which also keeps `now + delay` and `Instant +
/// Duration` far from overflowing.
pub mod validate {
    use super::{catalog, RivetError};
    use serde_json::json;

    /// The largest magnitude of a JavaScript `Date`, in ms since the epoch.
    pub const MAX_TIME_MS: f64 = 8.64e15;
    /// The largest integer a JavaScript number holds exactly.
    pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

    /// A readable form of a rejected number (`NaN`, `Infinity`, `-1.5`, ...).
    pub fn describe(value: f64) -> String {
        if value.is_nan() {
            "NaN".into()
        } else if value.is_infinite() {
            if value > 0.0 {
                "Infinity".into()
            } else {
                "-Infinity".into()
            }
        } else {
            format!("{value}")
        }
    }

    /// `napi.invalid_argument` for `argument`, with `{argument, reason}`
    /// metadata (the shape the reference's later releases use).
    pub fn invalid(argument: &str, reason: impl Into<String>) -> RivetError {
        let reason = reason.into();
        catalog::invalid_argument(format!("Invalid native argument '{argument}': {reason}"))
            .with_metadata(json!({ "argument": argument, "reason": reason }))
    }

    fn finite(argument: &str, value: f64) -> Result<f64, RivetError> {
        if value.is_finite() {
            Ok(value)
        } else {
            Err(invalid(argument, format!("expected a finite number, got {}", describe(value))))
        }
    }

    /// A point in time in ms since the epoch: finite and within the range
    /// of a JavaScript `Date`. Past times are allowed. Fractions are dropped.
    pub fn timestamp_ms(argument: &str, value: f64) -> Result<i64, RivetError> {
        let value = finite(argument, value)?;
        if value.abs() > MAX_TIME_MS {
            return Err(invalid(
                argument,
                format!("timestamp {} ms is outside the range of a JavaScript Date (±8.64e15 ms)", describe(value)),
            ));
        }
        Ok(value.trunc() as i64)
    }

    /// A duration in ms: finite, not negative, at most 8.64e15 ms.
    /// Fractions are dropped.
    pub fn duration_ms(argument: &str, value: f64) -> Result<u64, RivetError> {
        let value = finite(argument, value)?;
        if value < 0.0 {
            return Err(invalid(argument, format!("a duration must not be negative, got {} ms", describe(value))));
        }
        if value > MAX_TIME_MS {
            return Err(invalid(argument, format!("duration {} ms is larger than 8.64e15 ms", describe(value))));
        }
        Ok(value.trunc() as u64)
    }

    /// A count or size: a whole number in `0..=max`.
    pub fn size(argument: &str, value: f64, max: u64) -> Result<u64, RivetError> {
        let value = finite(argument, value)?;
        if value.fract() != 0.0 {
            return Err(invalid(argument, format!("expected a whole number, got {}", describe(value))));
        }
        if value < 0.0 {
            return Err(invalid(argument, format!("must not be negative, got {}", describe(value))));
        }
        let max_f = (max as f64).min(MAX_SAFE_INTEGER);
        if value > max_f {
            return Err(invalid(argument, format!("{} is larger than the maximum {max}", describe(value))));
        }
        Ok(value as u64)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn code_and_argument(err: RivetError) -> (String, String) {
            let argument = err.metadata.as_ref().unwrap()["argument"].as_str().unwrap().to_string();
            (err.qualified_code(), argument)
        }

        #[test]
        fn timestamps_must_be_finite_and_within_the_date_range() {
            assert_eq!(timestamp_ms("t", 1_700_000_000_000.9), Ok(1_700_000_000_000));
            assert_eq!(timestamp_ms("t", -5.0), Ok(-5));
            assert_eq!(timestamp_ms("t", MAX_TIME_MS), Ok(8_640_000_000_000_000));
            for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300, MAX_TIME_MS + 1.0] {
                let err = timestamp_ms("timestampMs", bad).unwrap_err();
                assert_eq!(code_and_argument(err), ("napi.invalid_argument".into(), "timestampMs".into()), "{bad}");
            }
            assert!(timestamp_ms("t", f64::NAN).unwrap_err().message.contains("NaN"));
        }

        #[test]
        fn durations_must_be_finite_and_not_negative() {
            assert_eq!(duration_ms("d", 0.0), Ok(0));
            assert_eq!(duration_ms("d", 1.7), Ok(1));
            for bad in [f64::NAN, f64::INFINITY, -1.0, -0.5, 1e300] {
                assert!(duration_ms("d", bad).is_err(), "{bad}");
            }
            assert!(duration_ms("d", -1.0).unwrap_err().message.contains("negative"));
        }

        #[test]
        fn sizes_are_whole_numbers_within_bounds() {
            assert_eq!(size("limit", 0.0, 10), Ok(0));
            assert_eq!(size("limit", 10.0, 10), Ok(10));
            for bad in [f64::NAN, f64::INFINITY, -1.0, 1.5, 11.0, 1e300] {
                assert!(size("limit", bad, 10).is_err(), "{bad}");
            }
            // Capped at what a JavaScript number holds exactly.
            assert!(size("n", 2f64.powi(60), u64::MAX).is_err());
        }

        #[test]
        fn describe_names_special_values() {
            assert_eq!(describe(f64::NAN), "NaN");
            assert_eq!(describe(f64::NEG_INFINITY), "-Infinity");
            assert_eq!(describe(2.5), "2.5");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extract_finds_structured_error_under_context() {
        let err = catalog::actor_stopping(None).into_anyhow().context("while stopping");
        let e = RivetError::extract(&err);
        assert_eq!((e.group.as_str(), e.code.as_str()), ("actor", "stopping"));
    }

    #[test]
    fn extract_synthesises_internal_error() {
        let err = anyhow::anyhow!("boom");
        let e = RivetError::extract(&err);
        assert_eq!(e.qualified_code(), "core.internal_error");
        assert!(e.metadata.unwrap()["error"].as_str().unwrap().contains("boom"));
    }

    #[test]
    fn extract_copies_actor_specifier_from_context() {
        let spec = ActorSpecifier { actor_id: "a".into(), generation: 3, key: Some("k".into()) };
        let err = catalog::actor_not_ready().into_anyhow().context(spec.clone());
        assert_eq!(RivetError::extract(&err).actor, Some(spec));
    }
}
