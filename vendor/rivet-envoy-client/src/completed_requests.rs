//! rivetkit-native patch: HTTP requests that completed a moment ago (as
//! the published client does from 2.3.32 on, #5936).
//!
//! An actor can finish a request while the gateway still sends frames for
//! it: the rest of an upload the handler did not read, or response credit
//! for bytes its client had not read yet. Such a trailing frame used to
//! find no route, be logged as a protocol violation and be answered with
//! an abort. It is dropped quietly instead, for [`REMEMBER_FOR`] after
//! the request completed.
//!
//! Bound: one entry per request completed in the last [`REMEMBER_FOR`],
//! pruned on every use (the request rate times 10 s).

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use crate::time::Instant;

/// Covers the frames the gateway sent before it saw the end of the response.
pub const REMEMBER_FOR: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct CompletedRequests {
	keys: HashSet<[u8; 8]>,
	expirations: VecDeque<(Instant, [u8; 8])>,
}

impl CompletedRequests {
	pub fn insert(&mut self, key: [u8; 8]) {
		let now = Instant::now();
		self.prune(now);
		if self.keys.insert(key) {
			self.expirations.push_back((now + REMEMBER_FOR, key));
		}
	}

	pub fn contains(&mut self, key: &[u8; 8]) -> bool {
		self.prune(Instant::now());
		self.keys.contains(key)
	}

	pub fn len(&self) -> usize {
		self.keys.len()
	}

	pub fn is_empty(&self) -> bool {
		self.keys.is_empty()
	}

	fn prune(&mut self, now: Instant) {
		while let Some((expires, key)) = self.expirations.front() {
			if *expires > now {
				break;
			}
			self.keys.remove(key);
			self.expirations.pop_front();
		}
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn remembers_then_forgets() {
		let mut done = CompletedRequests::default();
		done.insert([1; 8]);
		done.insert([1; 8]);
		assert!(done.contains(&[1; 8]));
		assert!(!done.contains(&[2; 8]));
		assert_eq!(done.len(), 1);
		done.prune(Instant::now() + REMEMBER_FOR);
		assert!(done.is_empty());
	}
}
