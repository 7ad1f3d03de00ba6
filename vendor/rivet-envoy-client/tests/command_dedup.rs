use std::collections::HashMap;
use std::sync::Arc;

use rivet_envoy_client::actor::ToActor;
use rivet_envoy_client::async_counter::AsyncCounter;
use rivet_envoy_client::commands::{handle_commands, send_command_ack};
use rivet_envoy_client::config::{
	BoxFuture, EnvoyCallbacks, EnvoyConfig, HttpRequest, HttpResponse, WebSocketHandler,
	WebSocketSender,
};
use rivet_envoy_client::context::{SharedContext, WsTxMessage};
use rivet_envoy_client::envoy::{
	EnvoyContext, declare_actors_lost, engine_ping_silence_deadline_ms, engine_ping_silence_expired,
};
use rivet_envoy_client::handle::EnvoyHandle;
use rivet_envoy_client::sqlite::{
	RemoteSqliteRequest, fail_sent_remote_sqlite_requests_with_indeterminate_result,
	handle_remote_sqlite_request,
};
use rivet_envoy_client::utils::{BufferMap, RemoteSqliteIndeterminateResultError};
use rivet_envoy_protocol as protocol;
use tokio::sync::mpsc;
use vbare::OwnedVersionedData;

struct IdleCallbacks;

impl EnvoyCallbacks for IdleCallbacks {
	fn on_actor_start(
		&self,
		_handle: EnvoyHandle,
		_actor_id: String,
		_generation: u32,
		_config: protocol::ActorConfig,
		_preloaded_kv: Option<protocol::PreloadedKv>,
	) -> BoxFuture<anyhow::Result<()>> {
		Box::pin(async { Ok(()) })
	}

	fn on_shutdown(&self) {}

	fn fetch(
		&self,
		_handle: EnvoyHandle,
		_actor_id: String,
		_gateway_id: protocol::GatewayId,
		_request_id: protocol::RequestId,
		_request: HttpRequest,
	) -> BoxFuture<anyhow::Result<HttpResponse>> {
		Box::pin(async { anyhow::bail!("fetch should not be called in command tests") })
	}

	fn websocket(
		&self,
		_handle: EnvoyHandle,
		_actor_id: String,
		_gateway_id: protocol::GatewayId,
		_request_id: protocol::RequestId,
		_request: HttpRequest,
		_path: String,
		_headers: HashMap<String, String>,
		_is_hibernatable: bool,
		_is_restoring_hibernatable: bool,
		_sender: WebSocketSender,
	) -> BoxFuture<anyhow::Result<WebSocketHandler>> {
		Box::pin(async { anyhow::bail!("websocket should not be called in command tests") })
	}

	fn can_hibernate(
		&self,
		_actor_id: &str,
		_gateway_id: &protocol::GatewayId,
		_request_id: &protocol::RequestId,
		_request: &HttpRequest,
	) -> BoxFuture<anyhow::Result<bool>> {
		Box::pin(async { Ok(false) })
	}
}

fn new_envoy_context() -> EnvoyContext {
	let (envoy_tx, _envoy_rx) = mpsc::unbounded_channel();
	let shared = Arc::new(SharedContext {
		config: EnvoyConfig {
			version: 1,
			endpoint: "http://127.0.0.1:1".to_string(),
			fallback_endpoints: Vec::new(),
			token: None,
			namespace: "test".to_string(),
			pool_name: "test".to_string(),
			prepopulate_actor_names: HashMap::new(),
			metadata: None,
			not_global: true,
			debug_latency_ms: None,
			lease_probe_actor_id: rivet_envoy_client::lease::NO_ACTOR.to_owned(),
			max_queued_requests_per_actor:
				rivet_envoy_client::queued_requests::DEFAULT_MAX_QUEUED_REQUESTS_PER_ACTOR,
			callbacks: Arc::new(IdleCallbacks),
		},
		envoy_key: "test-envoy".to_string().into(),
		envoy_tx,
		actors: Arc::new(std::sync::Mutex::new(HashMap::new())),
		actors_notify: Arc::new(tokio::sync::Notify::new()),
		live_tunnel_requests: Arc::new(std::sync::Mutex::new(HashMap::new())),
		pending_hibernation_restores: Arc::new(std::sync::Mutex::new(HashMap::new())),
		ws_tx: Arc::new(tokio::sync::Mutex::new(
			None::<mpsc::UnboundedSender<WsTxMessage>>,
		)),
		http_ws_tx: Arc::new(tokio::sync::Mutex::new(None)),
		connection_session: std::sync::atomic::AtomicU64::new(0),
		next_connection_session: std::sync::atomic::AtomicU64::new(0),
		connection_session_tx: tokio::sync::watch::channel(0).0,
		protocol_metadata: Arc::new(tokio::sync::Mutex::new(None)),
		shutting_down: std::sync::atomic::AtomicBool::new(false),
		fatal: std::sync::Mutex::new(None),
		last_ping_ts: std::sync::atomic::AtomicI64::new(0),
		lease_proof_ms: std::sync::atomic::AtomicI64::new(0),
		connect_started_ms: std::sync::atomic::AtomicI64::new(0),
		last_refused_ms: std::sync::atomic::AtomicI64::new(0),
		response_replay: Default::default(),
		stopped_tx: tokio::sync::watch::channel(true).0,
	});
	EnvoyContext {
		shared,
		shutting_down: false,
		actors: HashMap::new(),
		pending_events: HashMap::new(),
		buffered_actor_messages: HashMap::new(),
		kv_requests: HashMap::new(),
		next_kv_request_id: 0,
		sqlite_requests: HashMap::new(),
		next_sqlite_request_id: 0,
		remote_sqlite_requests: HashMap::new(),
		next_remote_sqlite_request_id: 0,
		request_to_actor: BufferMap::new(),
		http_request_routes: BufferMap::new(),
		http_message_indices: BufferMap::new(),
		http_request_cancellations: HashMap::new(),
		buffered_messages: Vec::new(),
		processed_command_idx: HashMap::new(),
		stopped_here: Default::default(),
		farewell: None,
		farewell_task: None,
		lease: Default::default(),
		withdrawn: false,
		parked_requests: Vec::new(),
		completed_http_requests: Default::default(),
	}
}

fn stop_command(actor_id: &str, generation: u32, index: i64) -> protocol::CommandWrapper {
	protocol::CommandWrapper {
		checkpoint: protocol::ActorCheckpoint {
			actor_id: actor_id.to_string(),
			generation,
			index,
		},
		inner: protocol::Command::CommandStopActor(protocol::CommandStopActor {
			reason: protocol::StopActorReason::StopIntent,
		}),
	}
}

fn start_command(actor_id: &str, generation: u32, index: i64) -> protocol::CommandWrapper {
	protocol::CommandWrapper {
		checkpoint: protocol::ActorCheckpoint {
			actor_id: actor_id.to_string(),
			generation,
			index,
		},
		inner: protocol::Command::CommandStartActor(protocol::CommandStartActor {
			config: protocol::ActorConfig {
				name: actor_id.to_string(),
				key: None,
				create_ts: 0,
				input: None,
			},
			hibernating_requests: Vec::new(),
			preloaded_kv: None,
		}),
	}
}

fn execute_request() -> protocol::SqliteExecuteRequest {
	protocol::SqliteExecuteRequest {
		namespace_id: "test".to_string(),
		actor_id: "actor-replay".to_string(),
		generation: 1,
		sql: "insert into test values (?)".to_string(),
		params: Some(vec![protocol::SqliteBindParam::SqliteValueText(
			protocol::SqliteValueText {
				value: "value".to_string(),
			},
		)]),
	}
}

#[tokio::test]
async fn replayed_stop_command_is_dropped() {
	let mut ctx = new_envoy_context();
	let (actor_tx, mut actor_rx) = mpsc::unbounded_channel::<ToActor>();
	ctx.insert_actor(
		"actor-replay".to_string(),
		1,
		actor_tx,
		Arc::new(AsyncCounter::new()),
		"actor-replay".to_string(),
		-1,
	);

	handle_commands(&mut ctx, vec![stop_command("actor-replay", 1, 5)]).await;
	assert!(matches!(
		actor_rx.try_recv(),
		Ok(ToActor::Stop { command_idx: 5, .. })
	));

	// Same index replayed: should be skipped.
	handle_commands(&mut ctx, vec![stop_command("actor-replay", 1, 5)]).await;
	assert!(actor_rx.try_recv().is_err());

	// Lower index from a stale replay: should also be skipped.
	handle_commands(&mut ctx, vec![stop_command("actor-replay", 1, 3)]).await;
	assert!(actor_rx.try_recv().is_err());

	// Higher index is processed.
	handle_commands(&mut ctx, vec![stop_command("actor-replay", 1, 7)]).await;
	assert!(matches!(
		actor_rx.try_recv(),
		Ok(ToActor::Stop { command_idx: 7, .. })
	));
}

#[tokio::test]
async fn dedup_is_per_actor_and_generation() {
	let mut ctx = new_envoy_context();
	let (tx_a1, mut rx_a1) = mpsc::unbounded_channel::<ToActor>();
	let (tx_a2, mut rx_a2) = mpsc::unbounded_channel::<ToActor>();
	let (tx_b1, mut rx_b1) = mpsc::unbounded_channel::<ToActor>();
	ctx.insert_actor(
		"actor-a".to_string(),
		1,
		tx_a1,
		Arc::new(AsyncCounter::new()),
		"actor-a".to_string(),
		-1,
	);
	ctx.insert_actor(
		"actor-a".to_string(),
		2,
		tx_a2,
		Arc::new(AsyncCounter::new()),
		"actor-a".to_string(),
		-1,
	);
	ctx.insert_actor(
		"actor-b".to_string(),
		1,
		tx_b1,
		Arc::new(AsyncCounter::new()),
		"actor-b".to_string(),
		-1,
	);

	handle_commands(&mut ctx, vec![stop_command("actor-a", 1, 5)]).await;
	assert!(rx_a1.try_recv().is_ok());

	// Same actor_id, different generation: not deduped.
	handle_commands(&mut ctx, vec![stop_command("actor-a", 2, 5)]).await;
	assert!(rx_a2.try_recv().is_ok());

	// Different actor_id, same index: not deduped.
	handle_commands(&mut ctx, vec![stop_command("actor-b", 1, 5)]).await;
	assert!(rx_b1.try_recv().is_ok());
}

#[tokio::test]
async fn replayed_command_is_dropped_after_remote_sql_lost_response() {
	let mut ctx = new_envoy_context();
	let (actor_tx, mut actor_rx) = mpsc::unbounded_channel::<ToActor>();
	ctx.insert_actor(
		"actor-replay".to_string(),
		1,
		actor_tx,
		Arc::new(AsyncCounter::new()),
		"actor-replay".to_string(),
		-1,
	);

	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);
	let (sql_tx, sql_rx) = tokio::sync::oneshot::channel();
	handle_remote_sqlite_request(
		&mut ctx,
		RemoteSqliteRequest::Execute(execute_request()),
		None,
		sql_tx,
	)
	.await;
	assert!(matches!(ws_rx.recv().await, Some(WsTxMessage::Send(_))));

	handle_commands(&mut ctx, vec![stop_command("actor-replay", 1, 5)]).await;
	assert!(matches!(
		actor_rx.try_recv(),
		Ok(ToActor::Stop { command_idx: 5, .. })
	));

	fail_sent_remote_sqlite_requests_with_indeterminate_result(&mut ctx);
	let err = sql_rx
		.await
		.expect("response sender should complete")
		.expect_err("sent remote SQL should become indeterminate");
	assert!(
		err.downcast_ref::<RemoteSqliteIndeterminateResultError>()
			.is_some()
	);

	handle_commands(&mut ctx, vec![stop_command("actor-replay", 1, 5)]).await;
	assert!(actor_rx.try_recv().is_err());
}

fn decode_ack_checkpoints(msg: WsTxMessage) -> Vec<protocol::ActorCheckpoint> {
	let WsTxMessage::Send(bytes) = msg else {
		panic!("expected a websocket send, got a close");
	};
	let message = protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
		.expect("failed to decode ToRivet message");
	match message {
		protocol::ToRivet::ToRivetAckCommands(val) => val.last_command_checkpoints,
		_ => panic!("expected ToRivetAckCommands"),
	}
}

#[tokio::test]
async fn start_command_is_acked_immediately() {
	let mut ctx = new_envoy_context();
	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);

	handle_commands(&mut ctx, vec![start_command("actor-a", 1, 1)]).await;

	// A start left unacked stays in the engine's command subspace, which is
	// re-streamed on every reconnect. Waiting for the periodic tick leaves a
	// window of `ACK_COMMANDS_INTERVAL_MS` in which a reconnect replays the
	// start and replaces the live actor.
	let checkpoints = decode_ack_checkpoints(
		ws_rx
			.try_recv()
			.expect("start should trigger an immediate ack"),
	);
	assert_eq!(checkpoints.len(), 1);
	assert_eq!(checkpoints[0].actor_id, "actor-a");
	assert_eq!(checkpoints[0].generation, 1);
	assert_eq!(checkpoints[0].index, 1);

	// Dedup is retained so a replay can still be suppressed in-process until
	// the tick clears it.
	assert_eq!(
		ctx.processed_command_idx.get(&("actor-a".to_string(), 1)),
		Some(&1)
	);
}

#[tokio::test]
async fn stop_command_is_acked_immediately() {
	let mut ctx = new_envoy_context();
	let (actor_tx, mut actor_rx) = mpsc::unbounded_channel::<ToActor>();
	ctx.insert_actor(
		"actor-a".to_string(),
		1,
		actor_tx,
		Arc::new(AsyncCounter::new()),
		"actor-a".to_string(),
		-1,
	);

	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);

	handle_commands(&mut ctx, vec![stop_command("actor-a", 1, 5)]).await;
	assert!(matches!(
		actor_rx.try_recv(),
		Ok(ToActor::Stop { command_idx: 5, .. })
	));

	// The stop must be acked right away rather than waiting for the periodic
	// tick, otherwise the actor entry is gone before the next ack.
	let checkpoints = decode_ack_checkpoints(
		ws_rx
			.try_recv()
			.expect("stop should trigger an immediate ack"),
	);
	assert_eq!(checkpoints.len(), 1);
	assert_eq!(checkpoints[0].actor_id, "actor-a");
	assert_eq!(checkpoints[0].generation, 1);
	assert_eq!(checkpoints[0].index, 5);

	// A successful immediate ack must still retain the dedup entry. Only the
	// periodic tick clears it, so a replay can re-ack if the server never
	// committed this ack.
	assert_eq!(
		ctx.processed_command_idx.get(&("actor-a".to_string(), 1)),
		Some(&5)
	);
}

#[tokio::test]
async fn stop_ack_retried_via_replay_after_failed_send() {
	let mut ctx = new_envoy_context();
	let (actor_tx, mut actor_rx) = mpsc::unbounded_channel::<ToActor>();
	ctx.insert_actor(
		"actor-a".to_string(),
		1,
		actor_tx,
		Arc::new(AsyncCounter::new()),
		"actor-a".to_string(),
		-1,
	);

	// No websocket is connected, so the immediate ack send fails. The processed
	// index must be retained so a later replay can re-ack it.
	handle_commands(&mut ctx, vec![stop_command("actor-a", 1, 5)]).await;
	assert!(matches!(
		actor_rx.try_recv(),
		Ok(ToActor::Stop { command_idx: 5, .. })
	));
	assert_eq!(
		ctx.processed_command_idx.get(&("actor-a".to_string(), 1)),
		Some(&5)
	);

	// Remove the actor, as happens once it emits its Stopped event. The re-ack
	// must still work with no live actor, sourced from the dedup map.
	ctx.remove_actor("actor-a", 1);

	// Reconnect and replay the same stop. Dedup skips reprocessing, but the batch
	// still carries a stop, so the retained checkpoint is re-acked.
	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);
	handle_commands(&mut ctx, vec![stop_command("actor-a", 1, 5)]).await;
	assert!(
		actor_rx.try_recv().is_err(),
		"replayed stop must not be reprocessed"
	);

	let checkpoints =
		decode_ack_checkpoints(ws_rx.try_recv().expect("replayed stop should re-ack"));
	assert_eq!(checkpoints.len(), 1);
	assert_eq!(checkpoints[0].index, 5);
}

/// Every message the envoy queued for the engine so far, decoded.
fn sent_messages(ws_rx: &mut mpsc::UnboundedReceiver<WsTxMessage>) -> Vec<protocol::ToRivet> {
	let mut sent = Vec::new();
	while let Ok(msg) = ws_rx.try_recv() {
		let WsTxMessage::Send(bytes) = msg else {
			panic!("expected a websocket send, got a close");
		};
		sent.push(
			protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
				.expect("failed to decode ToRivet message"),
		);
	}
	sent
}

fn acked(sent: &[protocol::ToRivet]) -> Vec<(String, u32, i64)> {
	sent.iter()
		.filter_map(|msg| match msg {
			protocol::ToRivet::ToRivetAckCommands(val) => Some(&val.last_command_checkpoints),
			_ => None,
		})
		.flatten()
		.map(|cp| (cp.actor_id.clone(), cp.generation, cp.index))
		.collect()
}

/// The `Stopped` events among `sent`, as (actor, generation, index, code).
fn stopped_events(sent: &[protocol::ToRivet]) -> Vec<(String, u32, i64)> {
	sent.iter()
		.filter_map(|msg| match msg {
			protocol::ToRivet::ToRivetEvents(events) => Some(events),
			_ => None,
		})
		.flatten()
		.filter(|event| {
			matches!(
				&event.inner,
				protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
					state: protocol::ActorState::ActorStateStopped(protocol::ActorStateStopped {
						code: protocol::StopCode::Ok,
						..
					}),
				})
			)
		})
		.map(|event| {
			(
				event.checkpoint.actor_id.clone(),
				event.checkpoint.generation,
				event.checkpoint.index,
			)
		})
		.collect()
}

#[tokio::test]
async fn unknown_actor_stop_is_acked_and_answered_stopped() {
	let mut ctx = new_envoy_context();
	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);

	// No actor inserted: models a stop replayed to a process that never started
	// it (e.g. after restart), or a stop that overtook its start. It must still
	// be acked to stop the replay, and answered so the engine ends the stop
	// now rather than after its threshold (rivet-envoy-client 3.0).
	handle_commands(&mut ctx, vec![stop_command("actor-gone", 3, 9)]).await;

	let sent = sent_messages(&mut ws_rx);
	assert_eq!(acked(&sent), vec![("actor-gone".to_string(), 3, 9)]);
	assert_eq!(
		stopped_events(&sent),
		vec![("actor-gone".to_string(), 3, 0)]
	);
}

#[tokio::test]
async fn a_start_overtaken_by_its_stop_is_dropped_and_acked() {
	let mut ctx = new_envoy_context();
	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);

	handle_commands(&mut ctx, vec![stop_command("actor-a", 3, 9)]).await;
	sent_messages(&mut ws_rx);

	// The tick acked and cleared the dedup entry; the late start still must
	// not run generation 3, and is acked so the engine forgets it.
	ctx.processed_command_idx.clear();
	handle_commands(&mut ctx, vec![start_command("actor-a", 3, 1)]).await;
	assert!(
		ctx.get_actor("actor-a", None).is_none(),
		"a stopped generation ran"
	);
	let sent = sent_messages(&mut ws_rx);
	assert_eq!(acked(&sent), vec![("actor-a".to_string(), 3, 1)]);
	assert!(stopped_events(&sent).is_empty());

	// An older generation is below the floor too; a newer one runs.
	handle_commands(&mut ctx, vec![start_command("actor-a", 2, 1)]).await;
	assert!(
		ctx.get_actor("actor-a", None).is_none(),
		"an older generation ran"
	);
	handle_commands(&mut ctx, vec![start_command("actor-a", 4, 1)]).await;
	assert!(
		ctx.get_actor("actor-a", Some(4)).is_some(),
		"the next generation did not run"
	);
}

#[tokio::test]
async fn a_late_start_for_a_generation_that_stopped_here_is_dropped() {
	let mut ctx = new_envoy_context();
	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);

	handle_commands(&mut ctx, vec![start_command("actor-a", 2, 1)]).await;
	assert!(ctx.get_actor("actor-a", Some(2)).is_some());
	// The generation ends here (its task reported Stopped and left).
	ctx.remove_actor("actor-a", 2);
	ctx.processed_command_idx.clear();
	sent_messages(&mut ws_rx);

	// A start replayed after the dedup entry was cleared (the race named in
	// `send_command_ack`) would resurrect it.
	handle_commands(&mut ctx, vec![start_command("actor-a", 2, 1)]).await;
	assert!(
		ctx.get_actor("actor-a", None).is_none(),
		"a stopped generation came back"
	);

	// A stop for it is acked, but its own task already reported `Stopped`.
	handle_commands(&mut ctx, vec![stop_command("actor-a", 2, 5)]).await;
	let sent = sent_messages(&mut ws_rx);
	assert!(
		stopped_events(&sent).is_empty(),
		"a second Stopped was sent"
	);
	assert!(acked(&sent).contains(&("actor-a".to_string(), 2, 5)));
}

#[tokio::test]
async fn live_actor_is_reacked_on_each_tick() {
	let mut ctx = new_envoy_context();
	let (actor_tx, _actor_rx) = mpsc::unbounded_channel::<ToActor>();
	// A live actor whose latest command index is 3.
	ctx.insert_actor(
		"actor-a".to_string(),
		1,
		actor_tx,
		Arc::new(AsyncCounter::new()),
		"actor-a".to_string(),
		3,
	);

	let (ws_tx, mut ws_rx) = mpsc::unbounded_channel();
	*ctx.shared.ws_tx.lock().await = Some(ws_tx);

	// The first tick acks index 3 and clears the dedup map. The second tick must
	// still re-ack from the live-actor scan, recovering an ack the server may
	// never have committed.
	send_command_ack(&mut ctx).await;
	let first = decode_ack_checkpoints(ws_rx.try_recv().expect("first tick should ack"));
	assert_eq!(first.len(), 1);
	assert_eq!(first[0].index, 3);

	send_command_ack(&mut ctx).await;
	let second = decode_ack_checkpoints(ws_rx.try_recv().expect("second tick should re-ack"));
	assert_eq!(second.len(), 1);
	assert_eq!(second[0].actor_id, "actor-a");
	assert_eq!(second[0].index, 3);
}

#[tokio::test]
async fn lost_stop_command_cancels_the_generation_signal_before_delivery() {
	let mut ctx = new_envoy_context();
	let (actor_tx, mut actor_rx) = mpsc::unbounded_channel::<ToActor>();
	let old_lost = tokio_util::sync::CancellationToken::new();
	let new_lost = tokio_util::sync::CancellationToken::new();
	ctx.insert_actor_with_lost_signal(
		"actor-lost".to_string(),
		1,
		actor_tx.clone(),
		old_lost.clone(),
		Arc::new(AsyncCounter::new()),
		"actor-lost".to_string(),
		-1,
	);
	ctx.insert_actor_with_lost_signal(
		"actor-lost".to_string(),
		2,
		actor_tx,
		new_lost.clone(),
		Arc::new(AsyncCounter::new()),
		"actor-lost".to_string(),
		-1,
	);

	let mut lost_stop = stop_command("actor-lost", 1, 5);
	lost_stop.inner = protocol::Command::CommandStopActor(protocol::CommandStopActor {
		reason: protocol::StopActorReason::Lost,
	});
	handle_commands(&mut ctx, vec![lost_stop]).await;

	assert!(
		old_lost.is_cancelled(),
		"a lost stop must signal its generation synchronously"
	);
	assert!(
		!new_lost.is_cancelled(),
		"a lost stop must not signal other generations of the same actor"
	);
	assert!(matches!(
		actor_rx.try_recv(),
		Ok(ToActor::Stop {
			reason: protocol::StopActorReason::Lost,
			..
		})
	));
}

/// A KV write queued before its generation was declared lost must never be transmitted, even
/// when the queue is flushed later.
#[tokio::test]
async fn queued_kv_write_is_dropped_once_its_generation_is_lost() {
	let mut ctx = new_envoy_context();
	let lost = tokio_util::sync::CancellationToken::new();
	let (response_tx, response_rx) = tokio::sync::oneshot::channel();
	// No connection is open, so the request stays queued.
	rivet_envoy_client::kv::handle_kv_request(
		&mut ctx,
		"actor-lost-kv".to_string(),
		protocol::KvRequestData::KvPutRequest(protocol::KvPutRequest {
			keys: vec![b"key".to_vec()],
			values: vec![b"value".to_vec()],
		}),
		Some(lost.clone()),
		response_tx,
	)
	.await;
	let request_id = *ctx
		.kv_requests
		.keys()
		.next()
		.expect("request should be queued");

	lost.cancel();
	rivet_envoy_client::kv::send_single_kv_request(&mut ctx, request_id).await;

	assert!(
		ctx.kv_requests.is_empty(),
		"the lost request must be dropped"
	);
	let error = response_rx
		.await
		.expect("the caller must get a response")
		.expect_err("the lost request must fail");
	assert!(format!("{error:#}").contains("declared lost"));
}

/// The engine declares actors lost `envoy_lost_threshold` after its last ping refresh. The envoy
/// gives up a safety margin earlier, measured (rivetkit-native patch, `crate::lease`) from the
/// newest pong the engine is proven to have read, so its actors stop before the engine can start
/// them elsewhere.
#[tokio::test]
async fn engine_ping_silence_expires_before_the_engine_lost_threshold() {
	let ctx = new_envoy_context();
	assert_eq!(
		engine_ping_silence_deadline_ms(&ctx),
		None,
		"no deadline before the first engine ping"
	);

	*ctx.shared.protocol_metadata.lock().await = Some(protocol::ProtocolMetadata {
		envoy_lost_threshold: 15_000,
		actor_stop_threshold: 1_800_000,
		max_response_payload_size: 20_971_520,
	});
	let last_ping_ts = 1_700_000_000_000;
	ctx.shared
		.lease_proof_ms
		.store(last_ping_ts, std::sync::atomic::Ordering::Release);

	let deadline = engine_ping_silence_deadline_ms(&ctx).expect("deadline after a ping");
	assert!(
		deadline < last_ping_ts + 15_000,
		"the envoy must give up before the engine's threshold"
	);
	assert!(
		deadline > last_ping_ts + 3_000,
		"the envoy must tolerate several missed ping intervals"
	);
	assert!(!engine_ping_silence_expired(&ctx, deadline - 1));
	assert!(engine_ping_silence_expired(&ctx, deadline));
}

#[tokio::test]
async fn declaring_actors_lost_signals_every_generation_before_delivery() {
	let mut ctx = new_envoy_context();
	let (actor_tx, mut actor_rx) = mpsc::unbounded_channel::<ToActor>();
	let first = tokio_util::sync::CancellationToken::new();
	let second = tokio_util::sync::CancellationToken::new();
	for (actor_id, lost) in [("actor-a", first.clone()), ("actor-b", second.clone())] {
		ctx.insert_actor_with_lost_signal(
			actor_id.to_string(),
			1,
			actor_tx.clone(),
			lost,
			Arc::new(AsyncCounter::new()),
			actor_id.to_string(),
			-1,
		);
	}

	declare_actors_lost(&mut ctx, "test");

	assert!(first.is_cancelled() && second.is_cancelled());
	assert!(ctx.actors.is_empty());
	assert!(matches!(actor_rx.try_recv(), Ok(ToActor::Lost)));
	assert!(matches!(actor_rx.try_recv(), Ok(ToActor::Lost)));
}
