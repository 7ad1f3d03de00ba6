//! rivetkit-native patch: the envoy's lease, counted from proof.
//!
//! The engine keeps an envoy alive from the moment it reads the envoy's
//! pong (`last_ping_ts = now` on each `ToRivetPong`) and gives its actors to
//! another host once that is older than its `envoy_lost_threshold`. The
//! published crate counted its own deadline from the moment it *received*
//! a ping, less a 3 s margin: a pong held in transit (a partition that
//! holds bytes) lets the engine's clock start earlier than the envoy
//! believes, and the engine could move the actors while this host still
//! answered for them.
//!
//! Here the lease starts at the moment a pong was *sent*, and only once the
//! engine has proved it read that pong: right behind each pong the envoy
//! sends a probe, an empty KV read, on the same ordered connection. The
//! engine reads its messages in order and updates the envoy's liveness as
//! it reads a pong, so any answer to the probe proves that the engine's
//! liveness for this envoy is at least the pong's send time. The lease
//! ends at that send time plus the threshold, less [`MARGIN_MS`] for the
//! engine's own timers. A connection's handshake proves its start the
//! same way (the engine registers the envoy as it accepts it).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use crate::envoy::EnvoyContext;
use crate::protocol;

/// Taken off the threshold: the engine checks liveness on its own timer
/// and our deadline timer fires late by the envoy loop's latency.
pub const MARGIN_MS: i64 = 1_000;
/// Probes waiting for their answer, at most; the oldest is forgotten
/// first (a partition leaves probes unanswered, one per engine ping).
const MAX_OUTSTANDING: usize = 8;
/// The actor id of the probes on engine 2.3: it is no actor id, so the
/// engine answers it with an error at once, without touching storage, on a
/// KV queue of its own (the engine keeps one per actor id): a probe never
/// waits behind an actor's writes. Any answer proves the order.
pub const NO_ACTOR: &str = "lease-probe";
/// The actor id of the probes on engine 3.0: the nil id (version 1, all
/// zero bytes, in the engine's 30-character base-36 form), which no actor
/// ever has. Engine 3.0 drops the whole connection on a KV request whose id
/// does not parse ("unsupported ID version"), and answers this one with an
/// error within milliseconds.
pub const NIL_ACTOR: &str = "100000000000000000000000000000";

#[derive(Default)]
pub struct Lease {
	/// (KV request id, local ms when the pong before it was queued).
	outstanding: VecDeque<(u32, i64)>,
	/// (KV request id, who waits for the engine to have read up to it), at
	/// most [`MAX_OUTSTANDING`]: see [`confirm_read`].
	read_waiters: Vec<(u32, oneshot::Sender<()>)>,
}

/// Right after a pong queued at `pong_sent_ms`: sends the probe that proves it.
pub async fn probe(ctx: &mut EnvoyContext, pong_sent_ms: i64) {
	if ctx.lease.outstanding.len() >= MAX_OUTSTANDING {
		ctx.lease.outstanding.pop_front();
	}
	let request_id = send_probe(ctx).await;
	ctx.lease.outstanding.push_back((request_id, pong_sent_ms));
}

/// Sends an empty KV read naming no actor; returns its request id. Nobody
/// waits on the answer: [`answered`] reads it from the request id.
async fn send_probe(ctx: &mut EnvoyContext) -> u32 {
	let request_id = ctx.next_kv_request_id;
	let (response_tx, _) = oneshot::channel();
	crate::kv::handle_kv_request(
		ctx,
		ctx.shared.config.lease_probe_actor_id.clone(),
		protocol::KvRequestData::KvGetRequest(protocol::KvGetRequest { keys: Vec::new() }),
		None,
		response_tx,
	)
	.await;
	request_id
}

/// A KV answer from the engine for `request_id` arrived: if it was a
/// probe, the pong before it is proven.
pub fn answered(ctx: &mut EnvoyContext, request_id: u32) {
	if let Some(at) = ctx
		.lease
		.read_waiters
		.iter()
		.position(|(id, _)| *id == request_id)
	{
		let (_, read_tx) = ctx.lease.read_waiters.remove(at);
		let _ = read_tx.send(());
	}
	let Some(at) = ctx
		.lease
		.outstanding
		.iter()
		.position(|(id, _)| *id == request_id)
	else {
		return;
	};
	let (_, pong_sent_ms) = ctx.lease.outstanding[at];
	// Probes before it proved older pongs; they are no longer needed.
	ctx.lease.outstanding.drain(..=at);
	prove(ctx, pong_sent_ms);
}

/// A probe that can no longer be answered (its connection ended): it
/// proves nothing, and whoever waited on it hears no.
pub fn forget(ctx: &mut EnvoyContext, request_id: u32) {
	ctx.lease.outstanding.retain(|(id, _)| *id != request_id);
	ctx.lease.read_waiters.retain(|(id, _)| *id != request_id);
}

/// The engine has seen this envoy alive at `ms` or later.
pub fn prove(ctx: &EnvoyContext, ms: i64) {
	ctx.shared.lease_proof_ms.fetch_max(ms, Ordering::AcqRel);
}

/// When this envoy must stop trusting its actors (local epoch ms), or
/// `None` before anything was proven.
pub fn deadline_ms(ctx: &EnvoyContext, threshold_ms: i64) -> Option<i64> {
	let proof = ctx.shared.lease_proof_ms.load(Ordering::Acquire);
	if proof == 0 {
		return None;
	}
	let margin = MARGIN_MS.min(threshold_ms / 2);
	Some(proof + threshold_ms - margin)
}

/// Sends a probe now and answers `read_tx` once the engine answers it: the
/// engine has read everything this envoy sent before the probe.
pub async fn confirm_read(ctx: &mut EnvoyContext, read_tx: oneshot::Sender<()>) {
	if ctx.lease.read_waiters.len() >= MAX_OUTSTANDING {
		ctx.lease.read_waiters.remove(0);
	}
	let request_id = send_probe(ctx).await;
	ctx.lease.read_waiters.push((request_id, read_tx));
}
