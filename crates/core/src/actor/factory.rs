//! A registered actor type: its configuration and its hooks.

use std::sync::Arc;

use super::{ActorConfig, DynHooks};

#[derive(Clone)]
pub struct ActorFactory {
    pub config: Arc<ActorConfig>,
    pub hooks: Arc<DynHooks>,
}

impl ActorFactory {
    pub fn new(config: ActorConfig, hooks: Arc<DynHooks>) -> Self {
        Self { config: Arc::new(config), hooks }
    }
}

impl std::fmt::Debug for ActorFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorFactory").field("config", &self.config).finish_non_exhaustive()
    }
}
