//! The registry: the actor factories a host registered, and the serve run
//! that connects them to the engine until shutdown.
//!
//! A registry is a plain name → factory map (last registration wins, like
//! the reference). `serve` consumes it: one registry runs once.

pub mod config;
pub(crate) mod drain;
mod serve;

use std::collections::HashMap;

pub use config::{EngineSpawnMode, ServeConfig};
pub use serve::ServeHandle;
// For the serverless runtime, whose envoys connect and drain the same way.
pub(crate) use config::should_manage_engine;
pub(crate) use drain::drain;
pub(crate) use serve::connect_envoy;

use crate::actor::ActorFactory;

#[derive(Default)]
pub struct CoreRegistry {
    factories: HashMap<String, ActorFactory>,
}

impl CoreRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces) the factory for `name`.
    pub fn register(&mut self, name: impl Into<String>, factory: ActorFactory) {
        self.factories.insert(name.into(), factory);
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Per-actor metadata sent to the engine: `{icon?, name?}` only.
    pub fn actor_metadata(&self) -> HashMap<String, serde_json::Value> {
        self.factories
            .iter()
            .map(|(name, factory)| {
                let mut meta = serde_json::Map::new();
                if let Some(icon) = &factory.config.icon {
                    meta.insert("icon".into(), icon.clone().into());
                }
                if let Some(display) = &factory.config.name {
                    meta.insert("name".into(), display.clone().into());
                }
                (name.clone(), serde_json::Value::Object(meta))
            })
            .collect()
    }

    /// Puts every actor type under the contract profile of the RivetKit
    /// version that serves it (docs/versions.md). Call it before serving:
    /// the generations read it from their actor type's config.
    pub fn set_contract(&mut self, contract: crate::contract::RivetkitVersion) {
        for factory in self.factories.values_mut() {
            std::sync::Arc::make_mut(&mut factory.config).contract = contract;
        }
    }

    pub(crate) fn into_factories(self) -> HashMap<String, ActorFactory> {
        self.factories
    }
}
