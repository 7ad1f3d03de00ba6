use rivet_envoy_protocol as protocol;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::connection::ws_send;
use crate::envoy::EnvoyContext;
use crate::metrics::METRICS;

pub struct KvRequestEntry {
	pub actor_id: String,
	pub data: protocol::KvRequestData,
	pub response_tx: oneshot::Sender<anyhow::Result<protocol::KvResponseData>>,
	/// Lost signal of the requesting generation. Checked right before transmission.
	pub lost: Option<CancellationToken>,
	pub sent: bool,
	pub timestamp: crate::time::Instant,
}

pub const KV_EXPIRE_MS: u64 = 30_000;
pub const KV_CLEANUP_INTERVAL_MS: u64 = 15_000;

pub async fn handle_kv_request(
	ctx: &mut EnvoyContext,
	actor_id: String,
	data: protocol::KvRequestData,
	lost: Option<CancellationToken>,
	response_tx: oneshot::Sender<anyhow::Result<protocol::KvResponseData>>,
) {
	let request_id = ctx.next_kv_request_id;
	ctx.next_kv_request_id += 1;

	let entry = KvRequestEntry {
		actor_id,
		data,
		response_tx,
		lost,
		sent: false,
		timestamp: crate::time::Instant::now(),
	};

	ctx.kv_requests.insert(request_id, entry);
	METRICS.kv_requests_inflight.inc();

	let ws_available = {
		let guard = ctx.shared.ws_tx.lock().await;
		guard.is_some()
	};

	if ws_available {
		send_single_kv_request(ctx, request_id).await;
	}
}

pub async fn handle_kv_response(ctx: &mut EnvoyContext, response: protocol::ToEnvoyKvResponse) {
	// rivetkit-native patch: see `crate::lease`.
	crate::lease::answered(ctx, response.request_id);
	let request = ctx.kv_requests.remove(&response.request_id);

	if let Some(request) = request {
		METRICS.kv_requests_inflight.dec();
		match response.data {
			protocol::KvResponseData::KvErrorResponse(ref e) => {
				let _ = request
					.response_tx
					.send(Err(anyhow::anyhow!("{}", e.message)));
			}
			_ => {
				let _ = request.response_tx.send(Ok(response.data));
			}
		}
	} else {
		tracing::error!(
			request_id = response.request_id,
			"received kv response for unknown request id"
		);
	}
}

pub async fn send_single_kv_request(ctx: &mut EnvoyContext, request_id: u32) {
	let request = ctx.kv_requests.get_mut(&request_id);
	let Some(request) = request else { return };
	if request.sent {
		return;
	}
	// A request queued before its generation was declared lost must not reach storage, even
	// when it is resent after a reconnect.
	if request
		.lost
		.as_ref()
		.is_some_and(CancellationToken::is_cancelled)
	{
		if let Some(request) = ctx.kv_requests.remove(&request_id) {
			METRICS.kv_requests_inflight.dec();
			let _ = request.response_tx.send(Err(anyhow::anyhow!(
				"actor generation was declared lost; kv request dropped before sending"
			)));
		}
		return;
	}

	ws_send(
		&ctx.shared,
		protocol::ToRivet::ToRivetKvRequest(protocol::ToRivetKvRequest {
			actor_id: request.actor_id.clone(),
			request_id,
			data: request.data.clone(),
		}),
	)
	.await;

	// Re-get after async call
	if let Some(request) = ctx.kv_requests.get_mut(&request_id) {
		request.sent = true;
		request.timestamp = crate::time::Instant::now();
	}
}

pub async fn process_unsent_kv_requests(ctx: &mut EnvoyContext) {
	let ws_available = {
		let guard = ctx.shared.ws_tx.lock().await;
		guard.is_some()
	};

	if !ws_available {
		return;
	}

	let mut unsent: Vec<u32> = ctx
		.kv_requests
		.iter()
		.filter(|(_, req)| !req.sent)
		.map(|(id, _)| *id)
		.collect();
	// rivetkit-native patch: in the order they were made (the map has none),
	// so that two writes of one key queued while disconnected keep theirs.
	unsent.sort_unstable();

	for request_id in unsent {
		send_single_kv_request(ctx, request_id).await;
	}
}

/// rivetkit-native patch: the connection ended with these requests sent and
/// unanswered. The published crate left them waiting for an answer that can
/// no longer come, until the 30 s cleanup: a state save in flight when an
/// engine node died held its actor's answers (the output gate) that long.
///
/// Every KV operation is idempotent (a put or delete applied twice leaves
/// what applying it once does), so a request whose outcome is unknown is
/// sent again on the next connection, in its original order among the
/// unsent ones. The lease's probes are the exception: one answered on the
/// next connection would prove a pong the engine may never have read, so
/// they are dropped (docs/deploy.md, "A node is lost").
pub fn requeue_sent_kv_requests(ctx: &mut EnvoyContext) {
	let mut probes = Vec::new();
	for (request_id, request) in ctx.kv_requests.iter_mut() {
		if !request.sent {
			continue;
		}
		if request.actor_id == ctx.shared.config.lease_probe_actor_id {
			probes.push(*request_id);
		} else {
			request.sent = false;
			request.timestamp = crate::time::Instant::now();
		}
	}
	for request_id in probes {
		if let Some(request) = ctx.kv_requests.remove(&request_id) {
			METRICS.kv_requests_inflight.dec();
			let _ = request.response_tx.send(Err(anyhow::anyhow!(
				"connection closed before the probe was answered"
			)));
		}
		crate::lease::forget(ctx, request_id);
	}
}

pub fn cleanup_old_kv_requests(ctx: &mut EnvoyContext) {
	let now = crate::time::Instant::now();
	let mut to_delete = Vec::new();

	for (request_id, request) in &ctx.kv_requests {
		if now.duration_since(request.timestamp).as_millis() > KV_EXPIRE_MS as u128 {
			to_delete.push(*request_id);
		}
	}

	for request_id in to_delete {
		if let Some(request) = ctx.kv_requests.remove(&request_id) {
			METRICS.kv_requests_inflight.dec();
			tracing::warn!(
				request_id,
				was_sent = request.sent,
				age_ms = now.duration_since(request.timestamp).as_millis() as u64,
				"kv request expired by cleanup"
			);
			let _ = request
				.response_tx
				.send(Err(anyhow::anyhow!("KV request timed out")));
		}
	}
}

#[cfg(test)]
mod tests {
	use rivet_envoy_protocol as protocol;
	use tokio::sync::{mpsc, oneshot};
	use vbare::OwnedVersionedData;

	use super::*;
	use crate::connection::install_connection;
	use crate::context::WsTxMessage;
	use crate::events::tests::new_envoy_context;

	fn put(key: u8) -> protocol::KvRequestData {
		protocol::KvRequestData::KvPutRequest(protocol::KvPutRequest {
			keys: vec![vec![key]],
			values: vec![vec![key]],
		})
	}

	async fn sent_request_id(rx: &mut mpsc::UnboundedReceiver<WsTxMessage>) -> (String, u32) {
		let WsTxMessage::Send(bytes) = rx.recv().await.expect("a frame") else {
			panic!("expected a frame");
		};
		match protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
			.expect("decode")
		{
			protocol::ToRivet::ToRivetKvRequest(r) => (r.actor_id, r.request_id),
			_ => panic!("expected a KV request"),
		}
	}

	/// rivetkit-native patch: a save in flight when an engine node died is
	/// sent again on the next connection, in order; a lease probe is not.
	#[tokio::test]
	async fn requests_unanswered_at_a_close_are_sent_again_in_order_and_probes_are_dropped() {
		let (mut ctx, _handle) = new_envoy_context();
		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;

		let (first_tx, mut first_rx) = oneshot::channel();
		handle_kv_request(&mut ctx, "actor".into(), put(1), None, first_tx).await;
		crate::lease::probe(&mut ctx, 1).await;
		let (second_tx, _second_rx) = oneshot::channel();
		handle_kv_request(&mut ctx, "actor".into(), put(2), None, second_tx).await;
		for _ in 0..3 {
			sent_request_id(&mut rx).await;
		}

		// The connection ends: nothing may wait for its answers any more.
		crate::connection::remove_connection_for_session(
			&ctx.shared,
			ctx.shared
				.connection_session
				.load(std::sync::atomic::Ordering::Acquire),
		)
		.await;
		requeue_sent_kv_requests(&mut ctx);
		assert_eq!(ctx.kv_requests.len(), 2, "the probe is gone");
		assert!(ctx.kv_requests.values().all(|r| !r.sent));
		assert!(
			first_rx.try_recv().is_err(),
			"the save still waits for its answer"
		);

		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		process_unsent_kv_requests(&mut ctx).await;
		assert_eq!(sent_request_id(&mut rx).await, ("actor".to_owned(), 0));
		assert_eq!(sent_request_id(&mut rx).await, ("actor".to_owned(), 2));
		assert!(rx.try_recv().is_err());
	}
}
