//! The engine error several steps raise: the endpoint cannot be parsed or
//! used (the caller's check, the health probe, the plan, the runner config).

use serde_json::json;

use crate::error::RivetError;

/// `engine.invalid_endpoint`, with the endpoint and the reason as metadata.
pub(crate) fn invalid_endpoint(endpoint: &str, reason: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_INVALID_ENDPOINT,
        format!("Engine endpoint '{endpoint}' is invalid: {reason}"),
    )
    .with_metadata(json!({ "endpoint": endpoint, "reason": reason }))
    .into_anyhow()
}
