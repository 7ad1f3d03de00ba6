//! The engine errors several steps raise: the endpoint cannot be parsed or
//! used (the caller's check, the health probe, the plan, the runner config),
//! the engine there is of the wrong architecture, a binary cannot be started.

use std::path::Path;

use serde_json::json;

use super::profile::EngineArch;

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

/// `engine.wrong_architecture`: the engine at `endpoint` is `running`, the
/// app needs `wanted`. Says how to get out of it.
pub(crate) fn wrong_architecture(
    endpoint: &str,
    running: EngineArch,
    wanted: EngineArch,
    version: Option<&str>,
) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_WRONG_ARCHITECTURE,
        format!(
            "The Rivet Engine running at {endpoint} is {} (version {}), but {} needs {}. Stop it (an engine \
             an earlier host left running, or another app's) and start again to have {} started here, or \
             point this app at an engine {} with RIVET_ENDPOINT, or use another port (RIVET_RUN_ENGINE_PORT).",
            running.label(),
            version.unwrap_or("unknown"),
            wanted.serves(),
            wanted.label(),
            wanted.label(),
            wanted.npm_release(),
        ),
    )
    .with_metadata(json!({
        "endpoint": endpoint,
        "running": running.label(),
        "wanted": wanted.label(),
        "version": version,
    }))
    .into_anyhow()
}

/// `engine.spawn_failed` for `binary`.
pub(crate) fn spawn_failed(binary: &Path, reason: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_SPAWN_FAILED,
        format!("Could not start the Rivet Engine `{}`: {reason}", binary.display()),
    )
    .with_metadata(json!({ "path": binary.display().to_string(), "reason": reason }))
    .into_anyhow()
}
