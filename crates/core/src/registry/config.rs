//! `ServeConfig`: everything a serve run needs to know about the engine it
//! talks to, and how it is read from the environment.
//!
//! Why this file exists on its own: the variable names, defaults and the
//! `RIVET_ENDPOINT` auth rules must match the reference RivetKit core (and
//! through it the TypeScript `tryParseEndpoint`) exactly, so that a project
//! can switch hosts without touching its environment. Keeping the parsing in
//! one pure function ([`ServeConfig::from_vars`]) makes every rule testable
//! without mutating the process environment.
//!
//! Our own additions (not in the reference): `drain_cap`,
//! `engine_start_timeout` and `envoy_connect_timeout`, each with a
//! `RIVETKIT_*_MS` variable, and more engine nodes to fail over to
//! (`fallback_endpoints`: a comma-separated `RIVET_ENDPOINT` or
//! `RIVETKIT_ENGINE_ENDPOINTS`, docs/deploy.md). Unlike the reference's lenient numbers, a typo in
//! one of *our* variables is an error: silently ignoring a timeout is worse.
//!
//! The napi layer builds `ServeConfig` from a JS object instead of calling
//! `from_env`.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use url::Url;

use crate::error::RivetError;

pub use crate::engine::options::{DEFAULT_ENGINE_PORT, DEFAULT_ENGINE_START_TIMEOUT};
/// How long we wait for the engine's init message on the envoy link.
pub const DEFAULT_ENVOY_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether this process should find/start a local engine .
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineSpawnMode {
    /// Manage the engine only when the endpoint is a loopback address.
    #[default]
    Auto,
    Always,
    Never,
}

impl EngineSpawnMode {
    /// Reads `RIVETKIT_ENGINE_SPAWN`.
    pub fn from_env() -> Self {
        Self::parse(crate::env::get(crate::env::RIVETKIT_ENGINE_SPAWN).as_deref())
    }

    /// `always` / `never`, case-insensitively; anything else is `Auto`.
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some(v) if v.eq_ignore_ascii_case("always") => Self::Always,
            Some(v) if v.eq_ignore_ascii_case("never") => Self::Never,
            _ => Self::Auto,
        }
    }
}

/// Configuration of one serve run. `Default` is the environment-free
/// default (what `from_vars` yields with no variables set), not the
/// reference's all-empty derive: a usable default makes tests shorter.
#[derive(Clone, PartialEq, Eq)]
pub struct ServeConfig {
    pub version: u32,
    pub endpoint: String,
    /// More nodes of the same engine cluster, tried in turn when the
    /// connection to the current one ends (docs/deploy.md).
    pub fallback_endpoints: Vec<String>,
    /// The token configured (the endpoint's credentials, `RIVET_TOKEN`,
    /// the host's config); `None` when none was. [`Self::token`] is the
    /// one sent.
    pub token: Option<String>,
    pub namespace: String,
    pub pool_name: String,
    pub engine_binary_path: Option<PathBuf>,
    pub engine_host: Option<String>,
    pub engine_port: Option<u16>,
    pub engine_spawn: EngineSpawnMode,
    /// Upper bound on the shutdown drain; `None` = the engine's threshold.
    pub drain_cap: Option<Duration>,
    pub engine_start_timeout: Duration,
    pub envoy_connect_timeout: Duration,
    pub serverless_package_version: String,
    /// HTTP requests that may wait for one actor (mostly while it starts)
    /// before more are answered `envoy.actor_overloaded`
    /// (`RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR`, default 1024, as the
    /// reference's 3.0).
    pub max_queued_requests_per_actor: usize,
}

impl ServeConfig {
    /// The contract profile of this run: the RivetKit version that reported
    /// itself in `serverlessPackageVersion` (direct use: the newest).
    pub fn contract(&self) -> crate::contract::RivetkitVersion {
        crate::contract::RivetkitVersion::from_package_version(Some(&self.serverless_package_version))
    }

    /// The token sent to the engine: the one configured, else the
    /// contract's default for this endpoint (docs/versions.md): `dev`
    /// under RivetKit 2.3; under 3.0 and in direct use `default` for a
    /// local engine and none for a remote one.
    pub fn token(&self) -> Option<String> {
        self.token.clone().or_else(|| {
            self.contract().default_token(crate::engine::is_local_endpoint(&self.endpoint)).map(str::to_owned)
        })
    }

    /// What the engine module needs of this configuration.
    pub fn engine_options(&self) -> crate::engine::EngineOptions {
        crate::engine::EngineOptions {
            endpoint: self.endpoint.clone(),
            token: self.token(),
            namespace: self.namespace.clone(),
            pool_name: self.pool_name.clone(),
            engine_binary_path: self.engine_binary_path.clone(),
            engine_host: self.engine_host.clone(),
            engine_port: self.engine_port,
            engine_start_timeout: self.engine_start_timeout,
            arch: crate::engine::EngineArch::required_by(self.contract()),
        }
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            version: 1,
            endpoint: default_endpoint("127.0.0.1", DEFAULT_ENGINE_PORT),
            fallback_endpoints: Vec::new(),
            token: None,
            namespace: "default".to_owned(),
            pool_name: "rivetkit-rust".to_owned(),
            engine_binary_path: None,
            engine_host: None,
            engine_port: None,
            engine_spawn: EngineSpawnMode::Auto,
            drain_cap: None,
            engine_start_timeout: DEFAULT_ENGINE_START_TIMEOUT,
            envoy_connect_timeout: DEFAULT_ENVOY_CONNECT_TIMEOUT,
            serverless_package_version: env!("CARGO_PKG_VERSION").to_owned(),
            max_queued_requests_per_actor: rivet_envoy_client::queued_requests::DEFAULT_MAX_QUEUED_REQUESTS_PER_ACTOR,
        }
    }
}

// Hand-written so that the token never lands in a log line.
impl fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeConfig")
            .field("version", &self.version)
            .field("endpoint", &self.endpoint)
            .field("fallback_endpoints", &self.fallback_endpoints)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("namespace", &self.namespace)
            .field("pool_name", &self.pool_name)
            .field("engine_binary_path", &self.engine_binary_path)
            .field("engine_host", &self.engine_host)
            .field("engine_port", &self.engine_port)
            .field("engine_spawn", &self.engine_spawn)
            .field("drain_cap", &self.drain_cap)
            .field("engine_start_timeout", &self.engine_start_timeout)
            .field("envoy_connect_timeout", &self.envoy_connect_timeout)
            .field("serverless_package_version", &self.serverless_package_version)
            .field("max_queued_requests_per_actor", &self.max_queued_requests_per_actor)
            .finish()
    }
}

impl ServeConfig {
    /// Reads the process environment (see [`ServeConfig::from_vars`]).
    pub fn from_env() -> anyhow::Result<Self> {
        let mut config = Self::from_vars(crate::env::get)?;
        // `get_os` keeps a non-UTF-8 path intact.
        if let Some(path) = crate::env::get_os(crate::env::RIVET_ENGINE_BINARY_PATH) {
            config.engine_binary_path = Some(PathBuf::from(path));
        }
        Ok(config)
    }

    /// Builds the config from a variable lookup; errors are `config.invalid`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let engine_host = var("RIVET_RUN_ENGINE_HOST");
        // Reference behaviour: an unparsable port or version is ignored.
        let engine_port = var("RIVET_RUN_ENGINE_PORT").and_then(|v| v.parse::<u16>().ok());

        // Only an explicit endpoint is auth-parsed; the built default is verbatim.
        // A list names the nodes of one cluster: credentials go on the first.
        let raw_endpoint = var("RIVET_ENDPOINT");
        let listed = raw_endpoint.as_deref().map(split_list).unwrap_or_default();
        let mut fallback_endpoints = Vec::new();
        for raw in listed.iter().skip(1) {
            fallback_endpoints.push(parse_fallback("RIVET_ENDPOINT", raw)?);
        }
        for raw in var(ENDPOINTS_VAR).as_deref().map(split_list).unwrap_or_default() {
            fallback_endpoints.push(parse_fallback(ENDPOINTS_VAR, &raw)?);
        }
        let parsed = match raw_endpoint {
            Some(raw) => parse_endpoint(listed.first().unwrap_or(&raw))?,
            None => ParsedEndpoint {
                endpoint: default_endpoint(
                    engine_host.as_deref().unwrap_or("127.0.0.1"),
                    engine_port.unwrap_or(DEFAULT_ENGINE_PORT),
                ),
                namespace: None,
                token: None,
            },
        };
        let env_namespace = var("RIVET_NAMESPACE");
        let env_token = var("RIVET_TOKEN");
        if parsed.namespace.is_some() && env_namespace.is_some() {
            return Err(invalid(
                "RIVET_ENDPOINT",
                "cannot specify namespace both in the RIVET_ENDPOINT URL and as RIVET_NAMESPACE",
            ));
        }
        if parsed.token.is_some() && env_token.is_some() {
            return Err(invalid(
                "RIVET_ENDPOINT",
                "cannot specify token both in the RIVET_ENDPOINT URL and as RIVET_TOKEN",
            ));
        }

        let defaults = Self::default();
        Ok(Self {
            version: var("RIVET_ENVOY_VERSION").and_then(|v| v.parse().ok()).unwrap_or(defaults.version),
            fallback_endpoints: dedup(&parsed.endpoint, fallback_endpoints),
            endpoint: parsed.endpoint,
            token: parsed.token.or(env_token),
            namespace: parsed.namespace.or(env_namespace).unwrap_or_else(|| "default".to_owned()),
            pool_name: var("RIVET_POOL_NAME").unwrap_or(defaults.pool_name),
            engine_binary_path: var("RIVET_ENGINE_BINARY_PATH").map(PathBuf::from),
            engine_host,
            engine_port,
            engine_spawn: EngineSpawnMode::parse(var("RIVETKIT_ENGINE_SPAWN").as_deref()),
            drain_cap: millis(&var, "RIVETKIT_DRAIN_TIMEOUT_MS", true)?,
            engine_start_timeout: millis(&var, "RIVETKIT_ENGINE_START_TIMEOUT_MS", false)?
                .unwrap_or(defaults.engine_start_timeout),
            envoy_connect_timeout: millis(&var, "RIVETKIT_ENVOY_CONNECT_TIMEOUT_MS", false)?
                .unwrap_or(defaults.envoy_connect_timeout),
            serverless_package_version: defaults.serverless_package_version,
            max_queued_requests_per_actor: count(&var, "RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR")?
                .unwrap_or(defaults.max_queued_requests_per_actor),
        })
    }
}

/// More engine nodes, appended to `RIVET_ENDPOINT`'s: for a RivetKit app,
/// whose own configuration takes `RIVET_ENDPOINT` as one URL.
pub const ENDPOINTS_VAR: &str = crate::env::RIVETKIT_ENGINE_ENDPOINTS;

impl ServeConfig {
    /// Sets the endpoint from one URL or a comma-separated list of the
    /// nodes of one cluster (the JS `endpoint` field); the environment's
    /// extra nodes stay after the listed ones.
    pub fn set_endpoints(&mut self, list: &str) -> anyhow::Result<()> {
        let mut listed = split_list(list).into_iter();
        let Some(first) = listed.next() else {
            return Err(invalid("endpoint", "no endpoint given"));
        };
        let mut fallbacks = Vec::new();
        for raw in listed {
            fallbacks.push(parse_fallback("endpoint", &raw)?);
        }
        fallbacks.append(&mut self.fallback_endpoints);
        self.fallback_endpoints = dedup(&first, fallbacks);
        self.endpoint = first;
        Ok(())
    }

    /// Every engine node, the primary first.
    pub fn endpoints(&self) -> Vec<&str> {
        std::iter::once(self.endpoint.as_str()).chain(self.fallback_endpoints.iter().map(String::as_str)).collect()
    }
}

fn split_list(raw: &str) -> Vec<String> {
    raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn dedup(primary: &str, list: Vec<String>) -> Vec<String> {
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let mut out: Vec<String> = Vec::new();
    for endpoint in list {
        if !same(&endpoint, primary) && !out.iter().any(|o| same(o, &endpoint)) {
            out.push(endpoint);
        }
    }
    out
}

/// A further node: an `http(s)` URL without credentials (they are given
/// once, on the first endpoint or as `RIVET_TOKEN`).
fn parse_fallback(variable: &str, raw: &str) -> anyhow::Result<String> {
    let parsed = parse_endpoint(raw).map_err(|_| invalid(variable, "every listed endpoint must be an http(s) URL"))?;
    if parsed.namespace.is_some() {
        return Err(invalid(variable, "credentials go on the first endpoint only"));
    }
    if !parsed.endpoint.starts_with("http://") && !parsed.endpoint.starts_with("https://") {
        return Err(invalid(variable, "every listed endpoint must be an http(s) URL"));
    }
    Ok(parsed.endpoint)
}

/// `Always`/`Never` win; `Auto` manages loopback endpoints only.
/// An unparsable endpoint (or one without a host) is `config.invalid`.
pub fn should_manage_engine(endpoint: &str, mode: EngineSpawnMode) -> anyhow::Result<bool> {
    match mode {
        EngineSpawnMode::Always => Ok(true),
        EngineSpawnMode::Never => Ok(false),
        EngineSpawnMode::Auto => {
            let url = Url::parse(endpoint).map_err(|e| invalid_endpoint_config(endpoint, &e.to_string()))?;
            let host = url.host().ok_or_else(|| invalid_endpoint_config(endpoint, "missing host"))?;
            Ok(host_is_local(&host))
        }
    }
}

pub use crate::engine::{host_is_local, is_local_endpoint};

/// An endpoint with `namespace:token@` credentials split out.
#[derive(Debug, PartialEq, Eq)]
struct ParsedEndpoint {
    endpoint: String,
    namespace: Option<String>,
    token: Option<String>,
}

/// Mirrors TS `tryParseEndpoint`: a URL without query or fragment; URL
/// credentials become namespace/token and are stripped. The error never
/// contains the raw value, which may hold a token.
fn parse_endpoint(raw: &str) -> anyhow::Result<ParsedEndpoint> {
    let mut url = Url::parse(raw).map_err(|e| invalid("RIVET_ENDPOINT", &format!("invalid URL: {e}")))?;
    if url.query().is_some() {
        return Err(invalid("RIVET_ENDPOINT", "endpoint cannot contain a query string"));
    }
    if url.fragment().is_some() {
        return Err(invalid("RIVET_ENDPOINT", "endpoint cannot contain a fragment"));
    }
    let namespace = match url.username() {
        "" => None,
        user => Some(percent_decode(user)?),
    };
    let token = match url.password() {
        None | Some("") => None,
        Some(password) => Some(percent_decode(password)?),
    };
    if token.is_some() && namespace.is_none() {
        return Err(invalid("RIVET_ENDPOINT", "endpoint cannot have a token without a namespace"));
    }
    // Opaque URLs (`ns:tok@host` without a scheme) carry no auth and would
    // reject the setters, so only strip when something was parsed.
    if namespace.is_some() && (url.set_username("").is_err() || url.set_password(None).is_err()) {
        return Err(invalid("RIVET_ENDPOINT", "endpoint URL does not support credentials"));
    }
    Ok(ParsedEndpoint { endpoint: url.to_string(), namespace, token })
}

/// `decodeURIComponent`, as the reference applies it to URL credentials:
/// every `%` must start a two-digit hex escape and the result must be UTF-8.
fn percent_decode(value: &str) -> anyhow::Result<String> {
    let bad = || invalid("RIVET_ENDPOINT", "invalid percent-encoding in endpoint URL auth");
    let bytes = value.as_bytes();
    let malformed = bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'%' && !bytes.get(i + 1..i + 3).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)));
    if malformed {
        return Err(bad());
    }
    percent_encoding::percent_decode_str(value).decode_utf8().map(|decoded| decoded.into_owned()).map_err(|_| bad())
}

/// `http://{host}:{port}`, bracketing a bare IPv6 host.
fn default_endpoint(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// Reads a millisecond variable; empty counts as unset.
fn millis(var: &impl Fn(&str) -> Option<String>, name: &str, allow_zero: bool) -> anyhow::Result<Option<Duration>> {
    let Some(raw) = var(name).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let ms: u64 = raw
        .trim()
        .parse()
        .map_err(|_| invalid(name, &format!("expected a whole number of milliseconds, got `{raw}`")))?;
    if ms == 0 && !allow_zero {
        return Err(invalid(name, "must be greater than 0"));
    }
    Ok(Some(Duration::from_millis(ms)))
}

/// A positive whole number from `name`, if set.
fn count(var: &impl Fn(&str) -> Option<String>, name: &str) -> anyhow::Result<Option<usize>> {
    let Some(raw) = var(name).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match raw.trim().parse::<usize>() {
        Ok(0) => Err(invalid(name, "must be greater than 0")),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(invalid(name, &format!("expected a whole number, got `{raw}`"))),
    }
}

fn invalid(variable: &str, reason: &str) -> anyhow::Error {
    RivetError::new(crate::error_codes::CONFIG_INVALID, format!("invalid {variable}: {reason}"))
        .with_metadata(json!({ "variable": variable, "reason": reason }))
        .into_anyhow()
}

fn invalid_endpoint_config(endpoint: &str, reason: &str) -> anyhow::Error {
    RivetError::new(crate::error_codes::CONFIG_INVALID, format!("engine endpoint `{endpoint}` is invalid: {reason}"))
        .with_metadata(json!({ "endpoint": endpoint, "reason": reason }))
        .into_anyhow()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    #[test]
    fn auto_manages_loopback_endpoints() {
        for endpoint in [
            "http://127.0.0.1:6420",
            "http://localhost:6420",
            "http://dev.localhost:6420",
            "http://[::1]:6420",
            "http://0.0.0.0:6420",
        ] {
            assert!(should_manage_engine(endpoint, EngineSpawnMode::Auto).unwrap(), "{endpoint}");
        }
    }

    #[test]
    fn auto_leaves_remote_endpoints_connect_only() {
        assert!(!should_manage_engine("https://api.rivet.dev", EngineSpawnMode::Auto).unwrap());
        assert!(!should_manage_engine("http://192.0.2.10:6420", EngineSpawnMode::Auto).unwrap());
    }

    #[test]
    fn explicit_spawn_mode_overrides_endpoint_shape() {
        assert!(should_manage_engine("https://api.rivet.dev", EngineSpawnMode::Always).unwrap());
        assert!(!should_manage_engine("http://127.0.0.1:6420", EngineSpawnMode::Never).unwrap());
        // Never/Always do not even parse the endpoint.
        assert!(should_manage_engine("not a url", EngineSpawnMode::Always).unwrap());
    }

    #[test]
    fn auto_rejects_unparsable_endpoint() {
        let err = should_manage_engine("not a url", EngineSpawnMode::Auto).unwrap_err();
        assert_eq!(code(&err), "config.invalid");
    }

    #[test]
    fn spawn_mode_parsing_is_case_insensitive() {
        assert_eq!(EngineSpawnMode::parse(Some("ALWAYS")), EngineSpawnMode::Always);
        assert_eq!(EngineSpawnMode::parse(Some("never")), EngineSpawnMode::Never);
        assert_eq!(EngineSpawnMode::parse(Some("yes")), EngineSpawnMode::Auto);
        assert_eq!(EngineSpawnMode::parse(None), EngineSpawnMode::Auto);
    }

    #[test]
    fn local_endpoint_includes_bracketed_ipv6() {
        assert!(is_local_endpoint("http://[::1]:6420"));
        assert!(is_local_endpoint("http://localhost:6420/base"));
        assert!(is_local_endpoint("http://0.0.0.0:6420"));
        assert!(!is_local_endpoint("https://api.rivet.dev"));
        assert!(!is_local_endpoint("not a url"));
    }

    /// The token sent without one configured follows the contract profile
    /// (docs/versions.md); a configured one always wins.
    #[test]
    fn the_default_token_follows_the_rivetkit_version() {
        let with = |version: &str, endpoint: &str, token: Option<&str>| ServeConfig {
            serverless_package_version: version.into(),
            endpoint: endpoint.into(),
            token: token.map(Into::into),
            ..ServeConfig::default()
        };
        let local = "http://127.0.0.1:6420";
        let remote = "https://engine.example.com";
        assert_eq!(with("2.3.19", local, None).token().as_deref(), Some("dev"));
        assert_eq!(with("2.3.19", remote, None).token().as_deref(), Some("dev"));
        assert_eq!(with("3.0.0", local, None).token().as_deref(), Some("default"));
        assert_eq!(with("3.0.0", remote, None).token(), None);
        assert_eq!(with("3.0.0", remote, Some("sk")).token().as_deref(), Some("sk"));
        assert_eq!(with("2.3.19", local, Some("sk")).engine_options().token.as_deref(), Some("sk"));
    }

    #[test]
    fn env_defaults() {
        let c = ServeConfig::from_vars(|_| None).unwrap();
        assert_eq!(c, ServeConfig::default());
        assert_eq!(c.version, 1);
        assert_eq!(c.endpoint, "http://127.0.0.1:6420");
        assert_eq!(c.token, None, "none configured");
        assert_eq!(c.token().as_deref(), Some("default"), "direct use, local engine: 3.0's default");
        assert_eq!(c.namespace, "default");
        assert_eq!(c.pool_name, "rivetkit-rust");
        assert_eq!(c.engine_spawn, EngineSpawnMode::Auto);
        assert_eq!(c.drain_cap, None);
        assert_eq!(c.engine_start_timeout, Duration::from_secs(30));
        assert_eq!(c.envoy_connect_timeout, Duration::from_secs(30));
        assert_eq!(c.serverless_package_version, env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn env_values_are_read() {
        let c = ServeConfig::from_vars(vars(&[
            ("RIVET_ENVOY_VERSION", "7"),
            ("RIVET_TOKEN", "tok"),
            ("RIVET_NAMESPACE", "ns"),
            ("RIVET_POOL_NAME", "pool"),
            ("RIVET_ENGINE_BINARY_PATH", "/x/rivet-engine"),
            ("RIVET_RUN_ENGINE_HOST", "::1"),
            ("RIVET_RUN_ENGINE_PORT", "7000"),
            ("RIVETKIT_ENGINE_SPAWN", "Never"),
            ("RIVETKIT_DRAIN_TIMEOUT_MS", "0"),
            ("RIVETKIT_ENGINE_START_TIMEOUT_MS", "2500"),
            ("RIVETKIT_ENVOY_CONNECT_TIMEOUT_MS", ""),
            ("RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR", "16"),
        ]))
        .unwrap();
        assert_eq!(c.version, 7);
        assert_eq!(c.endpoint, "http://[::1]:7000");
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert_eq!(c.namespace, "ns");
        assert_eq!(c.pool_name, "pool");
        assert_eq!(c.engine_binary_path, Some(PathBuf::from("/x/rivet-engine")));
        assert_eq!((c.engine_host.as_deref(), c.engine_port), (Some("::1"), Some(7000)));
        assert_eq!(c.engine_spawn, EngineSpawnMode::Never);
        assert_eq!(c.drain_cap, Some(Duration::ZERO));
        assert_eq!(c.engine_start_timeout, Duration::from_millis(2500));
        assert_eq!(c.envoy_connect_timeout, Duration::from_secs(30));
        assert_eq!(c.max_queued_requests_per_actor, 16);
        assert_eq!(ServeConfig::default().max_queued_requests_per_actor, 1024);
    }

    #[test]
    fn reference_variables_ignore_bad_numbers() {
        let c =
            ServeConfig::from_vars(vars(&[("RIVET_ENVOY_VERSION", "x"), ("RIVET_RUN_ENGINE_PORT", "99999")])).unwrap();
        assert_eq!((c.version, c.engine_port), (1, None));
        assert_eq!(c.endpoint, "http://127.0.0.1:6420");
    }

    #[test]
    fn our_timeout_variables_reject_bad_values() {
        for (name, value) in [
            ("RIVETKIT_DRAIN_TIMEOUT_MS", "soon"),
            ("RIVETKIT_ENGINE_START_TIMEOUT_MS", "0"),
            ("RIVETKIT_ENVOY_CONNECT_TIMEOUT_MS", "-1"),
            ("RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR", "0"),
            ("RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR", "many"),
        ] {
            let err = ServeConfig::from_vars(vars(&[(name, value)])).unwrap_err();
            assert_eq!(code(&err), "config.invalid");
            assert!(err.to_string().contains(name));
        }
    }

    #[test]
    fn endpoint_credentials_are_split_and_stripped() {
        let c = ServeConfig::from_vars(vars(&[("RIVET_ENDPOINT", "https://cloud-ns:sk_cloud%2Dtoken@api.rivet.dev")]))
            .unwrap();
        assert_eq!(c.endpoint, "https://api.rivet.dev/");
        assert_eq!(c.namespace, "cloud-ns");
        assert_eq!(c.token.as_deref(), Some("sk_cloud-token"));
    }

    #[test]
    fn endpoint_parsing_rules() {
        let p = parse_endpoint("https://my-ns@api.rivet.dev").unwrap();
        assert_eq!(
            (p.endpoint.as_str(), p.namespace.as_deref(), p.token),
            ("https://api.rivet.dev/", Some("my-ns"), None)
        );
        let p = parse_endpoint("https://my-ns:tok@api.rivet.dev/base").unwrap();
        assert_eq!(p.endpoint, "https://api.rivet.dev/base");
        // Normalised: a bare origin gains a trailing slash.
        let p = parse_endpoint("http://127.0.0.1:6420").unwrap();
        assert_eq!((p.endpoint.as_str(), p.namespace, p.token), ("http://127.0.0.1:6420/", None, None));
        // A scheme-less value is an opaque URL: passed through, no auth.
        let p = parse_endpoint("my-ns:tok@api.rivet.dev").unwrap();
        assert_eq!((p.endpoint.as_str(), p.namespace, p.token), ("my-ns:tok@api.rivet.dev", None, None));
    }

    #[test]
    fn endpoint_errors() {
        for (endpoint, needle) in [
            ("https://:sk_secret@api.rivet.dev", "token without a namespace"),
            ("not a url", "invalid URL"),
            ("https://my-ns:tok@api.rivet.dev?foo=bar", "query string"),
            ("https://my-ns:tok@api.rivet.dev#section", "fragment"),
            ("https://my-ns:bad%zz@api.rivet.dev", "percent-encoding"),
            ("https://my-ns:bad%2@api.rivet.dev", "percent-encoding"),
            ("https://my-ns:bad%+F@api.rivet.dev", "percent-encoding"),
            ("https://my-ns:bad%FF@api.rivet.dev", "percent-encoding"),
        ] {
            let err = ServeConfig::from_vars(vars(&[("RIVET_ENDPOINT", endpoint)])).unwrap_err();
            assert_eq!(code(&err), "config.invalid", "{endpoint}");
            assert!(err.to_string().contains(needle), "{endpoint}: {err}");
            assert!(!err.to_string().contains("sk_secret"), "token leaked: {err}");
        }
    }

    #[test]
    fn credentials_in_url_and_env_conflict() {
        let err = ServeConfig::from_vars(vars(&[
            ("RIVET_ENDPOINT", "https://ns@api.rivet.dev"),
            ("RIVET_NAMESPACE", "other"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("namespace both"));
        let err = ServeConfig::from_vars(vars(&[
            ("RIVET_ENDPOINT", "https://ns:tok@api.rivet.dev"),
            ("RIVET_TOKEN", "other"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("token both"));
        assert_eq!(code(&err), "config.invalid");
    }

    #[test]
    fn debug_redacts_token() {
        let c = ServeConfig { token: Some("sk_secret".into()), ..ServeConfig::default() };
        assert!(!format!("{c:?}").contains("sk_secret"));
    }

    #[test]
    fn an_endpoint_list_names_the_nodes_of_one_cluster() {
        let c = ServeConfig::from_vars(vars(&[
            ("RIVET_ENDPOINT", "http://ns:tok@a:6420, http://b:6420"),
            (ENDPOINTS_VAR, "http://c:6420,http://b:6420/"),
        ]))
        .unwrap();
        assert_eq!(c.endpoint, "http://a:6420/");
        assert_eq!(c.namespace, "ns");
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert_eq!(c.fallback_endpoints, ["http://b:6420/", "http://c:6420/"]);
        assert_eq!(c.endpoints(), ["http://a:6420/", "http://b:6420/", "http://c:6420/"]);
        // The JS field replaces the primary; the environment's extras stay after its list.
        let mut c = ServeConfig::from_vars(vars(&[(ENDPOINTS_VAR, "http://c:1")])).unwrap();
        c.set_endpoints("http://a:1,http://b:1").unwrap();
        assert_eq!(c.endpoints(), ["http://a:1", "http://b:1/", "http://c:1/"]);
        c.set_endpoints("http://solo:1").unwrap();
        assert_eq!(c.endpoint, "http://solo:1");
    }

    #[test]
    fn a_listed_node_is_a_plain_url() {
        for (name, value) in [
            ("RIVET_ENDPOINT", "http://a:1,http://ns:tok@b:1"),
            ("RIVET_ENDPOINT", "http://a:1,not a url"),
            (ENDPOINTS_VAR, "ftp://b:1"),
        ] {
            let err = ServeConfig::from_vars(vars(&[(name, value)])).unwrap_err();
            assert_eq!(code(&err), "config.invalid", "{name}={value}");
            assert!(!format!("{err:#}").contains("tok"), "{err:#}");
        }
        assert_eq!(code(&ServeConfig::default().set_endpoints(" , ").unwrap_err()), "config.invalid");
    }
}
