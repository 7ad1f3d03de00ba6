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

#[derive(Default)]
pub struct StoppedHere {
	at: HashMap<(String, u32), Instant>,
}

impl StoppedHere {
	pub fn insert(&mut self, actor_id: &str, generation: u32) {
		if self.at.len() >= PRUNE_ABOVE {
			let now = Instant::now();
			self.at
				.retain(|_, at| now.duration_since(*at) < REMEMBER_FOR);
		}
		self.at
			.insert((actor_id.to_owned(), generation), Instant::now());
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
	fn stays_bounded() {
		let mut stopped = StoppedHere::default();
		for i in 0..(PRUNE_ABOVE * 3) {
			stopped.insert(&format!("actor-{i}"), 1);
		}
		// Nothing is old enough to prune here; the bound is by age.
		assert_eq!(stopped.len(), PRUNE_ABOVE * 3);
	}
}
