//! The cloneable handle through which the dispatcher talks to a task.

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::actor::commands::{DispatchCommand, LifecycleCommand, Reply, ShutdownKind};
use std::sync::Arc;

use crate::actor::queue::QueueSendResult;
use crate::actor::{ActorConfig, ActorContext, Conn, HttpRequest, HttpResponse, QueueSendRequest};
use crate::error::{catalog, RivetError};

#[derive(Clone)]
pub struct ActorTaskHandle {
    ctx: ActorContext,
    config: Arc<ActorConfig>,
    lifecycle_tx: mpsc::Sender<LifecycleCommand>,
    dispatch_tx: mpsc::Sender<DispatchCommand>,
    dispatch_capacity: usize,
    joined: Shared<BoxFuture<'static, Result<(), String>>>,
}

impl std::fmt::Debug for ActorTaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ActorTaskHandle").field(&self.ctx).finish()
    }
}

impl ActorTaskHandle {
    pub(super) fn new(
        ctx: ActorContext,
        config: Arc<ActorConfig>,
        lifecycle_tx: mpsc::Sender<LifecycleCommand>,
        dispatch_tx: mpsc::Sender<DispatchCommand>,
        dispatch_capacity: usize,
        join: JoinHandle<()>,
    ) -> Self {
        let joined = join
            .map(|result| match result {
                Ok(()) => Ok(()),
                Err(err) if err.is_panic() => Err("the actor task panicked".to_string()),
                Err(_) => Err("the actor task was cancelled".to_string()),
            })
            .boxed()
            .shared();
        Self { ctx, config, lifecycle_tx, dispatch_tx, dispatch_capacity, joined }
    }

    pub fn context(&self) -> &ActorContext {
        &self.ctx
    }

    /// The configuration of this actor's type (limits, timeouts).
    pub fn config(&self) -> Arc<ActorConfig> {
        self.config.clone()
    }

    /// Same task (pointer equality of the underlying channel).
    pub fn same_task(&self, other: &ActorTaskHandle) -> bool {
        self.lifecycle_tx.same_channel(&other.lifecycle_tx)
    }

    /// Runs the start sequence; resolves once hooks ran and traffic is accepted.
    pub async fn start(&self) -> anyhow::Result<()> {
        self.lifecycle(|reply| LifecycleCommand::Start { reply }).await
    }

    /// Stops the generation; resolves when its shutdown (final save included) is done.
    pub async fn stop(&self, kind: ShutdownKind) -> anyhow::Result<()> {
        self.lifecycle(|reply| LifecycleCommand::Stop { kind, reply }).await
    }

    async fn lifecycle(&self, make: impl FnOnce(Reply<()>) -> LifecycleCommand) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.lifecycle_tx.send(make(tx)).await.map_err(|_| catalog::actor_not_ready().into_anyhow())?;
        rx.await.map_err(|_| catalog::actor_dropped_reply().into_anyhow())?
    }

    /// Waits for the task to exit.
    pub async fn join(&self) -> anyhow::Result<()> {
        self.joined.clone().await.map_err(|reason| {
            RivetError::new(crate::error_codes::ACTOR_PANICKED, format!("Actor task panicked while running: {reason}"))
                .into_anyhow()
        })
    }

    /// Routes a raw HTTP request to the actor. A full queue answers
    /// `actor.overloaded` rather than queueing without bound.
    pub async fn http(&self, request: HttpRequest) -> anyhow::Result<HttpResponse> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(DispatchCommand::Http { request, reply: tx }, "handle an http request")?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    /// Runs an action; `args` and the output are CBOR.
    pub async fn action(&self, name: String, args: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        self.action_on(None, None, name, args).await
    }

    /// Runs an action called on a connection.
    pub async fn action_on(
        &self,
        conn: Option<Conn>,
        message_index: Option<u16>,
        name: String,
        args: Vec<u8>,
    ) -> anyhow::Result<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(DispatchCommand::Action { conn, message_index, name, args, reply: tx }, "run an action")?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    /// `POST /action/{name}` in one trip: connect a transient connection
    /// with `params`, run the action on it, disconnect it.
    pub async fn http_action(
        &self,
        params: Vec<u8>,
        request: HttpRequest,
        name: String,
        args: Vec<u8>,
    ) -> anyhow::Result<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(DispatchCommand::HttpAction { params, request, name, args, reply: tx }, "run an action")?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    /// `POST /queue/{name}` in one trip: connect a transient connection
    /// with `params`, run `onQueueSend` on it, disconnect it.
    pub async fn queue_send(
        &self,
        params: Vec<u8>,
        request: HttpRequest,
        send: QueueSendRequest,
    ) -> anyhow::Result<QueueSendResult> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(DispatchCommand::QueueSend { params, request, send, reply: tx }, "dispatch_queue_send")?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    /// Connects `conn`: `onBeforeConnect`, `createConnState`, `onConnect`.
    /// On success the connection is registered with the actor.
    pub async fn connect(&self, conn: Conn, request: Option<HttpRequest>) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(DispatchCommand::Connect { conn, request, reply: tx }, "connect")?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    /// Disconnects `conn` (idempotent): removed at once, `onDisconnect` runs
    /// in the actor. If the actor is gone the connection simply ends.
    pub fn disconnect(&self, conn: Conn) {
        self.ctx.disconnect(&conn);
    }

    /// Subscribes `conn` to `event_name` after `onBeforeSubscribe` allowed it.
    pub async fn subscribe(&self, conn: Conn, event_name: String) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(DispatchCommand::Subscribe { conn, event_name, reply: tx }, "subscribe")?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    /// Runs `onWebSocket` for the raw WebSocket `ws` opened on `conn`;
    /// resolves when the hook did.
    pub async fn open_websocket(
        &self,
        conn: Conn,
        ws: crate::actor::websocket::RawWebSocket,
        request: Option<HttpRequest>,
    ) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(
            DispatchCommand::OpenWebSocket { conn, ws, request: Box::new(request), reply: tx },
            "open a websocket",
        )?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())?
    }

    fn dispatch(&self, cmd: DispatchCommand, operation: &str) -> anyhow::Result<()> {
        self.dispatch_tx.try_send(cmd).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => {
                catalog::actor_overloaded("dispatch", operation, self.dispatch_capacity).into_anyhow()
            }
            mpsc::error::TrySendError::Closed(_) => catalog::actor_not_ready().into_anyhow(),
        })
    }
}
