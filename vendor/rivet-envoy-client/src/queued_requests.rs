//! rivetkit-native patch: a cap on the HTTP requests waiting in one
//! actor's inbox (as rivet-envoy-client 3.0 does).
//!
//! A request is admitted to a generation's inbox before its task takes
//! it; while the generation starts (the start hooks can take seconds)
//! nothing takes them, and the inbox is unbounded. Past the cap a request
//! is answered `envoy.actor_overloaded` at admission instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Default for `EnvoyConfig::max_queued_requests_per_actor`.
pub const DEFAULT_MAX_QUEUED_REQUESTS_PER_ACTOR: usize = 1024;

/// The requests admitted to one generation and not yet taken by its task.
#[derive(Default)]
pub struct QueuedRequests(AtomicUsize);

impl QueuedRequests {
	/// Admits one request unless `cap` already wait. Its place is given
	/// back when the returned guard drops (taken by the task, or dropped
	/// with the inbox).
	pub fn admit(self: &Arc<Self>, cap: usize) -> Option<QueuedRequest> {
		let previous = self
			.0
			.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
				(queued < cap).then_some(queued + 1)
			})
			.ok()?;
		if previous + 1 == cap {
			tracing::warn!(
				cap,
				"an actor has as many requests waiting as it may: later ones are answered envoy.actor_overloaded until it takes them (usually a slow start)"
			);
		}
		Some(QueuedRequest(self.clone()))
	}

	pub fn len(&self) -> usize {
		self.0.load(Ordering::Acquire)
	}

	pub fn is_empty(&self) -> bool {
		self.len() == 0
	}
}

/// One admitted request's place in its actor's queue.
pub struct QueuedRequest(Arc<QueuedRequests>);

impl Drop for QueuedRequest {
	fn drop(&mut self) {
		self.0.0.fetch_sub(1, Ordering::AcqRel);
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn admits_up_to_the_cap_and_frees_places_on_drop() {
		let queue = Arc::new(QueuedRequests::default());
		let first = queue.admit(2).expect("first");
		let second = queue.admit(2).expect("second");
		assert!(
			queue.admit(2).is_none(),
			"a third was admitted past the cap"
		);
		drop(first);
		assert_eq!(queue.len(), 1);
		let third = queue.admit(2).expect("a freed place is reused");
		drop((second, third));
		assert!(queue.is_empty());
	}
}
