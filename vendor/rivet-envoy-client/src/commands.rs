use std::collections::HashMap;

use rivet_envoy_protocol as protocol;

use crate::actor::create_actor;
use crate::connection::ws_send;
use crate::envoy::EnvoyContext;
use crate::stringify::stringify_command_wrapper;

pub const ACK_COMMANDS_INTERVAL_MS: u64 = 5 * 60 * 1000;

pub async fn handle_commands(ctx: &mut EnvoyContext, commands: Vec<protocol::CommandWrapper>) {
	tracing::info!(command_count = commands.len(), "received commands");
	for command_wrapper in &commands {
		tracing::info!(
			command = %stringify_command_wrapper(command_wrapper),
			"received command"
		);
	}

	// Collect every actor in the raw batch before dedup, so a replayed
	// (skipped) command is still re-acked instead of being replayed forever.
	let batch_actors: Vec<(String, u32)> = commands
		.iter()
		.map(|c| (c.checkpoint.actor_id.clone(), c.checkpoint.generation))
		.collect();

	for command_wrapper in commands {
		let checkpoint = command_wrapper.checkpoint;
		let dedup_key = (checkpoint.actor_id.clone(), checkpoint.generation);

		// Drop replayed commands. `pegboard-envoy` re-streams every unacked
		// command on reconnect, and the command index is monotonic per
		// `(actor_id, generation)`, so any index at or below the highest one
		// we have already processed is a duplicate.
		if let Some(&last_idx) = ctx.processed_command_idx.get(&dedup_key) {
			if checkpoint.index <= last_idx {
				tracing::debug!(
					actor_id = %checkpoint.actor_id,
					generation = checkpoint.generation,
					index = checkpoint.index,
					last_idx,
					"skipping replayed command"
				);
				continue;
			}
		}
		ctx.processed_command_idx
			.insert(dedup_key, checkpoint.index);

		// rivetkit-native patch: a start for a generation that stopped here
		// (or whose stop came first) is a late duplicate; running it would
		// run a generation the engine no longer tracks (`crate::stopped_here`).
		// Its index is recorded above, so the batch ack below lets the
		// engine forget it instead of replaying it on every reconnect.
		if matches!(
			command_wrapper.inner,
			protocol::Command::CommandStartActor(_)
		) && ctx
			.stopped_here
			.blocks_start(&checkpoint.actor_id, checkpoint.generation)
			&& ctx
				.get_actor(&checkpoint.actor_id, Some(checkpoint.generation))
				.is_none()
		{
			tracing::info!(
				actor_id = %checkpoint.actor_id,
				generation = checkpoint.generation,
				"dropped a late start for a generation that already stopped here"
			);
			continue;
		}

		match command_wrapper.inner {
			protocol::Command::CommandStartActor(val) => {
				let actor_name = val.config.name.clone();
				let (handle, lost, active_http_request_count) = create_actor(
					ctx.shared.clone(),
					checkpoint.actor_id.clone(),
					checkpoint.generation,
					val.config,
					val.hibernating_requests,
					val.preloaded_kv,
				);

				ctx.insert_actor_with_lost_signal(
					checkpoint.actor_id.clone(),
					checkpoint.generation,
					handle,
					lost,
					active_http_request_count,
					actor_name,
					checkpoint.index,
				);
			}
			protocol::Command::CommandStopActor(val) => {
				let entry = ctx.get_actor_entry_mut(&checkpoint.actor_id, checkpoint.generation);

				if let Some(entry) = entry {
					// Signal loss before the stop reaches the actor task, which may be busy
					// starting or already tearing down.
					if matches!(val.reason, protocol::StopActorReason::Lost) {
						entry.lost.cancel();
					}
					entry.received_stop = true;
					entry.last_command_idx = checkpoint.index;
					let _ = entry.handle.send(crate::actor::ToActor::Stop {
						command_idx: checkpoint.index,
						reason: val.reason,
					});
				} else {
					// rivetkit-native patch: a stop for a generation this envoy
					// does not host is answered, so the engine ends the stop now
					// instead of waiting out its threshold; a start it overtook
					// is dropped on arrival (the floor). A generation that ran
					// here reports its own `Stopped` (its task, or the lost
					// path), so only one never seen here is answered.
					report_unhosted_generation_stopped(
						ctx,
						&checkpoint.actor_id,
						checkpoint.generation,
					)
					.await;
				}
			}
		}
	}

	// Ack the whole batch immediately. Anything left unacked stays in the
	// engine's `ActorCommandKey` subspace, and `envoy_conn_prepare` re-streams
	// that subspace on every reconnect, so a start that waits for the periodic
	// tick can be replayed for up to `ACK_COMMANDS_INTERVAL_MS` and resurrect a
	// stopped actor or replace a live one. Scope to just this batch's actors
	// instead of a full-state ack, and do not clear dedup; the tick handles
	// full re-acks, recovery, and clearing.
	if !batch_actors.is_empty() {
		send_batch_command_acks(ctx, &batch_actors).await;
	}
	// rivetkit-native patch: a stop may release parked requests (`crate::stopped_here`).
	crate::tunnel::release_parked_requests(ctx).await;
}

/// Ack only the given actors' latest processed command index. Used for the
/// immediate post-batch ack. Does not clear dedup (see the race note in
/// `send_command_ack`); a failed send is retried by the replayed batch or tick.
async fn send_batch_command_acks(ctx: &EnvoyContext, actors: &[(String, u32)]) {
	let mut highest: HashMap<(String, u32), i64> = HashMap::new();
	for key in actors {
		if let Some(&index) = ctx.processed_command_idx.get(key) {
			highest.insert(key.clone(), index);
		}
	}

	if highest.is_empty() {
		return;
	}

	send_ack_checkpoints(ctx, checkpoints_from(highest)).await;
}

pub async fn send_command_ack(ctx: &mut EnvoyContext) {
	// Merge live actors and the dedup map, highest index per actor-generation.
	// Live actors are re-acked every tick (recovers an ack accepted locally but
	// never committed by the server); the dedup map covers stops whose actor was
	// already removed and is cleared once acked.
	let mut highest: HashMap<(String, u32), i64> = HashMap::new();
	for (actor_id, generations) in &ctx.actors {
		for (generation, entry) in generations {
			if entry.last_command_idx >= 0 {
				highest.insert((actor_id.clone(), *generation), entry.last_command_idx);
			}
		}
	}
	for ((actor_id, generation), &index) in &ctx.processed_command_idx {
		highest
			.entry((actor_id.clone(), *generation))
			.and_modify(|existing| *existing = (*existing).max(index))
			.or_insert(index);
	}

	if highest.is_empty() {
		return;
	}

	let last_command_checkpoints = checkpoints_from(highest);
	let send_failed = send_ack_checkpoints(ctx, last_command_checkpoints.clone()).await;

	// Skip the dedup clear if the ack never left this process. Otherwise
	// `pegboard-envoy` would replay the commands on reconnect with no dedup
	// state to suppress them.
	if send_failed {
		return;
	}

	// TODO: Race condition. We clear `processed_command_idx` as soon as the
	// ack bytes leave this process, not when `pegboard-envoy` actually
	// commits the matching `clear_range` over `ActorCommandKey` entries. If
	// the WS drops between `ws_send` returning and the server applying the
	// ack, on reconnect `pegboard-envoy` will replay these commands and the
	// dedup map will no longer be populated to drop them, allowing a
	// stopped actor to be resurrected or a live actor to be replaced. The
	// window is narrow (the gap between OS-accepted bytes and the FDB
	// commit), but a strictly correct fix needs an ack-of-ack from
	// `pegboard-envoy` so we only clear after positive confirmation.
	// This now also applies to removed actors whose stops are acked here: a
	// short-lived actor can be resurrected in the same window. Same fix.
	for cp in &last_command_checkpoints {
		ctx.processed_command_idx
			.remove(&(cp.actor_id.clone(), cp.generation));
	}
}

fn checkpoints_from(highest: HashMap<(String, u32), i64>) -> Vec<protocol::ActorCheckpoint> {
	highest
		.into_iter()
		.map(
			|((actor_id, generation), index)| protocol::ActorCheckpoint {
				actor_id,
				generation,
				index,
			},
		)
		.collect()
}

/// Send an ack for the given checkpoints. Returns whether the send failed.
async fn send_ack_checkpoints(
	ctx: &EnvoyContext,
	last_command_checkpoints: Vec<protocol::ActorCheckpoint>,
) -> bool {
	ws_send(
		&ctx.shared,
		protocol::ToRivet::ToRivetAckCommands(protocol::ToRivetAckCommands {
			last_command_checkpoints,
		}),
	)
	.await
}

/// rivetkit-native patch: answers the engine's stop for a generation this
/// envoy never ran with `Stopped` (as rivet-envoy-client 3.0 does), after
/// raising the actor's stopped floor so that a start the stop overtook is
/// dropped. A generation that stopped here already sent its own `Stopped`.
async fn report_unhosted_generation_stopped(
	ctx: &mut EnvoyContext,
	actor_id: &str,
	generation: u32,
) {
	if ctx.stopped_here.contains(actor_id, Some(generation)) {
		tracing::debug!(%actor_id, generation, "stop for a generation that already stopped here");
		return;
	}
	ctx.stopped_here
		.raise_floor(actor_id, generation, crate::time::Instant::now());
	tracing::info!(%actor_id, generation, "stop for a generation this envoy does not host: reporting it stopped");
	let index = ctx
		.pending_events
		.get(&(actor_id.to_owned(), generation))
		.and_then(|pending| pending.events.iter().map(|e| e.checkpoint.index).max())
		.map_or(0, |index| index + 1);
	let event = protocol::EventWrapper {
		checkpoint: protocol::ActorCheckpoint {
			actor_id: actor_id.to_owned(),
			generation,
			index,
		},
		inner: protocol::Event::EventActorStateUpdate(protocol::EventActorStateUpdate {
			state: protocol::ActorState::ActorStateStopped(protocol::ActorStateStopped {
				code: protocol::StopCode::Ok,
				message: None,
			}),
		}),
	};
	crate::events::handle_send_events(ctx, vec![event]).await;
}
