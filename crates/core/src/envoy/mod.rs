//! The engine link through `rivet-envoy-client`: the callbacks the envoy
//! invokes (start, stop, fetch, websocket) and the [`EngineLink`] an actor
//! uses to reach the engine (intents, KV, alarms, SQLite pages).
//!
//! [`EngineLink`]: crate::actor::EngineLink

mod callbacks;
mod link;
mod sqlite;

pub use callbacks::RegistryCallbacks;
pub use link::EnvoyLink;
pub use sqlite::EnvoyPages;
