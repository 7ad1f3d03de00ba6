//! `ActorContext`, JavaScript's handle on one actor generation: the largest
//! class of the addon, one file per part of its JavaScript surface. Each
//! file is an `impl ActorContext` block (napi-rs merges them into the one
//! class) and imports only `handle`, never another part.
//!
//! - `handle`: the struct (core context, application span, workflow flag,
//!   ray ID) and the helpers every part shares;
//! - `identity`: `actorId`, `name`, `key`, `region`, `generation`,
//!   `sameActorInstance`;
//! - `state`: `state`, `saveState`, `requestSave`, `requestSaveAndWait`;
//! - `runtime_state`: `runtimeState`, `clearRuntimeState`;
//! - `lifecycle`: `setAlarm`, keep-awake regions and tracked promises, the
//!   `run` handler, `sleep`, `destroy`, `abortSignal`;
//! - `conns`: `conns`, `broadcast`, `connectConn`, `disconnectConn(s)`;
//! - `storage`: `kv`, `sql`, `beginStateTransaction`, `queue`, `schedule`
//!   (the classes they return are in `crate::classes`);
//! - `telemetry`: `withApplicationSpan`, `invocationTraceContext`,
//!   `startCallSpan`;
//! - `workflow`: `saveStateAndWorkflowBatch`, and the `WorkflowSpan` /
//!   `WorkflowStepSpan` classes, whose `ctx()` is a handle;
//! - `inspector`: the inspector's calls, and its two module functions;
//! - `runtime_socket`: `provisionActorRuntimeSocket`;
//! - `bookkeeping`: the runtime's bookkeeping calls (mostly no-ops).

mod handle;

pub mod bookkeeping;
pub mod conns;
pub mod identity;
pub mod inspector;
pub mod lifecycle;
pub mod runtime_socket;
pub mod runtime_state;
pub mod state;
pub mod storage;
pub mod telemetry;
pub mod workflow;

pub use handle::ActorContext;
