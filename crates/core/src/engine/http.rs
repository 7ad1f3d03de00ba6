//! A deliberately tiny HTTP/1.1 client for talking to a *local* engine.
//!
//! Why not reqwest/hyper: the only HTTP this crate does outside the envoy
//! link is a handful of JSON calls to an engine on this machine (`/health`,
//! `/datacenters`, `/runner-configs`). A full client would add TLS, a
//! connection pool and dozens of crates to a Node addon for that. So this
//! speaks plain `http://` only, one request per connection
//! (`Connection: close`), and understands `Content-Length`, chunked and
//! read-to-EOF bodies. `https://` is refused with a clear error.
//!
//! Every `Err` from [`request`] is a transport-level failure (connect, I/O,
//! timeout, malformed answer); any HTTP status, including 5xx, is `Ok`.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use url::{Host, Url};

const MAX_LINE: u64 = 16 * 1024;
const MAX_HEADERS: usize = 128;
const MAX_BODY: usize = 8 * 1024 * 1024;

/// Status and body of an answer; headers are not needed by any caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).context("decode JSON response body")
    }
}

pub async fn get(url: &Url, bearer: Option<&str>, timeout: Duration) -> Result<Response> {
    request("GET", url, bearer, None, timeout).await
}

pub async fn put_json(
    url: &Url,
    bearer: Option<&str>,
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<Response> {
    let bytes = serde_json::to_vec(body).context("encode JSON request body")?;
    request("PUT", url, bearer, Some(&bytes), timeout).await
}

/// One request on a fresh connection, bounded by `timeout` end to end.
pub async fn request(
    method: &str,
    url: &Url,
    bearer: Option<&str>,
    json_body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response> {
    if url.scheme() != "http" {
        bail!(
            "{method} {}: only plain http:// URLs are supported by the built-in client \
             (it is only used for a local engine)",
            redact(url)
        );
    }
    let started = tokio::time::Instant::now();
    let redacted = redact(url);
    let stream = tokio::time::timeout(timeout, connect(url))
        .await
        .map_err(|_| anyhow!("timed out after {} ms", timeout.as_millis()))
        .and_then(|connected| connected)
        .map_err(|e| e.context(ConnectFailed).context(format!("{method} {redacted}")))?;
    let remaining = timeout.saturating_sub(started.elapsed());
    tokio::time::timeout(remaining, exchange(stream, method, url, bearer, json_body))
        .await
        .map_err(|_| anyhow!("{method} {redacted}: timed out after {} ms", timeout.as_millis()))?
        .with_context(|| format!("{method} {redacted}"))
}

/// Marks an error of [`request`] that happened before a connection was
/// made (DNS, refused, unreachable, connect timeout): nothing answered.
#[derive(Debug, Clone, Copy)]
pub struct ConnectFailed;

impl std::fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connect")
    }
}

/// Whether `err` (from [`request`]) failed before anything accepted the connection.
pub fn is_connect_error(err: &anyhow::Error) -> bool {
    err.downcast_ref::<ConnectFailed>().is_some()
}

async fn connect(url: &Url) -> Result<TcpStream> {
    let port = url.port_or_known_default().unwrap_or(80);
    // A wildcard address means "this machine" when we are the client.
    let stream = match url.host() {
        Some(Host::Domain(name)) => TcpStream::connect((name, port)).await,
        Some(Host::Ipv4(ip)) if ip.is_unspecified() => TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).await,
        Some(Host::Ipv4(ip)) => TcpStream::connect((ip, port)).await,
        Some(Host::Ipv6(ip)) if ip.is_unspecified() => TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, port)).await,
        Some(Host::Ipv6(ip)) => TcpStream::connect((ip, port)).await,
        None => bail!("URL has no host"),
    }?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

async fn exchange(
    stream: TcpStream,
    method: &str,
    url: &Url,
    bearer: Option<&str>,
    json_body: Option<&[u8]>,
) -> Result<Response> {
    let mut stream = BufReader::new(stream);
    let head = request_head(method, url, bearer, json_body.map(<[u8]>::len));
    stream.get_mut().write_all(head.as_bytes()).await.context("send request")?;
    if let Some(body) = json_body {
        stream.get_mut().write_all(body).await.context("send request body")?;
    }
    stream.get_mut().flush().await.context("send request")?;
    read_response(&mut stream, method == "HEAD").await
}

fn request_head(method: &str, url: &Url, bearer: Option<&str>, body_len: Option<usize>) -> String {
    let mut target = url.path().to_owned();
    if let Some(query) = url.query() {
        target.push('?');
        target.push_str(query);
    }
    let host = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => String::new(),
    };
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         User-Agent: rivetkit-native\r\nAccept: application/json\r\n"
    );
    if let Some(token) = bearer {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    match body_len {
        Some(len) => head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {len}\r\n")),
        None if method != "GET" && method != "HEAD" => head.push_str("Content-Length: 0\r\n"),
        None => {}
    }
    head.push_str("\r\n");
    head
}

async fn read_response<R: AsyncBufRead + Unpin>(r: &mut R, head_only: bool) -> Result<Response> {
    loop {
        let status_line = read_line(r).await?;
        let status = parse_status(&status_line)?;
        let mut chunked = false;
        let mut content_length = None;
        for count in 0.. {
            let line = read_line(r).await?;
            if line.is_empty() {
                break;
            }
            if count >= MAX_HEADERS {
                bail!("too many response headers");
            }
            let Some((name, value)) = line.split_once(':') else {
                bail!("malformed response header line");
            };
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("content-length") {
                content_length = Some(value.parse::<usize>().context("bad Content-Length")?);
            }
        }
        // Interim answers (100 Continue) are followed by the real one.
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let body = if head_only || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            read_chunked(r).await?
        } else if let Some(len) = content_length {
            if len > MAX_BODY {
                bail!("response body of {len} bytes is too large");
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).await.context("read response body")?;
            body
        } else {
            read_to_end(r).await?
        };
        return Ok(Response { status, body });
    }
}

fn parse_status(line: &str) -> Result<u16> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(version), Some(code)) if version.starts_with("HTTP/1.") => code.parse().context("bad status code"),
        _ => bail!("not an HTTP/1.x response"),
    }
}

async fn read_chunked<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(r).await?;
        let size_hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).context("bad chunk size")?;
        if size == 0 {
            // Skip trailers up to the blank line.
            while !read_line(r).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            bail!("response body is too large");
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).await.context("read chunk")?;
        if !read_line(r).await?.is_empty() {
            bail!("chunk not followed by CRLF");
        }
    }
}

async fn read_to_end<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    (&mut *r).take(MAX_BODY as u64 + 1).read_to_end(&mut body).await.context("read response body")?;
    if body.len() > MAX_BODY {
        bail!("response body is too large");
    }
    Ok(body)
}

/// One CRLF- (or LF-) terminated line without its terminator.
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<String> {
    let mut buf = Vec::new();
    let n = (&mut *r).take(MAX_LINE).read_until(b'\n', &mut buf).await.context("read response")?;
    if n == 0 {
        bail!("connection closed before a complete response");
    }
    if buf.last() != Some(&b'\n') {
        bail!(if n as u64 >= MAX_LINE { "response line too long" } else { "truncated response" });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).context("response head is not UTF-8")
}

/// The URL without credentials, for error messages.
fn redact(url: &Url) -> String {
    let mut clean = url.clone();
    let _ = clean.set_password(None);
    let _ = clean.set_username("");
    clean.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_server::{json_response, FakeServer};

    const T: Duration = Duration::from_secs(5);

    fn url(server: &FakeServer, path: &str) -> Url {
        Url::parse(&format!("{}{path}", server.url)).unwrap()
    }

    #[tokio::test]
    async fn get_with_content_length_and_bearer() {
        let server = FakeServer::start(|_, _| json_response(200, r#"{"ok":true}"#)).await;
        let res = get(&url(&server, "/health?x=1"), Some("tok"), T).await.unwrap();
        assert_eq!(res.status, 200);
        assert_eq!(res.json::<serde_json::Value>().unwrap()["ok"], true);
        let req = &server.requests()[0];
        assert_eq!((req.method.as_str(), req.target.as_str()), ("GET", "/health?x=1"));
        assert_eq!(req.header("authorization").as_deref(), Some("Bearer tok"));
        assert_eq!(req.header("connection").as_deref(), Some("close"));
    }

    #[tokio::test]
    async fn put_json_sends_body() {
        let server = FakeServer::start(|_, _| json_response(200, "{}")).await;
        let body = serde_json::json!({"a": [1, 2]});
        let res = put_json(&url(&server, "/x"), None, &body, T).await.unwrap();
        assert!(res.is_success());
        let req = &server.requests()[0];
        assert_eq!(req.method, "PUT");
        assert_eq!(req.header("authorization"), None);
        assert_eq!(req.header("content-type").as_deref(), Some("application/json"));
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&req.body).unwrap(), body);
    }

    #[tokio::test]
    async fn chunked_and_eof_bodies() {
        let server = FakeServer::start(|_, n| match n {
            0 => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                  5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: y\r\n\r\n"
                .to_owned(),
            1 => "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 503 Busy\r\n\r\nno length".to_owned(),
            _ => "HTTP/1.1 204 No Content\r\n\r\n".to_owned(),
        })
        .await;
        let u = url(&server, "/");
        assert_eq!(get(&u, None, T).await.unwrap().text(), "hello world");
        let res = get(&u, None, T).await.unwrap();
        assert_eq!((res.status, res.text().as_str()), (503, "no length"));
        assert_eq!(get(&u, None, T).await.unwrap(), Response { status: 204, body: vec![] });
    }

    #[tokio::test]
    async fn refused_https_and_timeout_are_errors() {
        let https = Url::parse("https://127.0.0.1:1/health").unwrap();
        let err = get(&https, None, T).await.unwrap_err().to_string();
        assert!(err.contains("only plain http://"), "{err}");

        // Port of a listener we just closed: connection refused.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let refused = Url::parse(&format!("http://{free}/")).unwrap();
        assert!(get(&refused, None, T).await.is_err());

        // A server that never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let conn = silent.accept().await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(conn);
        });
        let slow = Url::parse(&format!("http://{addr}/")).unwrap();
        let err = get(&slow, None, Duration::from_millis(100)).await.unwrap_err().to_string();
        assert!(err.contains("timed out"), "{err}");
        hold.abort();
    }
}
