//! Client traffic inside the task: the second admission check and the
//! tracked, time-bounded handling of each request and action.

use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::action_slots::{ActionSlot, Reserved};
use super::ActorTask;
use crate::actor::commands::DispatchCommand;
use crate::actor::commands::ShutdownKind;
use crate::actor::lifecycle::Phase;
use crate::actor::HttpResponse;
use crate::error::{catalog, RivetError};

impl ActorTask {
    /// Admission of a command as it arrives (check 3 of docs/admission.md),
    /// the one door every command goes through: the table of
    /// [`crate::actor::lifecycle::admit`] again, since the phase may have
    /// moved since the dispatcher admitted it.
    ///
    /// Work whose answer the output gate holds (raw HTTP requests and
    /// actions) is also refused during sleep grace, with RivetKit's
    /// retryable `actor.restarting` (it never runs here; the client retries
    /// on the next generation). RivetKit drops the actor's state from
    /// memory at the end of `onSleep`, so what such work changed could be
    /// lost after its answer was confirmed (docs/durability.md, "Sleep grace").
    fn admit(&self, cmd: &DispatchCommand) -> anyhow::Result<()> {
        self.ctx.admit()?;
        let answered = matches!(
            cmd,
            DispatchCommand::Http { .. } | DispatchCommand::Action { .. } | DispatchCommand::HttpAction { .. }
        );
        if answered && self.gates_answers() && self.ctx.phase() == Phase::Stopping(ShutdownKind::Sleep) {
            return Err(catalog::actor_restarting("the generation is going to sleep").into_anyhow());
        }
        Ok(())
    }

    pub(super) fn handle_dispatch(&mut self, cmd: DispatchCommand) {
        if cmd.caller_gone() {
            // Nobody waits for it any more: the work never starts.
            return;
        }
        if let Err(err) = self.admit(&cmd) {
            cmd.refuse(err.context(self.ctx.specifier()));
            return;
        }
        let cancel = CancellationToken::new();
        match cmd {
            DispatchCommand::Http { request, reply } => {
                let Some(fut) = self.factory.hooks.on_request(&self.ctx, request, cancel.clone()) else {
                    let _ = reply.send(Ok(HttpResponse { status: 404, ..Default::default() }));
                    return;
                };
                let timeout = self.factory.config.on_request_timeout;
                self.spawn_tracked_reply(fut, Some(timeout), cancel, reply);
            }
            DispatchCommand::Action { conn, message_index, name, args, reply } => {
                let reserved = match self.action_slots.reserve() {
                    Ok(reserved) => reserved,
                    Err(err) => {
                        let _ = reply.send(Err(err.context(self.ctx.specifier())));
                        return;
                    }
                };
                let fut: BoxFuture<'static, anyhow::Result<Vec<u8>>> = match reserved {
                    // Called now, in the order the traffic arrived.
                    Reserved::Now(slot) => {
                        match self.factory.hooks.action(&self.ctx, conn.as_ref(), &name, args, cancel.clone()) {
                            Some(fut) => Box::pin(async move {
                                let _slot = slot;
                                fut.await
                            }),
                            None => Box::pin(std::future::ready(Err(action_not_found(&name)))),
                        }
                    }
                    // Called once a slot frees up.
                    Reserved::Later(slot) => {
                        let (ctx, factory, token, conn) =
                            (self.ctx.clone(), self.factory.clone(), cancel.clone(), conn.clone());
                        Box::pin(async move {
                            once_slotted(slot, token, &name, |token| {
                                factory.hooks.action(&ctx, conn.as_ref(), &name, args, token)
                            })
                            .await
                        })
                    }
                };
                let fut = match (conn, message_index) {
                    (Some(conn), Some(index)) => Box::pin(async move {
                        let output = fut.await;
                        if output.is_ok() {
                            conn.set_client_message_index(index);
                        }
                        output
                    }),
                    _ => fut,
                };
                let timeout = self.factory.config.action_timeout;
                self.spawn_tracked_reply(fut, Some(timeout), cancel, reply);
            }
            DispatchCommand::HttpAction { params, request, name, args, reply } => {
                if reply.is_closed() {
                    return;
                }
                let slot = match self.action_slots.reserve() {
                    Ok(reserved) => Box::pin(reserved.wait()),
                    Err(err) => {
                        let _ = reply.send(Err(err.context(self.ctx.specifier())));
                        return;
                    }
                };
                let action = Action { name, args, slot };
                let fut = http_action(self.ctx.clone(), self.factory.clone(), params, request, action, cancel.clone());
                self.spawn_tracked_reply(fut, None, cancel, reply);
            }
            DispatchCommand::QueueSend { params, request, send, reply } => {
                let fut = queue_send(self.ctx.clone(), self.factory.clone(), params, request, send, cancel.clone());
                self.spawn_tracked_reply(fut, None, cancel, reply);
            }
            DispatchCommand::Connect { conn, request, reply } => {
                let fut = connect_hooks(self.ctx.clone(), self.factory.clone(), conn, request);
                // Each hook has its own bound; the whole is bounded again by the caller.
                let bound = self.factory.config.on_before_connect_timeout
                    + self.factory.config.create_conn_state_timeout
                    + self.factory.config.on_connect_timeout;
                self.spawn_tracked_reply(fut, Some(bound), cancel, reply);
            }
            DispatchCommand::Subscribe { conn, event_name, reply } => {
                let hook = self.factory.hooks.on_before_subscribe(&self.ctx, &conn, &event_name);
                let timeout = self.factory.config.on_before_connect_timeout;
                let fut: BoxFuture<'static, anyhow::Result<()>> = Box::pin(async move {
                    if let Some(hook) = hook {
                        super::with_timeout("onBeforeSubscribe", timeout, hook).await?;
                    }
                    conn.subscribe(&event_name);
                    Ok(())
                });
                self.spawn_tracked_reply(fut, Some(timeout + std::time::Duration::from_millis(100)), cancel, reply);
            }
            DispatchCommand::OpenWebSocket { conn, ws, request, reply } => {
                let Some(fut) = self.factory.hooks.on_websocket(&self.ctx, &conn, ws, *request) else {
                    let err = RivetError::new(
                        crate::error_codes::ACTOR_WEBSOCKET_NOT_HANDLED,
                        "The actor has no `onWebSocket` handler.",
                    );
                    let _ = reply.send(Err(err.into_anyhow().context(self.ctx.specifier())));
                    return;
                };
                // No core timeout : the socket and its connection
                // live on after the hook, which only sets them up.
                let specifier = self.ctx.specifier();
                self.inflight.spawn(async move {
                    let _ = reply.send(fut.await.map_err(|err| err.context(specifier)));
                });
            }
        }
    }

    /// Runs `onDisconnect` for the connections that ended, as tracked work.
    pub(super) fn run_disconnects(&mut self) {
        for conn in self.ctx.clients().take_ended() {
            let Some(fut) = self.factory.hooks.on_disconnect(&self.ctx, &conn) else { continue };
            let timeout = self.factory.config.on_connect_timeout;
            self.inflight.spawn(async move {
                if let Err(err) = super::with_timeout("onDisconnect", timeout, fut).await {
                    tracing::warn!(conn = conn.id(), error = %format!("{err:#}"), "onDisconnect failed");
                }
            });
        }
    }

    /// Runs `fut` as tracked in-flight work, bounded by `timeout` if given
    /// (`actor.action_timed_out`). `cancel` (the JS cancel token) fires as
    /// soon as the caller stops waiting, while the work goes on to its end
    /// or its bound, and in any case once it is done.
    fn spawn_tracked_reply<T: Send + 'static>(
        &mut self,
        fut: BoxFuture<'static, anyhow::Result<T>>,
        timeout: Option<std::time::Duration>,
        cancel: CancellationToken,
        mut reply: oneshot::Sender<anyhow::Result<T>>,
    ) {
        let ctx = self.ctx.clone();
        self.inflight.spawn(async move {
            let _cancel_on_exit = cancel.clone().drop_guard();
            let work = async move {
                match timeout {
                    Some(timeout) => tokio::time::timeout(timeout, fut)
                        .await
                        .unwrap_or_else(|_| Err(catalog::action_timed_out().into_anyhow())),
                    None => fut.await,
                }
            };
            tokio::pin!(work);
            let result = tokio::select! {
                result = &mut work => result,
                _ = reply.closed() => {
                    cancel.cancel();
                    work.await
                }
            };
            let _ = reply.send(result.map_err(|err| err.context(ctx.specifier())));
        });
    }
}

/// An HTTP action to run once it has a slot (`maxActions`).
struct Action {
    name: String,
    args: Vec<u8>,
    slot: BoxFuture<'static, ActionSlot>,
}

/// Calls the action once `slot` is there. A caller that leaves while it
/// waits: the action never starts.
async fn once_slotted(
    slot: impl std::future::Future<Output = ActionSlot>,
    cancel: CancellationToken,
    name: &str,
    call: impl FnOnce(CancellationToken) -> Option<BoxFuture<'static, anyhow::Result<Vec<u8>>>>,
) -> anyhow::Result<Vec<u8>> {
    let _slot = tokio::select! {
        slot = slot => slot,
        _ = cancel.cancelled() => return Err(caller_left()),
    };
    match call(cancel) {
        Some(fut) => fut.await,
        None => Err(action_not_found(name)),
    }
}

/// What a waiting action resolves to once its caller left (nobody reads it).
fn caller_left() -> anyhow::Error {
    catalog::actor_stopping(Some("the caller left before the action started")).into_anyhow()
}

fn action_not_found(name: &str) -> anyhow::Error {
    RivetError::new(crate::error_codes::ACTOR_ACTION_NOT_FOUND, format!("Action `{name}` was not found."))
        .with_metadata(serde_json::json!({ "name": name }))
        .into_anyhow()
}

/// `onBeforeConnect` → `createConnState` → register → `onConnect`, each
/// bounded by its own timeout. A failure after registering unregisters.
fn connect_hooks(
    ctx: crate::actor::ActorContext,
    factory: crate::actor::ActorFactory,
    conn: crate::actor::Conn,
    request: Option<crate::actor::HttpRequest>,
) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(async move {
        let hooks = &factory.hooks;
        let config = &factory.config;
        if let Some(fut) = hooks.on_before_connect(&ctx, conn.params(), request.as_ref()) {
            super::with_timeout("onBeforeConnect", config.on_before_connect_timeout, fut).await?;
        }
        if let Some(fut) = hooks.create_conn_state(&ctx, &conn, conn.params(), request.as_ref()) {
            let state = super::with_timeout("createConnState", config.create_conn_state_timeout, fut).await?;
            conn.set_state(state);
        }
        if conn.is_closed() {
            return Err(crate::error::catalog::actor_stopping(Some("the connection closed during setup")).into_anyhow());
        }
        ctx.conns().insert(conn.clone());
        if let Some(fut) = hooks.on_connect(&ctx, &conn, request) {
            if let Err(err) = super::with_timeout("onConnect", config.on_connect_timeout, fut).await {
                ctx.conns().remove(&conn);
                return Err(err);
            }
        }
        Ok(())
    })
}

/// An HTTP action: connect a transient connection (each connect hook
/// bounded by its timeout), run the action on it (bounded by the action
/// timeout), then disconnect it, `onDisconnect` included, whatever the
/// action's outcome.
fn http_action(
    ctx: crate::actor::ActorContext,
    factory: crate::actor::ActorFactory,
    params: Vec<u8>,
    request: crate::actor::HttpRequest,
    action: Action,
    cancel: CancellationToken,
) -> BoxFuture<'static, anyhow::Result<Vec<u8>>> {
    Box::pin(async move {
        let Action { name, args, slot } = action;
        let conn = crate::actor::Conn::new(crate::actor::conn::new_id(), params, None, None);
        conn.note_caller(&request.headers);
        connect_hooks(ctx.clone(), factory.clone(), conn.clone(), Some(request)).await?;
        // The wait for a slot counts toward the action's timeout.
        let run =
            once_slotted(slot, cancel, &name, |cancel| factory.hooks.action(&ctx, Some(&conn), &name, args, cancel));
        let result = tokio::time::timeout(factory.config.action_timeout, run)
            .await
            .unwrap_or_else(|_| Err(catalog::action_timed_out().into_anyhow()));
        if ctx.end_conn(&conn) {
            if let Some(fut) = factory.hooks.on_disconnect(&ctx, &conn) {
                if let Err(err) = super::with_timeout("onDisconnect", factory.config.on_connect_timeout, fut).await {
                    tracing::warn!(conn = conn.id(), error = %format!("{err:#}"), "onDisconnect failed");
                }
            }
        }
        result
    })
}

/// A client's queue send: connect a transient connection (each connect
/// hook bounded by its timeout), run `onQueueSend` on it (bounded by the
/// request timeout, as the reference bounds it), then disconnect it,
/// `onDisconnect` included, whatever the outcome.
fn queue_send(
    ctx: crate::actor::ActorContext,
    factory: crate::actor::ActorFactory,
    params: Vec<u8>,
    request: crate::actor::HttpRequest,
    send: crate::actor::QueueSendRequest,
    cancel: CancellationToken,
) -> BoxFuture<'static, anyhow::Result<crate::actor::queue::QueueSendResult>> {
    Box::pin(async move {
        let conn = crate::actor::Conn::new(crate::actor::conn::new_id(), params, None, None);
        conn.note_caller(&request.headers);
        connect_hooks(ctx.clone(), factory.clone(), conn.clone(), Some(request.clone())).await?;
        let result = match factory.hooks.on_queue_send(&ctx, &conn, request, send, cancel) {
            Some(fut) => tokio::time::timeout(factory.config.on_request_timeout, fut)
                .await
                .unwrap_or_else(|_| Err(catalog::action_timed_out().into_anyhow())),
            // The reference's answer: an internal error (masked for clients).
            None => Err(catalog::invalid_state("callback onQueueSend is not configured").into_anyhow()),
        };
        if ctx.end_conn(&conn) {
            if let Some(fut) = factory.hooks.on_disconnect(&ctx, &conn) {
                if let Err(err) = super::with_timeout("onDisconnect", factory.config.on_connect_timeout, fut).await {
                    tracing::warn!(conn = conn.id(), error = %format!("{err:#}"), "onDisconnect failed");
                }
            }
        }
        result
    })
}
