//! The listener with stand-in routes and application, over real sockets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use url::Url;

use super::*;
use crate::engine::http::request as http_request;
use crate::serverless::{BodyStream, ResponseBody, ServerlessRequest, ServerlessResponse};

/// Owns `/rivet/*`; `/rivet/stream` answers with a stream fed by the test.
struct FakeRoutes {
    stream: std::sync::Mutex<Option<BodyStream>>,
}

impl Routes for Arc<FakeRoutes> {
    fn owns(&self, path: &str) -> bool {
        path.starts_with("/rivet/")
    }
    fn handle(&self, req: ServerlessRequest) -> BoxFuture<'static, ServerlessResponse> {
        let stream = if req.path() == "/rivet/stream" { self.stream.lock().unwrap().take() } else { None };
        Box::pin(async move {
            match stream {
                Some(stream) => ServerlessResponse {
                    status: 200,
                    headers: HashMap::from([("content-type".into(), "text/event-stream".into())]),
                    body: ResponseBody::Stream(stream),
                },
                None => ServerlessResponse::text(
                    if req.path().starts_with("/rivet/") { 200 } else { 404 },
                    &format!("routes {} {}", req.method, req.path()),
                ),
            }
        })
    }
}

fn application() -> Application {
    Arc::new(|req: AppRequest| {
        Box::pin(async move {
            if req.url.ends_with("/fail") {
                anyhow::bail!("boom");
            }
            Ok(AppResponse {
                status: 201,
                headers: HashMap::from([("x-app".into(), "yes".into())]),
                body: Bytes::from(format!("app {} {} {}", req.method, req.url, String::from_utf8_lossy(&req.body))),
                stream: false,
            })
        })
    })
}

struct Running {
    base: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    routes: Arc<FakeRoutes>,
}

async fn start(public_dir: Option<PathBuf>, application: Option<Application>) -> Running {
    let config = ListenerConfig { host: Some("127.0.0.1".into()), port: 0, public_dir, max_body_bytes: 16 };
    let listener = bind(&config).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let routes = Arc::new(FakeRoutes { stream: std::sync::Mutex::new(None) });
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, config, Arc::new(routes.clone()), application, shutdown.clone()));
    Running { base, shutdown, task, routes }
}

async fn call(base: &str, method: &str, path: &str, body: Option<&[u8]>) -> (u16, String) {
    let url = Url::parse(&format!("{base}{path}")).unwrap();
    let response = http_request(method, &url, None, body, Duration::from_secs(10)).await.unwrap();
    (response.status, response.text())
}

#[tokio::test]
async fn routes_then_files_then_the_application() {
    let dir = std::env::temp_dir().join(format!("rivetkit-native-listener-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("page.html"), "<h1>static</h1>").unwrap();
    let running = start(Some(dir.clone()), Some(application())).await;
    let base = &running.base;

    assert_eq!(call(base, "GET", "/rivet/health", None).await, (200, "routes GET /rivet/health".into()));
    assert_eq!(call(base, "GET", "/page.html", None).await, (200, "<h1>static</h1>".into()));
    let (status, text) = call(base, "POST", "/things?x=1", Some(b"hello")).await;
    assert_eq!(status, 201);
    assert!(text.starts_with("app POST http://127.0.0.1:") && text.ends_with("/things?x=1 hello"), "{text}");
    assert_eq!(call(base, "GET", "/fail", None).await, (500, "Internal Server Error".into()));
    let (status, text) = call(base, "POST", "/things", Some(&[b'x'; 17])).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("incoming_too_long"), "{text}");

    running.shutdown.cancel();
    running.task.await.unwrap().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn without_an_application_the_routes_answer_the_rest() {
    let running = start(None, None).await;
    assert_eq!(call(&running.base, "GET", "/elsewhere", None).await, (404, "routes GET /elsewhere".into()));
    running.shutdown.cancel();
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn streamed_bodies_flush_and_end_before_shutdown_completes() {
    let running = start(None, None).await;
    let cancel = CancellationToken::new();
    let (tx, stream) = BodyStream::channel(4, cancel.clone());
    *running.routes.stream.lock().unwrap() = Some(stream);

    let mut socket = tokio::net::TcpStream::connect(running.base.trim_start_matches("http://")).await.unwrap();
    socket.write_all(b"GET /rivet/stream HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    tx.send(Ok(Bytes::from_static(b"event: ping\ndata:\n\n"))).await.unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("event: ping") {
        let mut buf = [0u8; 1024];
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));

    // Shutdown waits for the response in flight; ending the stream ends it.
    running.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!running.task.is_finished());
    drop(tx);
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_dropped_client_cancels_its_stream() {
    let running = start(None, None).await;
    let cancel = CancellationToken::new();
    let (tx, stream) = BodyStream::channel(4, cancel.clone());
    *running.routes.stream.lock().unwrap() = Some(stream);
    let mut socket = tokio::net::TcpStream::connect(running.base.trim_start_matches("http://")).await.unwrap();
    socket.write_all(b"GET /rivet/stream HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    tx.send(Ok(Bytes::from_static(b"a"))).await.unwrap();
    let mut buf = [0u8; 256];
    let _ = socket.read(&mut buf).await.unwrap();
    drop(socket);
    // hyper notices on its next write.
    while !cancel.is_cancelled() {
        let _ = tx.send(Ok(Bytes::from_static(b"b"))).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.shutdown.cancel();
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_port_in_use_is_a_structured_error() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap().port();
    let config = ListenerConfig { host: Some("127.0.0.1".into()), port, public_dir: None, max_body_bytes: 1 };
    let err = bind(&config).await.unwrap_err();
    let error = RivetError::extract(&err);
    assert_eq!((error.group.as_str(), error.code.as_str()), ("listener", "bind_failed"));
}

/// An application that streams its answer: the head at once, the first
/// chunk, then the rest only when `release` is notified.
fn streaming_application(release: Arc<tokio::sync::Notify>, gone: Arc<tokio::sync::Notify>) -> Application {
    Arc::new(move |req: AppRequest| {
        let release = release.clone();
        let gone = gone.clone();
        Box::pin(async move {
            let writer = req.response_body;
            tokio::spawn(async move {
                writer.write(b"data: first\n\n").await.unwrap();
                tokio::select! {
                    _ = release.notified() => {
                        writer.write(b"data: second\n\n").await.unwrap();
                        writer.end().await.unwrap();
                    }
                    _ = writer.cancelled() => gone.notify_one(),
                }
            });
            Ok(AppResponse {
                status: 200,
                headers: HashMap::from([("content-type".into(), "text/event-stream".into())]),
                body: Bytes::new(),
                stream: true,
            })
        })
    })
}

async fn read_until(socket: &mut tokio::net::TcpStream, seen: &mut Vec<u8>, needle: &str) {
    while !String::from_utf8_lossy(seen).contains(needle) {
        let mut buf = [0u8; 1024];
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed before {needle:?}: {}", String::from_utf8_lossy(seen));
        seen.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn the_application_streams_its_answer_chunk_by_chunk() {
    let release = Arc::new(tokio::sync::Notify::new());
    let gone = Arc::new(tokio::sync::Notify::new());
    let running = start(None, Some(streaming_application(release.clone(), gone.clone()))).await;
    let mut socket = tokio::net::TcpStream::connect(running.base.trim_start_matches("http://")).await.unwrap();
    socket.write_all(b"GET /events HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut seen = Vec::new();
    // The first chunk arrives while the application still holds the rest.
    read_until(&mut socket, &mut seen, "data: first").await;
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    assert!(!String::from_utf8_lossy(&seen).contains("data: second"));
    release.notify_one();
    read_until(&mut socket, &mut seen, "data: second").await;
    // Chunked encoding's last chunk: the body ended.
    read_until(&mut socket, &mut seen, "0\r\n\r\n").await;

    // A client that leaves mid-stream resolves the writer's `cancelled()`.
    let mut socket = tokio::net::TcpStream::connect(running.base.trim_start_matches("http://")).await.unwrap();
    socket.write_all(b"GET /events HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut seen = Vec::new();
    read_until(&mut socket, &mut seen, "data: first").await;
    drop(socket);
    gone.notified().await;

    running.shutdown.cancel();
    running.task.await.unwrap().unwrap();
}
