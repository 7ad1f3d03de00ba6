//! The writing side of one connection, shared by its request tasks and
//! lease workers: a leaf of its own so that the connection
//! ([`super::server`]) and the leases ([`super::lease`]) both use it
//! without importing each other.

use std::collections::HashSet;
use std::sync::Mutex;

use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio_util::sync::CancellationToken;

use super::frame::write_frame;
use super::wire::{self, GoAwayReason, ResponsePayload, ServerFrame};

/// Writes the answers of one connection. Once it went away (a `GoAway`
/// was sent, or a write failed) nothing more is written.
/// Once the connection is cancelled, writes give up (the connection is
/// ending; a frame cut short does not matter), so that nothing waits on a
/// client that does not read.
pub(super) struct Responder {
    writer: tokio::sync::Mutex<Option<OwnedWriteHalf>>,
    in_flight: Mutex<HashSet<u32>>,
    max_frame_bytes: u32,
    cancel: CancellationToken,
}

impl Responder {
    pub(super) fn new(writer: OwnedWriteHalf, max_frame_bytes: u32, cancel: CancellationToken) -> Self {
        Self { writer: tokio::sync::Mutex::new(Some(writer)), in_flight: Mutex::default(), max_frame_bytes, cancel }
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `id` as in flight; false if it already is.
    pub(super) fn admit(&self, id: u32) -> bool {
        self.ids().insert(id)
    }

    /// Sends the answer to request `id` (`ResponseTooLarge` if it does not
    /// fit in a frame). The id is free again before the answer is sent, so
    /// a client may reuse it as soon as it read the answer.
    pub(super) async fn respond(&self, id: u32, payload: ResponsePayload) {
        let mut frame = wire::encode_server_frame(&ServerFrame::Response { request_id: id, payload });
        if frame.len() > self.max_frame_bytes as usize {
            frame = wire::encode_server_frame(&ServerFrame::Response {
                request_id: id,
                payload: ResponsePayload::ResponseTooLarge,
            });
        }
        let mut writer = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return,
            writer = self.writer.lock() => writer,
        };
        self.ids().remove(&id);
        let Some(stream) = writer.as_mut() else { return };
        let written: std::io::Result<()> = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(std::io::ErrorKind::Interrupted.into()),
            written = write_frame(stream, &frame) => written,
        };
        if let Err(err) = written {
            tracing::debug!(%err, "runtime socket: writing an answer failed");
            *writer = None;
        }
    }

    /// Sends `GoAway` and closes the writing side; later answers are dropped.
    pub(super) async fn go_away(&self, reason: GoAwayReason) {
        tracing::debug!(?reason, "runtime socket: closing a connection that broke the protocol");
        let taken = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => None,
            mut writer = self.writer.lock() => writer.take(),
        };
        if let Some(mut stream) = taken {
            let frame = wire::encode_server_frame(&ServerFrame::GoAway(reason));
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {}
                _ = async {
                    let _ = write_frame(&mut stream, &frame).await;
                    let _ = stream.shutdown().await;
                } => {}
            }
        }
    }
}
