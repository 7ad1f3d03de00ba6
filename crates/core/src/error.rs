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
    pub fn new(group: impl Into<String>, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            code: code.into(),
            message: message.into(),
            metadata: None,
            actor: None,
        }
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
                let mut e = RivetError::new("core", "internal_error", internal_message(err));
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

impl fmt::Display for ActorSpecifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "actor {} generation {}", self.actor_id, self.generation)
    }
}

impl std::error::Error for ActorSpecifier {}

fn internal_message(err: &anyhow::Error) -> String {
    if std::env::var("RIVET_EXPOSE_ERRORS").as_deref() == Ok("1") {
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
        (
            "actor_runtime_socket",
            "unsupported" | "not_enabled" | "closed" | "database_unavailable",
        ) => 400,
        ("message", "incoming_too_long" | "outgoing_too_long") => 400,
        ("schedule" | "kv" | "user", _) => 400,
        (
            "queue",
            "full" | "message_too_large" | "message_invalid" | "invalid_payload"
            | "invalid_completion_payload" | "already_completed"
            | "previous_message_not_completed" | "complete_not_configured" | "timed_out",
        ) => 400,
        ("rivetkit-native", "unsupported") => 400,
        _ => return None,
    })
}

/// Constructors for the catalogue of errors this crate raises.
pub mod catalog {
    use super::RivetError;
    use serde_json::json;

    pub fn actor_starting() -> RivetError {
        RivetError::new("actor", "starting", "Actor is starting.")
    }
    pub fn actor_not_ready() -> RivetError {
        RivetError::new("actor", "not_ready", "Actor is not ready.")
    }
    pub fn actor_stopping(context: Option<&str>) -> RivetError {
        let message = match context {
            Some(c) => format!("Actor is stopping: {c}."),
            None => "Actor is stopping.".to_string(),
        };
        RivetError::new("actor", "stopping", message)
    }
    pub fn actor_destroying() -> RivetError {
        RivetError::new("actor", "destroying", "Actor is destroying.")
    }
    pub fn actor_dropped_reply() -> RivetError {
        RivetError::new("actor", "dropped_reply", "Actor reply channel was dropped without a response.")
    }
    pub fn actor_overloaded(channel: &str, operation: &str, capacity: usize) -> RivetError {
        RivetError::new(
            "actor",
            "overloaded",
            format!("Actor channel '{channel}' is overloaded while attempting to {operation} (capacity {capacity})."),
        )
        .with_metadata(json!({ "channel": channel, "operation": operation, "capacity": capacity }))
    }
    pub fn actor_not_found(resource: &str, id: &str) -> RivetError {
        RivetError::new("actor", "not_found", format!("Actor {resource} '{id}' was not found."))
            .with_metadata(json!({ "resource": resource, "id": id }))
    }
    pub fn actor_not_registered(actor_name: &str) -> RivetError {
        RivetError::new(
            "actor",
            "not_registered",
            format!("Actor factory '{actor_name}' is not registered."),
        )
        .with_metadata(json!({ "actor_name": actor_name }))
    }
    pub fn callback_timed_out(callback_name: &str, duration_ms: u64) -> RivetError {
        RivetError::new(
            "actor",
            "callback_timed_out",
            format!("callback `{callback_name}` timed out after {duration_ms} ms"),
        )
        .with_metadata(json!({ "callback_name": callback_name, "duration_ms": duration_ms }))
    }
    pub fn action_timed_out() -> RivetError {
        RivetError::new("actor", "action_timed_out", "Action timed out")
    }
    pub fn actor_aborted() -> RivetError {
        RivetError::new("actor", "aborted", "Actor aborted")
    }
    pub fn invalid_state(message: impl Into<String>) -> RivetError {
        RivetError::new("napi", "invalid_state", message)
    }
    pub fn invalid_argument(message: impl Into<String>) -> RivetError {
        RivetError::new("napi", "invalid_argument", message)
    }
    pub fn registry_shut_down() -> RivetError {
        RivetError::new("registry", "shut_down", "The registry is shut down.")
    }
    /// A feature that rivetkit-native does not implement yet.
    pub fn unsupported(feature: &str) -> RivetError {
        RivetError::new(
            "rivetkit-native",
            "unsupported",
            format!("{feature} is not supported by rivetkit-native yet."),
        )
        .with_metadata(json!({ "feature": feature }))
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

