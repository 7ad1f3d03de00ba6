//! rivetkit-native patch: the envoy's key, replaced after a fence.
//!
//! The engine keeps per-key records: the envoy's liveness, its place in the
//! load balancer and the commands it has not acknowledged. Once this host
//! has declared its actors lost (its lease ran out, or it stayed away past
//! the lost threshold), those records describe generations it no longer
//! runs: a reconnect under the same key would be handed the old key's
//! unacknowledged commands. So the key is replaced, as the published client
//! does from 2.3.32 on, and the connection made under the old key is given
//! up: the next connection registers a new, empty envoy. The old
//! generations' `Stopped` goes out under the old key, on its last
//! connection and on a farewell connection (`crate::connection::farewell`);
//! the engine ignores events that do not come from an actor's current envoy.

use std::fmt;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

pub struct EnvoyKey {
	current: RwLock<Arc<str>>,
	/// Bumped on every replacement; a connection watches it to end itself.
	epoch: watch::Sender<u64>,
}

impl EnvoyKey {
	pub fn new(key: String) -> Self {
		Self {
			current: RwLock::new(key.into()),
			epoch: watch::Sender::new(0),
		}
	}

	/// A fresh random key.
	pub fn random() -> Self {
		Self::new(uuid::Uuid::new_v4().to_string())
	}

	pub fn get(&self) -> Arc<str> {
		self.current
			.read()
			.unwrap_or_else(|p| p.into_inner())
			.clone()
	}

	/// Replaces the key with a fresh one; returns the new key.
	pub fn rotate(&self) -> Arc<str> {
		let key: Arc<str> = uuid::Uuid::new_v4().to_string().into();
		*self.current.write().unwrap_or_else(|p| p.into_inner()) = key.clone();
		self.epoch.send_modify(|epoch| *epoch += 1);
		key
	}

	/// How many times the key was replaced.
	pub fn epoch(&self) -> u64 {
		*self.epoch.borrow()
	}

	/// Changes once the key is replaced.
	pub fn subscribe(&self) -> watch::Receiver<u64> {
		self.epoch.subscribe()
	}
}

impl From<String> for EnvoyKey {
	fn from(key: String) -> Self {
		Self::new(key)
	}
}

impl fmt::Display for EnvoyKey {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str(&self.get())
	}
}

impl fmt::Debug for EnvoyKey {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		fmt::Debug::fmt(&*self.get(), f)
	}
}

#[cfg(test)]
mod tests {
	use super::EnvoyKey;

	#[test]
	fn rotate_replaces_the_key_and_wakes_watchers() {
		let key = EnvoyKey::from("first".to_string());
		let mut watcher = key.subscribe();
		assert_eq!(&*key.get(), "first");
		assert_eq!(key.epoch(), 0);
		let next = key.rotate();
		assert_eq!(key.epoch(), 1);
		assert_ne!(&*next, "first");
		assert_eq!(key.get(), next);
		assert_eq!(key.to_string(), next.to_string());
		assert!(watcher.has_changed().unwrap());
		watcher.mark_unchanged();
		key.rotate();
		assert!(watcher.has_changed().unwrap());
	}
}
