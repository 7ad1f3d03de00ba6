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
}

/// `{endpoint}/health`, keeping any base path (as the reference does).
pub fn health_url(endpoint: &str) -> Result<Url> {
    let raw = format!("{}/health", endpoint.trim_end_matches('/'));
    Url::parse(&raw).map_err(|e| super::invalid_endpoint(endpoint, &e.to_string()))
}

/// `Ok(Some)` = a healthy engine to reuse; `Ok(None)` = nothing usable
/// answered (refused, timeout, non-2xx); `Err(engine.port_occupied)` = a
/// 2xx from something that is not an engine.
pub async fn probe_engine(endpoint: &str) -> Result<Option<EngineHealth>> {
    let url = health_url(endpoint)?;
    let Ok(response) = http::get(&url, None, PROBE_TIMEOUT).await else {
        return Ok(None);
    };
    if !response.is_success() {
        return Ok(None);
    }
    let runtime = match response.json::<EngineHealth>() {
        Ok(health) if health.runtime.as_deref() == Some("engine") => return Ok(Some(health)),
        Ok(health) => health.runtime.unwrap_or_else(|| "unknown".to_owned()),
        Err(_) => "unknown (its /health answer is not JSON)".to_owned(),
    };
    Err(RivetError::new(
        "engine",
        "port_occupied",
        format!(
            "Cannot start engine: endpoint '{endpoint}' is already serving runtime '{runtime}'. \
             Stop that process and retry, or use another port."
        ),
    )
    .with_metadata(json!({ "endpoint": endpoint, "runtime": runtime }))
    .into_anyhow())
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
        assert_eq!(probe_engine(&server.url).await.unwrap(), None);
        let err = probe_engine(&server.url).await.unwrap_err();
        assert_eq!(code(&err), "engine.port_occupied");
        assert!(err.to_string().contains("rivetkit"));
        let err = probe_engine(&format!("{}/", server.url)).await.unwrap_err();
        assert_eq!(code(&err), "engine.port_occupied");
        assert_eq!(server.requests()[3].target, "/health");
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
