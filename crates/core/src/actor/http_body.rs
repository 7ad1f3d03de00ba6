//! Streamed bodies of raw requests (`onRequest`), docs/streams.md.
//!
//! [`RequestBodyReader`] hands the upload to the host chunk by chunk as the
//! gateway delivers it; nothing is buffered here, and the envoy returns
//! flow-control credit only for chunks read, so a slow reader slows the
//! client down instead of growing memory. [`ResponseBodyWriter`] is the
//! other direction: the host writes the response body after it answered the
//! status and headers; every write waits for room in a channel of
//! [`RESPONSE_CHANNEL_CAPACITY`] chunks (backpressure). Either side going
//! away ends the stream cleanly: a cancelled reader drops the upload (the
//! envoy tells the gateway), a client gone resolves
//! [`ResponseBodyWriter::cancelled`] and makes later writes fail with
//! `http.stream_closed`.
//!
//! Both handles are cheap clones of one shared stream, so they can ride in
//! [`super::HttpRequest`] and be handed to the host runtime.

use std::fmt;
use std::sync::{Arc, Mutex};

use rivet_envoy_client::config::{HttpRequestBodyStream, HttpResponseBodyStream, ResponseChunk};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::RivetError;

/// Response chunks queued between the host and the tunnel (each at most
/// [`MAX_CHUNK`] bytes after splitting), so at most 1 MiB per response.
pub const RESPONSE_CHANNEL_CAPACITY: usize = 16;

/// The largest chunk put on the response channel; bigger writes are split.
pub const MAX_CHUNK: usize = 64 * 1024;

/// How much of a streamed upload is read before the hook runs: a body up
/// to this size reaches it whole in `body`, a larger one as a prefix of at
/// least this size plus a [`RequestBodyReader`] for the rest.
pub const INLINE_BODY: usize = 64 * 1024;

/// `http.stream_closed`: the other side of a streamed body went away.
pub fn stream_closed(message: &str) -> RivetError {
    RivetError::new(crate::error_codes::HTTP_STREAM_CLOSED, message.to_string())
}

/// `http.stream_aborted`: the client aborted its upload mid-way.
fn stream_aborted(detail: impl fmt::Display) -> RivetError {
    RivetError::new(crate::error_codes::HTTP_STREAM_ABORTED, format!("The request body stream was aborted: {detail}"))
}

struct ReaderInner {
    stream: tokio::sync::Mutex<Option<HttpRequestBodyStream>>,
    cancel: CancellationToken,
}

/// The rest of an upload, read chunk by chunk (see the module docs).
#[derive(Clone)]
pub struct RequestBodyReader {
    inner: Arc<ReaderInner>,
}

impl fmt::Debug for RequestBodyReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBodyReader").field("cancelled", &self.inner.cancel.is_cancelled()).finish()
    }
}

impl RequestBodyReader {
    pub fn new(stream: HttpRequestBodyStream) -> Self {
        Self {
            inner: Arc::new(ReaderInner {
                stream: tokio::sync::Mutex::new(Some(stream)),
                cancel: CancellationToken::new(),
            }),
        }
    }

    /// The next chunk, `None` at the end (or after [`Self::cancel`]). An
    /// aborted upload is `http.stream_aborted`; after an error the stream
    /// is over and later reads return `None`.
    pub async fn read(&self) -> Result<Option<Vec<u8>>, RivetError> {
        let inner = &self.inner;
        tokio::select! {
            biased;
            _ = inner.cancel.cancelled() => Ok(None),
            result = async {
                let mut guard = inner.stream.lock().await;
                let Some(stream) = guard.as_mut() else { return Ok(None) };
                match stream.recv().await {
                    Ok(Some(chunk)) => Ok(Some(chunk)),
                    Ok(None) => {
                        *guard = None;
                        Ok(None)
                    }
                    Err(err) => {
                        *guard = None;
                        Err(stream_aborted(err))
                    }
                }
            } => result,
        }
    }

    /// Stops reading: a pending read returns `None` and the rest of the
    /// upload is dropped (the envoy cancels it upstream). Idempotent.
    pub async fn cancel(&self) {
        self.inner.cancel.cancel();
        // The pending read (if any) has let go of the lock by now.
        drop(self.inner.stream.lock().await.take());
    }
}

struct WriterInner {
    tx: Mutex<Option<mpsc::Sender<ResponseChunk>>>,
    gone: CancellationToken,
}

/// The host's end of a streamed response body (see the module docs).
#[derive(Clone)]
pub struct ResponseBodyWriter {
    inner: Arc<WriterInner>,
}

impl fmt::Debug for ResponseBodyWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBodyWriter").field("gone", &self.inner.gone.is_cancelled()).finish()
    }
}

/// The tunnel's end of a streamed response body. Dropping it (the response
/// was not streamed, or the client went away) resolves the writer's
/// [`ResponseBodyWriter::cancelled`].
pub struct ResponseBodyReceiver {
    rx: Option<mpsc::Receiver<ResponseChunk>>,
    gone: CancellationToken,
}

impl Drop for ResponseBodyReceiver {
    fn drop(&mut self) {
        if self.rx.is_some() {
            self.gone.cancel();
        }
    }
}

impl ResponseBodyReceiver {
    /// The envoy's response stream; the writer learns when the envoy drops it.
    pub fn into_envoy(mut self) -> HttpResponseBodyStream {
        let rx = self.rx.take().expect("the receiver is taken once");
        let gone = self.gone.clone();
        let mut stream = HttpResponseBodyStream::from(rx);
        stream.set_on_drop(move || gone.cancel());
        stream
    }

    /// The next chunk (tests read the channel directly).
    pub async fn recv(&mut self) -> Option<ResponseChunk> {
        self.rx.as_mut()?.recv().await
    }
}

/// A writer and the receiver the tunnel reads.
pub fn response_body_channel() -> (ResponseBodyWriter, ResponseBodyReceiver) {
    let (tx, rx) = mpsc::channel(RESPONSE_CHANNEL_CAPACITY);
    let gone = CancellationToken::new();
    let writer = ResponseBodyWriter { inner: Arc::new(WriterInner { tx: Mutex::new(Some(tx)), gone: gone.clone() }) };
    (writer, ResponseBodyReceiver { rx: Some(rx), gone })
}

impl ResponseBodyWriter {
    fn sender(&self, what: &str) -> Result<mpsc::Sender<ResponseChunk>, RivetError> {
        if self.inner.gone.is_cancelled() {
            return Err(stream_closed(&format!("Cannot {what}: the response body receiver is gone.")));
        }
        self.inner
            .tx
            .lock()
            .map_err(|_| stream_closed("The response body stream is poisoned."))?
            .clone()
            .ok_or_else(|| stream_closed(&format!("Cannot {what}: the response body already ended.")))
    }

    fn take_sender(&self, what: &str) -> Result<mpsc::Sender<ResponseChunk>, RivetError> {
        let tx = self.inner.tx.lock().map_err(|_| stream_closed("The response body stream is poisoned."))?.take();
        tx.ok_or_else(|| stream_closed(&format!("Cannot {what}: the response body already ended.")))
    }

    async fn send(&self, tx: &mpsc::Sender<ResponseChunk>, chunk: ResponseChunk) -> Result<(), RivetError> {
        tokio::select! {
            biased;
            _ = self.inner.gone.cancelled() => Err(stream_closed("The response body receiver is gone.")),
            sent = tx.send(chunk) => sent.map_err(|_| stream_closed("The response body receiver is gone.")),
        }
    }

    /// Queues `chunk` (split into [`MAX_CHUNK`] pieces), waiting for room.
    pub async fn write(&self, chunk: &[u8]) -> Result<(), RivetError> {
        let tx = self.sender("write")?;
        for piece in chunk.chunks(MAX_CHUNK) {
            self.send(&tx, ResponseChunk::Data { data: piece.to_vec(), finish: false }).await?;
        }
        Ok(())
    }

    /// Ends the body; later writes fail.
    pub async fn end(&self) -> Result<(), RivetError> {
        let tx = self.take_sender("end")?;
        self.send(&tx, ResponseChunk::Data { data: Vec::new(), finish: true }).await
    }

    /// Ends the body with an error (the gateway aborts the response).
    pub async fn error(&self, message: String) -> Result<(), RivetError> {
        let tx = self.take_sender("report an error")?;
        self.send(&tx, ResponseChunk::Error(message)).await
    }

    /// Resolves once the receiver is gone (client disconnected, response
    /// not streamed, or the body delivered and dropped).
    pub async fn cancelled(&self) {
        self.inner.gone.cancelled().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(chunk: ResponseChunk) -> (Vec<u8>, bool) {
        match chunk {
            ResponseChunk::Data { data, finish } => (data, finish),
            ResponseChunk::Error(message) => panic!("unexpected error {message}"),
        }
    }

    #[tokio::test]
    async fn writes_are_split_and_bounded() {
        let (writer, mut rx) = response_body_channel();
        let big = vec![7u8; MAX_CHUNK * (RESPONSE_CHANNEL_CAPACITY + 2)];
        let w = writer.clone();
        let write = tokio::spawn(async move { w.write(&big).await });
        // The channel holds at most its capacity: the write waits for the reader.
        tokio::task::yield_now().await;
        assert!(!write.is_finished());
        let mut total = 0;
        for _ in 0..RESPONSE_CHANNEL_CAPACITY + 2 {
            let (chunk, finish) = data(rx.recv().await.unwrap());
            assert!(chunk.len() <= MAX_CHUNK && !finish);
            total += chunk.len();
        }
        write.await.unwrap().unwrap();
        assert_eq!(total, MAX_CHUNK * (RESPONSE_CHANNEL_CAPACITY + 2));
        writer.end().await.unwrap();
        assert_eq!(data(rx.recv().await.unwrap()), (Vec::new(), true));
        let err = writer.write(b"late").await.unwrap_err();
        assert_eq!(err.qualified_code(), "http.stream_closed");
        assert!(writer.end().await.is_err());
    }

    #[tokio::test]
    async fn a_dropped_receiver_cancels_and_fails_writes() {
        let (writer, rx) = response_body_channel();
        let w = writer.clone();
        let waiting = tokio::spawn(async move { w.cancelled().await });
        drop(rx);
        waiting.await.unwrap();
        assert_eq!(writer.write(b"x").await.unwrap_err().qualified_code(), "http.stream_closed");
    }

    #[tokio::test]
    async fn a_write_blocked_on_a_full_channel_ends_when_the_receiver_goes() {
        let (writer, rx) = response_body_channel();
        let stream = rx.into_envoy();
        let big = vec![0u8; MAX_CHUNK * (RESPONSE_CHANNEL_CAPACITY + 1)];
        let w = writer.clone();
        let write = tokio::spawn(async move { w.write(&big).await });
        tokio::task::yield_now().await;
        drop(stream);
        assert_eq!(write.await.unwrap().unwrap_err().qualified_code(), "http.stream_closed");
        writer.cancelled().await;
    }

    #[tokio::test]
    async fn errors_reach_the_receiver() {
        let (writer, mut rx) = response_body_channel();
        writer.write(b"a").await.unwrap();
        writer.error("boom".into()).await.unwrap();
        assert_eq!(data(rx.recv().await.unwrap()), (b"a".to_vec(), false));
        assert!(matches!(rx.recv().await, Some(ResponseChunk::Error(m)) if m == "boom"));
    }

    fn upload() -> (
        mpsc::Sender<Vec<u8>>,
        tokio::sync::watch::Sender<Option<rivet_envoy_client::config::HttpRequestBodyError>>,
        RequestBodyReader,
    ) {
        let (tx, rx) = mpsc::channel(4);
        let (abort_tx, abort_rx) = tokio::sync::watch::channel(None);
        (tx, abort_tx, RequestBodyReader::new(HttpRequestBodyStream::new(rx, abort_rx)))
    }

    #[tokio::test]
    async fn reads_chunks_then_the_end() {
        let (tx, _abort, reader) = upload();
        tx.send(b"ab".to_vec()).await.unwrap();
        tx.send(b"cd".to_vec()).await.unwrap();
        drop(tx);
        assert_eq!(reader.read().await.unwrap(), Some(b"ab".to_vec()));
        assert_eq!(reader.read().await.unwrap(), Some(b"cd".to_vec()));
        assert_eq!(reader.read().await.unwrap(), None);
        assert_eq!(reader.read().await.unwrap(), None);
    }

    #[tokio::test]
    async fn cancel_ends_a_pending_read() {
        let (tx, _abort, reader) = upload();
        let r = reader.clone();
        let pending = tokio::spawn(async move { r.read().await });
        tokio::task::yield_now().await;
        reader.cancel().await;
        assert_eq!(pending.await.unwrap().unwrap(), None);
        // The upload's receiver is gone.
        assert!(tx.send(b"x".to_vec()).await.is_err());
        reader.cancel().await;
    }

    #[tokio::test]
    async fn an_aborted_upload_is_a_structured_error() {
        let (_tx, abort, reader) = upload();
        abort
            .send(Some(rivet_envoy_client::config::HttpRequestBodyError {
                reason: rivet_envoy_client::protocol::HttpStreamAbortReason {
                    kind: rivet_envoy_client::protocol::HttpStreamAbortReasonKind::InternalError,
                    detail: None,
                },
            }))
            .unwrap();
        assert_eq!(reader.read().await.unwrap_err().qualified_code(), "http.stream_aborted");
        assert_eq!(reader.read().await.unwrap(), None);
    }
}
