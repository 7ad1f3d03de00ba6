use rivet_envoy_protocol as protocol;

use crate::connection::ws_send;
use crate::envoy::EnvoyContext;
use crate::stringify::stringify_event_wrapper;

pub(crate) const TERMINAL_EVENT_RETENTION: std::time::Duration =
	std::time::Duration::from_secs(60 * 60);

pub async fn handle_send_events(ctx: &mut EnvoyContext, events: Vec<protocol::EventWrapper>) {
	tracing::info!(event_count = events.len(), "sending events");
	for event in &events {
		tracing::info!(event = %stringify_event_wrapper(event), "sending event");
	}

	for event in &events {
		let pending = ctx
			.pending_events
			.entry((
				event.checkpoint.actor_id.clone(),
				event.checkpoint.generation,
			))
			.or_default();
		pending.events.push(event.clone());
		if matches!(
			&event.inner,
			protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
				state: protocol::ActorState::ActorStateStopped(_),
			})
		) {
			pending
				.retired_at
				.get_or_insert_with(crate::time::Instant::now);
		}
		let mut remove_after_stop = false;
		let entry =
			ctx.get_actor_entry_mut(&event.checkpoint.actor_id, event.checkpoint.generation);
		if let Some(entry) = entry {
			// rivetkit-native patch: for the fence's report (`envoy::fence`).
			entry.next_event_index = entry.next_event_index.max(event.checkpoint.index + 1);
			if let protocol::Event::EventActorStateUpdate(ref state_update) = event.inner {
				if matches!(
					state_update.state,
					protocol::ActorState::ActorStateStopped(_)
				) {
					// If the actor is being stopped by rivet, we don't need the entry anymore
					if entry.received_stop {
						remove_after_stop = true;
					}
				}
			}
		}
		if remove_after_stop {
			ctx.remove_actor(&event.checkpoint.actor_id, event.checkpoint.generation);
		}
	}

	// Send if connected
	ws_send(&ctx.shared, protocol::ToRivet::ToRivetEvents(events)).await;
}

pub fn handle_ack_events(ctx: &mut EnvoyContext, ack: protocol::ToEnvoyAckEvents) {
	for checkpoint in &ack.last_event_checkpoints {
		let key = (checkpoint.actor_id.clone(), checkpoint.generation);
		if let Some(pending) = ctx.pending_events.get_mut(&key) {
			pending
				.events
				.retain(|event| event.checkpoint.index > checkpoint.index);
			if pending.events.is_empty() {
				ctx.pending_events.remove(&key);
			}
		}
	}
}

pub fn cleanup_expired_terminal_events(ctx: &mut EnvoyContext) {
	cleanup_expired_terminal_events_at(ctx, crate::time::Instant::now());
}

fn cleanup_expired_terminal_events_at(ctx: &mut EnvoyContext, now: crate::time::Instant) {
	for ((actor_id, generation), pending) in ctx.pending_events.iter_mut() {
		if pending.retired_at.is_none()
			&& !ctx
				.actors
				.get(actor_id)
				.is_some_and(|generations| generations.contains_key(generation))
		{
			pending.retired_at = Some(now);
		}
	}

	let before = ctx.pending_events.len();
	ctx.pending_events.retain(|_, pending| {
		pending
			.retired_at
			.is_none_or(|at| now.saturating_duration_since(at) < TERMINAL_EVENT_RETENTION)
	});
	let expired = before - ctx.pending_events.len();
	if expired > 0 {
		tracing::warn!(expired, "discarded expired terminal actor events");
	}
}

pub async fn resend_unacknowledged_events(ctx: &mut EnvoyContext) {
	cleanup_expired_terminal_events(ctx);
	let mut events: Vec<protocol::EventWrapper> = Vec::new();

	for pending in ctx.pending_events.values() {
		events.extend(pending.events.iter().cloned());
	}

	if events.is_empty() {
		return;
	}

	tracing::info!(count = events.len(), "resending unacknowledged events");
	for event in &events {
		tracing::info!(event = %stringify_event_wrapper(event), "resending event");
	}

	ws_send(&ctx.shared, protocol::ToRivet::ToRivetEvents(events)).await;
}

#[cfg(test)]
pub(crate) mod tests {
	use std::collections::HashMap;
	use std::sync::Arc;

	use crate::async_counter::AsyncCounter;
	use rivet_envoy_protocol as protocol;
	use tokio::sync::mpsc;
	use vbare::OwnedVersionedData;

	use super::{
		TERMINAL_EVENT_RETENTION, cleanup_expired_terminal_events_at, handle_ack_events,
		handle_send_events, resend_unacknowledged_events,
	};
	use crate::actor::ToActor;
	use crate::config::{
		BoxFuture, EnvoyCallbacks, EnvoyConfig, HttpRequest, HttpResponse, WebSocketHandler,
		WebSocketSender,
	};
	use crate::connection::install_connection;
	use crate::context::{SharedContext, WsTxMessage};
	use crate::envoy::EnvoyContext;
	use crate::handle::EnvoyHandle;

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
			Box::pin(async { anyhow::bail!("fetch should not be called in event tests") })
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
			Box::pin(async { anyhow::bail!("websocket should not be called in event tests") })
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

	pub(crate) fn new_envoy_context() -> (EnvoyContext, EnvoyHandle) {
		new_envoy_context_at("http://127.0.0.1:1")
	}

	/// rivetkit-native patch: a context whose engine endpoint is `endpoint`.
	pub(crate) fn new_envoy_context_at(endpoint: &str) -> (EnvoyContext, EnvoyHandle) {
		let (envoy_tx, _envoy_rx) = mpsc::unbounded_channel();
		let shared = Arc::new(SharedContext {
			config: EnvoyConfig {
				version: 1,
				endpoint: endpoint.to_string(),
				fallback_endpoints: Vec::new(),
				token: None,
				namespace: "test".to_string(),
				pool_name: "test".to_string(),
				prepopulate_actor_names: HashMap::new(),
				metadata: None,
				not_global: true,
				debug_latency_ms: None,
				lease_probe_actor_id: crate::lease::NO_ACTOR.to_owned(),
				max_queued_requests_per_actor:
					crate::queued_requests::DEFAULT_MAX_QUEUED_REQUESTS_PER_ACTOR,
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
		let handle = EnvoyHandle {
			shared: shared.clone(),
			started_rx: tokio::sync::watch::channel(()).1,
		};
		(
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
				request_to_actor: crate::utils::BufferMap::new(),
				http_request_routes: crate::utils::BufferMap::new(),
				http_message_indices: crate::utils::BufferMap::new(),
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
			},
			handle,
		)
	}

	fn insert_actor(
		ctx: &mut EnvoyContext,
		actor_id: &str,
		generation: u32,
		counter: Arc<AsyncCounter>,
		received_stop: bool,
	) {
		let handle = mpsc::unbounded_channel::<ToActor>().0;
		ctx.insert_actor(
			actor_id.to_string(),
			generation,
			handle.clone(),
			counter.clone(),
			format!("{actor_id}-{generation}"),
			0,
		);
		ctx.actors
			.get_mut(actor_id)
			.and_then(|generations| generations.get_mut(&generation))
			.expect("actor should be inserted")
			.received_stop = received_stop;
	}

	fn stopped_event(actor_id: &str, generation: u32) -> protocol::EventWrapper {
		protocol::EventWrapper {
			checkpoint: protocol::ActorCheckpoint {
				actor_id: actor_id.to_string(),
				generation,
				index: 0,
			},
			inner: protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
				state: protocol::ActorState::ActorStateStopped(protocol::ActorStateStopped {
					code: protocol::StopCode::Ok,
					message: None,
				}),
			}),
		}
	}

	fn running_event(actor_id: &str, generation: u32) -> protocol::EventWrapper {
		protocol::EventWrapper {
			checkpoint: protocol::ActorCheckpoint {
				actor_id: actor_id.to_string(),
				generation,
				index: 0,
			},
			inner: protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
				state: protocol::ActorState::ActorStateRunning,
			}),
		}
	}

	#[tokio::test]
	async fn stop_event_removes_actor_from_primary_and_shared_registries() {
		let (mut ctx, handle) = new_envoy_context();
		let counter = Arc::new(AsyncCounter::new());
		insert_actor(&mut ctx, "actor-stop", 1, counter.clone(), true);

		assert!(handle.http_request_counter("actor-stop", Some(1)).is_some());

		handle_send_events(&mut ctx, vec![stopped_event("actor-stop", 1)]).await;

		assert!(ctx.actors.get("actor-stop").is_none());
		assert!(
			ctx.shared
				.actors
				.lock()
				.expect("shared actor registry poisoned")
				.get("actor-stop")
				.is_none()
		);
		assert!(handle.http_request_counter("actor-stop", Some(1)).is_none());
	}

	#[tokio::test]
	async fn stop_event_only_removes_the_stopped_generation() {
		let (mut ctx, handle) = new_envoy_context();
		let stopped_counter = Arc::new(AsyncCounter::new());
		let live_counter = Arc::new(AsyncCounter::new());
		insert_actor(&mut ctx, "actor-shared", 1, stopped_counter, true);
		insert_actor(&mut ctx, "actor-shared", 2, live_counter.clone(), false);

		handle_send_events(&mut ctx, vec![stopped_event("actor-shared", 1)]).await;

		assert!(
			handle
				.http_request_counter("actor-shared", Some(1))
				.is_none()
		);
		let remaining = handle
			.http_request_counter("actor-shared", Some(2))
			.expect("other generation should remain visible");
		assert!(Arc::ptr_eq(&remaining, &live_counter));
		assert!(
			ctx.actors
				.get("actor-shared")
				.expect("actor id should remain")
				.contains_key(&2)
		);
		assert!(
			!ctx.actors
				.get("actor-shared")
				.expect("actor id should remain")
				.contains_key(&1)
		);
	}

	#[tokio::test]
	async fn stopped_event_survives_actor_removal_and_replays_until_acked() {
		let (mut ctx, _handle) = new_envoy_context();
		insert_actor(
			&mut ctx,
			"actor-stop",
			1,
			Arc::new(AsyncCounter::new()),
			false,
		);
		ctx.remove_actor("actor-stop", 1);
		let event = stopped_event("actor-stop", 1);
		let other_event = stopped_event("actor-other", 2);

		handle_send_events(&mut ctx, vec![event.clone(), other_event.clone()]).await;
		assert!(ctx.actors.is_empty());
		assert_eq!(ctx.pending_events.len(), 2);

		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		resend_unacknowledged_events(&mut ctx).await;
		let WsTxMessage::Send(bytes) = rx.recv().await.expect("replayed event") else {
			panic!("expected event frame");
		};
		let replayed =
			protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
				.expect("decode replayed event");
		assert!(
			matches!(replayed, protocol::ToRivet::ToRivetEvents(events) if events.len() == 2 && events.contains(&event) && events.contains(&other_event))
		);

		handle_ack_events(
			&mut ctx,
			protocol::ToEnvoyAckEvents {
				last_event_checkpoints: vec![event.checkpoint],
			},
		);
		assert_eq!(ctx.pending_events.len(), 1);

		crate::connection::remove_connection(&ctx.shared).await;
		let (next_tx, mut next_rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, next_tx).await;
		resend_unacknowledged_events(&mut ctx).await;
		let WsTxMessage::Send(bytes) = next_rx.recv().await.expect("second replay") else {
			panic!("expected event frame");
		};
		let replayed =
			protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
				.expect("decode second replay");
		assert!(
			matches!(replayed, protocol::ToRivet::ToRivetEvents(events) if events == vec![other_event.clone()])
		);
		handle_ack_events(
			&mut ctx,
			protocol::ToEnvoyAckEvents {
				last_event_checkpoints: vec![other_event.checkpoint],
			},
		);
		assert!(ctx.pending_events.is_empty());
		resend_unacknowledged_events(&mut ctx).await;
		assert!(next_rx.try_recv().is_err());
	}

	#[tokio::test]
	async fn expired_terminal_events_are_removed_without_ack() {
		let (mut ctx, _handle) = new_envoy_context();
		insert_actor(&mut ctx, "running", 1, Arc::new(AsyncCounter::new()), false);
		handle_send_events(&mut ctx, vec![stopped_event("stopped", 1)]).await;
		handle_send_events(&mut ctx, vec![running_event("running", 1)]).await;
		cleanup_expired_terminal_events_at(
			&mut ctx,
			crate::time::Instant::now() + TERMINAL_EVENT_RETENTION,
		);

		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		resend_unacknowledged_events(&mut ctx).await;
		assert!(!ctx.pending_events.contains_key(&("stopped".to_string(), 1)));
		assert!(ctx.pending_events.contains_key(&("running".to_string(), 1)));
		let WsTxMessage::Send(bytes) = rx.recv().await.expect("live event replay") else {
			panic!("expected event frame");
		};
		let replayed =
			protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
				.expect("decode live replay");
		assert!(
			matches!(replayed, protocol::ToRivet::ToRivetEvents(events) if events.len() == 1 && events[0].checkpoint.actor_id == "running")
		);
	}

	#[tokio::test]
	async fn events_of_actor_exiting_without_stop_expire() {
		let (mut ctx, _handle) = new_envoy_context();
		insert_actor(&mut ctx, "crashed", 1, Arc::new(AsyncCounter::new()), false);
		handle_send_events(&mut ctx, vec![running_event("crashed", 1)]).await;
		let key = ("crashed".to_string(), 1);

		let now = crate::time::Instant::now();
		cleanup_expired_terminal_events_at(&mut ctx, now + TERMINAL_EVENT_RETENTION);
		assert!(ctx.pending_events[&key].retired_at.is_none());

		ctx.remove_actor("crashed", 1);
		cleanup_expired_terminal_events_at(&mut ctx, now);
		assert_eq!(ctx.pending_events[&key].retired_at, Some(now));

		cleanup_expired_terminal_events_at(&mut ctx, now + TERMINAL_EVENT_RETENTION);
		assert!(ctx.pending_events.is_empty());
	}

	// rivetkit-native patch: `crate::stopped_here`.
	fn request_start(actor_id: &str, generation: Option<u32>) -> protocol::ToEnvoyTunnelMessage {
		protocol::ToEnvoyTunnelMessage {
			message_id: protocol::MessageId {
				gateway_id: [1, 2, 3, 4],
				request_id: [5, 6, 7, 8],
				message_index: 0,
			},
			message_kind: protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestStart(
				protocol::ToEnvoyRequestStart {
					actor_id: actor_id.to_string(),
					actor_generation: generation,
					method: "POST".to_string(),
					path: "/action/increment".to_string(),
					headers: HashMap::new(),
					body: None,
					stream: false,
					response_stream: false,
				},
			),
		}
	}

	/// The error an answer carries: (x-rivet-error, body).
	async fn answered_error(
		rx: &mut mpsc::UnboundedReceiver<WsTxMessage>,
	) -> (String, serde_json::Value) {
		let answer = tokio::time::timeout(std::time::Duration::from_secs(2), rx.recv())
			.await
			.expect("no answer within 2 s");
		let WsTxMessage::Send(bytes) = answer.expect("an answer") else {
			panic!("expected a frame");
		};
		let answer = protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
			.expect("decode answer");
		let protocol::ToRivet::ToRivetTunnelMessage(protocol::ToRivetTunnelMessage {
			message_kind: protocol::ToRivetTunnelMessageKind::ToRivetResponseStart(start),
			..
		}) = answer
		else {
			panic!("expected a response start");
		};
		let body =
			serde_json::from_slice(start.body.as_deref().expect("a body")).expect("json body");
		(start.headers["x-rivet-error"].clone(), body)
	}

	#[tokio::test]
	async fn request_for_a_generation_stopped_here_is_answered_restarting() {
		let (mut ctx, _handle) = new_envoy_context();
		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		insert_actor(&mut ctx, "slept", 1, Arc::new(AsyncCounter::new()), true);
		insert_actor(&mut ctx, "stopping", 1, Arc::new(AsyncCounter::new()), true);
		ctx.remove_actor("slept", 1);

		for (actor_id, generation) in [("slept", Some(1)), ("slept", None), ("stopping", Some(1))] {
			crate::tunnel::handle_tunnel_message(&mut ctx, 0, request_start(actor_id, generation))
				.await;
			let (header, body) = answered_error(&mut rx).await;
			assert_eq!(header, "actor.restarting", "{actor_id} {generation:?}");
			assert_eq!(body["group"], "actor");
			assert_eq!(body["code"], "restarting");
			assert_eq!(body["metadata"]["retryable"], true);
		}

		// An actor this envoy never ran is still answered not found.
		crate::tunnel::handle_tunnel_message(&mut ctx, 0, request_start("never-here", Some(1)))
			.await;
		assert_eq!(answered_error(&mut rx).await.0, "envoy.actor_not_found");
	}

	#[tokio::test]
	async fn request_for_a_generation_put_to_sleep_here_waits_for_the_engines_stop() {
		let (mut ctx, _handle) = new_envoy_context();
		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		// Put to sleep by this host: its task ended (the helper's handle is
		// closed), the engine has not sent a stop, the entry is still here.
		insert_actor(
			&mut ctx,
			"slept-here",
			1,
			Arc::new(AsyncCounter::new()),
			false,
		);

		crate::tunnel::handle_tunnel_message(&mut ctx, 0, request_start("slept-here", Some(1)))
			.await;
		crate::tunnel::release_parked_requests(&mut ctx).await;
		assert!(rx.try_recv().is_err(), "answered before the engine's stop");
		assert_eq!(ctx.parked_requests.len(), 1);

		ctx.actors
			.get_mut("slept-here")
			.and_then(|generations| generations.get_mut(&1))
			.expect("entry")
			.received_stop = true;
		crate::tunnel::release_parked_requests(&mut ctx).await;
		assert_eq!(answered_error(&mut rx).await.0, "actor.restarting");
		assert!(ctx.parked_requests.is_empty());
	}

	// rivetkit-native patch: `crate::queued_requests`.
	#[tokio::test]
	async fn requests_past_the_per_actor_cap_are_answered_overloaded() {
		let (mut ctx, _handle) = new_envoy_context();
		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		// A generation still starting: nothing takes from its inbox.
		let (inbox_tx, mut inbox) = mpsc::unbounded_channel::<ToActor>();
		ctx.insert_actor(
			"starting".to_string(),
			1,
			inbox_tx,
			Arc::new(AsyncCounter::new()),
			"starting".to_string(),
			0,
		);
		let cap = ctx.shared.config.max_queued_requests_per_actor;
		let request = |n: usize| {
			let mut start = request_start("starting", Some(1));
			start.message_id.request_id = (n as u32).to_be_bytes();
			start
		};
		for n in 0..cap {
			crate::tunnel::handle_tunnel_message(&mut ctx, 0, request(n)).await;
		}
		assert!(
			rx.try_recv().is_err(),
			"a request under the cap was refused"
		);

		crate::tunnel::handle_tunnel_message(&mut ctx, 0, request(cap)).await;
		let (header, body) = answered_error(&mut rx).await;
		assert_eq!(header, "envoy.actor_overloaded");
		assert_eq!(body["actor"]["generation"], 1);

		// The task takes one: its place is free again.
		drop(inbox.recv().await.expect("a queued request"));
		crate::tunnel::handle_tunnel_message(&mut ctx, 0, request(cap + 1)).await;
		assert!(rx.try_recv().is_err(), "a freed place was not reused");
	}

	// rivetkit-native patch: `crate::completed_requests`.
	#[tokio::test]
	async fn a_trailing_frame_of_a_completed_request_is_dropped_quietly() {
		let (mut ctx, _handle) = new_envoy_context();
		let (tx, mut rx) = mpsc::unbounded_channel();
		let session = install_connection(&ctx.shared, tx).await;
		let (inbox_tx, _inbox) = mpsc::unbounded_channel::<ToActor>();
		ctx.insert_actor(
			"serving".to_string(),
			1,
			inbox_tx,
			Arc::new(AsyncCounter::new()),
			"serving".to_string(),
			0,
		);
		let start = request_start("serving", Some(1));
		let id = start.message_id.clone();
		crate::tunnel::handle_tunnel_message(&mut ctx, session, start).await;
		// The actor answered without reading the rest of the upload.
		crate::tunnel::complete_http_request(&mut ctx, id.gateway_id, id.request_id);

		let chunk = |index: u16| protocol::ToEnvoyTunnelMessage {
			message_id: protocol::MessageId {
				message_index: index,
				..id.clone()
			},
			message_kind: protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestChunk(
				protocol::ToEnvoyRequestChunk {
					body: vec![0; 16],
					finish: false,
				},
			),
		};
		crate::tunnel::handle_tunnel_message(&mut ctx, session, chunk(1)).await;
		// HTTP frames reach the socket through a relay task: give it time.
		let answered = tokio::time::timeout(std::time::Duration::from_millis(300), rx.recv()).await;
		assert!(answered.is_err(), "a trailing frame was answered");
	}

	/// rivetkit-native patch: a fence reports every generation stopped, as
	/// lost, on the old key's connection, after the last event each sent,
	/// and keeps the same report for the old key's farewell.
	#[tokio::test]
	async fn a_fence_reports_its_generations_stopped_under_the_old_key() {
		let (mut ctx, _handle) = new_envoy_context();
		let (tx, mut rx) = mpsc::unbounded_channel();
		install_connection(&ctx.shared, tx).await;
		insert_actor(&mut ctx, "fenced", 1, Arc::new(AsyncCounter::new()), false);
		let running = protocol::EventWrapper {
			checkpoint: protocol::ActorCheckpoint {
				actor_id: "fenced".to_string(),
				generation: 1,
				index: 0,
			},
			inner: protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
				state: protocol::ActorState::ActorStateRunning,
			}),
		};
		handle_send_events(&mut ctx, vec![running]).await;
		let _ = rx.recv().await.expect("the running event");
		let old_key = ctx.shared.envoy_key.get();

		crate::envoy::fence(&mut ctx, "test").await;

		let WsTxMessage::Send(bytes) = rx
			.try_recv()
			.expect("the report, sent before the fence returns")
		else {
			panic!("expected an event frame");
		};
		let report = protocol::versioned::ToRivet::deserialize(&bytes, protocol::PROTOCOL_VERSION)
			.expect("decode the report");
		let expected = crate::actor::stopped_as_lost("fenced".to_string(), 1, 1);
		assert_eq!(
			report,
			protocol::ToRivet::ToRivetEvents(vec![expected.clone()])
		);
		assert_ne!(ctx.shared.envoy_key.get(), old_key);
		assert!(ctx.actors.is_empty());
		let (farewell_key, farewell_events) = ctx.farewell.take().expect("a farewell");
		assert_eq!(farewell_key, old_key);
		assert_eq!(farewell_events, vec![expected]);
	}
}
