//! The actor-connect messages in either direction, as every encoding
//! (`json`, `cbor`, `bare`) and the facade see them, and the error a
//! malformed client message decodes to.

use serde_json::json;

use crate::error::{ActorSpecifier, RivetError};

/// A server → client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToClient {
    /// Sent once a new connection is set up (never on a restored one).
    Init { actor_id: String, connection_id: String },
    /// A connection-setup failure (`action_id: None`) or an action failure.
    /// `metadata_cbor` is the CBOR of the error's JSON metadata.
    Error {
        group: String,
        code: String,
        message: String,
        metadata_cbor: Option<Vec<u8>>,
        action_id: Option<u64>,
        actor: Option<ActorSpecifier>,
    },
    /// An action's result; `output_cbor` is the actor's CBOR.
    ActionResponse { id: u64, output_cbor: Vec<u8> },
    /// A broadcast or per-connection event; `args_cbor` is the actor's CBOR.
    Event { name: String, args_cbor: Vec<u8> },
}

/// A client → server message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToServer {
    /// `args_cbor` is CBOR for the actor: the client's bytes (BARE) or its
    /// JSON value re-encoded (JSON, CBOR).
    ActionRequest {
        id: u64,
        name: String,
        args_cbor: Vec<u8>,
    },
    SubscriptionRequest {
        event_name: String,
        subscribe: bool,
    },
}

/// `protocol.invalid_actor_connect_request` (docs/errors.md), with its fields as
/// metadata.
pub fn invalid_request(field: &str, reason: impl Into<String>) -> RivetError {
    let reason = reason.into();
    RivetError::new(
        crate::error_codes::PROTOCOL_INVALID_ACTOR_CONNECT_REQUEST,
        format!("Invalid actor-connect request {field}: {reason}"),
    )
    .with_metadata(json!({ "field": field, "reason": reason }))
}

pub(super) fn invalid(field: &str, reason: impl Into<String>) -> anyhow::Error {
    invalid_request(field, reason).into_anyhow()
}
