//! The OTLP exporter: a bounded queue of finished spans, sent in batches
//! by one worker thread over OTLP/HTTP JSON (docs/telemetry.md, "Export").
//!
//! It is on only when the standard OpenTelemetry environment names an
//! endpoint. The worker is a plain thread with its own small runtime, so
//! export works whoever finishes a span (the JavaScript thread included)
//! and never holds the Node event loop open. A collector that is slow or
//! down costs dropped spans, never a blocked actor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::otlp_json;
use super::sampler::ProcessSampler;
use super::span::{SpanRecord, Value};
use crate::env;

/// Finished spans waiting for the worker; beyond this they are dropped
/// (and counted) rather than held.
pub const QUEUE_CAPACITY: usize = 2048;
/// Spans per request at most.
const BATCH: usize = 512;
/// How long a span waits for its batch at most.
const BATCH_DELAY: Duration = Duration::from_secs(1);
/// One request's bound, connect included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `shutdownTelemetry` waits for the queue to be sent.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how spans go, read from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportConfig {
    /// `http://host:port/path` of the traces endpoint.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    pub sampler: ProcessSampler,
}

impl ExportConfig {
    /// The config the variables give, `Ok(None)` when they turn export
    /// off or name no endpoint, and an error (logged once by the caller)
    /// when they ask for something this exporter does not do.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        if set(env::OTEL_SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || set(env::OTEL_TRACES_EXPORTER).is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let url = match (set(env::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), set(env::OTEL_EXPORTER_OTLP_ENDPOINT)) {
            (Some(url), _) => url.trim().to_owned(),
            (None, Some(base)) => format!("{}/v1/traces", base.trim().trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        let protocol = set(env::OTEL_EXPORTER_OTLP_TRACES_PROTOCOL).or_else(|| set(env::OTEL_EXPORTER_OTLP_PROTOCOL));
        if let Some(protocol) = protocol.as_deref().map(str::trim) {
            if protocol != "http/json" && protocol != "http/protobuf" {
                return Err(format!("OTLP protocol `{protocol}` is not supported: spans are sent as OTLP/HTTP JSON"));
            }
        }
        match url::Url::parse(&url) {
            Ok(parsed) if parsed.scheme() == "http" && parsed.host_str().is_some() => {}
            Ok(parsed) => {
                return Err(format!(
                    "OTLP endpoint `{url}`: scheme `{}` is not supported, use http://",
                    parsed.scheme()
                ))
            }
            Err(err) => return Err(format!("OTLP endpoint `{url}` is not a URL: {err}")),
        }
        let headers = set(env::OTEL_EXPORTER_OTLP_TRACES_HEADERS)
            .or_else(|| set(env::OTEL_EXPORTER_OTLP_HEADERS))
            .map(|list| parse_headers(&list))
            .unwrap_or_default();
        let sampler = ProcessSampler::parse(
            set(env::OTEL_TRACES_SAMPLER).as_deref(),
            set(env::OTEL_TRACES_SAMPLER_ARG).as_deref(),
        )?;
        let service_name = set(env::OTEL_SERVICE_NAME).unwrap_or_else(|| "rivetkit".to_owned());
        Ok(Some(Self { url, headers, service_name, sampler }))
    }
}

/// `key=value,key2=value2`, values percent-decoded (the OTLP headers form).
fn parse_headers(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let v = percent_encoding::percent_decode_str(v.trim()).decode_utf8_lossy().into_owned();
            Some((k.trim().to_owned(), v)).filter(|(k, _)| !k.is_empty())
        })
        .collect()
}

enum Msg {
    Span(Box<SpanRecord>),
    Flush(oneshot::Sender<()>),
}

/// The running exporter.
pub struct Exporter {
    tx: mpsc::Sender<Msg>,
    pub(crate) sampler: ProcessSampler,
    dropped: AtomicU64,
}

static EXPORTER: OnceLock<Option<Exporter>> = OnceLock::new();

/// The process's exporter, started on first use from the environment;
/// `None` when export is off.
pub fn exporter() -> Option<&'static Exporter> {
    EXPORTER
        .get_or_init(|| match ExportConfig::from_env(env::get) {
            Ok(Some(config)) => match Exporter::start(config) {
                Ok(exporter) => Some(exporter),
                Err(err) => {
                    tracing::warn!(error = %err, "span export could not start; no spans are exported");
                    None
                }
            },
            Ok(None) => None,
            Err(reason) => {
                tracing::warn!(%reason, "span export is off");
                None
            }
        })
        .as_ref()
}

/// The process rule for spans without an actor rate.
pub fn process_sampler() -> ProcessSampler {
    exporter().map(|e| e.sampler).unwrap_or_default()
}

/// Sends every span finished so far, waiting [`FLUSH_TIMEOUT`] at most.
/// Export stays on afterwards.
pub async fn flush() {
    let Some(exporter) = EXPORTER.get().and_then(Option::as_ref) else { return };
    let (done, wait) = oneshot::channel();
    let sent = tokio::time::timeout(FLUSH_TIMEOUT, async {
        exporter.tx.send(Msg::Flush(done)).await.ok()?;
        wait.await.ok()
    })
    .await;
    if !matches!(sent, Ok(Some(()))) {
        tracing::warn!(timeout_ms = FLUSH_TIMEOUT.as_millis() as u64, "span export did not finish; spans may be lost");
    }
}

impl Exporter {
    /// Starts the worker thread for `config`.
    pub fn start(config: ExportConfig) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let sampler = config.sampler;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        tracing::info!(url = %config.url, "exporting spans over OTLP/HTTP JSON");
        std::thread::Builder::new().name("rivetkit-otlp".into()).spawn(move || runtime.block_on(worker(config, rx)))?;
        Ok(Self { tx, sampler, dropped: AtomicU64::new(0) })
    }

    /// Queues a finished span, or drops it when the queue is full.
    pub fn push(&self, record: SpanRecord) {
        if self.tx.try_send(Msg::Span(Box::new(record))).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, capacity = QUEUE_CAPACITY, "span export queue full; spans dropped");
            }
        }
    }
}

/// Collects spans into batches and sends each; ends when every sender is
/// gone (never, for the process's exporter).
async fn worker(config: ExportConfig, mut rx: mpsc::Receiver<Msg>) {
    let resource = [
        ("service.name", Value::Str(config.service_name.clone())),
        ("rivetkit-native.version", Value::Str(env!("CARGO_PKG_VERSION").to_owned())),
    ];
    let mut batch: Vec<SpanRecord> = Vec::new();
    let mut failing = false;
    loop {
        let msg = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(BATCH_DELAY, rx.recv()).await {
                Ok(msg) => msg,
                Err(_) => {
                    send(&config, &resource, &mut batch, &mut failing).await;
                    continue;
                }
            }
        };
        match msg {
            Some(Msg::Span(record)) => {
                batch.push(*record);
                if batch.len() >= BATCH {
                    send(&config, &resource, &mut batch, &mut failing).await;
                }
            }
            Some(Msg::Flush(done)) => {
                send(&config, &resource, &mut batch, &mut failing).await;
                let _ = done.send(());
            }
            None => {
                send(&config, &resource, &mut batch, &mut failing).await;
                return;
            }
        }
    }
}

/// Sends `batch` once (a failed batch is dropped: spans are best effort);
/// a failure is logged once per run of failures.
async fn send(
    config: &ExportConfig,
    resource: &[(&'static str, Value)],
    batch: &mut Vec<SpanRecord>,
    failing: &mut bool,
) {
    if batch.is_empty() {
        return;
    }
    let body = otlp_json::encode(resource, batch).to_string();
    let spans = batch.len();
    batch.clear();
    match tokio::time::timeout(REQUEST_TIMEOUT, post(config, body)).await {
        Ok(Ok(status)) if (200..300).contains(&status) => {
            if std::mem::take(failing) {
                tracing::info!("span export works again");
            }
        }
        outcome => {
            let error = match outcome {
                Ok(Ok(status)) => format!("the collector answered {status}"),
                Ok(Err(err)) => err,
                Err(_) => format!("no answer in {} s", REQUEST_TIMEOUT.as_secs()),
            };
            if !std::mem::replace(failing, true) {
                tracing::warn!(url = %config.url, %error, spans, "span export failed; those spans are dropped");
            }
        }
    }
}

/// One POST of `body`; the response's status.
async fn post(config: &ExportConfig, body: String) -> Result<u16, String> {
    use http_body_util::Full;
    use hyper_util::rt::TokioIo;

    let url = url::Url::parse(&config.url).map_err(|e| e.to_string())?;
    let host = url.host_str().ok_or("no host")?.trim_matches(['[', ']']).to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let authority = match url.port() {
        Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_owned(),
    };
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let mut request = hyper::Request::post(path)
        .header("host", authority)
        .header("content-type", "application/json")
        .header("content-length", body.len());
    for (name, value) in &config.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(bytes::Bytes::from(body))).map_err(|e| e.to_string())?;
    // The connection runs beside the request and ends once the answer's
    // head is in and the sender is gone.
    let exchange = async move {
        let status = sender.send_request(request).await.map(|r| r.status().as_u16());
        drop(sender);
        status
    };
    let (status, _) = tokio::join!(exchange, conn);
    status.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Option<ExportConfig>, String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ExportConfig::from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn export_is_on_only_with_an_endpoint() {
        assert_eq!(config(&[]), Ok(None));
        let on = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap().unwrap();
        assert_eq!(on.url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(on.service_name, "rivetkit");
        let traces = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:2/x"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t, x-team = blue"),
            ("OTEL_SERVICE_NAME", "shop"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(traces.url, "http://b:2/x");
        assert_eq!(traces.headers, vec![("authorization".into(), "Bearer t".into()), ("x-team".into(), "blue".into())]);
        assert_eq!(traces.service_name, "shop");
        for off in [("OTEL_SDK_DISABLED", "true"), ("OTEL_TRACES_EXPORTER", "none")] {
            assert_eq!(config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"), off]), Ok(None));
        }
    }

    #[test]
    fn what_it_cannot_do_is_an_error_not_a_silent_default() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1");
        assert!(config(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err().contains("grpc"));
        assert!(config(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).unwrap().is_some());
        assert!(config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://a:1")]).unwrap_err().contains("https"));
        assert!(config(&[endpoint, ("OTEL_TRACES_SAMPLER", "nope")]).is_err());
    }

    #[tokio::test]
    async fn a_batch_reaches_the_collector_and_a_full_queue_drops() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let collector = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains("resourceSpans") || !seen.ends_with(b"}") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
            String::from_utf8(seen).unwrap()
        });
        let config = ExportConfig {
            url,
            headers: vec![("x-key".into(), "k".into())],
            service_name: "t".into(),
            sampler: ProcessSampler::default(),
        };
        let (tx, rx) = mpsc::channel(2);
        let exporter = Exporter { tx, sampler: config.sampler, dropped: AtomicU64::new(0) };
        let record = |name: &str| SpanRecord {
            context: crate::telemetry::context::SpanContext::root(true),
            parent_span_id: None,
            name: name.into(),
            kind: crate::telemetry::span::Kind::Server,
            start_ns: 1,
            end_ns: 2,
            attributes: vec![],
            error: None,
        };
        for name in ["a", "b", "c"] {
            exporter.push(record(name));
        }
        assert_eq!(exporter.dropped.load(Ordering::Relaxed), 1, "the third span found the queue full");
        let (done, flushed) = oneshot::channel();
        let worker = tokio::spawn(worker(config, rx));
        exporter.tx.send(Msg::Flush(done)).await.unwrap();
        flushed.await.unwrap();
        let request = collector.await.unwrap();
        assert!(request.starts_with("POST /v1/traces HTTP/1.1"), "{request}");
        assert!(request.to_ascii_lowercase().contains("x-key: k"));
        assert!(request.contains("\"name\":\"a\"") && request.contains("\"name\":\"b\""));
        drop(exporter);
        worker.await.unwrap();
    }
}
