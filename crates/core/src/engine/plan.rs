//! Deriving the engine's addresses, environment and config file from
//! `EngineOptions` : pure functions, so every rule is unit-tested
//! without starting anything.
//!
//! Why a config file: on non-default ports the engine's datacenter
//! `public_url`/`peer_url` still default to 6420/6421 (its `/datacenters`
//! answers `http://127.0.0.1:6420/`); our engine notes report actor
//! create/resolve then hanging 30 s.
//! We always pass `--config {root}/var/engine/config-{port}.json` with the
//! real URLs; the engine merges it with the `RIVET__*` variables.

use std::net::IpAddr;

use anyhow::Result;
use serde_json::json;
use url::{Host, Url};

use super::errors::invalid_endpoint;
use super::lookup::Env;
use super::options::EngineOptions;
use super::paths::EngineDirs;
use super::profile::EngineArch;

/// Addresses the engine will use, derived from the endpoint .
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnginePlan {
    /// An IP literal: the engine rejects host names here.
    pub bind_host: String,
    pub guard_port: u16,
    pub api_peer_port: u16,
    pub metrics_port: u16,
    /// Guard URL as clients reach it (topology `public_url`).
    pub public_url: String,
    /// API-peer URL (topology `peer_url`).
    pub peer_url: String,
    /// The token our envoy will present: the engine we start accepts it
    /// as its admin token (unless `RIVET__AUTH__ADMIN_TOKEN` says otherwise).
    pub admin_token: Option<String>,
}

pub fn plan(config: &EngineOptions) -> Result<EnginePlan> {
    let endpoint = config.endpoint.as_str();
    let url = Url::parse(endpoint).map_err(|e| invalid_endpoint(endpoint, &e.to_string()))?;
    let host = url.host().ok_or_else(|| invalid_endpoint(endpoint, "missing host"))?;
    let port = url.port_or_known_default().ok_or_else(|| invalid_endpoint(endpoint, "missing port"))?;
    check_engine_port(config)?;
    let guard_port = config.engine_port.unwrap_or(port);
    let too_large = || invalid_endpoint(endpoint, "port is too large (the engine also uses port+1 and port+10)");
    let api_peer_port = guard_port.checked_add(1).ok_or_else(too_large)?;
    let metrics_port = guard_port.checked_add(10).ok_or_else(too_large)?;

    let bind_ip = match (config.engine_host.as_deref(), host.clone()) {
        (Some(name), _) | (None, Host::Domain(name)) => ip_of_name(endpoint, name)?,
        (None, Host::Ipv4(ip)) => IpAddr::V4(ip),
        (None, Host::Ipv6(ip)) => IpAddr::V6(ip),
    };
    let public_host = match host {
        Host::Ipv4(ip) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        Host::Ipv6(ip) if ip.is_unspecified() => "[::1]".to_owned(),
        other => other.to_string(),
    };
    Ok(EnginePlan {
        bind_host: bind_ip.to_string(),
        guard_port,
        api_peer_port,
        metrics_port,
        public_url: format!("http://{public_host}:{guard_port}"),
        peer_url: format!("http://{}:{api_peer_port}", url_host(reachable(bind_ip))),
        admin_token: config.token.clone(),
    })
}

/// An engine we start listens on `engine_port`, but we reach it (health,
/// runner config, envoy) at the endpoint: when the two disagree, a spawned
/// engine could never be reached, so that is a configuration error naming
/// both rather than a health check that times out. RivetKit passes
/// `enginePort` (default 6420, `RIVET_RUN_ENGINE_PORT`) with every
/// endpoint, so this is only checked when an engine is about to be started.
pub fn check_engine_port(config: &EngineOptions) -> Result<()> {
    let endpoint = config.endpoint.as_str();
    let url = Url::parse(endpoint).map_err(|e| invalid_endpoint(endpoint, &e.to_string()))?;
    let (Some(engine_port), Some(port)) = (config.engine_port, url.port_or_known_default()) else {
        return Ok(());
    };
    if engine_port == port {
        return Ok(());
    }
    Err(crate::error::RivetError::new(
        crate::error_codes::CONFIG_INVALID,
        format!(
            "enginePort ({engine_port}) and the port of the endpoint '{endpoint}' ({port}) disagree: an engine \
             started on port {engine_port} could not be reached at the endpoint. Set enginePort \
             (RIVET_RUN_ENGINE_PORT) to {port}, or use an endpoint on port {engine_port}."
        ),
    )
    .with_metadata(json!({ "enginePort": engine_port, "endpoint": endpoint, "endpointPort": port }))
    .into_anyhow())
}

/// The engine parses its bind hosts as IPs, so `localhost` must be mapped
/// (verified: `RIVET__GUARD__HOST=localhost` exits with "invalid IP address
/// syntax"); other names are refused up front with a clear message.
fn ip_of_name(endpoint: &str, name: &str) -> Result<IpAddr> {
    let lower = name.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse().map_err(|_| {
        invalid_endpoint(
            endpoint,
            &format!(
                "a managed engine binds an IP address, not `{name}`; \
                 use an IP in the endpoint or set RIVET_RUN_ENGINE_HOST"
            ),
        )
    })
}

/// A wildcard bind is reached through loopback.
fn reachable(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        other => other,
    }
}

fn url_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// How often an engine we start pings each envoy (its default is 3000).
pub const ENVOY_PING_INTERVAL_MS: u32 = 1000;
/// How long without a ping before an engine we start stops placing actors
/// on an envoy.
pub const ENVOY_ELIGIBLE_THRESHOLD_MS: u32 = 3000;
/// How long without a ping before an engine we start declares an envoy's
/// actors lost (its default is 15000).
pub const ENVOY_LOST_THRESHOLD_MS: u32 = 5000;

// Our envoy stops its actors once no ping came for the lost threshold minus
// min(3 s, threshold / 2): that must leave room for a lost ping, and
// eligibility must end before actors are declared lost.
const _: () = {
    let half = ENVOY_LOST_THRESHOLD_MS / 2;
    let margin = if half < 3000 { half } else { 3000 };
    assert!(ENVOY_LOST_THRESHOLD_MS - margin >= 2 * ENVOY_PING_INTERVAL_MS);
    assert!(ENVOY_ELIGIBLE_THRESHOLD_MS >= 2 * ENVOY_PING_INTERVAL_MS);
    assert!(ENVOY_ELIGIBLE_THRESHOLD_MS < ENVOY_LOST_THRESHOLD_MS);
};

/// The CPU, in millicores, that an engine we start measures its load
/// against: a thousand cores, so that it never sheds load.
pub const WORKER_CPU_MAX_MILLICORES: u32 = 1_000_000;

/// The engine's environment. Added on top of the inherited
/// environment, so a user's own `RIVET__*` settings not listed here still
/// apply. The ports are the same for both architectures; the rest follows
/// the engine profile (`super::profile`).
pub fn engine_env(arch: EngineArch, plan: &EnginePlan, dirs: &EngineDirs, env: Env<'_>) -> Vec<(String, String)> {
    let host = plan.bind_host.clone();
    let ports: [(&str, String); 6] = [
        ("RIVET__GUARD__HOST", host.clone()),
        ("RIVET__GUARD__PORT", plan.guard_port.to_string()),
        ("RIVET__API_PEER__HOST", host.clone()),
        ("RIVET__API_PEER__PORT", plan.api_peer_port.to_string()),
        ("RIVET__METRICS__HOST", host),
        ("RIVET__METRICS__PORT", plan.metrics_port.to_string()),
    ];
    let mut out: Vec<(String, String)> = ports.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let own = match arch {
        EngineArch::V2 => v2_env(dirs),
        EngineArch::V3 => v3_env(dirs),
    };
    out.extend(own.into_iter().map(|(k, v)| (k.to_owned(), v)));
    // No load shedding for the machine's other work (docs/engine.md, "Load
    // shedding"): on a host without a CPU cgroup of its own, the engine's
    // workflow worker reads the whole machine's CPU use and, above 70% of
    // it, pulls fewer ready workflows (5% at 90%), so a busy laptop stalls
    // actor starts and wakes. Counted against a thousand cores it never
    // sheds. A value the user set wins. Both architectures have the setting.
    if env("RIVET__RUNTIME__WORKER_CPU_MAX").is_none() {
        out.push(("RIVET__RUNTIME__WORKER_CPU_MAX".to_owned(), WORKER_CPU_MAX_MILLICORES.to_string()));
    }
    if let Some(token) = admin_token(arch, plan, env) {
        out.insert(0, ("RIVET__AUTH__ADMIN_TOKEN".to_owned(), token));
    }
    out
}

/// Engine 2.3: a file-system database, and the pegboard's envoy timing.
fn v2_env(dirs: &EngineDirs) -> Vec<(&'static str, String)> {
    vec![
        ("RIVET__FILE_SYSTEM__PATH", dirs.db.to_string_lossy().into_owned()),
        // Development tuning: fast retries and short lost/shutdown thresholds.
        // Unlike the reference we leave the retry reset duration (100 ms) and
        // the backoff exponent cap (1) at the engine's defaults: with them, an
        // engine left running after the app exits retried every drained actor
        // about every 100 ms for as long as no host came back (measured: 55%
        // of a core for 6 actors; 4% with the defaults, decaying).
        ("RIVET__PEGBOARD__BASE_RETRY_TIMEOUT", "100".into()),
        ("RIVET__PEGBOARD__RUNNER_ELIGIBLE_THRESHOLD", "5000".into()),
        ("RIVET__PEGBOARD__RUNNER_LOST_THRESHOLD", "7000".into()),
        // Lost-envoy detection, which bounds how long the actors of a crashed
        // host stay unreachable (README "Recovery after a crash"). The engine
        // refreshes an envoy's liveness stamp with every ping it sends it
        // (every `ENVOY_UPDATE_PING_INTERVAL`), and each running actor
        // re-checks that stamp once per `ENVOY_LOST_THRESHOLD`: after a
        // SIGKILL its actors come back between threshold - ping interval and
        // twice the threshold later. Measured (bench/recovery.mjs, 10 actors):
        // 7.4 / 9.5 / 12.7 s (min / median / max) with 7000 and the engine's
        // 3000 ms pings, 5.3 / 6.4 / 7.4 s with these.
        // Our envoy stops its own actors when no ping came for the threshold
        // minus min(3 s, threshold / 2): 2.5 s here, i.e. one ping may be lost
        // and the next 500 ms late (with 7000 / 3000 it was 4 s, 1 s of
        // slack). Eligibility for new actors must end before the lost check
        // fires, or a woken actor can be placed on the dead envoy again.
        ("RIVET__PEGBOARD__ENVOY_UPDATE_PING_INTERVAL", ENVOY_PING_INTERVAL_MS.to_string()),
        ("RIVET__PEGBOARD__ENVOY_ELIGIBLE_THRESHOLD", ENVOY_ELIGIBLE_THRESHOLD_MS.to_string()),
        ("RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD", ENVOY_LOST_THRESHOLD_MS.to_string()),
        ("RIVET__PEGBOARD__MIN_METADATA_POLL_INTERVAL", "1000".into()),
        ("RIVET__FEATURES__GUARD_GATEWAY_V3__MODE", "on".into()),
        ("RIVET__FEATURES__GUARD_GATEWAY_V3__PERCENTAGE", "100".into()),
        ("RIVET__RUNTIME__WORKER_SHUTDOWN_DURATION", "1".into()),
        ("RIVET__RUNTIME__GUARD_SHUTDOWN_DURATION", "1".into()),
        ("RIVET__RUNTIME__FORCE_SHUTDOWN_DURATION", "2".into()),
    ]
}

/// Engine 3.0: one storage worker over a local log directory and a local
/// object store (both must exist), short stop budgets, and the same
/// lost-host timing as for 2.3 (the pegboard's `node_*` settings).
fn v3_env(dirs: &EngineDirs) -> Vec<(&'static str, String)> {
    vec![
        ("RIVET__STORAGE__LOG_DIRECTORY", dirs.depot_log.to_string_lossy().into_owned()),
        ("RIVET__OBJECT_STORAGE__PRIMARY__FILE_SYSTEM__PATH", dirs.depot_objects.to_string_lossy().into_owned()),
        // One storage worker holds every partition: nothing to balance.
        ("RIVET__STORAGE__BALANCING__ENABLED", "false".into()),
        ("RIVET__STORAGE__AUTO_PROVISION_PARTITIONS", "1".into()),
        // A bounded log on disk; the object store is local already, so a
        // disk cache in front of it would only hold a second copy.
        ("RIVET__STORAGE__LOG_SHARD__MAX_DISK_BYTES", V3_LOG_MAX_DISK_BYTES.to_string()),
        ("RIVET__STORAGE__COLD_STORE__DISK_CACHE_BYTES", "0".into()),
        // The storage stop must outlast the age at which writes go cold, and
        // the forced stop both budgets: an engine we start stops in seconds.
        ("RIVET__STORAGE__WRITE_TO_COLD_AFTER_MS", "5000".into()),
        ("RIVET__STORAGE__STOP_TIMEOUT_MS", "6000".into()),
        ("RIVET__STORAGE__STOP_TEARDOWN_MS", "2000".into()),
        ("RIVET__PEGBOARD__NODE_UPDATE_PING_INTERVAL", ENVOY_PING_INTERVAL_MS.to_string()),
        ("RIVET__PEGBOARD__NODE_LOST_THRESHOLD", ENVOY_LOST_THRESHOLD_MS.to_string()),
        ("RIVET__RUNTIME__WORKER_SHUTDOWN_DURATION", "1".into()),
        ("RIVET__RUNTIME__GUARD_SHUTDOWN_DURATION", "1".into()),
        ("RIVET__RUNTIME__FORCE_SHUTDOWN_DURATION", "10".into()),
    ]
}

/// The log shard's disk bound of an engine 3.0 we start (4 GiB).
pub const V3_LOG_MAX_DISK_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// The engine's admin token. `RIVET__AUTH__ADMIN_TOKEN` wins. Engine 3.0
/// refuses to start without one, so it gets the token our envoy presents
/// (else `default`). Engine 2.3 bound to loopback runs without one, as
/// `@rivetkit/rivetkit-napi` 2.3.19 starts it: only local processes reach
/// it, and RivetKit clients that send no token (or its default `dev`) work;
/// bound to any other address it requires the envoy's token too.
fn admin_token(arch: EngineArch, plan: &EnginePlan, env: Env<'_>) -> Option<String> {
    if let Some(token) = env("RIVET__AUTH__ADMIN_TOKEN") {
        return Some(token);
    }
    let loopback = plan.bind_host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let required = arch == EngineArch::V3 || !loopback;
    required.then(|| plan.admin_token.clone().unwrap_or_else(|| "default".to_owned()))
}

/// Topology override; the schema was checked with `rivet-engine config show`.
pub fn config_file(plan: &EnginePlan) -> serde_json::Value {
    json!({
        "topology": {
            "datacenter_label": 1,
            "datacenters": {
                "default": {
                    "datacenter_label": 1,
                    "is_leader": true,
                    "public_url": plan.public_url,
                    "peer_url": plan.peer_url,
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use super::*;
    use crate::error::RivetError;

    fn cfg(endpoint: &str) -> EngineOptions {
        EngineOptions { endpoint: endpoint.to_owned(), ..Default::default() }
    }

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    #[test]
    fn plan_derives_ports_and_urls() {
        let p = plan(&cfg("http://127.0.0.1:26420")).unwrap();
        assert_eq!(
            (p.bind_host.as_str(), p.guard_port, p.api_peer_port, p.metrics_port),
            ("127.0.0.1", 26420, 26421, 26430)
        );
        assert_eq!((p.public_url.as_str(), p.peer_url.as_str()), ("http://127.0.0.1:26420", "http://127.0.0.1:26421"));

        let p = plan(&cfg("http://localhost:7000/")).unwrap();
        assert_eq!((p.bind_host.as_str(), p.public_url.as_str()), ("127.0.0.1", "http://localhost:7000"));

        let p = plan(&cfg("http://[::1]:7000")).unwrap();
        assert_eq!((p.bind_host.as_str(), p.peer_url.as_str()), ("::1", "http://[::1]:7001"));

        let p = plan(&cfg("http://0.0.0.0:7000")).unwrap();
        assert_eq!(
            (p.bind_host.as_str(), p.public_url.as_str(), p.peer_url.as_str()),
            ("0.0.0.0", "http://127.0.0.1:7000", "http://127.0.0.1:7001")
        );

        let overridden = EngineOptions {
            engine_host: Some("0.0.0.0".into()),
            engine_port: Some(9000),
            ..cfg("http://127.0.0.1:9000")
        };
        let p = plan(&overridden).unwrap();
        assert_eq!(
            (p.bind_host.as_str(), p.guard_port, p.public_url.as_str()),
            ("0.0.0.0", 9000, "http://127.0.0.1:9000")
        );
    }

    #[test]
    fn engine_port_and_endpoint_port_must_agree() {
        let mismatch = EngineOptions { engine_port: Some(6420), ..cfg("http://127.0.0.1:7000") };
        let err = plan(&mismatch).unwrap_err();
        assert_eq!(code(&err), "config.invalid");
        let message = err.to_string();
        assert!(message.contains("6420") && message.contains("7000"), "{message}");
        assert!(check_engine_port(&EngineOptions { engine_port: Some(7000), ..cfg("http://127.0.0.1:7000") }).is_ok());
        assert!(check_engine_port(&cfg("http://127.0.0.1:7000")).is_ok());
        // http's default port counts as the endpoint's port.
        assert!(check_engine_port(&EngineOptions { engine_port: Some(80), ..cfg("http://localhost") }).is_ok());
    }

    #[test]
    fn plan_rejects_port_overflow_and_host_names() {
        for endpoint in ["http://127.0.0.1:65530", "http://127.0.0.1:65535"] {
            let err = plan(&cfg(endpoint)).unwrap_err();
            assert_eq!(code(&err), "engine.invalid_endpoint", "{endpoint}");
        }
        let err = plan(&cfg("http://example.com:6420")).unwrap_err();
        assert_eq!(code(&err), "engine.invalid_endpoint");
        assert!(err.to_string().contains("RIVET_RUN_ENGINE_HOST"));
    }

    #[test]
    fn engine_3_gets_its_storage_and_always_a_token() {
        let dirs = EngineDirs::new(PathBuf::from("/r/.rivetkit"));
        let p = plan(&cfg("http://127.0.0.1:6420")).unwrap();
        let env: HashMap<_, _> = engine_env(EngineArch::V3, &p, &dirs, &|_| None).into_iter().collect();
        assert_eq!(env["RIVET__AUTH__ADMIN_TOKEN"], "default", "engine 3.0 does not start without one");
        assert_eq!(env["RIVET__STORAGE__LOG_DIRECTORY"], "/r/.rivetkit/var/engine/depot/log");
        assert_eq!(env["RIVET__OBJECT_STORAGE__PRIMARY__FILE_SYSTEM__PATH"], "/r/.rivetkit/var/engine/depot/objects");
        assert_eq!(env["RIVET__PEGBOARD__NODE_LOST_THRESHOLD"], ENVOY_LOST_THRESHOLD_MS.to_string());
        assert_eq!(env["RIVET__RUNTIME__WORKER_CPU_MAX"], "1000000");
        assert_eq!(env["RIVET__GUARD__PORT"], "6420");
        // Nothing of 2.3's: engine 3.0 refuses unknown settings.
        for key in env.keys() {
            assert!(!key.contains("FILE_SYSTEM__PATH") || key.starts_with("RIVET__OBJECT_STORAGE"), "{key}");
            assert!(!key.contains("ENVOY_") && !key.contains("RUNNER_") && !key.contains("FEATURES"), "{key}");
        }
        let token = |k: &str| (k == "RIVET__AUTH__ADMIN_TOKEN").then(|| "sekrit".to_owned());
        let env = engine_env(EngineArch::V3, &p, &dirs, &token);
        assert!(env.contains(&("RIVET__AUTH__ADMIN_TOKEN".into(), "sekrit".into())));
    }

    #[test]
    fn env_matches_the_spec() {
        let dirs = EngineDirs::new(PathBuf::from("/r/.rivetkit"));
        let env: HashMap<_, _> =
            engine_env(EngineArch::V2, &plan(&cfg("http://127.0.0.1:6420")).unwrap(), &dirs, &|_| None)
                .into_iter()
                .collect();
        assert!(!env.contains_key("RIVET__AUTH__ADMIN_TOKEN"), "a loopback engine runs without an admin token");
        assert_eq!(env["RIVET__GUARD__PORT"], "6420");
        assert_eq!(env["RIVET__API_PEER__PORT"], "6421");
        assert_eq!(env["RIVET__METRICS__PORT"], "6430");
        assert_eq!(env["RIVET__METRICS__HOST"], "127.0.0.1");
        assert_eq!(env["RIVET__FILE_SYSTEM__PATH"], "/r/.rivetkit/var/engine/db");
        assert_eq!(env["RIVET__PEGBOARD__ENVOY_LOST_THRESHOLD"], "5000");
        assert_eq!(env["RIVET__PEGBOARD__ENVOY_UPDATE_PING_INTERVAL"], "1000");
        assert_eq!(env["RIVET__PEGBOARD__ENVOY_ELIGIBLE_THRESHOLD"], "3000");
        assert_eq!(env["RIVET__FEATURES__GUARD_GATEWAY_V3__MODE"], "on");
        assert_eq!(env["RIVET__RUNTIME__FORCE_SHUTDOWN_DURATION"], "2");
        assert_eq!(env["RIVET__RUNTIME__WORKER_CPU_MAX"], "1000000", "no load shedding for the machine's other work");
        let own = |k: &str| (k == "RIVET__RUNTIME__WORKER_CPU_MAX").then(|| "2000".to_owned());
        let env = engine_env(EngineArch::V2, &plan(&cfg("http://127.0.0.1:6420")).unwrap(), &dirs, &own);
        assert!(
            !env.iter().any(|(k, _)| k == "RIVET__RUNTIME__WORKER_CPU_MAX"),
            "the user's value is inherited as it is"
        );

        let token = |k: &str| (k == "RIVET__AUTH__ADMIN_TOKEN").then(|| "sekrit".to_owned());
        let env = engine_env(EngineArch::V2, &plan(&cfg("http://127.0.0.1:6420")).unwrap(), &dirs, &token);
        assert!(env.contains(&("RIVET__AUTH__ADMIN_TOKEN".into(), "sekrit".into())));

        // Bound beyond loopback, the engine requires the token our envoy presents.
        let mut exposed = cfg("http://127.0.0.1:6420");
        exposed.engine_host = Some("0.0.0.0".into());
        exposed.token = Some("dev".into());
        let env = engine_env(EngineArch::V2, &plan(&exposed).unwrap(), &dirs, &|_: &str| None);
        assert!(env.contains(&("RIVET__AUTH__ADMIN_TOKEN".into(), "dev".into())));
    }
}
