//! `JsServeConfig`, the configuration of `serve()` and of the serverless
//! calls, read into the core's `ServeConfig` and `ServerlessSettings`.

use std::time::Duration;

use napi::bindgen_prelude::Either;
use napi_derive::napi;
use rivetkit_native_core::error::RivetError;
use rivetkit_native_core::registry::{EngineSpawnMode, ServeConfig};
use rivetkit_native_core::serverless::settings::{normalize_base_path, DEFAULT_MAX_START_PAYLOAD_BYTES};
use rivetkit_native_core::serverless::ServerlessSettings;

use crate::bridge::types::args;

/// Serve configuration. Every field is optional for direct use; omitted
/// fields come from the environment (`RIVET_ENDPOINT`, `RIVET_POOL_NAME`,
/// ...) with the reference defaults (endpoint `http://127.0.0.1:6420`,
/// namespace `default`, pool `rivetkit-rust`).
#[napi(object)]
#[derive(Default)]
pub struct JsServeConfig {
    pub version: Option<f64>,
    /// The engine's URL, or the nodes of one engine cluster as a
    /// comma-separated list: the envoy moves to the next node when the one
    /// it is on goes away (docs/deploy.md).
    pub endpoint: Option<String>,
    pub token: Option<String>,
    pub namespace: Option<String>,
    pub pool_name: Option<String>,
    pub engine_binary_path: Option<String>,
    pub start_services: Option<bool>,
    pub services_binary_path: Option<String>,
    pub engine_host: Option<String>,
    pub engine_port: Option<f64>,
    pub handle_inspector_http_in_runtime: Option<bool>,
    /// A bearer token every actor's inspector accepts (RivetKit's test
    /// mode); the actors' own tokens are then not consulted.
    pub inspector_test_token: Option<String>,
    pub serverless_base_path: Option<String>,
    pub serverless_package_version: Option<String>,
    pub serverless_client_endpoint: Option<String>,
    pub serverless_client_namespace: Option<String>,
    pub serverless_client_token: Option<String>,
    pub serverless_validate_endpoint: Option<bool>,
    pub serverless_max_start_payload_bytes: Option<f64>,
    /// Whether this host spawns (or reuses) a local engine for `endpoint`:
    /// `"auto"` (default: for a loopback endpoint), `"always"` or
    /// `"never"`; or a boolean, as RivetKit 3.0 sends it (`true`: spawn or
    /// reuse the engine at `endpoint`, `false`: only connect; it is `true`
    /// only when the app gave no endpoint). Default from
    /// `RIVETKIT_ENGINE_SPAWN`.
    #[napi(ts_type = "boolean | 'auto' | 'always' | 'never'")]
    pub engine_spawn: Option<Either<bool, String>>,
    /// Upper bound of the shutdown drain (default 30 s, `RIVETKIT_DRAIN_TIMEOUT_MS`).
    pub drain_timeout_ms: Option<f64>,
    /// How long to wait for a spawned engine to become healthy (default 30 s).
    pub engine_start_timeout_ms: Option<f64>,
    /// How long to wait for the engine to accept this host (default 30 s).
    pub envoy_connect_timeout_ms: Option<f64>,
    /// When `serve()` fails, set `process.exitCode` to 1 unless something
    /// set it already (default `true`): with RivetKit's `registry.start()`
    /// the failure is otherwise only a log line and the process exits 0.
    /// `false` for a host that handles the rejection itself.
    pub exit_code_on_failure: Option<bool>,
}

impl JsServeConfig {
    pub(crate) fn into_core(self) -> anyhow::Result<ServeConfig> {
        let mut c = ServeConfig::from_env()?;
        // Numbers are checked (a NaN, a negative or a fraction is refused
        // with napi.invalid_argument naming the field, never read as 0).
        let field = |name: &str| format!("config.{name}");
        let invalid = |e: RivetError| e.into_anyhow();
        if let Some(v) = args::field_size(&field("version"), self.version, u64::from(u32::MAX)).map_err(invalid)? {
            c.version = v as u32;
        }
        if let Some(v) = self.endpoint {
            c.set_endpoints(&v)?;
        }
        if self.token.is_some() {
            c.token = self.token;
        }
        if let Some(v) = self.namespace {
            c.namespace = v;
        }
        if let Some(v) = self.pool_name {
            c.pool_name = v;
        }
        if let Some(v) = self.engine_binary_path {
            c.engine_binary_path = Some(v.into());
        }
        if self.engine_host.is_some() {
            c.engine_host = self.engine_host;
        }
        if let Some(port) =
            args::field_size(&field("enginePort"), self.engine_port, u64::from(u32::MAX)).map_err(invalid)?
        {
            c.engine_port =
                Some(u16::try_from(port).map_err(|_| invalid_config(format!("enginePort {port} is not a port")))?);
        }
        args::field_size(
            &field("serverlessMaxStartPayloadBytes"),
            self.serverless_max_start_payload_bytes,
            u64::from(u32::MAX),
        )
        .map_err(invalid)?;
        if let Some(mode) = self.engine_spawn {
            c.engine_spawn = engine_spawn_mode(mode)?;
        }
        if let Some(ms) = args::field_duration_ms(&field("drainTimeoutMs"), self.drain_timeout_ms).map_err(invalid)? {
            c.drain_cap = Some(Duration::from_millis(ms));
        }
        if let Some(ms) =
            args::field_duration_ms(&field("engineStartTimeoutMs"), self.engine_start_timeout_ms).map_err(invalid)?
        {
            c.engine_start_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) =
            args::field_duration_ms(&field("envoyConnectTimeoutMs"), self.envoy_connect_timeout_ms).map_err(invalid)?
        {
            c.envoy_connect_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = self.serverless_package_version {
            c.serverless_package_version = v;
        }
        Ok(c)
    }
}

/// `engineSpawn` as either RivetKit version or a direct user gives it
/// (docs/versions.md). RivetKit 3.0's `true` means "the endpoint is the
/// local engine this app runs" (it sends it only when the app named no
/// endpoint), so the engine there is managed whatever its host is:
/// `Always`, which reuses a healthy engine before it spawns one.
fn engine_spawn_mode(value: Either<bool, String>) -> anyhow::Result<EngineSpawnMode> {
    match value {
        Either::A(true) => Ok(EngineSpawnMode::Always),
        Either::A(false) => Ok(EngineSpawnMode::Never),
        Either::B(mode) => match mode.as_str() {
            "auto" => Ok(EngineSpawnMode::Auto),
            "always" => Ok(EngineSpawnMode::Always),
            "never" => Ok(EngineSpawnMode::Never),
            other => Err(invalid_config(format!(
                "engineSpawn must be a boolean, 'auto', 'always' or 'never', got '{other}'"
            ))),
        },
    }
}

fn invalid_config(message: String) -> anyhow::Error {
    RivetError::new(rivetkit_native_core::error_codes::CONFIG_INVALID, message).into_anyhow()
}

/// The serverless settings of a JS config (defaults: base path
/// `/api/rivet`, endpoint validation on, 1 MiB start payloads).
pub(crate) fn settings_from(config: &JsServeConfig) -> ServerlessSettings {
    let defaults = ServerlessSettings::default();
    ServerlessSettings {
        base_path: normalize_base_path(config.serverless_base_path.as_deref()),
        package_version: config.serverless_package_version.clone().unwrap_or(defaults.package_version),
        client_endpoint: config.serverless_client_endpoint.clone(),
        client_namespace: config.serverless_client_namespace.clone(),
        client_token: config.serverless_client_token.clone(),
        validate_endpoint: config.serverless_validate_endpoint.unwrap_or(true),
        max_start_payload_bytes: config
            .serverless_max_start_payload_bytes
            // Checked to be a whole number within u32 by `into_core`.
            .map(|n| n as usize)
            .unwrap_or(DEFAULT_MAX_START_PAYLOAD_BYTES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_spawn_takes_rivetkit_3_booleans_and_our_strings() {
        let mode = |v| engine_spawn_mode(v).unwrap();
        assert_eq!(mode(Either::A(true)), EngineSpawnMode::Always);
        assert_eq!(mode(Either::A(false)), EngineSpawnMode::Never);
        assert_eq!(mode(Either::B("auto".into())), EngineSpawnMode::Auto);
        assert_eq!(mode(Either::B("always".into())), EngineSpawnMode::Always);
        assert_eq!(mode(Either::B("never".into())), EngineSpawnMode::Never);
        let err = RivetError::extract(&engine_spawn_mode(Either::B("sometimes".into())).unwrap_err());
        assert_eq!(err.qualified_code(), "config.invalid");
    }
}
