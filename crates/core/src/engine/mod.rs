//! Finding, reusing or starting a local Rivet Engine, and preparing it for
//! our envoy.
//!
//! Why this lives in the core: a developer runs `node app.js` and expects
//! actors to work without starting anything else. So when the endpoint is
//! local (see `registry::config::should_manage_engine`) the host:
//!
//! 1. reuses an engine already answering `GET /health` ([`health`]), if it
//!    is of the architecture the app needs ([`profile`]), and otherwise says
//!    what to do;
//! 2. otherwise finds a `rivet-engine` binary of that architecture
//!    ([`resolve`], npm first) and starts it detached, with logs in files
//!    and a config file for its real ports ([`plan`], [`spawn`]), waiting up
//!    to `engine_start_timeout`;
//! 3. makes sure of our pool ([`runner_config`]: a runner config on 2.3, a
//!    pool on 3.0), which the engine requires before it accepts an envoy.
//!
//! An engine we started belongs to the host and is stopped when the host
//! shuts down ([`SpawnedEngine::stop`]); one we found running is only
//! reused. Talking to it uses a tiny built-in HTTP client ([`http`]) rather
//! than a full HTTP stack.

mod errors;
pub mod health;
pub mod http;
mod lookup;
pub mod options;
pub mod paths;
pub mod plan;
pub mod profile;
mod ready;
pub mod resolve;
pub mod runner_config;
pub mod spawn;
mod status;

#[cfg(test)]
mod test_dir;
#[cfg(test)]
pub(crate) mod test_server;

use anyhow::Result;

use errors::invalid_endpoint;
use lookup::process_env;
pub use lookup::Env;
pub use options::{host_is_local, is_local_endpoint, EngineOptions};
pub use profile::EngineArch;
pub use status::{EngineStatus, SpawnedEngine};

pub use health::{probe_engine, EngineHealth};
pub use resolve::resolve_engine_binary;
pub use runner_config::{
    ensure_runner_config, ensure_runner_config_with, running_arch, wait_until_listed, RetryPolicy,
};

/// Reuses the engine at `config.endpoint` or starts one .
pub async fn ensure_engine(config: &EngineOptions) -> Result<EngineStatus> {
    ensure_engine_with(config, &process_env).await
}

/// [`ensure_engine`] with an explicit variable lookup (used for
/// `RIVET_ENGINE_BINARY*`, `RIVETKIT_STORAGE_PATH`, `HOME`,
/// `RIVET__AUTH__ADMIN_TOKEN`).
pub async fn ensure_engine_with(config: &EngineOptions, env: Env<'_>) -> Result<EngineStatus> {
    let scheme = url::Url::parse(&config.endpoint)
        .map_err(|e| invalid_endpoint(&config.endpoint, &e.to_string()))?
        .scheme()
        .to_owned();
    if scheme != "http" {
        return Err(invalid_endpoint(&config.endpoint, "a managed (local) engine needs an http:// endpoint"));
    }
    // A wrong explicit path is reported even when an engine is running:
    // the user asked for that file (same order as the reference).
    let explicit = resolve::explicit_binary(config, env)?;
    // An explicit binary decides the architecture; otherwise the app's.
    let explicit = match explicit {
        Some(path) => {
            let arch = EngineArch::of_binary(&path).ok_or_else(|| {
                errors::spawn_failed(&path, "the file cannot be run (`--runtime-info` did not start)")
            })?;
            if arch != config.arch {
                tracing::warn!(
                    binary = %path.display(),
                    "the engine binary you gave is {}, but this app expects {}; using it as asked",
                    arch.label(),
                    config.arch.label()
                );
            }
            Some((path, arch))
        }
        None => None,
    };
    let wanted = explicit.as_ref().map_or(config.arch, |(_, arch)| *arch);
    if let Some(health) = probe_engine(&config.endpoint).await? {
        let running = health.arch();
        if running != wanted {
            return Err(errors::wrong_architecture(&config.endpoint, running, wanted, health.version.as_deref()));
        }
        tracing::info!(
            version = health.version.as_deref().unwrap_or("?"),
            "reusing the Rivet Engine ({}) already running on {}",
            running.label(),
            config.endpoint
        );
        return Ok(EngineStatus::Reused { arch: running });
    }
    // Nothing answers at the endpoint: an engine is about to be started
    // there, so its port must be the endpoint's.
    plan::check_engine_port(config)?;
    let (binary, arch) = match explicit {
        Some(found) => found,
        None => (resolve::find_npm_binary_of(&resolve::search_roots(), wanted)?, wanted),
    };
    spawn::spawn_engine(config, &binary, arch, env).await
}

/// Bound of each step of [`diagnose_reachability`].
pub const DIAGNOSIS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Why nothing at `endpoint` can answer, if that is the case: the DNS
/// lookup of its host failed, or the TCP connection was refused or not
/// answered. `None` when a connection could be made (the cause is then
/// elsewhere: auth, namespace, pool) or the endpoint is not a URL.
pub async fn diagnose_reachability(endpoint: &str) -> Option<String> {
    let url = url::Url::parse(endpoint).ok()?;
    let port = url.port_or_known_default()?;
    let host = match url.host()? {
        url::Host::Domain(name) => name.to_owned(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => ip.to_string(),
    };
    let addrs: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(DIAGNOSIS_TIMEOUT, tokio::net::lookup_host((host.as_str(), port))).await {
            Err(_) => return Some(format!("the DNS lookup of '{host}' got no answer within {DIAGNOSIS_TIMEOUT:?}")),
            Ok(Err(err)) => return Some(format!("the DNS lookup of '{host}' failed: {err}")),
            Ok(Ok(addrs)) => addrs.collect(),
        };
    let Some(addr) = addrs.first().copied() else {
        return Some(format!("the DNS lookup of '{host}' returned no address"));
    };
    match tokio::time::timeout(DIAGNOSIS_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Err(_) => Some(format!("connecting to {addr} got no answer within {DIAGNOSIS_TIMEOUT:?}")),
        Ok(Err(err)) => Some(format!("connecting to {addr} failed: {err}")),
        Ok(Ok(_)) => None,
    }
}

/// How long a failing DNS lookup of the endpoint's host is tried again
/// before `serve()` gives up on it (a resolver that fails once may answer
/// the next time; a typo never does).
pub const DNS_GIVE_UP: std::time::Duration = std::time::Duration::from_millis(1_500);

/// Why none of `endpoints` can be reached by name: `Some` when the DNS
/// lookup of every endpoint's host failed (or returned no address) for
/// [`DNS_GIVE_UP`]; `None` as soon as one resolves, when one is an IP
/// address or no URL, or when a lookup is still unanswered at the end
/// (the connect bound decides then).
pub async fn unresolvable(endpoints: &[&str]) -> Option<String> {
    let deadline = tokio::time::Instant::now() + DNS_GIVE_UP;
    let lookups = endpoints.iter().map(|endpoint| dns_failure(endpoint, deadline));
    let failures = futures::future::join_all(lookups).await;
    if failures.iter().any(Option::is_none) {
        return None;
    }
    Some(failures.into_iter().flatten().collect::<Vec<_>>().join("; "))
}

/// The DNS failure of one endpoint's host name, tried until `deadline`.
async fn dns_failure(endpoint: &str, deadline: tokio::time::Instant) -> Option<String> {
    let url = url::Url::parse(endpoint).ok()?;
    let port = url.port_or_known_default()?;
    let Some(url::Host::Domain(host)) = url.host() else { return None };
    loop {
        let lookup = tokio::time::timeout_at(deadline, tokio::net::lookup_host((host, port))).await;
        let failure = match lookup.map(|found| found.map(|mut addrs| addrs.next().is_some())) {
            Err(_) | Ok(Ok(true)) => return None,
            Ok(Ok(false)) => format!("the DNS lookup of '{host}' returned no address"),
            Ok(Err(err)) => format!("the DNS lookup of '{host}' failed: {err}"),
        };
        let retry = tokio::time::Instant::now() + std::time::Duration::from_millis(250);
        if retry >= deadline {
            return Some(failure);
        }
        tokio::time::sleep_until(retry).await;
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::engine::test_dir::TestDir;
    use crate::engine::test_server::{json_response, FakeServer};
    use crate::error::RivetError;

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    #[test]
    fn futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let config = EngineOptions::default();
        assert_send(&ensure_engine(&config));
        assert_send(&ensure_runner_config(&config));
    }

    #[tokio::test]
    async fn diagnosis_names_the_cause() {
        let cause = diagnose_reachability("http://no-such-host.invalid:6420").await.unwrap();
        assert!(cause.contains("DNS lookup of 'no-such-host.invalid' failed"), "{cause}");
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let cause = diagnose_reachability(&format!("http://{free}")).await.unwrap();
        assert!(cause.contains(&format!("connecting to {free} failed")) && cause.contains("refused"), "{cause}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap();
        assert_eq!(diagnose_reachability(&format!("http://{open}")).await, None);
    }

    #[tokio::test]
    async fn reuses_a_running_engine() {
        let server = FakeServer::start(|_, _| json_response(200, r#"{"runtime":"engine","status":"ok"}"#)).await;
        let config = EngineOptions { endpoint: server.url.clone(), arch: EngineArch::V2, ..Default::default() };
        let status = ensure_engine_with(&config, &|_| None).await.unwrap();
        assert!(matches!(status, EngineStatus::Reused { arch: EngineArch::V2 }), "{status:?}");
        let v3 = r#"{"runtime":"engine","status":"ok","architecture":"v3","version":"3.0.0"}"#;
        let server = FakeServer::start(move |_, _| json_response(200, v3)).await;
        let config = EngineOptions { endpoint: server.url.clone(), ..Default::default() };
        let status = ensure_engine_with(&config, &|_| None).await.unwrap();
        assert!(matches!(status, EngineStatus::Reused { arch: EngineArch::V3 }), "{status:?}");
    }

    #[tokio::test]
    async fn refuses_a_running_engine_of_the_wrong_kind() {
        let server =
            FakeServer::start(|_, _| json_response(200, r#"{"runtime":"engine","status":"ok","version":"2.3.19"}"#))
                .await;
        let config = EngineOptions { endpoint: server.url.clone(), arch: EngineArch::V3, ..Default::default() };
        let err = ensure_engine_with(&config, &|_| None).await.unwrap_err();
        assert_eq!(code(&err), "engine.wrong_architecture");
        let message = err.to_string();
        assert!(message.contains("engine 2.3") && message.contains("engine 3.0"), "{message}");
        assert!(message.contains("Stop it"), "{message}");
    }

    #[tokio::test]
    async fn refuses_https_and_missing_explicit_binary() {
        let config = EngineOptions { endpoint: "https://127.0.0.1:6420".into(), ..Default::default() };
        let err = ensure_engine_with(&config, &|_| None).await.unwrap_err();
        assert_eq!(code(&err), "engine.invalid_endpoint");

        let dir = TestDir::new("missing-bin");
        let config = EngineOptions {
            endpoint: "http://127.0.0.1:1".into(),
            engine_binary_path: Some(dir.path.join("rivet-engine")),
            ..Default::default()
        };
        let err = ensure_engine_with(&config, &|_| None).await.unwrap_err();
        assert_eq!(code(&err), "engine.binary_not_found");
    }

    /// A fake "engine" script: exits at once, or never answers health.
    #[cfg(unix)]
    fn script(dir: &TestDir, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path.join("fake-engine.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn engine_that_exits_reports_status_and_logs() {
        let dir = TestDir::new("exits");
        let bin = script(&dir, "echo 'Error: failed to deserialize config' >&2\nexit 3");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = EngineOptions {
            endpoint: format!("http://127.0.0.1:{port}"),
            engine_binary_path: Some(bin),
            ..Default::default()
        };
        let root = dir.path.display().to_string();
        let env = move |k: &str| (k == "RIVETKIT_STORAGE_PATH").then(|| root.clone());
        let err = ensure_engine_with(&config, &env).await.unwrap_err();
        let e = RivetError::extract(&err);
        assert_eq!(e.qualified_code(), "engine.health_check_failed");
        assert!(e.message.contains("exit status: 3"), "{}", e.message);
        assert!(e.message.contains("failed to deserialize config"), "{}", e.message);
        assert!(e.message.contains("-stderr.log"));
        // The config file was written for the endpoint's port.
        let cfg = dir.path.join(format!(".rivetkit/var/engine/config-{port}.json"));
        let cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(cfg).unwrap()).unwrap();
        assert_eq!(cfg["topology"]["datacenters"]["default"]["peer_url"], format!("http://127.0.0.1:{}", port + 1));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn engine_that_never_gets_healthy_is_killed() {
        let dir = TestDir::new("hangs");
        let pid_file = dir.path.join("pid");
        let bin = script(
            &dir,
            &format!("[ \"$1\" = --runtime-info ] && exit 2\necho $$ > {}\nexec sleep 30", pid_file.display()),
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = EngineOptions {
            endpoint: format!("http://127.0.0.1:{port}"),
            engine_binary_path: Some(bin),
            engine_start_timeout: std::time::Duration::from_millis(400),
            ..Default::default()
        };
        let root = dir.path.display().to_string();
        let env = move |k: &str| (k == "RIVETKIT_STORAGE_PATH").then(|| root.clone());
        let err = ensure_engine_with(&config, &env).await.unwrap_err();
        let e = RivetError::extract(&err);
        assert_eq!(e.qualified_code(), "engine.health_check_failed");
        assert!(e.message.contains("killed"), "{}", e.message);
        assert!(e.metadata.unwrap()["attempts"].as_u64().unwrap() >= 2);
        let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        // SAFETY: signal 0 only checks whether the process exists.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "half-started engine still alive");
    }
}
