//! rivetkit-native patch: a last, short connection under the envoy key a
//! fence replaced, made once the new key's connection is up.
//!
//! The engine takes an actor's events only from the envoy key it placed the
//! actor on, and keeps routing requests to that key until its own lost check
//! runs, a threshold or two after the key went quiet. When a partition
//! outlasts the engine's ping timeout, the engine has already closed the old
//! key's connection by the heal, so the fence's `Stopped` frames
//! (`envoy::fence`) never reach it, and every request it routes to the old
//! key in that time waits out the gateway's retries and fails. This
//! connection says, under the old key: withdraw me from placements, and
//! every generation I ran has stopped as lost. The engine then stops them at
//! once. A request the gateway still hands to the old key is answered
//! `actor.restarting` (503, retryable), as the main connection answers one
//! for a generation stopped here (`crate::stopped_here`): the RivetKit
//! client retries it, and the gateway routes the retry to the next
//! generation. A start of a generation this host never ran is reported
//! stopped too, so the engine places it again. Anything else (replayed
//! commands, the rest of a request's frames) is left unanswered.
//! See docs/durability.md, "After a fence".

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use rivet_envoy_protocol as protocol;
use tokio_tungstenite::tungstenite;
use vbare::OwnedVersionedData;

use crate::context::SharedContext;

/// How long the farewell may take to connect.
const CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the farewell stays: the gateway's retries of a request it sent
/// to the old key last about 19 s, and each retry that lands here is
/// answered `actor.restarting` instead of failing when the budget runs out.
const FAREWELL_STAY: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs the farewell in the background; the handle is the caller's to abort
/// on shutdown. It ends by itself within `CONNECT_WAIT` plus `FAREWELL_STAY`.
pub(crate) fn spawn_farewell(
	shared: Arc<SharedContext>,
	old_key: Arc<str>,
	events: Vec<protocol::EventWrapper>,
) -> tokio::task::JoinHandle<()> {
	tokio::spawn(async move {
		let count = events.len();
		match farewell(&shared, &old_key, events).await {
			Ok((acked, refused)) => tracing::info!(
				old_envoy_key = %old_key,
				count,
				acked,
				refused,
				"told the engine under the old envoy key that its generations stopped"
			),
			Err(error) => tracing::warn!(
				old_envoy_key = %old_key,
				?error,
				"could not reach the engine under the old envoy key; it declares those actors lost on its own clock"
			),
		}
	})
}

/// Returns whether the engine acknowledged every event, and how many
/// requests were answered `actor.restarting`.
async fn farewell(
	shared: &SharedContext,
	old_key: &str,
	events: Vec<protocol::EventWrapper>,
) -> anyhow::Result<(bool, usize)> {
	let endpoint = super::endpoints(shared)
		.first()
		.map(|e| e.to_string())
		.ok_or_else(|| anyhow::anyhow!("no endpoint"))?;
	let url = super::ws_url_for_key(shared, &endpoint, old_key);
	let request = super::native::connect_request(shared, &url)?;
	let (stream, _) = tokio::time::timeout(
		CONNECT_WAIT,
		tokio_tungstenite::connect_async_with_config(
			request,
			Some(super::native::websocket_config()),
			true,
		),
	)
	.await??;
	let (mut write, mut read) = stream.split();

	// What must be acknowledged: the highest index sent per generation.
	let mut owed: HashMap<(String, u32), i64> = events
		.iter()
		.map(|e| {
			(
				(e.checkpoint.actor_id.clone(), e.checkpoint.generation),
				e.checkpoint.index,
			)
		})
		.collect();
	for message in [
		super::initial_metadata(shared),
		protocol::ToRivet::ToRivetStopping,
		protocol::ToRivet::ToRivetEvents(events),
	] {
		write
			.send(tungstenite::Message::Binary(encode(message)?.into()))
			.await?;
	}

	let deadline = tokio::time::Instant::now() + FAREWELL_STAY;
	let mut refused = 0usize;
	loop {
		let next = tokio::time::timeout_at(deadline, read.next()).await;
		let Ok(Some(frame)) = next else { break };
		let tungstenite::Message::Binary(data) = frame? else {
			continue;
		};
		let message =
			crate::protocol::versioned::ToEnvoy::deserialize(&data, protocol::PROTOCOL_VERSION)?;
		let reply = match message {
			protocol::ToEnvoy::ToEnvoyPing(ping) => {
				Some(protocol::ToRivet::ToRivetPong(protocol::ToRivetPong {
					ts: ping.ts,
				}))
			}
			protocol::ToEnvoy::ToEnvoyAckEvents(ack) => {
				for c in ack.last_event_checkpoints {
					let key = (c.actor_id, c.generation);
					if owed.get(&key).is_some_and(|index| c.index >= *index) {
						owed.remove(&key);
					}
				}
				None
			}
			protocol::ToEnvoy::ToEnvoyCommands(commands) => {
				let unknown: Vec<_> = commands
					.into_iter()
					.filter(|c| matches!(c.inner, protocol::Command::CommandStartActor(_)))
					.map(|c| c.checkpoint)
					.filter(|c| !owed.contains_key(&(c.actor_id.clone(), c.generation)))
					.map(|c| crate::actor::stopped_as_lost(c.actor_id, c.generation, 0))
					.collect();
				for e in &unknown {
					owed.insert(
						(e.checkpoint.actor_id.clone(), e.checkpoint.generation),
						e.checkpoint.index,
					);
				}
				(!unknown.is_empty()).then_some(protocol::ToRivet::ToRivetEvents(unknown))
			}
			protocol::ToEnvoy::ToEnvoyTunnelMessage(protocol::ToEnvoyTunnelMessage {
				message_id,
				message_kind: protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestStart(start),
			}) => {
				refused += 1;
				Some(crate::tunnel::error_response(
					message_id.gateway_id,
					message_id.request_id,
					"actor.restarting",
					"Actor is restarting. Retry the request.",
					start
						.actor_generation
						.map(|generation| (start.actor_id.as_str(), generation)),
				))
			}
			_ => None,
		};
		if let Some(reply) = reply {
			write
				.send(tungstenite::Message::Binary(encode(reply)?.into()))
				.await?;
		}
	}
	let acked = owed.is_empty();
	let _ = write
		.send(tungstenite::Message::Close(Some(
			tungstenite::protocol::CloseFrame {
				code: tungstenite::protocol::frame::coding::CloseCode::Normal,
				reason: "envoy.shutdown".into(),
			},
		)))
		.await;
	Ok((acked, refused))
}

fn encode(message: protocol::ToRivet) -> anyhow::Result<Vec<u8>> {
	crate::protocol::versioned::ToRivet::wrap_latest(message).serialize(protocol::PROTOCOL_VERSION)
}

#[cfg(test)]
mod tests {
	use std::collections::HashMap;

	use futures_util::{SinkExt, StreamExt};
	use rivet_envoy_protocol as protocol;
	use tokio::net::TcpListener;
	use tokio_tungstenite::tungstenite;
	use vbare::OwnedVersionedData;

	use super::*;

	type Server = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

	async fn next_to_rivet(ws: &mut Server) -> protocol::ToRivet {
		loop {
			let frame = ws.next().await.expect("a frame").expect("read");
			if let tungstenite::Message::Binary(data) = frame {
				return crate::protocol::versioned::ToRivet::deserialize(
					&data,
					protocol::PROTOCOL_VERSION,
				)
				.expect("decode");
			}
		}
	}

	async fn send(ws: &mut Server, message: protocol::ToEnvoy) {
		let data = crate::protocol::versioned::ToEnvoy::wrap_latest(message)
			.serialize(protocol::PROTOCOL_VERSION)
			.expect("encode");
		ws.send(tungstenite::Message::Binary(data.into()))
			.await
			.expect("send");
	}

	fn stopped_of(message: protocol::ToRivet) -> Vec<(String, u32, i64)> {
		let protocol::ToRivet::ToRivetEvents(events) = message else {
			panic!("expected events, got {message:?}");
		};
		events
			.into_iter()
			.map(|e| {
				assert!(matches!(
					e.inner,
					protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
						state: protocol::ActorState::ActorStateStopped(
							protocol::ActorStateStopped {
								code: protocol::StopCode::Error,
								..
							}
						),
					})
				));
				(
					e.checkpoint.actor_id,
					e.checkpoint.generation,
					e.checkpoint.index,
				)
			})
			.collect()
	}

	#[tokio::test]
	async fn the_old_key_hears_every_generation_stopped_and_its_requests_are_refused_retryable() {
		let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
		let addr = listener.local_addr().unwrap();
		let (ctx, _handle) = crate::events::tests::new_envoy_context_at(&format!("http://{addr}"));
		let shared = ctx.shared.clone();

		let server = tokio::spawn(async move {
			let (stream, _) = listener.accept().await.unwrap();
			let mut uri = String::new();
			let mut ws = tokio_tungstenite::accept_hdr_async(
				stream,
				|request: &tungstenite::handshake::server::Request,
				 mut response: tungstenite::handshake::server::Response| {
					uri = request.uri().to_string();
					response
						.headers_mut()
						.insert("Sec-WebSocket-Protocol", "rivet".parse().unwrap());
					Ok(response)
				},
			)
			.await
			.unwrap();
			assert!(uri.contains("envoy_key=old-key"), "{uri}");

			assert!(matches!(
				next_to_rivet(&mut ws).await,
				protocol::ToRivet::ToRivetMetadata(_)
			));
			assert!(matches!(
				next_to_rivet(&mut ws).await,
				protocol::ToRivet::ToRivetStopping
			));
			assert_eq!(
				stopped_of(next_to_rivet(&mut ws).await),
				vec![("a".to_string(), 1, 3)]
			);

			// A request the gateway still routes to the old key.
			send(
				&mut ws,
				protocol::ToEnvoy::ToEnvoyTunnelMessage(protocol::ToEnvoyTunnelMessage {
					message_id: protocol::MessageId {
						gateway_id: [1; 4],
						request_id: [2; 4],
						message_index: 0,
					},
					message_kind: protocol::ToEnvoyTunnelMessageKind::ToEnvoyRequestStart(
						protocol::ToEnvoyRequestStart {
							actor_id: "a".to_string(),
							actor_generation: Some(1),
							method: "POST".to_string(),
							path: "/action/increment".to_string(),
							headers: HashMap::new(),
							body: None,
							stream: false,
							response_stream: false,
						},
					),
				}),
			)
			.await;
			let protocol::ToRivet::ToRivetTunnelMessage(answer) = next_to_rivet(&mut ws).await
			else {
				panic!("expected an answer");
			};
			let protocol::ToRivetTunnelMessageKind::ToRivetResponseStart(start) =
				answer.message_kind
			else {
				panic!("expected a response start");
			};
			assert_eq!(start.status, 503);
			assert_eq!(start.headers["x-rivet-error"], "actor.restarting");

			// A start this host never ran is reported stopped too.
			send(
				&mut ws,
				protocol::ToEnvoy::ToEnvoyCommands(vec![protocol::CommandWrapper {
					checkpoint: protocol::ActorCheckpoint {
						actor_id: "b".to_string(),
						generation: 2,
						index: 0,
					},
					inner: protocol::Command::CommandStartActor(protocol::CommandStartActor {
						config: protocol::ActorConfig {
							name: "counter".to_string(),
							key: None,
							create_ts: 0,
							input: None,
						},
						hibernating_requests: Vec::new(),
						preloaded_kv: None,
					}),
				}]),
			)
			.await;
			assert_eq!(
				stopped_of(next_to_rivet(&mut ws).await),
				vec![("b".to_string(), 2, 0)]
			);

			send(
				&mut ws,
				protocol::ToEnvoy::ToEnvoyAckEvents(protocol::ToEnvoyAckEvents {
					last_event_checkpoints: vec![
						protocol::ActorCheckpoint {
							actor_id: "a".to_string(),
							generation: 1,
							index: 3,
						},
						protocol::ActorCheckpoint {
							actor_id: "b".to_string(),
							generation: 2,
							index: 0,
						},
					],
				}),
			)
			.await;
			ws.close(None).await.unwrap();
		});

		let (acked, refused) = farewell(
			&shared,
			"old-key",
			vec![crate::actor::stopped_as_lost("a".to_string(), 1, 3)],
		)
		.await
		.unwrap();
		server.await.unwrap();
		assert!(acked);
		assert_eq!(refused, 1);
	}
}
