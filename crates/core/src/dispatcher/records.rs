//! The records the dispatcher keeps per (actor id, generation).

use std::fmt;

use crate::actor::{ActorContext, ActorTaskHandle, ShutdownKind};

/// `(actor id, generation)`: every per-generation record is keyed by it, so
/// a command for generation N can never touch generation N+1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceKey {
    pub actor_id: String,
    pub generation: u32,
}

impl InstanceKey {
    pub fn new(actor_id: impl Into<String>, generation: u32) -> Self {
        Self { actor_id: actor_id.into(), generation }
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.actor_id, self.generation)
    }
}

/// A generation whose start succeeded.
#[derive(Clone)]
pub enum InstanceRecord {
    Active(ActorTaskHandle),
    Stopping { handle: ActorTaskHandle, kind: ShutdownKind },
}

impl InstanceRecord {
    pub fn handle(&self) -> &ActorTaskHandle {
        match self {
            InstanceRecord::Active(handle) | InstanceRecord::Stopping { handle, .. } => handle,
        }
    }

    pub fn context(&self) -> &ActorContext {
        self.handle().context()
    }
}

/// The engine's stop reasons (envoy protocol `StopActorReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    SleepIntent,
    StopIntent,
    Destroy,
    GoingAway,
    Lost,
}

impl StopReason {
    /// Sleep-like reasons keep the actor's data.
    pub fn kind(self) -> ShutdownKind {
        match self {
            StopReason::SleepIntent | StopReason::GoingAway | StopReason::Lost => ShutdownKind::Sleep,
            StopReason::StopIntent | StopReason::Destroy => ShutdownKind::Destroy,
        }
    }
}

/// Signals the engine that a stop finished. Signalled exactly once
/// (invariant I5): consuming methods make a second signal impossible.
pub struct StopHandle(Box<dyn FnOnce(anyhow::Result<()>) + Send>);

impl StopHandle {
    pub fn new(f: impl FnOnce(anyhow::Result<()>) + Send + 'static) -> Self {
        Self(Box::new(f))
    }

    pub fn complete(self) {
        (self.0)(Ok(()))
    }

    pub fn fail(self, err: anyhow::Error) {
        (self.0)(Err(err))
    }

    pub fn finish(self, result: anyhow::Result<()>) {
        (self.0)(result)
    }
}

/// A stop that arrived before its generation was registered.
pub struct PendingStop {
    pub reason: StopReason,
    pub stop: StopHandle,
}
