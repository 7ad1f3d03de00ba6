//! Engine 3.0 answers `/health` before its storage is open: until then
//! every actor request fails with `depot.overloaded`. An engine we start is
//! ready once an actor listing answers 200 (docs/engine.md, "Ready means
//! placeable"); the listing names an actor that does not exist, so it
//! changes nothing.

use std::time::Duration;

use url::Url;

use super::http;
use super::options::EngineOptions;

/// The actor name the listing asks for (the reference's readiness probe
/// uses the same, so the two leave the same trace in the engine's logs).
const PROBE_NAME: &str = "rivetkit-readiness-probe";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const PAUSE: Duration = Duration::from_millis(100);
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Polls the listing until it answers 200 or `budget` runs out; `Err`
/// carries the last answer.
pub async fn wait_until_ready(config: &EngineOptions, token: Option<&str>, budget: Duration) -> Result<(), String> {
    let mut url = Url::parse(&config.endpoint).map_err(|e| e.to_string())?;
    url.set_path("/actors");
    url.query_pairs_mut()
        .append_pair("namespace", &config.namespace)
        .append_pair("name", PROBE_NAME)
        .append_pair("key", "probe");
    let started = tokio::time::Instant::now();
    let mut next_progress = PROGRESS_EVERY;
    loop {
        let last = match http::get(&url, token, REQUEST_TIMEOUT.min(budget.max(PAUSE))).await {
            Ok(response) if response.is_success() => {
                tracing::debug!(after_ms = started.elapsed().as_millis() as u64, "the engine's storage is open");
                return Ok(());
            }
            Ok(response) => format!("HTTP {}: {}", response.status, response.text()),
            Err(err) => format!("{err:#}"),
        };
        let waited = started.elapsed();
        if waited >= budget {
            return Err(last);
        }
        if waited >= next_progress {
            tracing::info!("waiting for the engine's storage to open ({} s)...", waited.as_secs());
            next_progress += PROGRESS_EVERY;
        }
        tokio::time::sleep(PAUSE.min(budget - waited)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_server::{json_response, FakeServer};

    #[tokio::test]
    async fn waits_for_the_listing_to_answer() {
        let server = FakeServer::start(|_, n| {
            if n < 2 {
                json_response(400, r#"{"group":"depot","code":"overloaded","message":"retry after 100 ms"}"#)
            } else {
                json_response(200, r#"{"actors":[]}"#)
            }
        })
        .await;
        let config = EngineOptions { endpoint: server.url.clone(), ..Default::default() };
        wait_until_ready(&config, Some("default"), Duration::from_secs(5)).await.unwrap();
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        assert!(requests[0].target.starts_with("/actors?namespace=default&name=rivetkit-readiness-probe"));

        let stuck = FakeServer::start(|_, _| json_response(400, r#"{"code":"overloaded"}"#)).await;
        let config = EngineOptions { endpoint: stuck.url.clone(), ..Default::default() };
        let err = wait_until_ready(&config, None, Duration::from_millis(250)).await.unwrap_err();
        assert!(err.contains("overloaded"), "{err}");
    }
}
