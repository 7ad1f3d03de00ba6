//! The hooks a host runtime provides for an actor type.
//!
//! The actor task calls them in the order of docs/generations.md
//! and bounds each with its timeout; implementations only run user code.
//! Every hook returns a `'static` future so the task can keep polling it
//! alongside client traffic (work is accepted during sleep grace).

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::request::{HttpRequest, HttpResponse, QueueSendRequest};
use super::websocket::RawWebSocket;
use super::{Conn, ScheduledFire};

/// Hooks of the shape `(ctx) -> ()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LifecycleHook {
    CreateVars,
    OnWake,
    OnBeforeActorStart,
    OnSleep,
    OnDestroy,
    /// The actor's alarm fired (`setAlarm`); an extension of ours for
    /// direct users.
    OnAlarm,
    /// The long-running `run` handler, started after the start hooks.
    Run,
}

impl LifecycleHook {
    pub fn name(self) -> &'static str {
        match self {
            LifecycleHook::CreateVars => "createVars",
            LifecycleHook::OnWake => "onWake",
            LifecycleHook::OnBeforeActorStart => "onBeforeActorStart",
            LifecycleHook::OnSleep => "onSleep",
            LifecycleHook::OnDestroy => "onDestroy",
            LifecycleHook::OnAlarm => "onAlarm",
            LifecycleHook::Run => "run",
        }
    }
}

/// Why the state is serialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerializeReason {
    Save,
    Inspector,
}

impl SerializeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SerializeReason::Save => "save",
            SerializeReason::Inspector => "inspector",
        }
    }
}

/// What `serializeState` returns: the state if it changed (and, later,
/// hibernatable connection changes).
#[derive(Debug, Clone, Default)]
pub struct StateDelta {
    pub state: Option<Vec<u8>>,
    /// The queue's handling mark when the host read the state
    /// ([`super::queue::Queue::handled_mark`]); `None`: read when the call
    /// began.
    pub queue_mark: Option<u64>,
}

/// User code for one actor type. Every method has a default that does
/// nothing, so a runtime implements only what the user defined.
///
/// `Ctx` is the context the hooks are called with: the core's
/// `ActorContext`, which holds them as `DynHooks`. Named here as an
/// associated type, so that this file and the context do not import each
/// other.
pub trait ActorHooks: Send + Sync + 'static {
    /// The actor context the hooks receive.
    type Ctx;

    /// `onMigrate({ctx, isNew})`; `None` when not defined.
    fn on_migrate(&self, _ctx: &Self::Ctx, _is_new: bool) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// `createState({ctx, input})` → initial state bytes; `None` when not defined.
    fn create_state(
        &self,
        _ctx: &Self::Ctx,
        _input: Option<Vec<u8>>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        None
    }

    /// `onCreate({ctx, input})`; `None` when not defined.
    fn on_create(&self, _ctx: &Self::Ctx, _input: Option<Vec<u8>>) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// Any `(ctx) -> ()` hook; `None` when not defined.
    fn lifecycle(&self, _hook: LifecycleHook, _ctx: &Self::Ctx) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// `serializeState({ctx, reason})`: the host's latest state, asked for
    /// before every save. `None` when not defined (the context's state is
    /// saved as is).
    fn serialize_state(
        &self,
        _ctx: &Self::Ctx,
        _reason: SerializeReason,
    ) -> Option<BoxFuture<'static, anyhow::Result<StateDelta>>> {
        None
    }

    /// `onBeforeConnect({ctx, params, request})`: reject to refuse the connection.
    /// The parameters are borrowed: an actor without the hook (the usual
    /// case) copies nothing for it.
    fn on_before_connect(
        &self,
        _ctx: &Self::Ctx,
        _params: &[u8],
        _request: Option<&HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// `createConnState({ctx, conn, params, request})` → the connection's
    /// initial state. Borrowed parameters, as for `on_before_connect`.
    fn create_conn_state(
        &self,
        _ctx: &Self::Ctx,
        _conn: &Conn,
        _params: &[u8],
        _request: Option<&HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        None
    }

    /// `onConnect({ctx, conn, request})`.
    fn on_connect(
        &self,
        _ctx: &Self::Ctx,
        _conn: &Conn,
        _request: Option<HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// `onDisconnect({ctx, conn})`, after the connection was removed.
    fn on_disconnect(&self, _ctx: &Self::Ctx, _conn: &Conn) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// `onBeforeSubscribe({ctx, conn, eventName})`: reject to refuse.
    fn on_before_subscribe(
        &self,
        _ctx: &Self::Ctx,
        _conn: &Conn,
        _event_name: &str,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// The action `name` with CBOR-encoded `args` (an array), resolving to
    /// the CBOR-encoded output, called on `conn` (`None` for HTTP actions).
    /// `None` when no such action is defined. `cancel` fires when the core
    /// stops waiting (timeout, abort).
    fn action(
        &self,
        _ctx: &Self::Ctx,
        _conn: Option<&Conn>,
        _name: &str,
        _args: Vec<u8>,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        None
    }

    /// A scheduled action firing (`schedule.after/at`): the action `name`
    /// with its stored args and `fire` (why it runs). By default the plain
    /// action, with no connection.
    fn scheduled_action(
        &self,
        ctx: &Self::Ctx,
        name: &str,
        args: Vec<u8>,
        _fire: &ScheduledFire,
        cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>> {
        self.action(ctx, None, name, args, cancel)
    }

    /// `onQueueSend({ctx, conn, request, name, body, wait, timeoutMs,
    /// cancelToken})`: a client's queue send, on a transient connection.
    /// The host checks the queue's schema and permissions, then sends (or
    /// enqueues and waits) through `ctx.queue()`. `None` when not defined:
    /// the client gets `napi.invalid_state` (internal, masked), as from the
    /// reference.
    fn on_queue_send(
        &self,
        _ctx: &Self::Ctx,
        _conn: &Conn,
        _request: HttpRequest,
        _send: QueueSendRequest,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<super::queue::QueueSendResult>>> {
        None
    }

    /// `onRequest({ctx, request, cancelToken})`. `cancel` fires when the core
    /// stops waiting (timeout, abort). `None` when not defined.
    fn on_request(
        &self,
        _ctx: &Self::Ctx,
        _request: HttpRequest,
        _cancel: CancellationToken,
    ) -> Option<BoxFuture<'static, anyhow::Result<HttpResponse>>> {
        None
    }

    /// `getWorkflowHistory({ctx})`: the workflow's history, encoded by the
    /// host for the inspector (`Ok(None)`: no history yet). `None` when the
    /// actor's `run` is not a workflow (docs/inspector.md).
    fn workflow_history(&self, _ctx: &Self::Ctx) -> Option<BoxFuture<'static, anyhow::Result<Option<Vec<u8>>>>> {
        None
    }

    /// `replayWorkflow({ctx, entryId})`: replays the workflow from an entry
    /// (from the start when `None`) and returns its history, as
    /// [`ActorHooks::workflow_history`]. `None` when not defined.
    fn replay_workflow(
        &self,
        _ctx: &Self::Ctx,
        _entry_id: Option<String>,
    ) -> Option<BoxFuture<'static, anyhow::Result<Option<Vec<u8>>>>> {
        None
    }

    /// `onWebSocket({ctx, conn, ws, request})`: a raw WebSocket opened on
    /// `conn` (already connected). Its frames reach the event sink the host
    /// sets on `ws`; a failure closes the socket with 1011 `<group>.<code>`.
    /// `None` when not defined.
    fn on_websocket(
        &self,
        _ctx: &Self::Ctx,
        _conn: &Conn,
        _ws: RawWebSocket,
        _request: Option<HttpRequest>,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }
}
