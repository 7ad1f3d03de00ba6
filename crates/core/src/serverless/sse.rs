//! The event stream that answers a `/start`.
//!
//! The engine keeps the start request open for as long as the actor runs
//! on this host and reads Server-Sent Events from it: a `ping` right away
//! and every second after, then one `stopping` when the actor generation
//! has stopped here (so the engine can close the request before its
//! lifespan ends). Any other outcome (the actor could not be handed to the
//! envoy) ends the stream with a structured error.

use std::time::Duration;

use bytes::Bytes;
use rivet_envoy_client::handle::EnvoyHandle;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;

use super::start::StartTarget;
use crate::error::RivetError;

pub const PING_FRAME: &[u8] = b"event: ping\ndata:\n\n";
pub const STOPPING_FRAME: &[u8] = b"event: stopping\ndata:\n\n";
pub const PING_INTERVAL: Duration = Duration::from_secs(1);
/// Chunks buffered for a slow reader; a ping that does not fit is skipped.
pub const STREAM_CAPACITY: usize = 8;
/// How long the last frame (`stopping`, or the error) waits for a reader.
const LAST_FRAME_WAIT: Duration = Duration::from_secs(5);

pub(super) type Sender = mpsc::Sender<Result<Bytes, RivetError>>;

/// Hands the actor to `envoy` and streams events until the generation
/// stopped, the request was cancelled, or the reader went away.
pub(super) async fn run(
    envoy: EnvoyHandle,
    payload: Bytes,
    target: StartTarget,
    tx: Sender,
    cancel: CancellationToken,
) {
    let _ = tx.try_send(Ok(Bytes::from_static(PING_FRAME)));
    let started = tokio::select! {
        _ = cancel.cancelled() => return,
        started = envoy.start_serverless_actor(&payload) => started,
    };
    if let Err(err) = started {
        tracing::warn!(actor_id = %target.actor_id, generation = target.generation, error = %format!("{err:#}"), "serverless start failed");
        let error = RivetError::new(
            crate::error_codes::SERVERLESS_START_FAILED,
            format!("The actor could not be handed to this host's envoy: {err:#}"),
        );
        let _ = tokio::time::timeout(LAST_FRAME_WAIT, tx.send(Err(error))).await;
        return;
    }
    tracing::debug!(actor_id = %target.actor_id, generation = target.generation, "serverless start handed to the envoy");

    let stopped = envoy.wait_actor_registered_then_stopped(&target.actor_id, target.generation);
    tokio::pin!(stopped);
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = &mut stopped => {
                tracing::debug!(actor_id = %target.actor_id, generation = target.generation, "serverless actor stopped");
                let _ = tokio::time::timeout(LAST_FRAME_WAIT, tx.send(Ok(Bytes::from_static(STOPPING_FRAME)))).await;
                return;
            }
            _ = ping.tick() => {
                if let Err(TrySendError::Closed(_)) = tx.try_send(Ok(Bytes::from_static(PING_FRAME))) {
                    return;
                }
            }
        }
    }
}
