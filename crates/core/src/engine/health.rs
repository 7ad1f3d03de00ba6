//! Asking `GET {endpoint}/health` whether an engine is there.
//!
//! Why probe before spawning: the engine is long-lived and shared (it is
//! left running when a host stops), so the common case on a developer
//! machine is "an engine is already up"; reusing it keeps actor state and
//! saves a second of start-up. Only a `runtime == "engine"` answer counts:
//! anything else on the port (for example a RivetKit serverless host, whose
//! `/health` says `"runtime":"rivetkit"`) means the port is taken and a
//! spawn would fail to bind, so we say that instead of spawning.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Deserialize;
use serde_json::json;
use url::Url;

use super::errors::invalid_endpoint;
use super::http;
use crate::error::RivetError;

/// Per-request timeout of a health check .
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// The engine's `/health` body, e.g. `{"runtime":"engine","status":"ok","version":"2.3.19"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct EngineHealth {
    pub status: Option<String>,
    pub runtime: Option<String>,
    pub version: Option<String>,
    /// `v3` on engine 3.0; absent on 2.3.
    #[serde(default)]
    pub architecture: Option<String>,
}

impl EngineHealth {
    /// Which engine answered (docs/engine.md, "Two engine architectures").
    pub fn arch(&self) -> super::profile::EngineArch {
        super::profile::EngineArch::from_health_field(self.architecture.as_deref())
    }
}

/// `{endpoint}/health`, keeping any base path (as the reference does).
pub fn health_url(endpoint: &str) -> Result<Url> {
    let raw = format!("{}/health", endpoint.trim_end_matches('/'));
    Url::parse(&raw).map_err(|e| invalid_endpoint(endpoint, &e.to_string()))
}

/// `Ok(Some)` = a healthy engine to reuse; `Ok(None)` = nothing accepted
/// the connection (refused, no route), or an engine answered that it is
/// not ready: spawn one (or wait for it); `Err(engine.port_occupied)` =
/// something that is not an engine holds the port (any answer that is not
/// an engine's, a connection closed without an answer, or no answer within
/// [`PROBE_TIMEOUT`]): a spawned engine could not bind there, so we say
/// what answered at once instead of spawning and timing out.
pub async fn probe_engine(endpoint: &str) -> Result<Option<EngineHealth>> {
    let url = health_url(endpoint)?;
    let response = match http::get(&url, None, PROBE_TIMEOUT).await {
        Ok(response) => response,
        Err(err) if http::is_connect_error(&err) => return Ok(None),
        Err(err) => {
            let cause = format!("{:#}", err.root_cause());
            let what = format!("it accepted the connection but gave no HTTP answer to GET /health ({cause})");
            return Err(port_occupied(endpoint, "unknown", &what));
        }
    };
    let health = response.json::<EngineHealth>().ok();
    let runtime = health.as_ref().and_then(|h| h.runtime.clone());
    match (response.is_success(), runtime.as_deref()) {
        (true, Some("engine")) => Ok(health),
        // An engine that is there but not healthy yet: not "occupied".
        (false, Some("engine")) => Ok(None),
        (_, runtime) => {
            let body = clip(&response.text());
            let what = match runtime {
                Some(runtime) => format!("GET /health answered HTTP {} with runtime '{runtime}'", response.status),
                None if body.is_empty() => format!("GET /health answered HTTP {} with an empty body", response.status),
                None => format!("GET /health answered HTTP {}: {body}", response.status),
            };
            Err(port_occupied(endpoint, runtime.unwrap_or("unknown"), &what))
        }
    }
}

fn port_occupied(endpoint: &str, runtime: &str, what: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::ENGINE_PORT_OCCUPIED,
        format!(
            "Cannot start the Rivet Engine at '{endpoint}': something that is not a Rivet Engine holds \
             that port ({what}). Stop that process and retry, or use another port."
        ),
    )
    .with_metadata(json!({ "endpoint": endpoint, "runtime": runtime, "answer": what }))
    .into_anyhow()
}

/// The first 200 characters of an answer, on one line.
fn clip(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// How a wait for a freshly spawned engine ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOutcome {
    Ready(EngineHealth),
    /// The child exited first; carries its exit status.
    Exited(String),
    TimedOut,
}

#[derive(Debug, Clone)]
pub struct WaitReport {
    pub outcome: WaitOutcome,
    pub attempts: u32,
    pub last_reason: String,
    pub elapsed: Duration,
}

/// Polls `/health` with backoff (100 ms doubling to 1 s) until it answers
/// as an engine, `exited()` reports the child gone, or `deadline` passes.
pub async fn wait_until_healthy(
    url: &Url,
    deadline: Duration,
    mut exited: impl FnMut() -> Option<String>,
) -> WaitReport {
    let start = Instant::now();
    let mut backoff = INITIAL_BACKOFF;
    let mut next_progress = PROGRESS_EVERY;
    let mut attempts = 0;
    loop {
        attempts += 1;
        // Never let one request overshoot the overall deadline by much.
        let budget = deadline.saturating_sub(start.elapsed());
        let timeout = PROBE_TIMEOUT.min(budget).max(Duration::from_millis(50));
        let last_reason = match http::get(url, None, timeout).await {
            Ok(res) if res.is_success() => match res.json::<EngineHealth>() {
                Ok(health) if health.runtime.as_deref() == Some("engine") => {
                    let elapsed = start.elapsed();
                    let outcome = WaitOutcome::Ready(health);
                    return WaitReport { outcome, attempts, last_reason: String::new(), elapsed };
                }
                Ok(health) => format!("/health answered with runtime {:?}", health.runtime),
                Err(e) => format!("/health answer is not engine JSON: {e:#}"),
            },
            Ok(res) => format!("/health answered HTTP {}", res.status),
            Err(e) => format!("{e:#}"),
        };
        let elapsed = start.elapsed();
        let report = |outcome| WaitReport { outcome, attempts, last_reason: last_reason.clone(), elapsed };
        if let Some(status) = exited() {
            return report(WaitOutcome::Exited(status));
        }
        if elapsed >= deadline {
            return report(WaitOutcome::TimedOut);
        }
        if elapsed >= next_progress {
            tracing::info!("still waiting for the engine ({}s)...", elapsed.as_secs());
            next_progress += PROGRESS_EVERY;
        }
        tokio::time::sleep(backoff.min(deadline - elapsed)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_server::{json_response, FakeServer};

    const ENGINE: &str = r#"{"runtime":"engine","status":"ok","version":"2.3.19"}"#;

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    #[tokio::test]
    async fn probe_classifies_answers() {
        let server = FakeServer::start(|_, n| match n {
            0 => json_response(200, ENGINE),
            1 => json_response(503, ENGINE),
            2 => json_response(200, r#"{"runtime":"rivetkit","status":"ok"}"#),
            _ => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi".to_owned(),
        })
        .await;
        let health = probe_engine(&server.url).await.unwrap().unwrap();
        assert_eq!(health.version.as_deref(), Some("2.3.19"));
        // An engine that is not ready yet is not "occupied".
        assert_eq!(probe_engine(&server.url).await.unwrap(), None);
        let err = probe_engine(&server.url).await.unwrap_err();
        assert_eq!(code(&err), "engine.port_occupied");
        assert!(err.to_string().contains("rivetkit"));
        let err = probe_engine(&format!("{}/", server.url)).await.unwrap_err();
        assert_eq!(code(&err), "engine.port_occupied");
        assert_eq!(server.requests()[3].target, "/health");
    }

    #[tokio::test]
    async fn probe_says_what_holds_the_port() {
        let server =
            FakeServer::start(|_, _| "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNot Found".to_owned()).await;
        let err = probe_engine(&server.url).await.unwrap_err();
        assert_eq!(code(&err), "engine.port_occupied");
        let message = RivetError::extract(&err).message;
        assert!(message.contains("HTTP 404: Not Found"), "{message}");
        assert!(message.contains(&server.url), "{message}");

        // A TCP listener that closes every connection without answering.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                drop(stream);
            }
        });
        let started = std::time::Instant::now();
        let err = probe_engine(&format!("http://{addr}")).await.unwrap_err();
        assert_eq!(code(&err), "engine.port_occupied");
        let message = RivetError::extract(&err).message;
        assert!(message.contains("accepted the connection but gave no HTTP answer"), "{message}");
        assert!(started.elapsed() < PROBE_TIMEOUT * 2);
    }

    #[tokio::test]
    async fn probe_of_nothing_is_none() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        assert_eq!(probe_engine(&format!("http://{free}")).await.unwrap(), None);
    }

    #[tokio::test]
    async fn wait_retries_until_ready() {
        let server =
            FakeServer::start(|_, n| if n < 2 { json_response(503, "{}") } else { json_response(200, ENGINE) }).await;
        let url = health_url(&server.url).unwrap();
        let report = wait_until_healthy(&url, Duration::from_secs(5), || None).await;
        assert!(matches!(report.outcome, WaitOutcome::Ready(_)));
        assert_eq!(report.attempts, 3);
    }

    #[tokio::test]
    async fn wait_stops_on_exit_and_deadline() {
        let server = FakeServer::start(|_, _| json_response(500, "{}")).await;
        let url = health_url(&server.url).unwrap();
        let report = wait_until_healthy(&url, Duration::from_secs(5), || Some("exit status: 1".into())).await;
        assert_eq!(report.outcome, WaitOutcome::Exited("exit status: 1".into()));
        assert_eq!(report.attempts, 1);
        assert!(report.last_reason.contains("HTTP 500"));

        let report = wait_until_healthy(&url, Duration::from_millis(350), || None).await;
        assert_eq!(report.outcome, WaitOutcome::TimedOut);
        assert!(report.attempts >= 2 && report.attempts <= 4, "{}", report.attempts);
        assert!(report.elapsed < Duration::from_secs(2));
    }
}
