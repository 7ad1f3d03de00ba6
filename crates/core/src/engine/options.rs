//! What the engine module needs to know, and nothing more: the registry
//! builds these options from its `ServeConfig`, so `engine` depends on no
//! other module of ours.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use url::{Host, Url};

use super::profile::EngineArch;

/// The engine's default guard port.
pub const DEFAULT_ENGINE_PORT: u16 = 6420;
/// How long we wait for an engine we started to become healthy. The
/// reference waits 10 s; a first start from a cold disk on a busy 2-core
/// machine wrote nothing for 10 s and was killed half-started
/// (docs/testing.md), so we wait longer, saying so every 2 s.
pub const DEFAULT_ENGINE_START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct EngineOptions {
    /// The engine's endpoint (`http://host:port`).
    pub endpoint: String,
    pub token: Option<String>,
    pub namespace: String,
    /// The pool whose runner config we make sure of.
    pub pool_name: String,
    /// An explicit engine binary; otherwise it is looked up.
    pub engine_binary_path: Option<PathBuf>,
    /// Where a spawned engine binds, when not taken from the endpoint.
    pub engine_host: Option<String>,
    pub engine_port: Option<u16>,
    pub engine_start_timeout: Duration,
    /// The engine architecture the app needs: the one an engine we start
    /// must have, and a running one we reuse (an explicit binary decides
    /// for itself). From the contract profile.
    pub arch: EngineArch,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            endpoint: format!("http://127.0.0.1:{DEFAULT_ENGINE_PORT}"),
            token: Some("default".to_owned()),
            namespace: "default".to_owned(),
            pool_name: "rivetkit-rust".to_owned(),
            engine_binary_path: None,
            engine_host: None,
            engine_port: None,
            engine_start_timeout: DEFAULT_ENGINE_START_TIMEOUT,
            arch: EngineArch::V3,
        }
    }
}

// Hand-written so that the token never lands in a log line.
impl fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineOptions")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("namespace", &self.namespace)
            .field("pool_name", &self.pool_name)
            .field("engine_binary_path", &self.engine_binary_path)
            .field("engine_host", &self.engine_host)
            .field("engine_port", &self.engine_port)
            .field("engine_start_timeout", &self.engine_start_timeout)
            .field("arch", &self.arch)
            .finish()
    }
}

/// Whether `endpoint` names this machine: `localhost`, `*.localhost`, or a
/// loopback/unspecified IP. Used for the runner-config upsert.
///
/// Deliberate fix: the reference compares `host_str()`, which keeps IPv6
/// brackets, so `http://[::1]:6420` was "loopback" for spawning but not
/// "local" for the runner config. We use the parsed host, so both agree.
pub fn is_local_endpoint(endpoint: &str) -> bool {
    Url::parse(endpoint).ok().and_then(|url| url.host().map(|h| host_is_local(&h))).unwrap_or(false)
}

/// Whether a parsed host is this machine (see [`is_local_endpoint`]).
pub fn host_is_local(host: &Host<&str>) -> bool {
    match host {
        Host::Ipv4(ip) => ip.is_loopback() || ip.is_unspecified(),
        Host::Ipv6(ip) => ip.is_loopback() || ip.is_unspecified(),
        // Non-special schemes leave IPs as opaque "domains"; parse them too.
        Host::Domain(name) => {
            let bare = name.trim_start_matches('[').trim_end_matches(']');
            name.eq_ignore_ascii_case("localhost")
                || name.to_ascii_lowercase().ends_with(".localhost")
                || bare.parse::<IpAddr>().map(|ip| ip.is_loopback() || ip.is_unspecified()).unwrap_or(false)
        }
    }
}
