//! Making sure the local engine has our pool: a runner config on engine
//! 2.3, a pool (`PUT /pools/{pool}`) on engine 3.0 (docs/engine.md).
//!
//! Why: without a runner config for the pool, the engine closes the envoy
//! socket (`ws.no_runner_config`) and the envoy client reconnects forever.
//! A local engine starts empty, so before connecting we upsert
//! `{"datacenters": {"<dc>": {"normal": {}, "drain_on_version_upgrade": true}}}`
//! for every datacenter it reports . Remote engines are
//! configured by their operators and are left alone.
//!
//! A freshly started engine may answer before its default namespace exists,
//! so "not ready" answers (transport errors, 404, 429, 5xx, or a body whose
//! `code` is `not_found`) are retried on a fixed interval.

use std::time::Duration;

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use url::Url;

use super::errors::invalid_endpoint;
use super::http;
use super::options::{is_local_endpoint, EngineOptions};
use super::profile::{is_dns_label, EngineArch};
use crate::error::RivetError;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY_IN_ERROR: usize = 1024;

/// How often and how long to retry "not ready yet" answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub interval: Duration,
}

impl Default for RetryPolicy {
    /// 60 attempts, 500 ms apart: about 30 s, as in the reference.
    fn default() -> Self {
        Self { attempts: 60, interval: Duration::from_millis(500) }
    }
}

/// Upserts the normal runner config (engine 2.3) or the pool (engine 3.0)
/// of `config.pool_name` on a local engine whose architecture is
/// `config.arch`; does nothing for a remote endpoint.
pub async fn ensure_runner_config(config: &EngineOptions) -> Result<()> {
    ensure_runner_config_with(config, RetryPolicy::default()).await
}

pub async fn ensure_runner_config_with(config: &EngineOptions, policy: RetryPolicy) -> Result<()> {
    if !is_local_endpoint(&config.endpoint) {
        tracing::debug!(endpoint = %config.endpoint, "remote engine: runner config left to its operator");
        return Ok(());
    }
    let api = EngineApi::new(config)?;
    let arch = config.arch;
    if arch.wants_dns_label_pools() && !is_dns_label(&config.pool_name) {
        return Err(failed(
            config,
            "the pool name",
            400,
            "",
            "engine 3.0 takes only pool names of 1-63 lowercase letters, digits and hyphens",
        ));
    }
    let attempts = policy.attempts.max(1);
    let mut attempt = 1;
    loop {
        let once = match arch {
            EngineArch::V2 => upsert_once(&api, config).await,
            EngineArch::V3 => upsert_pool_once(&api, config).await,
        };
        let failure = match once {
            Ok(()) => {
                tracing::debug!(pool = %config.pool_name, attempt, "runner config is in place");
                return Ok(());
            }
            Err(Failure::Fatal(error)) => return Err(error),
            Err(retryable) => retryable,
        };
        if attempt >= attempts {
            return Err(exhausted(config, attempts, failure));
        }
        tracing::debug!(attempt, reason = %failure.reason(), "engine not ready for the runner config; retrying");
        tokio::time::sleep(failure.retry_after().unwrap_or(policy.interval)).await;
        attempt += 1;
    }
}

async fn upsert_once(api: &EngineApi<'_>, config: &EngineOptions) -> Result<(), Failure> {
    let response =
        http::get(&api.url(&["datacenters"])?, api.token, REQUEST_TIMEOUT).await.map_err(Failure::Transport)?;
    check(&response, "GET /datacenters", config)?;
    let datacenters: DatacentersResponse = response.json().map_err(|e| {
        Failure::Fatal(failed(config, "GET /datacenters", response.status, &response.text(), &format!("{e:#}")))
    })?;
    if datacenters.datacenters.is_empty() {
        return Err(Failure::NotReady("the engine reported no datacenters yet".to_owned()));
    }

    let mut per_dc = Map::new();
    for dc in datacenters.datacenters {
        per_dc.insert(dc.name, json!({ "normal": {}, "drain_on_version_upgrade": true }));
    }
    let body = json!({ "datacenters": per_dc });
    let url = api.url(&["runner-configs", &config.pool_name])?;
    let response = http::put_json(&url, api.token, &body, REQUEST_TIMEOUT).await.map_err(Failure::Transport)?;
    check(&response, "PUT /runner-configs", config)
}

/// Engine 3.0: `PUT /pools/{pool}`, which creates or updates the pool.
async fn upsert_pool_once(api: &EngineApi<'_>, config: &EngineOptions) -> Result<(), Failure> {
    let url = api.url(&["pools", &config.pool_name])?;
    let body = json!({ "drain_on_version_upgrade": true });
    let response = http::put_json(&url, api.token, &body, REQUEST_TIMEOUT).await.map_err(Failure::Transport)?;
    check(&response, "PUT /pools", config)
}

/// The architecture of the engine at the endpoint, from its `/health`; the
/// one the app expects when it does not answer (the requests that follow
/// then say why).
pub async fn running_arch(config: &EngineOptions) -> EngineArch {
    match super::health::probe_engine(&config.endpoint).await {
        Ok(Some(health)) => health.arch(),
        _ => config.arch,
    }
}

/// Waits until the local engine lists the envoy `envoy_key` among its
/// pool's envoys (`GET /envoys?name=<pool>`), at most `within`.
///
/// Why: the engine places a new actor only in a datacenter that lists a
/// live envoy of its pool, and it lists ours a moment after it accepted the
/// connection. A client that creates an actor as soon as `serve()` is ready
/// would otherwise get `actor.no_runner_config_configured` (400, not
/// retried by the clients) on a busy machine. Never fails: past `within`
/// it says so and goes on. Remote engines are left alone, as above.
pub async fn wait_until_listed(config: &EngineOptions, envoy_key: &str, within: Duration) {
    if !is_local_endpoint(&config.endpoint) {
        return;
    }
    let Ok(api) = EngineApi::new(config) else { return };
    let arch = config.arch;
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = Duration::from_millis(10);
    loop {
        let answer = match arch {
            EngineArch::V2 => listed(&api, &config.pool_name, envoy_key).await,
            EngineArch::V3 => listed_node(&api, &config.pool_name, envoy_key).await,
        };
        match answer {
            Ok(true) => return,
            Ok(false) => {}
            Err(failure) => tracing::debug!(reason = %failure.reason(), "could not ask the engine for its envoys"),
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                pool = %config.pool_name,
                waited_ms = within.as_millis() as u64,
                "the engine does not list this host yet; actors created now may be refused for a moment"
            );
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

async fn listed(api: &EngineApi<'_>, pool: &str, envoy_key: &str) -> Result<bool, Failure> {
    #[derive(Deserialize)]
    struct Envoys {
        envoys: Vec<Envoy>,
    }
    #[derive(Deserialize)]
    struct Envoy {
        envoy_key: String,
        stop_ts: Option<i64>,
    }
    let mut url = api.url(&["envoys"])?;
    url.query_pairs_mut().append_pair("name", pool);
    let response = http::get(&url, api.token, REQUEST_TIMEOUT).await.map_err(Failure::Transport)?;
    if !response.is_success() {
        return Err(Failure::NotReady(format!("GET /envoys answered HTTP {}", response.status)));
    }
    let envoys: Envoys =
        response.json().map_err(|e| Failure::NotReady(format!("GET /envoys answered an unexpected body: {e:#}")))?;
    Ok(envoys.envoys.iter().any(|e| e.envoy_key == envoy_key && e.stop_ts.is_none()))
}

/// Engine 3.0: whether `GET /pools/{pool}/nodes` lists a node with this
/// key that has not stopped.
async fn listed_node(api: &EngineApi<'_>, pool: &str, envoy_key: &str) -> Result<bool, Failure> {
    let url = api.url(&["pools", pool, "nodes"])?;
    let response = http::get(&url, api.token, REQUEST_TIMEOUT).await.map_err(Failure::Transport)?;
    if !response.is_success() {
        return Err(Failure::NotReady(format!("GET /pools/{{pool}}/nodes answered HTTP {}", response.status)));
    }
    let body: Value = response
        .json()
        .map_err(|e| Failure::NotReady(format!("GET /pools/{{pool}}/nodes answered an unexpected body: {e:#}")))?;
    Ok(node_is_listed(&body, envoy_key))
}

/// Whether a nodes listing names `key` on a node that is connected and not
/// stopping. Engine 3.0's node (measured):
/// `{"key":…,"connected":true,"stopping":false,"pool":…,"last_ping_ts":…}`.
fn node_is_listed(body: &Value, key: &str) -> bool {
    let nodes = body.get("nodes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    nodes.iter().any(|node| {
        node.get("key").and_then(Value::as_str) == Some(key)
            && node.get("connected").and_then(Value::as_bool) == Some(true)
            && node.get("stopping").and_then(Value::as_bool) != Some(true)
    })
}

/// Sorts a non-2xx answer into retryable or fatal.
fn check(response: &http::Response, what: &str, config: &EngineOptions) -> Result<(), Failure> {
    if response.is_success() {
        return Ok(());
    }
    let body = response.text();
    let code_not_found = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.get("code").and_then(Value::as_str).map(|c| c == "not_found"))
        .unwrap_or(false);
    let status = response.status;
    // Engine 3.0 sheds load with `retry_after_ms` in the body (400
    // `depot.overloaded` while its storage opens or moves): try again then.
    if let Some(ms) = retry_after_ms(&body) {
        return Err(Failure::Overloaded(format!("{what} answered HTTP {status}: {}", clip(&body)), ms));
    }
    if status == 404 || status == 429 || status >= 500 || code_not_found {
        return Err(Failure::NotReady(format!("{what} answered HTTP {status}: {}", clip(&body))));
    }
    Err(Failure::Fatal(failed(config, what, status, &body, "the engine refused the request")))
}

#[derive(Debug)]
enum Failure {
    Transport(anyhow::Error),
    NotReady(String),
    /// The engine asked to be asked again after this many milliseconds.
    Overloaded(String, u64),
    Fatal(anyhow::Error),
}

impl Failure {
    fn reason(&self) -> String {
        match self {
            Failure::Transport(e) | Failure::Fatal(e) => format!("{e:#}"),
            Failure::NotReady(reason) | Failure::Overloaded(reason, _) => reason.clone(),
        }
    }

    /// The engine's own retry hint, bounded to 10 ms..5 s.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::Overloaded(_, ms) => Some(Duration::from_millis((*ms).clamp(10, 5_000))),
            _ => None,
        }
    }
}

/// The `retry_after_ms` of an overload answer: a body field, or the
/// `retry after N ms` of its message (engine 3.0's `depot.overloaded`).
pub fn retry_after_ms(body: &str) -> Option<u64> {
    let value: Value = serde_json::from_str(body).ok()?;
    if let Some(ms) = value.get("retry_after_ms").and_then(Value::as_u64) {
        return Some(ms);
    }
    if let Some(ms) = value.get("metadata").and_then(|m| m.get("retry_after_ms")).and_then(Value::as_u64) {
        return Some(ms);
    }
    if value.get("code").and_then(Value::as_str) != Some("overloaded") {
        return None;
    }
    let message = value.get("message").and_then(Value::as_str)?;
    let after = message.split("retry after ").nth(1)?;
    after.split(" ms").next()?.trim().parse().ok()
}

struct EngineApi<'a> {
    origin: Url,
    namespace: &'a str,
    token: Option<&'a str>,
}

impl<'a> EngineApi<'a> {
    fn new(config: &'a EngineOptions) -> Result<Self> {
        let origin = Url::parse(&config.endpoint).map_err(|e| invalid_endpoint(&config.endpoint, &e.to_string()))?;
        if origin.scheme() != "http" {
            return Err(RivetError::new(
                crate::error_codes::ENGINE_RUNNER_CONFIG_FAILED,
                format!(
                    "Cannot configure the local engine at {} over {}: the built-in client speaks \
                     plain http:// only. Use an http:// endpoint for a local engine.",
                    config.endpoint,
                    origin.scheme()
                ),
            )
            .with_metadata(json!({ "endpoint": config.endpoint }))
            .into_anyhow());
        }
        Ok(Self { origin, namespace: &config.namespace, token: config.token.as_deref() })
    }

    /// `{origin}/{segments..}?namespace=..`: any base path of the endpoint is dropped.
    fn url(&self, segments: &[&str]) -> Result<Url, Failure> {
        let mut url = self.origin.clone();
        url.set_path("");
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .map_err(|_| Failure::Fatal(anyhow::anyhow!("engine endpoint cannot be a base URL")))?
            .clear()
            .extend(segments);
        url.query_pairs_mut().append_pair("namespace", self.namespace);
        Ok(url)
    }
}

#[derive(Debug, Deserialize)]
struct DatacentersResponse {
    datacenters: Vec<Datacenter>,
}

#[derive(Debug, Deserialize)]
struct Datacenter {
    name: String,
}

fn failed(config: &EngineOptions, what: &str, status: u16, body: &str, reason: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_RUNNER_CONFIG_FAILED,
        format!(
            "Could not set up runner config `{}` in namespace `{}`: {what} answered HTTP {status} ({reason}): {}",
            config.pool_name,
            config.namespace,
            clip(body)
        ),
    )
    .with_metadata(json!({
        "pool_name": config.pool_name,
        "namespace": config.namespace,
        "request": what,
        "status": status,
        "body": clip(body),
    }))
    .into_anyhow()
}

/// After the last attempt: `engine.unreachable` if we never got an answer,
/// else `engine.runner_config_failed`.
fn exhausted(config: &EngineOptions, attempts: u32, last: Failure) -> anyhow::Error {
    let code = if matches!(last, Failure::Transport(_)) {
        crate::error_codes::ENGINE_UNREACHABLE
    } else {
        crate::error_codes::ENGINE_RUNNER_CONFIG_FAILED
    };
    let reason = last.reason();
    RivetError::new(
        code,
        format!(
            "local runner config `{}` did not become ready after {attempts} attempts \
             (engine {}, namespace `{}`); last error: {reason}",
            config.pool_name, config.endpoint, config.namespace
        ),
    )
    .with_metadata(json!({
        "pool_name": config.pool_name,
        "namespace": config.namespace,
        "endpoint": config.endpoint,
        "attempts": attempts,
        "reason": reason,
    }))
    .into_anyhow()
}

fn clip(body: &str) -> String {
    match body.char_indices().nth(MAX_BODY_IN_ERROR) {
        Some((cut, _)) => format!("{}...", &body[..cut]),
        None => body.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_server::{json_response, FakeServer, Recorded};

    const DCS: &str = r#"{"datacenters":[{"name":"default","url":"http://127.0.0.1:6420/"}]}"#;
    const FAST: RetryPolicy = RetryPolicy { attempts: 5, interval: Duration::from_millis(1) };

    fn config(endpoint: &str) -> EngineOptions {
        EngineOptions {
            endpoint: endpoint.to_owned(),
            token: Some("dev".into()),
            pool_name: "my pool".into(),
            arch: EngineArch::V2,
            ..Default::default()
        }
    }

    /// Datacenters always succeed; the n-th PUT gets `put(n)`.
    async fn engine(put: impl Fn(usize) -> String + Send + Sync + 'static) -> FakeServer {
        let puts = std::sync::atomic::AtomicUsize::new(0);
        FakeServer::start(move |req: &Recorded, _| match (req.method.as_str(), req.path()) {
            ("GET", "/datacenters") => json_response(200, DCS),
            ("PUT", _) => put(puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst)),
            _ => json_response(404, "{}"),
        })
        .await
    }

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    #[test]
    fn overload_answers_carry_their_wait() {
        let depot = r#"{"code":"overloaded","group":"depot","message":"The storage host refused the command (routing_unavailable); retry after 100 ms."}"#;
        assert_eq!(retry_after_ms(depot), Some(100));
        assert_eq!(retry_after_ms(r#"{"code":"x","retry_after_ms":250}"#), Some(250));
        assert_eq!(retry_after_ms(r#"{"code":"not_found","message":"retry after 5 ms"}"#), None);
        assert_eq!(retry_after_ms("not json"), None);
    }

    #[test]
    fn a_node_listing_names_the_key() {
        let body = serde_json::json!({"nodes": [
            {"key": "a", "connected": true, "stopping": false},
            {"key": "b", "connected": true, "stopping": true},
            {"key": "d", "connected": false, "stopping": false},
        ]});
        assert!(node_is_listed(&body, "a"));
        assert!(!node_is_listed(&body, "b"), "a stopping node does not count");
        assert!(!node_is_listed(&body, "d"), "a disconnected node does not count");
        assert!(!node_is_listed(&body, "c"));
        assert!(!node_is_listed(&serde_json::json!({}), "a"));
    }

    #[tokio::test]
    async fn engine_3_gets_a_pool_after_its_overload_answers() {
        let puts = std::sync::atomic::AtomicUsize::new(0);
        let server = FakeServer::start(move |req: &Recorded, _| match (req.method.as_str(), req.path()) {
            ("PUT", "/pools/my-pool") if puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 => {
                json_response(400, r#"{"group":"depot","code":"overloaded","message":"retry after 20 ms"}"#)
            }
            ("PUT", "/pools/my-pool") => json_response(200, r#"{"pool":{"name":"my-pool"}}"#),
            _ => json_response(404, "{}"),
        })
        .await;
        let config = EngineOptions { pool_name: "my-pool".into(), arch: EngineArch::V3, ..config(&server.url) };
        ensure_runner_config_with(&config, FAST).await.unwrap();
        let puts: Vec<_> = server.requests().into_iter().filter(|r| r.method == "PUT").collect();
        assert_eq!(puts.len(), 2);
        assert_eq!(puts[1].target, "/pools/my-pool?namespace=default");
        assert_eq!(puts[1].header("authorization").as_deref(), Some("Bearer dev"));

        let config = EngineOptions { pool_name: "My_Pool".into(), ..config };
        let err = ensure_runner_config_with(&config, FAST).await.unwrap_err();
        assert!(err.to_string().contains("lowercase letters"), "{err}");
    }

    #[tokio::test]
    async fn sends_the_expected_requests() {
        let server = engine(|_| json_response(200, r#"{"endpoint_config_changed":true}"#)).await;
        // A base path in the endpoint is dropped.
        ensure_runner_config_with(&config(&format!("{}/base/", server.url)), FAST).await.unwrap();
        let reqs = server.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].target, "/datacenters?namespace=default");
        assert_eq!(reqs[0].header("authorization").as_deref(), Some("Bearer dev"));
        assert_eq!(reqs[1].target, "/runner-configs/my%20pool?namespace=default");
        let body: Value = serde_json::from_slice(&reqs[1].body).unwrap();
        assert_eq!(body, json!({"datacenters": {"default": {"normal": {}, "drain_on_version_upgrade": true}}}));
    }

    /// Ready waits for the engine to list our envoy, and gives up quietly.
    #[tokio::test]
    async fn waits_until_the_engine_lists_the_envoy() {
        let server = FakeServer::start(|req, n| match (n, req.path()) {
            (0, _) => json_response(200, r#"{"envoys":[]}"#),
            (1, _) => json_response(200, r#"{"envoys":[{"envoy_key":"k","stop_ts":1}]}"#),
            (_, "/envoys") => json_response(
                200,
                r#"{"envoys":[{"envoy_key":"other","stop_ts":null},{"envoy_key":"k","stop_ts":null}]}"#,
            ),
            _ => json_response(404, "{}"),
        })
        .await;
        wait_until_listed(&config(&server.url), "k", Duration::from_secs(5)).await;
        let reqs = server.requests();
        assert_eq!(reqs.len(), 3, "empty, then stopped, then listed");
        assert_eq!(reqs[0].target, "/envoys?namespace=default&name=my+pool");

        let never = FakeServer::start(|_, _| json_response(200, r#"{"envoys":[]}"#)).await;
        tokio::time::timeout(
            Duration::from_secs(5),
            wait_until_listed(&config(&never.url), "k", Duration::from_millis(50)),
        )
        .await
        .expect("bounded");
    }

    #[tokio::test]
    async fn retries_404_then_succeeds() {
        let server = FakeServer::start(|req, n| match (n, req.path()) {
            (0, _) => json_response(404, "nope"),
            (_, "/datacenters") => json_response(200, DCS),
            _ => json_response(200, "{}"),
        })
        .await;
        ensure_runner_config_with(&config(&server.url), FAST).await.unwrap();
        assert_eq!(server.requests().len(), 3);
    }

    #[tokio::test]
    async fn retries_namespace_not_found() {
        let server = engine(|n| {
            if n == 0 {
                json_response(400, r#"{"group":"namespace","code":"not_found"}"#)
            } else {
                json_response(200, "{}")
            }
        })
        .await;
        ensure_runner_config_with(&config(&server.url), RetryPolicy { attempts: 2, interval: Duration::ZERO })
            .await
            .unwrap();
        assert_eq!(server.requests().len(), 4);
    }

    #[tokio::test]
    async fn other_client_errors_are_fatal() {
        let server = engine(|_| json_response(400, r#"{"group":"api","code":"bad_request"}"#)).await;
        let err = ensure_runner_config_with(&config(&server.url), FAST).await.unwrap_err();
        assert_eq!(code(&err), "engine.runner_config_failed");
        let meta = RivetError::extract(&err).metadata.unwrap();
        assert_eq!(meta["status"], 400);
        assert!(meta["body"].as_str().unwrap().contains("bad_request"));
        assert_eq!(server.requests().len(), 2, "no retry");
    }

    #[tokio::test]
    async fn stops_after_the_configured_bound() {
        let server = engine(|_| json_response(503, "busy")).await;
        let policy = RetryPolicy { attempts: 3, interval: Duration::from_millis(1) };
        let err = ensure_runner_config_with(&config(&server.url), policy).await.unwrap_err();
        assert!(err.to_string().contains("did not become ready after 3 attempts"), "{err}");
        assert_eq!(code(&err), "engine.runner_config_failed");
        assert_eq!(server.requests().len(), 6);
    }

    #[tokio::test]
    async fn unreachable_engine_and_remote_endpoints() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let policy = RetryPolicy { attempts: 2, interval: Duration::from_millis(1) };
        let err = ensure_runner_config_with(&config(&format!("http://{free}")), policy).await.unwrap_err();
        assert_eq!(code(&err), "engine.unreachable");
        assert!(err.to_string().contains("did not become ready after 2 attempts"));

        // Remote: nothing is sent at all (this host does not exist).
        ensure_runner_config_with(&config("http://192.0.2.10:6420"), policy).await.unwrap();
    }
}
