//! The routes without an engine: everything a start request is checked
//! for happens before an envoy is needed.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::start::tests::payload;
use super::*;
use crate::registry::EngineSpawnMode;

async fn runtime(settings: ServerlessSettings) -> Arc<ServerlessRuntime> {
    let config = ServeConfig {
        endpoint: "http://127.0.0.1:1".into(),
        engine_spawn: EngineSpawnMode::Never,
        ..ServeConfig::default()
    };
    ServerlessRuntime::new(CoreRegistry::new(), config, settings)
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> ServerlessRequest {
    ServerlessRequest {
        method: method.into(),
        url: format!("http://host:3000{path}"),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>(),
        body: body.into(),
        cancel: CancellationToken::new(),
    }
}

fn json_of(response: &ServerlessResponse) -> Value {
    serde_json::from_slice(response.body_bytes().expect("a whole body")).unwrap()
}

const START_HEADERS: [(&str, &str); 3] =
    [("x-rivet-endpoint", "http://localhost:1/"), ("x-rivet-pool-name", "pool"), ("x-rivet-namespace-name", "default")];

#[tokio::test]
async fn plain_routes() {
    let rt = runtime(ServerlessSettings {
        client_endpoint: Some("https://public".into()),
        package_version: "9.9.9".into(),
        ..ServerlessSettings::default()
    })
    .await;
    let root = rt.handle(request("GET", "/api/rivet", &[], "")).await;
    assert_eq!(root.status, 200);
    assert!(std::str::from_utf8(root.body_bytes().unwrap()).unwrap().starts_with("This is a RivetKit server."));

    let health = rt.handle(request("GET", "/api/rivet/health", &[], "")).await;
    assert_eq!(health.status, 200);
    assert_eq!(json_of(&health), serde_json::json!({"status": "ok", "runtime": "rivetkit", "version": "9.9.9"}));
    assert_eq!(rt.handle(request("GET", "/health", &[], "")).await.status, 200, "also at the root");

    let metadata = json_of(&rt.handle(request("GET", "/api/rivet/metadata", &[], "")).await);
    assert_eq!(metadata["envoy"]["kind"], serde_json::json!({ "serverless": {} }));
    assert_eq!(metadata["envoyProtocolVersion"], 8);
    assert_eq!(metadata["clientEndpoint"], "https://public");
    assert!(metadata.get("clientToken").is_none());

    let metrics = rt.handle(request("GET", "/api/rivet/metrics", &[], "")).await;
    assert!(std::str::from_utf8(metrics.body_bytes().unwrap()).unwrap().contains("rivetkit_native_active_actors 0"));

    let options = rt.handle(request("OPTIONS", "/api/rivet/start", &[("origin", "https://app")], "")).await;
    assert_eq!(options.status, 204);
    assert_eq!(options.headers["access-control-allow-origin"], "https://app");

    let missing = rt.handle(request("GET", "/api/rivet/nope", &[], "")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.headers["access-control-allow-origin"], "*");
}

async fn refused(rt: &Arc<ServerlessRuntime>, headers: &[(&str, &str)], body: impl Into<Bytes>) -> (u16, Value) {
    let response = rt.handle(request("POST", "/api/rivet/start", headers, body)).await;
    let status = response.status;
    (status, json_of(&response))
}

#[tokio::test]
async fn bad_starts_are_refused_before_anything_starts() {
    let rt = runtime(ServerlessSettings { max_start_payload_bytes: 64, ..ServerlessSettings::default() }).await;

    let (status, body) = refused(&rt, &START_HEADERS[..2], payload("a", 1)).await;
    assert_eq!((status, body["group"].as_str(), body["code"].as_str()), (400, Some("request"), Some("invalid")));
    assert!(body["message"].as_str().unwrap().contains("x-rivet-namespace-name"));

    let mut other = START_HEADERS;
    other[0] = ("x-rivet-endpoint", "http://elsewhere:1");
    let (status, body) = refused(&rt, &other, payload("a", 1)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("endpoint_mismatch")));

    let (status, body) = refused(&rt, &START_HEADERS, vec![0u8; 65]).await;
    assert_eq!(
        (status, body["group"].as_str(), body["code"].as_str()),
        (413, Some("message"), Some("incoming_too_long"))
    );
    assert_eq!(body["metadata"]["limit"], 64);

    let (status, body) = refused(&rt, &START_HEADERS, &b"\x08\x00garbage"[..]).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid")));
    assert!(body["message"].as_str().unwrap().contains("start payload"), "{body}");

    let (status, body) = refused(&rt, &START_HEADERS, &b"\x01\x00"[..]).await;
    assert_eq!(status, 400);
    assert!(body["message"].as_str().unwrap().contains("protocol version 1"), "{body}");
    assert!(rt.envoy().is_none(), "no envoy was started");
}

#[tokio::test]
async fn validation_can_be_turned_off() {
    let rt = runtime(ServerlessSettings { validate_endpoint: false, ..ServerlessSettings::default() }).await;
    rt.shutdown().await;
    let mut other = START_HEADERS;
    other[0] = ("x-rivet-endpoint", "http://elsewhere:1");
    // Past the identity check, refused only because the host is shut down.
    let (status, body) = refused(&rt, &other, payload("a", 1)).await;
    assert_eq!((status, body["group"].as_str(), body["code"].as_str()), (503, Some("registry"), Some("shut_down")));
}

#[tokio::test]
async fn shutdown_is_idempotent() {
    let rt = runtime(ServerlessSettings::default()).await;
    tokio::join!(rt.shutdown(), rt.shutdown());
    rt.shutdown().await;
    assert!(rt.is_shut_down());
}

#[test]
fn framework_paths_follow_the_base_path() {
    let rt = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(runtime(ServerlessSettings { base_path: "/rivet".into(), ..ServerlessSettings::default() }));
    assert!(rt.owns("/rivet/start"));
    assert!(!rt.owns("/api/rivet/start"));
}
