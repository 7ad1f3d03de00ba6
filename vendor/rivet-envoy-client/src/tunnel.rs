use rivet_envoy_protocol as protocol;
use std::collections::HashMap;
use std::time::Duration;

use crate::connection::ws_send;
use crate::envoy::{BufferedActorMessage, EnvoyContext, HttpRequestRoute, WebSocketRoute};

const HTTP_REQUEST_CANCELLATION_TTL: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub struct HttpRequestCancellationKey {
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
	actor_id: String,
	actor_generation: u32,
}

fn request_cancellation_key(
	message_id: &protocol::MessageId,
	actor_id: &str,
	actor_generation: u32,
) -> HttpRequestCancellationKey {
	HttpRequestCancellationKey {
		gateway_id: message_id.gateway_id,
		request_id: message_id.request_id,
		actor_id: actor_id.to_owned(),
		actor_generation,
	}
}

fn request_abort_cancellation_key(
	message_id: &protocol::MessageId,
	abort: &protocol::ToEnvoyRequestAbort,
) -> Result<Option<HttpRequestCancellationKey>, &'static str> {
	match (&abort.actor_id, abort.actor_generation) {
		(Some(actor_id), Some(actor_generation)) => Ok(Some(request_cancellation_key(
			message_id,
			actor_id,
			actor_generation,
		))),
		(None, None) => Ok(None),
		_ => Err("HTTP request abort must include both actor id and generation"),
	}
}

fn prune_http_request_cancellations(ctx: &mut EnvoyContext) {
	let now = crate::time::Instant::now();
	ctx.http_request_cancellations.retain(|_, cancelled_at| {
		now.duration_since(*cancelled_at) < HTTP_REQUEST_CANCELLATION_TTL
	});
}

pub(crate) fn make_ws_key(
	gateway_id: &protocol::GatewayId,
	request_id: &protocol::RequestId,
) -> [u8; 8] {
	let mut key = [0u8; 8];
	key[..4].copy_from_slice(gateway_id);
	key[4..].copy_from_slice(request_id);
	key
}

/// rivetkit-native patch: whether a body cancel or a response window
/// update is for a request whose route is gone (its response was sent). The
/// gateway sends such a cancel after the response now and then (a few HTTP
/// requests in a hundred here); there is nothing left to cancel, so it is
/// dropped quietly instead of being logged as a violation and answered with
/// an abort.
fn finished_http_request(ctx: &EnvoyContext, message_id: &protocol::MessageId) -> bool {
	let key: [&[u8]; 2] = [&message_id.gateway_id, &message_id.request_id];
	let finished = ctx.http_message_indices.get(&key).is_none();
	if finished {
		tracing::debug!(
			message_index = message_id.message_index,
			"dropped a body cancel or window update of a finished HTTP request"
		);
	}
	finished
}

fn advance_http_message_index(ctx: &mut EnvoyContext, message_id: &protocol::MessageId) -> bool {
	let key: [&[u8]; 2] = [&message_id.gateway_id, &message_id.request_id];
	let Some(expected) = ctx.http_message_indices.get_mut(&key) else {
		tracing::warn!(
			message_index = message_id.message_index,
			"received HTTP tunnel message without request start"
		);
		return false;
	};
	if message_id.message_index != *expected {
		tracing::warn!(
			expected_message_index = *expected,
			actual_message_index = message_id.message_index,
			"received reordered HTTP tunnel message"
		);
		return false;
	}
	*expected = expected.wrapping_add(1);
	true
}

pub struct HibernatingWebSocketMetadata {
	pub gateway_id: protocol::GatewayId,
	pub request_id: protocol::RequestId,
	pub envoy_message_index: u16,
	pub rivet_message_index: u16,
	pub path: String,
	pub headers: std::collections::HashMap<String, String>,
}

/// Releases a request's routing state once the actor finished both its
/// upload and its response, and remembers it a moment for the frames the
/// gateway may still send (`crate::completed_requests`).
pub fn complete_http_request(
	ctx: &mut EnvoyContext,
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
) {
	ctx.http_request_routes.remove(&[&gateway_id, &request_id]);
	ctx.http_message_indices.remove(&[&gateway_id, &request_id]);
	ctx.completed_http_requests
		.insert(make_ws_key(&gateway_id, &request_id));
}

/// A route for a refused streamed upload, so the body frames the gateway
/// may already have sent are drained rather than taken for violations; its
/// finish, cancellation, abort or the connection's close removes it.
fn keep_drain_route(
	ctx: &mut EnvoyContext,
	message_id: &protocol::MessageId,
	actor_id: &str,
	actor_generation: Option<u32>,
	session: u64,
) {
	let key: [&[u8]; 2] = [&message_id.gateway_id, &message_id.request_id];
	ctx.http_message_indices.insert(&key, 1);
	ctx.http_request_routes.insert(
		&key,
		HttpRequestRoute {
			actor_id: actor_id.to_owned(),
			actor_generation,
			actor_admitted: false,
			session,
			gateway_id: message_id.gateway_id,
			request_id: message_id.request_id,
		},
	);
}

pub async fn handle_tunnel_message(
	ctx: &mut EnvoyContext,
	connection_session: u64,
	msg: protocol::ToEnvoyTunnelMessage,
) {
	let message_id = msg.message_id;
	let is_http_continuation = matches!(
		&msg.message_kind,
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestChunk(_)
			| protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestAbort(_)
			| protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestBodyCancel
			| protocol::ToEnvoyTunnelMessageKind::ToEnvoyResponseBodyWindowUpdate(_)
	);
	// rivetkit-native patch: a trailing frame of a request that completed
	// a moment ago is dropped (`crate::completed_requests`).
	if is_http_continuation
		&& !ctx
			.http_request_routes
			.contains_key(&[&message_id.gateway_id, &message_id.request_id])
		&& ctx
			.completed_http_requests
			.contains(&make_ws_key(&message_id.gateway_id, &message_id.request_id))
	{
		tracing::debug!(
			message_index = message_id.message_index,
			"dropped a tunnel frame of an HTTP request that already completed"
		);
		return;
	}
	if is_http_continuation
		&& let Some(route) = ctx
			.http_request_routes
			.get(&[&message_id.gateway_id, &message_id.request_id])
		&& route.session != connection_session
	{
		handle_http_protocol_violation(
			ctx,
			connection_session,
			message_id,
			"HTTP request identifier belongs to another connection",
		)
		.await;
		return;
	}
	match msg.message_kind {
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestStart(req) => {
			handle_request_start(ctx, connection_session, message_id, req).await;
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestChunk(chunk) => {
			if advance_http_message_index(ctx, &message_id) {
				handle_request_chunk(ctx, message_id, chunk).await;
			} else {
				handle_http_protocol_violation(
					ctx,
					connection_session,
					message_id,
					"invalid HTTP tunnel message sequence",
				)
				.await;
			}
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestAbort(abort) => {
			let cancellation_key = match request_abort_cancellation_key(&message_id, &abort) {
				Ok(key) => key,
				Err(detail) => {
					handle_http_protocol_violation(ctx, connection_session, message_id, detail)
						.await;
					return;
				}
			};
			if let Some(cancellation_key) = cancellation_key {
				let route = ctx
					.http_request_routes
					.get(&[&message_id.gateway_id, &message_id.request_id])
					.map(|route| (route.actor_id.clone(), route.actor_generation));
				if let Some((route_actor_id, route_actor_generation)) = route
					&& (cancellation_key.actor_id != route_actor_id
						|| Some(cancellation_key.actor_generation) != route_actor_generation)
				{
					handle_http_protocol_violation(
						ctx,
						connection_session,
						message_id,
						"HTTP request abort actor identity does not match request start",
					)
					.await;
				} else {
					// Exact-generation cancellation is intentionally out of band from the
					// ordered body stream. It must work after an ambiguous message handoff,
					// when Gateway cannot know which message index Envoy accepted.
					handle_request_abort(ctx, message_id, abort, Some(cancellation_key));
				}
			} else if advance_http_message_index(ctx, &message_id) {
				// V6 cancellation has no actor identity, so preserve its ordered behavior.
				handle_request_abort(ctx, message_id, abort, None);
			} else {
				handle_http_protocol_violation(
					ctx,
					connection_session,
					message_id,
					"invalid HTTP request-abort sequence",
				)
				.await;
			}
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestBodyCancel
			if finished_http_request(ctx, &message_id) => {}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestBodyCancel => {
			if advance_http_message_index(ctx, &message_id) {
				handle_request_body_cancel(ctx, message_id);
			} else {
				handle_http_protocol_violation(
					ctx,
					connection_session,
					message_id,
					"invalid HTTP request-body-cancel sequence",
				)
				.await;
			}
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyResponseBodyWindowUpdate(_)
			if finished_http_request(ctx, &message_id) => {}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyResponseBodyWindowUpdate(update) => {
			// rivetkit-native patch: the gateway keeps returning credit while it
			// delivers the tail of a streamed response, after this side sent the
			// final chunk and forgot the request. Such late credit is harmless;
			// answering it with a protocol violation aborted a response the
			// client was still reading.
			if ctx
				.http_message_indices
				.get(&[&message_id.gateway_id, &message_id.request_id])
				.is_none()
			{
				tracing::debug!(
					message_index = message_id.message_index,
					"ignoring response window update for a finished request"
				);
				return;
			}
			if advance_http_message_index(ctx, &message_id) {
				handle_response_body_window_update(ctx, message_id, update.consumed_bytes);
			} else {
				handle_http_protocol_violation(
					ctx,
					connection_session,
					message_id,
					"invalid HTTP response-window sequence",
				)
				.await;
			}
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyWebSocketOpen(open) => {
			handle_ws_open(ctx, message_id, open).await;
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyWebSocketMessage(msg) => {
			handle_ws_message(ctx, message_id, msg);
		}
		protocol::ToEnvoyTunnelMessageKind::ToEnvoyWebSocketClose(close) => {
			handle_ws_close(ctx, message_id, close);
		}
	}
}

async fn handle_http_protocol_violation(
	ctx: &mut EnvoyContext,
	connection_session: u64,
	message_id: protocol::MessageId,
	detail: &'static str,
) {
	let key: [&[u8]; 2] = [&message_id.gateway_id, &message_id.request_id];
	if let Some(route) = ctx.http_request_routes.get(&key) {
		if route.session != connection_session {
			send_response_abort_for_session(ctx, connection_session, message_id, detail).await;
			return;
		}
		let actor_id = route.actor_id.clone();
		let actor_generation = route.actor_generation;
		if route.actor_admitted
			&& let Some(actor) = ctx.get_actor(&actor_id, actor_generation)
		{
			let _ = actor
				.handle
				.send(crate::actor::ToActor::ReqProtocolViolation {
					message_id: message_id.clone(),
					detail: detail.to_owned(),
				});
		}
		ctx.http_request_routes.remove(&key);
		ctx.http_message_indices.remove(&key);
		return;
	}

	send_response_abort_for_session(ctx, connection_session, message_id, detail).await;
}

async fn send_response_abort_for_session(
	ctx: &EnvoyContext,
	connection_session: u64,
	mut message_id: protocol::MessageId,
	detail: &'static str,
) {
	message_id.message_index = 0;
	let _ = crate::connection::ws_send_http_for_session(
		&ctx.shared,
		protocol::ToRivet::ToRivetTunnelMessage(protocol::ToRivetTunnelMessage {
			message_id,
			message_kind: protocol::ToRivetTunnelMessageKind::ToRivetResponseAbort(
				protocol::ToRivetResponseAbort {
					reason: protocol::HttpStreamAbortReason {
						kind: protocol::HttpStreamAbortReasonKind::InternalError,
						detail: Some(detail.to_owned()),
					},
				},
			),
		}),
		connection_session,
	)
	.await;
}

fn handle_request_body_cancel(ctx: &mut EnvoyContext, message_id: protocol::MessageId) {
	let route = ctx
		.http_request_routes
		.get(&[&message_id.gateway_id, &message_id.request_id])
		.map(|route| {
			(
				route.actor_id.clone(),
				route.actor_generation,
				route.actor_admitted,
			)
		});
	if let Some((actor_id, actor_generation, true)) = &route
		&& let Some(actor) = ctx.get_actor(actor_id, *actor_generation)
	{
		let _ = actor.handle.send(crate::actor::ToActor::ReqBodyCancel {
			message_id: message_id.clone(),
		});
	}
	if matches!(route, Some((_, _, false))) {
		ctx.http_request_routes
			.remove(&[&message_id.gateway_id, &message_id.request_id]);
		ctx.http_message_indices
			.remove(&[&message_id.gateway_id, &message_id.request_id]);
	}
}

fn handle_response_body_window_update(
	ctx: &mut EnvoyContext,
	message_id: protocol::MessageId,
	consumed_bytes: u64,
) {
	let route = ctx
		.http_request_routes
		.get(&[&message_id.gateway_id, &message_id.request_id])
		.map(|route| {
			(
				route.actor_id.clone(),
				route.actor_generation,
				route.actor_admitted,
			)
		});
	if let Some((actor_id, actor_generation, true)) = &route
		&& let Some(actor) = ctx.get_actor(actor_id, *actor_generation)
	{
		let _ = actor
			.handle
			.send(crate::actor::ToActor::ResponseBodyWindowUpdate {
				message_id,
				consumed_bytes,
			});
	}
}

async fn handle_request_start(
	ctx: &mut EnvoyContext,
	connection_session: u64,
	message_id: protocol::MessageId,
	req: protocol::ToEnvoyRequestStart,
) {
	let key: [&[u8]; 2] = [&message_id.gateway_id, &message_id.request_id];
	let actor_id = req.actor_id.clone();
	let actor_generation = req.actor_generation;
	let response_stream = req.response_stream;
	let request_stream = req.stream;
	if message_id.message_index != 0 {
		tracing::warn!(
			message_index = message_id.message_index,
			"received invalid HTTP request start sequence"
		);
		send_response_abort_for_session(
			ctx,
			connection_session,
			message_id,
			"HTTP request start must use message index zero",
		)
		.await;
		return;
	}
	prune_http_request_cancellations(ctx);
	if let Some(actor_generation) = actor_generation {
		let cancellation_key = request_cancellation_key(&message_id, &actor_id, actor_generation);
		if ctx
			.http_request_cancellations
			.contains_key(&cancellation_key)
		{
			tracing::debug!(
				%actor_id,
				actor_generation,
				gateway_id = ?message_id.gateway_id,
				request_id = ?message_id.request_id,
				"discarding HTTP request start cancelled before delivery"
			);
			return;
		}
	}
	if let Some(existing) = ctx.http_request_routes.get(&key) {
		let same_session = existing.session == connection_session;
		handle_http_protocol_violation(
			ctx,
			connection_session,
			message_id,
			if same_session {
				"duplicate HTTP request start"
			} else {
				"HTTP request identifier belongs to another connection"
			},
		)
		.await;
		return;
	}
	// rivetkit-native patch: at most `max_queued_requests_per_actor` wait
	// in one actor's inbox (`crate::queued_requests`).
	let cap = ctx.shared.config.max_queued_requests_per_actor;
	let admitted = ctx
		.get_actor_for_admission(&actor_id, actor_generation)
		.map(|actor| (actor.handle.clone(), actor.queued_requests.admit(cap)));
	let (actor_handle, queued) = match admitted {
		Some((handle, Some(queued))) => (Some(handle), Some(queued)),
		Some((_, None)) => {
			tracing::debug!(%actor_id, ?actor_generation, cap, "request refused: too many wait for this actor");
			if request_stream {
				// Its body frames may already be on their way, as below.
				keep_drain_route(
					ctx,
					&message_id,
					&actor_id,
					actor_generation,
					connection_session,
				);
			}
			send_error_response(
				ctx,
				response_stream.then_some(connection_session),
				message_id.gateway_id,
				message_id.request_id,
				"envoy.actor_overloaded",
				"Actor has too many queued requests",
				actor_generation.map(|generation| (actor_id.as_str(), generation)),
			)
			.await;
			return;
		}
		None => (None, None),
	};

	let Some(actor_handle) = actor_handle else {
		// rivetkit-native patch: a generation stopped here a moment ago is
		// answered `actor.restarting`, once the engine has taken its stop
		// (`crate::stopped_here`).
		let stopped_recently = ctx.stopped_recently(&actor_id, actor_generation);
		// RequestStart is deliberately not application-acknowledged, so body frames may already be
		// in flight when this rejection reaches Gateway. Keep a short-lived drain route only for a
		// streamed upload; its finish, cancellation, abort, or connection close removes the state.
		if request_stream {
			keep_drain_route(
				ctx,
				&message_id,
				&actor_id,
				actor_generation,
				connection_session,
			);
		}
		if stopped_recently {
			// rivetkit-native patch: see `SharedContext::last_refused_ms`.
			ctx.shared.last_refused_ms.store(
				crate::time::now_millis(),
				std::sync::atomic::Ordering::Release,
			);
			let session = response_stream.then_some(connection_session);
			if ctx.awaiting_engine_stop(&actor_id, actor_generation)
				&& ctx.parked_requests.len() < crate::stopped_here::MAX_PARKED
			{
				tracing::debug!(actor_id = %actor_id, ?actor_generation, "request for a generation put to sleep here; parked until the engine's stop");
				ctx.parked_requests.push(crate::stopped_here::Parked {
					actor_id,
					generation: actor_generation,
					gateway_id: message_id.gateway_id,
					request_id: message_id.request_id,
					session,
					at: crate::time::Instant::now(),
				});
				return;
			}
			tracing::debug!(actor_id = %actor_id, ?actor_generation, "request for a generation stopped here; answered restarting");
			answer_restarting(
				ctx,
				session,
				message_id.gateway_id,
				message_id.request_id,
				actor_generation.map(|generation| (actor_id.as_str(), generation)),
			)
			.await;
			return;
		}
		let generation_mismatch =
			actor_generation.is_some() && ctx.get_actor(&actor_id, None).is_some();
		let (error_code, message) = if generation_mismatch {
			tracing::warn!(
				actor_id = %actor_id,
				?actor_generation,
				"received request for stale actor generation"
			);
			(
				"envoy.actor_generation_mismatch",
				"Actor generation does not match",
			)
		} else {
			tracing::warn!(actor_id = %actor_id, ?actor_generation, "received request for unknown actor");
			("envoy.actor_not_found", "Actor not found")
		};
		send_error_response(
			ctx,
			response_stream.then_some(connection_session),
			message_id.gateway_id,
			message_id.request_id,
			error_code,
			message,
			actor_generation.map(|generation| (actor_id.as_str(), generation)),
		)
		.await;
		return;
	};
	ctx.http_message_indices
		.insert(&[&message_id.gateway_id, &message_id.request_id], 1);

	ctx.http_request_routes.insert(
		&[&message_id.gateway_id, &message_id.request_id],
		HttpRequestRoute {
			actor_id: actor_id.clone(),
			actor_generation,
			actor_admitted: true,
			session: connection_session,
			gateway_id: message_id.gateway_id,
			request_id: message_id.request_id,
		},
	);

	if actor_handle
		.send(crate::actor::ToActor::ReqStart {
			message_id: message_id.clone(),
			req,
			connection_session,
			queued,
		})
		.is_err()
	{
		ctx.http_request_routes
			.remove(&[&message_id.gateway_id, &message_id.request_id]);
		ctx.http_message_indices
			.remove(&[&message_id.gateway_id, &message_id.request_id]);
		send_error_response(
			ctx,
			response_stream.then_some(connection_session),
			message_id.gateway_id,
			message_id.request_id,
			"envoy.actor_not_found",
			"Actor stopped before accepting request",
			actor_generation.map(|generation| (actor_id.as_str(), generation)),
		)
		.await;
	}
}

async fn handle_request_chunk(
	ctx: &mut EnvoyContext,
	message_id: protocol::MessageId,
	chunk: protocol::ToEnvoyRequestChunk,
) {
	let route = ctx
		.http_request_routes
		.get(&[&message_id.gateway_id, &message_id.request_id])
		.map(|route| {
			(
				route.actor_id.clone(),
				route.actor_generation,
				route.actor_admitted,
			)
		});

	if let Some((actor_id, actor_generation, actor_admitted)) = &route {
		if !actor_admitted {
			if chunk.finish {
				ctx.http_request_routes
					.remove(&[&message_id.gateway_id, &message_id.request_id]);
				ctx.http_message_indices
					.remove(&[&message_id.gateway_id, &message_id.request_id]);
			}
			return;
		}
		if let Some(actor) = ctx.get_actor(actor_id, *actor_generation) {
			let _ = actor.handle.send(crate::actor::ToActor::ReqChunk {
				message_id: message_id.clone(),
				chunk,
			});
		} else {
			tracing::warn!(actor_id = %actor_id, "received request chunk for unknown actor");
		}
	} else {
		tracing::warn!(
			gateway_id = ?message_id.gateway_id,
			request_id = ?message_id.request_id,
			message_index = message_id.message_index,
			"received request chunk without request start"
		);
		send_error_response(
			ctx,
			None,
			message_id.gateway_id,
			message_id.request_id,
			"envoy.request_not_found",
			"Request start was not delivered",
			None,
		)
		.await;
	}
}

fn handle_request_abort(
	ctx: &mut EnvoyContext,
	message_id: protocol::MessageId,
	abort: protocol::ToEnvoyRequestAbort,
	cancellation_key: Option<HttpRequestCancellationKey>,
) {
	let route = ctx
		.http_request_routes
		.get(&[&message_id.gateway_id, &message_id.request_id])
		.map(|route| {
			(
				route.actor_id.clone(),
				route.actor_generation,
				route.actor_admitted,
			)
		});
	if let Some((actor_id, actor_generation, true)) = &route {
		if let Some(actor) = ctx.get_actor(actor_id, *actor_generation) {
			let _ = actor.handle.send(crate::actor::ToActor::ReqAbort {
				message_id: message_id.clone(),
				reason: abort.reason,
			});
		}
	}
	if let Some(cancellation_key) = cancellation_key {
		prune_http_request_cancellations(ctx);
		ctx.http_request_cancellations
			.insert(cancellation_key, crate::time::Instant::now());
		tracing::debug!(
			gateway_id = ?message_id.gateway_id,
			request_id = ?message_id.request_id,
			"recorded exact HTTP request cancellation"
		);
	}

	ctx.http_request_routes
		.remove(&[&message_id.gateway_id, &message_id.request_id]);
	ctx.http_message_indices
		.remove(&[&message_id.gateway_id, &message_id.request_id]);
}

async fn handle_ws_open(
	ctx: &mut EnvoyContext,
	message_id: protocol::MessageId,
	open: protocol::ToEnvoyWebSocketOpen,
) {
	let actor_id = open.actor_id.clone();
	let actor_generation = open.actor_generation;
	let actor_handle = ctx
		.get_actor_for_admission(&actor_id, actor_generation)
		.map(|actor| actor.handle.clone());

	let Some(actor_handle) = actor_handle else {
		// rivetkit-native patch: as for an HTTP request (`crate::stopped_here`).
		if ctx.stopped_recently(&actor_id, actor_generation) {
			tracing::debug!(actor_id = %actor_id, ?actor_generation, "ws open for a generation stopped here; left for the gateway to retry");
			return;
		}
		let generation_mismatch =
			actor_generation.is_some() && ctx.get_actor(&actor_id, None).is_some();
		let reason = if generation_mismatch {
			tracing::warn!(
				actor_id = %actor_id,
				?actor_generation,
				"received ws open for stale actor generation"
			);
			"envoy.actor_generation_mismatch"
		} else {
			tracing::warn!(actor_id = %actor_id, ?actor_generation, "received ws open for unknown actor");
			"envoy.actor_not_found"
		};

		ws_send(
			&ctx.shared,
			protocol::ToRivet::ToRivetTunnelMessage(protocol::ToRivetTunnelMessage {
				message_id,
				message_kind: protocol::ToRivetTunnelMessageKind::ToRivetWebSocketClose(
					protocol::ToRivetWebSocketClose {
						code: Some(1011),
						reason: Some(reason.to_string()),
						hibernate: false,
					},
				),
			}),
		)
		.await;
		return;
	};

	ctx.request_to_actor.insert(
		&[&message_id.gateway_id, &message_id.request_id],
		WebSocketRoute {
			actor_id: actor_id.clone(),
			actor_generation,
		},
	);
	ctx.shared
		.live_tunnel_requests
		.lock()
		.expect("shared live tunnel request registry poisoned")
		.insert(
			make_ws_key(&message_id.gateway_id, &message_id.request_id),
			actor_id.clone(),
		);

	// Convert HashMap headers to BTreeMap for the actor message
	let headers = open
		.headers
		.iter()
		.map(|(k, v)| (k.clone(), v.clone()))
		.collect();

	if actor_handle
		.send(crate::actor::ToActor::WsOpen {
			message_id: message_id.clone(),
			path: open.path,
			headers,
		})
		.is_err()
	{
		ctx.request_to_actor
			.remove(&[&message_id.gateway_id, &message_id.request_id]);
		ctx.shared
			.live_tunnel_requests
			.lock()
			.expect("shared live tunnel request registry poisoned")
			.remove(&make_ws_key(&message_id.gateway_id, &message_id.request_id));
		ws_send(
			&ctx.shared,
			protocol::ToRivet::ToRivetTunnelMessage(protocol::ToRivetTunnelMessage {
				message_id,
				message_kind: protocol::ToRivetTunnelMessageKind::ToRivetWebSocketClose(
					protocol::ToRivetWebSocketClose {
						code: Some(1011),
						reason: Some("envoy.actor_not_found".to_string()),
						hibernate: false,
					},
				),
			}),
		)
		.await;
	}
}

fn handle_ws_message(
	ctx: &mut EnvoyContext,
	message_id: protocol::MessageId,
	msg: protocol::ToEnvoyWebSocketMessage,
) {
	let route = ctx
		.request_to_actor
		.get(&[&message_id.gateway_id, &message_id.request_id])
		.cloned();
	if let Some(route) = &route {
		if let Some(actor) = ctx.get_actor(&route.actor_id, route.actor_generation) {
			let _ = actor
				.handle
				.send(crate::actor::ToActor::WsMsg { message_id, msg });
		} else if route.actor_generation.is_none() {
			ctx.buffered_actor_messages
				.entry(route.actor_id.clone())
				.or_default()
				.push(BufferedActorMessage::WsMsg { message_id, msg });
		}
	}
}

fn handle_ws_close(
	ctx: &mut EnvoyContext,
	message_id: protocol::MessageId,
	close: protocol::ToEnvoyWebSocketClose,
) {
	let route = ctx
		.request_to_actor
		.get(&[&message_id.gateway_id, &message_id.request_id])
		.cloned();
	if let Some(route) = &route {
		if let Some(actor) = ctx.get_actor(&route.actor_id, route.actor_generation) {
			let _ = actor.handle.send(crate::actor::ToActor::WsClose {
				message_id: message_id.clone(),
				close,
			});
		} else if route.actor_generation.is_none() {
			ctx.buffered_actor_messages
				.entry(route.actor_id.clone())
				.or_default()
				.push(BufferedActorMessage::WsClose {
					message_id: message_id.clone(),
					close,
				});
		}
	}

	ctx.request_to_actor
		.remove(&[&message_id.gateway_id, &message_id.request_id]);
	ctx.shared
		.live_tunnel_requests
		.lock()
		.expect("shared live tunnel request registry poisoned")
		.remove(&make_ws_key(&message_id.gateway_id, &message_id.request_id));
}

pub fn send_hibernatable_ws_message_ack(
	ctx: &mut EnvoyContext,
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
	envoy_message_index: u16,
) {
	let route = ctx
		.request_to_actor
		.get(&[&gateway_id, &request_id])
		.cloned();
	if let Some(route) = &route {
		if let Some(actor) = ctx.get_actor(&route.actor_id, route.actor_generation) {
			let _ = actor.handle.send(crate::actor::ToActor::HwsAck {
				gateway_id,
				request_id,
				envoy_message_index,
			});
		}
	}
}

pub async fn resend_buffered_tunnel_messages(ctx: &mut EnvoyContext) {
	if ctx.buffered_messages.is_empty() {
		return;
	}

	tracing::info!(
		count = ctx.buffered_messages.len(),
		"resending buffered tunnel messages"
	);

	let messages = std::mem::take(&mut ctx.buffered_messages);
	let mut messages = messages.into_iter();
	while let Some(msg) = messages.next() {
		let failed = ws_send(
			&ctx.shared,
			protocol::ToRivet::ToRivetTunnelMessage(msg.clone()),
		)
		.await;
		if failed {
			ctx.buffered_messages.push(msg);
			ctx.buffered_messages.extend(messages);
			break;
		}
	}
}

pub async fn send_or_buffer_tunnel_message(
	ctx: &mut EnvoyContext,
	msg: protocol::ToRivetTunnelMessage,
) {
	let failed = ws_send(
		&ctx.shared,
		protocol::ToRivet::ToRivetTunnelMessage(msg.clone()),
	)
	.await;
	if failed {
		ctx.buffered_messages.push(msg);
	}
}

/// rivetkit-native patch: `actor.restarting` (503, retryable), RivetKit's
/// own answer for "retry this on the next generation" (`crate::stopped_here`).
async fn answer_restarting(
	ctx: &EnvoyContext,
	session: Option<u64>,
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
	actor: Option<(&str, u32)>,
) {
	send_error_response(
		ctx,
		session,
		gateway_id,
		request_id,
		"actor.restarting",
		"Actor is restarting. Retry the request.",
		actor,
	)
	.await;
}

/// rivetkit-native patch: answers every parked request whose generation the
/// engine has now stopped, or that waited [`crate::stopped_here::PARK_FOR`].
pub async fn release_parked_requests(ctx: &mut EnvoyContext) {
	if ctx.parked_requests.is_empty() {
		return;
	}
	let now = crate::time::Instant::now();
	let parked = std::mem::take(&mut ctx.parked_requests);
	for request in parked {
		let waited_out = now.duration_since(request.at) >= crate::stopped_here::PARK_FOR;
		if !waited_out && ctx.awaiting_engine_stop(&request.actor_id, request.generation) {
			ctx.parked_requests.push(request);
			continue;
		}
		answer_restarting(
			ctx,
			request.session,
			request.gateway_id,
			request.request_id,
			request
				.generation
				.map(|generation| (request.actor_id.as_str(), generation)),
		)
		.await;
	}
}

async fn send_error_response(
	ctx: &EnvoyContext,
	connection_session: Option<u64>,
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
	error_code: &str,
	message: &str,
	actor: Option<(&str, u32)>,
) {
	send_error_response_from(
		&ctx.shared,
		connection_session,
		gateway_id,
		request_id,
		error_code,
		message,
		actor,
	)
	.await;
}

/// rivetkit-native patch: [`send_error_response`] for callers without the
/// envoy's context (an actor task).
pub(crate) async fn send_error_response_from(
	shared: &crate::context::SharedContext,
	connection_session: Option<u64>,
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
	error_code: &str,
	message: &str,
	actor: Option<(&str, u32)>,
) {
	let response = error_response(gateway_id, request_id, error_code, message, actor);
	match connection_session {
		Some(session) => {
			let _ = crate::connection::ws_send_http_for_session(shared, response, session).await;
		}
		None => {
			ws_send(shared, response).await;
		}
	}
}

/// rivetkit-native patch: the one-frame 503 answer carrying `error_code`
/// (also said by `connection::farewell`).
pub(crate) fn error_response(
	gateway_id: protocol::GatewayId,
	request_id: protocol::RequestId,
	error_code: &str,
	message: &str,
	actor: Option<(&str, u32)>,
) -> protocol::ToRivet {
	// rivetkit-native patch: the group comes from the code ("envoy." before).
	let (group, code) = error_code.split_once('.').unwrap_or(("envoy", error_code));
	let mut error = serde_json::json!({
		"group": group,
		"code": code,
		"message": message,
	});
	if error_code == "actor.restarting" {
		error["metadata"] = serde_json::json!({ "retryable": true });
	}
	if let Some((actor_id, generation)) = actor {
		error["actor"] = serde_json::json!({
			"actorId": actor_id,
			"generation": generation,
		});
	}
	let body = serde_json::to_vec(&error).expect("serialize canonical HTTP error response");
	let mut headers = HashMap::new();
	headers.insert("x-rivet-error".to_string(), error_code.to_owned());
	headers.insert("content-type".to_string(), "application/json".to_owned());
	headers.insert("content-length".to_string(), body.len().to_string());

	protocol::ToRivet::ToRivetTunnelMessage(protocol::ToRivetTunnelMessage {
		message_id: protocol::MessageId {
			gateway_id,
			request_id,
			message_index: 0,
		},
		message_kind: protocol::ToRivetTunnelMessageKind::ToRivetResponseStart(
			protocol::ToRivetResponseStart {
				status: 503,
				headers,
				body: Some(body),
				stream: false,
			},
		),
	})
}
