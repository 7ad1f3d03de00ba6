//! rivetkit-native patch: the generations this envoy stopped a moment ago.
//!
//! The engine's gateway picks the envoy before it sends a request, and it
//! learns that a generation stopped only once the actor's workflow has
//! applied the `Stopped` this envoy sent. A request that arrives in
//! between used to be answered `envoy.actor_not_found`, which the gateway
//! passes to the client (a few requests in a thousand during a rolling
//! deploy). Such a request never runs here. It is answered
//! `actor.restarting` (503, retryable), which the RivetKit client retries
//! at once and the gateway then routes to the next generation. While the
//! engine has not yet taken the sleep of a generation this host put to
//! sleep itself, a retry would come straight back here, so the request is
//! parked until the engine's stop for it arrives (at most [`PARK_FOR`]).

use std::collections::HashMap;
use std::time::Duration;

use crate::time::Instant;

/// How long a stopped generation is remembered. The engine applies a
/// `Stopped` within a second or two here; this is far past that.
pub const REMEMBER_FOR: Duration = Duration::from_secs(60);
/// Entries are pruned by age once there are more than this many (so the
/// map holds at most what a minute of stops adds).
const PRUNE_ABOVE: usize = 1024;

/// How long a request waits for the engine's stop of its generation.
pub const PARK_FOR: Duration = Duration::from_secs(5);
/// Requests parked at most; past it they are answered at once.
pub const MAX_PARKED: usize = 1024;

/// A request for a generation this host put to sleep, waiting for the
/// engine's stop of it before it is answered `actor.restarting`.
pub struct Parked {
	pub actor_id: String,
	pub generation: Option<u32>,
	pub gateway_id: crate::protocol::GatewayId,
	pub request_id: crate::protocol::RequestId,
	pub session: Option<u64>,
	pub at: Instant,
}

/// How long an actor's stopped floor holds (see [`StoppedHere::blocks_start`]):
/// past the engine's command deadline plus its lost threshold, the window
/// in which a start it forwarded can still arrive (as rivet-envoy-client
/// 3.0 does).
pub const FLOOR_FOR: Duration = Duration::from_secs(120);
/// Floors kept at most (as rivet-envoy-client 3.0): a backstop for stop
/// rates that [`FLOOR_FOR`] alone cannot bound. At the cap the oldest floor
/// is forgotten early, with a warning.
pub const FLOOR_CAPACITY: usize = 65_536;

#[derive(Default)]
pub struct StoppedHere {
	at: HashMap<(String, u32), Instant>,
	/// Per actor, the highest generation stopped (or declared lost, or
	/// answered as not hosted) here, and when.
	floor: HashMap<String, (u32, Instant)>,
	/// Sizes at which each map is next pruned by age: twice what the last
	/// prune left, so pruning costs O(1) per insert over time.
	prune_at_above: usize,
	prune_floor_above: usize,
}

impl StoppedHere {
	pub fn insert(&mut self, actor_id: &str, generation: u32) {
		let now = Instant::now();
		if self.at.len() >= self.prune_at_above.max(PRUNE_ABOVE) {
			self.at
				.retain(|_, at| now.duration_since(*at) < REMEMBER_FOR);
			self.prune_at_above = self.at.len() * 2;
		}
		self.at.insert((actor_id.to_owned(), generation), now);
		self.raise_floor(actor_id, generation, now);
	}

	/// Records that `generation` of `actor_id` will not run here, without
	/// making it a tombstone for requests (it never ran here).
	pub fn raise_floor(&mut self, actor_id: &str, generation: u32, now: Instant) {
		if !self.floor.contains_key(actor_id) {
			self.make_room_for_a_floor(now);
		}
		let floor = self
			.floor
			.entry(actor_id.to_owned())
			.or_insert((generation, now));
		if generation >= floor.0 {
			*floor = (generation, now);
		}
	}

	fn make_room_for_a_floor(&mut self, now: Instant) {
		if self.floor.len() >= self.prune_floor_above.max(PRUNE_ABOVE) {
			self.floor
				.retain(|_, (_, at)| now.duration_since(*at) < FLOOR_FOR);
			self.prune_floor_above = self.floor.len() * 2;
		}
		if self.floor.len() < FLOOR_CAPACITY {
			return;
		}
		// Still full of live floors: forget the oldest eighth at once, so the
		// sort is paid once per many inserts.
		let mut ages: Vec<Instant> = self.floor.values().map(|(_, at)| *at).collect();
		let cut = ages.len() / 8;
		ages.select_nth_unstable(cut);
		let cutoff = ages[cut];
		let before = self.floor.len();
		self.floor.retain(|_, (_, at)| *at > cutoff);
		tracing::warn!(
			capacity = FLOOR_CAPACITY,
			forgotten = before - self.floor.len(),
			"too many actors stopped here within the floor's lifetime: forgetting the oldest floors early"
		);
	}

	/// Whether a start for `generation` of `actor_id` is a late duplicate:
	/// that generation, or a newer one, stopped here in the last
	/// [`FLOOR_FOR`]. Generations only grow per actor, so starting it would
	/// run a generation the engine no longer tracks.
	pub fn blocks_start(&self, actor_id: &str, generation: u32) -> bool {
		self.floor.get(actor_id).is_some_and(|(floor, at)| {
			generation <= *floor && Instant::now().duration_since(*at) < FLOOR_FOR
		})
	}

	/// Whether this envoy stopped that generation (any, without one) in
	/// the last [`REMEMBER_FOR`].
	pub fn contains(&self, actor_id: &str, generation: Option<u32>) -> bool {
		let now = Instant::now();
		let fresh = |at: &Instant| now.duration_since(*at) < REMEMBER_FOR;
		match generation {
			Some(generation) => self
				.at
				.get(&(actor_id.to_owned(), generation))
				.is_some_and(fresh),
			None => self
				.at
				.iter()
				.any(|((id, _), at)| id == actor_id && fresh(at)),
		}
	}

	pub fn len(&self) -> usize {
		self.at.len()
	}

	pub fn is_empty(&self) -> bool {
		self.at.is_empty()
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn remembers_the_generation_it_stopped() {
		let mut stopped = StoppedHere::default();
		stopped.insert("a", 2);
		assert!(stopped.contains("a", Some(2)));
		assert!(stopped.contains("a", None));
		assert!(!stopped.contains("a", Some(3)));
		assert!(!stopped.contains("b", None));
	}

	#[test]
	fn a_start_at_or_below_the_floor_is_blocked() {
		let mut stopped = StoppedHere::default();
		stopped.insert("a", 3);
		assert!(stopped.blocks_start("a", 3));
		assert!(stopped.blocks_start("a", 1));
		assert!(!stopped.blocks_start("a", 4));
		assert!(!stopped.blocks_start("b", 1));
		// The floor only rises.
		stopped.insert("a", 2);
		assert!(stopped.blocks_start("a", 3));
		stopped.raise_floor("c", 5, Instant::now());
		assert!(stopped.blocks_start("c", 5));
		assert!(
			!stopped.contains("c", Some(5)),
			"a floor alone is no tombstone"
		);
	}

	#[test]
	fn stays_bounded() {
		let mut stopped = StoppedHere::default();
		for i in 0..(PRUNE_ABOVE * 3) {
			stopped.insert(&format!("actor-{i}"), 1);
		}
		// Nothing is old enough to prune here; the bound is by age.
		assert_eq!(stopped.len(), PRUNE_ABOVE * 3);
	}

	#[test]
	fn floors_stay_under_their_cap() {
		let mut stopped = StoppedHere::default();
		let now = Instant::now();
		for i in 0..(FLOOR_CAPACITY + 10) {
			let at = now + Duration::from_micros(i as u64);
			stopped.raise_floor(&format!("actor-{i}"), 1, at);
		}
		assert!(stopped.floor.len() <= FLOOR_CAPACITY);
		// The newest floors are kept; a known actor's floor rises in place.
		let newest = format!("actor-{}", FLOOR_CAPACITY + 9);
		assert!(stopped.blocks_start(&newest, 1));
		let len = stopped.floor.len();
		stopped.raise_floor(&newest, 4, now);
		assert_eq!(stopped.floor.len(), len);
		assert!(stopped.blocks_start(&newest, 4));
	}
}
