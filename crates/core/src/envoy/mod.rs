//! The engine link through `rivet-envoy-client`: the callbacks the envoy
//! invokes (start, stop, fetch, websocket) and the [`EngineLink`] an actor
//! uses to reach the engine (intents, KV, alarms, SQLite pages).
//!
//! [`EngineLink`]: crate::actor::EngineLink

mod callbacks;
mod key_index;
mod link;
mod sqlite;

pub use callbacks::RegistryCallbacks;
pub use key_index::KeyIndex;
pub use link::EnvoyLink;
pub use sqlite::EnvoyPages;
