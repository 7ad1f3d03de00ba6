//! The per-generation actor context shared by the task, the dispatcher and
//! the host runtime.
//!
//! It is built whole, once its actor type is known, and holds the
//! generation's identity, link and hooks beside its parts, each in its own
//! file: the signals admission reads ([`Signals`]), what the actor record
//! persists ([`Persisted`]), the `run` handler ([`RunHandler`]), the
//! connections ([`Clients`]), the output gate ([`Outbox`]), the inspector
//! ([`ActorInspector`]) and the database ([`Database`]). Methods that touch
//! one part live on it; those here combine parts or serve the host.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::clients::{Clients, Inbox};
use super::config::{ActorConfig, OutputGate};
use super::conn::{Conn, Connections};
use super::database::Database;
use super::hooks::ActorHooks;
use super::inspector::bookkeeping::ActorInspector;
use super::key::ActorKey;
use super::lifecycle::Phase;
use super::link::EngineLink;
use super::outbox::{self, Outbox};
use super::persisted::Persisted;
use super::queue::{Limits, Queue};
use super::request::HttpRequest;
use super::run_handler::RunHandler;
use super::save::SaveOptions;
use super::schedule::Schedule;
pub use super::signals::GenerationHold;
use super::signals::Signals;
use crate::error::{catalog, ActorSpecifier, RivetError};

#[derive(Clone)]
pub struct ActorContext(Arc<Inner>);

/// An actor type's hooks, as the context holds them and the task calls them.
pub type DynHooks = dyn ActorHooks<Ctx = ActorContext>;

/// A context that does not keep its generation alive (for what the
/// generation's own connections and sockets hold).
#[derive(Clone)]
pub struct WeakContext(std::sync::Weak<Inner>);

impl WeakContext {
    pub fn upgrade(&self) -> Option<ActorContext> {
        self.0.upgrade().map(ActorContext)
    }

    /// Whether some handle still holds the generation's context.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Whether this is `ctx`'s context (the same generation instance).
    pub fn refers_to(&self, ctx: &ActorContext) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&ctx.0))
    }
}

struct Inner {
    identity: ActorIdentity,
    link: Arc<dyn EngineLink>,
    /// The actor type's hooks (`None` for a type not registered, whose
    /// start fails); workflow flushes use them to serialize the state
    /// (docs/workflows.md).
    hooks: Option<Arc<DynHooks>>,
    signals: Signals,
    /// Keep-awake regions and tracked work.
    activity: Activity,
    persisted: Persisted,
    run: RunHandler,
    /// Scheduled actions (`schedule.after/at`) and cron jobs.
    schedule: Schedule,
    /// The message queue (`ctx.queue()`).
    queue: Queue,
    clients: Clients,
    /// Outputs held until their save is acknowledged ([`super::outbox`]).
    outbox: Outbox,
    inspector: ActorInspector,
    database: Database,
    /// The actor type's trace sample rates (docs/telemetry.md).
    tracing: Arc<crate::telemetry::ActorTracing>,
}

/// Identity of a generation, as the engine gives it on start.
#[derive(Debug, Clone)]
pub struct ActorIdentity {
    pub actor_id: String,
    pub generation: u32,
    pub name: String,
    pub key: ActorKey,
    pub region: String,
    pub input: Option<Vec<u8>>,
}

impl ActorContext {
    /// `lost` is the envoy's lost signal for this generation; `config` and
    /// `hooks` are its actor type's (limits and intervals are fixed for its
    /// life). Returns the context with the task's end of its traffic queue.
    pub fn new(
        identity: ActorIdentity,
        lost: CancellationToken,
        link: Arc<dyn EngineLink>,
        config: &ActorConfig,
        hooks: Option<Arc<DynHooks>>,
    ) -> (Self, Inbox) {
        let (clients, inbox) = Clients::new(config.dispatch_queue_capacity);
        let ctx = Self(Arc::new(Inner {
            identity,
            link,
            hooks,
            signals: Signals::new(lost),
            activity: Activity::default(),
            persisted: Persisted::new(config.state_save_interval),
            run: RunHandler::default(),
            schedule: Schedule::with_limit(config.max_schedules),
            queue: Queue::new(
                Limits::new(config.max_queue_size, config.max_queue_message_size)
                    .with_max_deliveries(config.max_queue_deliveries),
            ),
            clients,
            outbox: Outbox::new(config.output_gate == OutputGate::On && config.has_state),
            inspector: ActorInspector::default(),
            database: Database::new(config.enable_actor_runtime_socket, config.sqlite_profiling.clone()),
            tracing: config.tracing.clone(),
        }));
        (ctx, inbox)
    }

    // --- identity ---------------------------------------------------------

    pub fn actor_id(&self) -> &str {
        &self.0.identity.actor_id
    }
    pub fn generation(&self) -> u32 {
        self.0.identity.generation
    }
    pub fn name(&self) -> &str {
        &self.0.identity.name
    }
    pub fn key(&self) -> &ActorKey {
        &self.0.identity.key
    }
    /// The actor type's trace sample rates.
    pub fn tracing(&self) -> &crate::telemetry::ActorTracing {
        &self.0.tracing
    }
    pub fn region(&self) -> &str {
        &self.0.identity.region
    }
    pub fn input(&self) -> Option<&[u8]> {
        self.0.identity.input.as_deref()
    }
    pub fn link(&self) -> &Arc<dyn EngineLink> {
        &self.0.link
    }
    pub fn hooks(&self) -> Option<Arc<DynHooks>> {
        self.0.hooks.clone()
    }

    /// `{actorId, generation, key}` attached to every error this generation returns.
    pub fn specifier(&self) -> ActorSpecifier {
        ActorSpecifier {
            actor_id: self.actor_id().to_owned(),
            generation: u64::from(self.generation()),
            key: Some(self.key().format()),
        }
    }

    /// True when both handles point at the same generation.
    pub fn same_instance(&self, other: &ActorContext) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.0))
    }

    // --- parts ------------------------------------------------------------

    /// Phase, lost and abort signals, write fence, requests, holds.
    pub fn signals(&self) -> &Signals {
        &self.0.signals
    }
    /// Keep-awake regions and tracked work.
    pub fn activity(&self) -> &Activity {
        &self.0.activity
    }
    /// State, alarm, saves.
    pub fn persisted(&self) -> &Persisted {
        &self.0.persisted
    }
    pub fn run_handler(&self) -> &RunHandler {
        &self.0.run
    }
    /// Scheduled actions and cron jobs.
    pub fn schedule(&self) -> &Schedule {
        &self.0.schedule
    }
    /// The message queue.
    pub fn queue(&self) -> &Queue {
        &self.0.queue
    }
    pub fn clients(&self) -> &Clients {
        &self.0.clients
    }
    /// The live connections; any of them keeps the actor awake.
    pub fn conns(&self) -> &Connections {
        self.0.clients.conns()
    }
    pub(crate) fn outbox(&self) -> &Outbox {
        &self.0.outbox
    }
    /// The inspector's token and counters.
    pub fn inspector(&self) -> &ActorInspector {
        &self.0.inspector
    }

    // --- signals ----------------------------------------------------------

    pub fn is_lost(&self) -> bool {
        self.signals().is_lost()
    }
    pub fn mark_lost(&self) {
        self.signals().mark_lost()
    }
    pub fn lost_token(&self) -> &CancellationToken {
        self.signals().lost_token()
    }
    /// The actor's abort signal: fires when the generation begins to stop.
    pub fn abort_token(&self) -> &CancellationToken {
        self.signals().abort_token()
    }
    pub fn aborted(&self) -> bool {
        self.signals().aborted()
    }
    /// The token every write of this generation is fenced by: a put is
    /// dropped before it leaves the host once it fired.
    pub fn write_fence(&self) -> &CancellationToken {
        self.signals().write_fence()
    }
    /// True once this generation may no longer write (lost, or stopped).
    pub fn writes_closed(&self) -> bool {
        self.signals().writes_closed()
    }
    /// The task's phase.
    pub fn phase(&self) -> Phase {
        self.signals().phase()
    }
    /// Between the start hooks and the final save.
    pub fn started(&self) -> bool {
        self.signals().started()
    }
    pub fn destroy_requested(&self) -> bool {
        self.signals().destroy_requested()
    }
    pub fn mark_destroy_requested(&self) {
        self.signals().mark_destroy_requested()
    }
    pub fn sleep_requested(&self) -> bool {
        self.signals().sleep_requested()
    }
    pub fn hold_generation(&self) -> GenerationHold {
        self.signals().hold()
    }
    pub fn is_generation_finished(&self) -> bool {
        self.signals().is_finished()
    }
    pub async fn wait_for_generation_finished(&self) {
        self.signals().wait_finished().await
    }

    /// Whether client traffic may run now (the admission table of
    /// [`super::lifecycle::admit`]), with this generation's specifier.
    pub fn admit(&self) -> anyhow::Result<()> {
        self.signals().admit().map_err(|err| err.with_actor(self.specifier()).into_anyhow())
    }

    /// `Ok` while this generation may write; the structured refusal a
    /// stale handle gets otherwise (`actor.stopping`).
    pub fn check_writable(&self) -> anyhow::Result<()> {
        if !self.writes_closed() {
            return Ok(());
        }
        let why = if self.is_lost() {
            "this actor generation was declared lost; its writes are refused"
        } else {
            "this actor generation has stopped; its writes are refused (use the context of the current generation)"
        };
        Err(catalog::actor_stopping(Some(why)).with_actor(self.specifier()).into_anyhow())
    }

    /// Ends this generation's writes, once its final save is done: waits
    /// for a write under way, then closes the fence, so no write of this
    /// handle can land after the engine is told the generation stopped.
    /// Save waiters still pending are answered with the refusal.
    pub(crate) async fn end_writes(&self) {
        let _writing = self.persisted().lock_writes().await;
        self.signals().close_writes();
        self.close_saves();
    }

    /// The same without waiting for a write under way: for a task that
    /// ends without a shutdown (a failed start, a panic, a lost generation).
    /// A database still open is closed in the background, under a
    /// generation hold.
    pub(crate) fn end_writes_now(&self) {
        self.signals().close_writes();
        let db = self.0.database.open_sqlite();
        let socket = self.0.database.runtime_socket();
        if db.is_some() || socket.path().is_some() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let (ctx, hold) = (self.clone(), self.hold_generation());
                    runtime.spawn(async move {
                        ctx.0.database.runtime_socket().shutdown().await;
                        if let Some(db) = db {
                            db.close_for_generation_end().await;
                        }
                        drop(hold);
                    });
                }
                Err(_) => socket.shutdown_now(),
            }
        }
        self.close_saves();
    }

    fn close_saves(&self) {
        let refusal = catalog::actor_stopping(Some("this actor generation has stopped")).with_actor(self.specifier());
        self.persisted().saves().close(refusal);
    }

    /// `ctx.sleep()`: asks the engine to stop this generation with `SleepIntent`.
    pub fn sleep(&self) -> anyhow::Result<()> {
        if !self.started() {
            if self.sleep_requested() || self.destroy_requested() {
                return Err(catalog::actor_stopping(None).into_anyhow());
            }
            return Err(catalog::actor_starting().into_anyhow());
        }
        if self.signals().request_sleep() {
            return Ok(());
        }
        self.0.link.request_sleep(self.actor_id(), self.generation());
        Ok(())
    }

    /// `ctx.destroy()`: asks the engine to destroy the actor (`StopIntent`).
    pub fn destroy(&self) -> anyhow::Result<()> {
        if !self.started() {
            return Err(catalog::actor_starting().into_anyhow());
        }
        if self.signals().request_destroy() {
            return Err(catalog::actor_stopping(Some("destroy was already requested")).into_anyhow());
        }
        self.0.link.request_destroy(self.actor_id(), self.generation());
        Ok(())
    }

    /// Reports a crash to the engine (the actor is put to sleep and the
    /// error recorded), e.g. when the `run` handler fails.
    pub fn stop_with_error(&self, message: String) {
        if self.signals().request_sleep() || self.destroy_requested() {
            return;
        }
        self.0.link.report_crash(self.actor_id(), self.generation(), message);
    }

    // --- SQLite and the runtime socket ------------------------------------

    /// The generation's SQLite database: created on the first call, opened
    /// on its first statement.
    pub fn sqlite(&self) -> &crate::sqlite::ActorDatabase {
        self.0.database.sqlite_or(|| {
            crate::sqlite::ActorDatabase::new(
                self.specifier(),
                self.0.link.clone(),
                self.write_fence().clone(),
                crate::sqlite::SqlitePool::global(),
            )
        })
    }

    /// Closes the database for the end of the generation (at once if it
    /// was never opened); later statements are refused.
    pub async fn close_sqlite(&self) {
        self.sqlite().close_for_generation_end().await;
    }

    /// Provisions the generation's runtime socket (once; later calls give
    /// the same path): `actor_runtime_socket.not_enabled` unless the actor
    /// type enabled it, `.closed` once the generation stopped,
    /// `.database_unavailable` on a host without a page store.
    pub fn provision_runtime_socket(&self) -> anyhow::Result<String> {
        use super::runtime_socket as socket;
        let refuse = |e: RivetError| Err(e.with_actor(self.specifier()).into_anyhow());
        if !self.0.database.runtime_socket().is_enabled() {
            return refuse(socket::not_enabled());
        }
        if self.writes_closed() {
            return refuse(socket::closed());
        }
        if self.0.link.sqlite_transport().is_none() {
            return refuse(socket::database_unavailable());
        }
        self.0.database.runtime_socket().provision(self.sqlite())
    }

    /// Where the runtime socket listens, while it does.
    pub fn runtime_socket_path(&self) -> Option<String> {
        self.0.database.runtime_socket().path()
    }

    /// Closes the runtime socket for the end of the generation (idempotent).
    pub async fn shutdown_runtime_socket(&self) {
        self.0.database.runtime_socket().shutdown().await;
    }

    // --- state and saves --------------------------------------------------

    pub fn state(&self) -> Vec<u8> {
        self.persisted().state()
    }
    /// Replaces the state, read now: it reflects every queue message
    /// handled so far (call it where the state was serialized, on the
    /// JavaScript thread for the napi layer).
    pub fn set_state(&self, state: Vec<u8>) {
        let mark = self.queue().handled_mark();
        self.set_state_at(state, mark);
    }
    /// Replaces the state, read when the queue's handling mark was `mark`
    /// ([`super::queue::Queue::handled_mark`]).
    pub fn set_state_at(&self, state: Vec<u8>, mark: u64) {
        self.persisted().replace_state(state, mark);
        self.0.inspector.state_changed();
    }

    /// `requestSave`: persist soon (throttled). Returns the request's revision.
    /// A no-op once the generation stopped (a hint to a task that is gone).
    pub fn request_save(&self, options: SaveOptions) -> Option<u64> {
        let persisted = self.persisted();
        persisted.saves().request(options, persisted.save_interval())
    }

    /// `requestSaveAndWait`: resolves once a save covering this request is
    /// acknowledged by the engine.
    pub async fn request_save_and_wait(&self, options: SaveOptions) -> anyhow::Result<()> {
        if !self.started() && !self.aborted() {
            return Err(catalog::actor_starting().into_anyhow());
        }
        self.check_writable()?;
        match self.request_save(options) {
            Some(revision) => self.persisted().saves().wait_for(revision).await,
            None => self.check_writable(),
        }
    }

    // --- alarm and wake-ups -----------------------------------------------

    /// The alarm that will wake this actor, if any (ms since the epoch).
    pub fn alarm(&self) -> Option<i64> {
        self.persisted().alarm()
    }

    /// Sets (or clears) the alarm: persisted with the actor record, and the
    /// engine is told the actor's next wake-up so a sleeping actor wakes on time.
    pub fn set_alarm(&self, timestamp_ms: Option<i64>) -> anyhow::Result<()> {
        self.check_writable()?;
        self.persisted().replace_alarm(timestamp_ms);
        self.sync_engine_alarm();
        self.request_save(SaveOptions { immediate: true, max_wait: None });
        Ok(())
    }

    /// Restores the persisted alarm at start without pushing it again.
    pub(crate) fn restore_alarm(&self, timestamp_ms: Option<i64>) {
        self.persisted().replace_alarm(timestamp_ms);
    }

    /// The actor's next wake-up: the earliest of its alarm and its
    /// scheduled events.
    pub fn next_wake(&self) -> Option<i64> {
        earliest(self.alarm(), self.0.schedule.next())
    }

    /// Sets (or clears) the time the `run` handler wants the actor awake
    /// by: the engine's alarm covers it too, so a sleeping actor is started
    /// (and its `run` with it) on time. Not persisted, and nothing fires
    /// in-process: an awake `run` keeps its own timers (docs/generations.md).
    pub fn set_run_wake_at(&self, timestamp_ms: Option<i64>) -> anyhow::Result<()> {
        self.check_writable()?;
        self.run_handler().set_wake_at(timestamp_ms);
        self.sync_engine_alarm();
        Ok(())
    }

    pub fn run_wake_at(&self) -> Option<i64> {
        self.run_handler().wake_at()
    }

    /// Pushes the next wake-up to the engine if it changed since the last push.
    pub(crate) fn sync_engine_alarm(&self) {
        if self.is_lost() {
            return;
        }
        let next = earliest(self.next_wake(), self.run_wake_at());
        if self.persisted().note_pushed_alarm(next) {
            self.0.link.set_alarm(self.actor_id(), self.generation(), next);
        }
    }

    // --- run handler ------------------------------------------------------

    pub fn run_handler_active(&self) -> bool {
        self.run_handler().is_active()
    }
    /// Starts the `run` handler again if it is not running.
    pub fn restart_run_handler(&self) {
        self.run_handler().restart()
    }

    // --- connections ------------------------------------------------------

    /// Closes `conn`'s socket, after the events the output gate still holds
    /// for it ([`super::outbox`]).
    pub fn close_conn_transport(&self, conn: &Conn, code: u16, reason: &str) {
        if !self.outbox().is_gated() || self.outbox().is_empty() {
            conn.close_transport(code, reason);
            return;
        }
        let (conn, reason) = (conn.clone(), reason.to_owned());
        // An answer always queues; the close goes out whatever the save did.
        let _ = self.after_save(outbox::Kind::Answer, move |_| conn.close_transport(code, &reason));
    }

    /// Ends a connection: removed at once (idempotent), its subscriptions
    /// cleared, and `onDisconnect` handed to the actor task, which runs it
    /// however busy its traffic queue is.
    pub fn disconnect(&self, conn: &Conn) {
        if self.end_conn(conn) {
            self.clients().push_ended(conn.clone());
        }
    }

    /// Removes `conn` (false if it was not registered) and its record.
    pub(crate) fn end_conn(&self, conn: &Conn) -> bool {
        if !self.conns().remove(conn) {
            return false;
        }
        conn.clear_subscriptions();
        if conn.is_hibernatable() {
            // Its record goes with it (on the next save, which we ask for now).
            self.conns().forget_record(conn.id());
            self.request_save(SaveOptions { immediate: true, max_wait: None });
        }
        true
    }

    /// A connection without a socket (e.g. for one HTTP request): the
    /// connect hooks run in the actor and it is registered on success.
    pub async fn connect_conn(&self, params: Vec<u8>, request: Option<HttpRequest>) -> anyhow::Result<Conn> {
        let conn = Conn::new(super::conn::new_id(), params, None, None);
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.clients()
            .traffic()
            .try_send(super::commands::DispatchCommand::Connect { conn: conn.clone(), request, reply })
            .map_err(|_| catalog::actor_not_ready().into_anyhow())?;
        rx.await.map_err(|_| catalog::actor_stopping(None).into_anyhow())??;
        Ok(conn)
    }

    /// `ctx.broadcast(name, args)` to subscribed connections.
    ///
    /// With the output gate on, the event leaves once the save covering
    /// what changed before it is acknowledged ([`super::outbox`]); it goes
    /// to the connections subscribed now, and the count is theirs.
    pub fn broadcast(&self, name: &str, args_cbor: &[u8]) -> usize {
        let targets: Vec<Conn> = self.conns().list().into_iter().filter(|c| c.is_subscribed(name)).collect();
        if !self.outbox().is_gated() {
            return self.send_events(&targets, name, args_cbor);
        }
        if targets.is_empty() {
            return 0;
        }
        let count = targets.len();
        match self.queue_event(targets, name, args_cbor) {
            Ok(()) => count,
            Err(err) => {
                tracing::warn!(event = name, error = %err.message, "a broadcast was dropped");
                0
            }
        }
    }

    /// `conn.send(name, args)`: an event to one connection, held by the
    /// output gate like a broadcast.
    pub fn send_event(&self, conn: &Conn, name: &str, args_cbor: &[u8]) -> anyhow::Result<()> {
        if !self.outbox().is_gated() {
            return conn.send(name, args_cbor).inspect_err(|_| self.end_if_closed(conn));
        }
        conn.check_can_send()?;
        self.queue_event(vec![conn.clone()], name, args_cbor).map_err(RivetError::into_anyhow)
    }

    /// Sends event `name` to each of `targets` (see
    /// [`Connections::send_to`]); returns how many took it.
    fn send_events(&self, targets: &[Conn], name: &str, args_cbor: &[u8]) -> usize {
        let sent = Connections::send_to(targets, name, args_cbor);
        if sent < targets.len() {
            for conn in targets {
                self.end_if_closed(conn);
            }
        }
        sent
    }

    /// Ends `conn` if its socket is closed: after a send that failed, the
    /// one that closed it (an event over `maxOutgoingMessageSize` closes
    /// the socket 1011 `message.outgoing_too_long`). Engine 2.3 answers
    /// that close with its own, which ended the connection; engine 3.0
    /// does not, and `onDisconnect` waited for the actor's next stop
    /// (docs/engine.md, "Closing a socket").
    fn end_if_closed(&self, conn: &Conn) {
        if conn.is_closed() {
            self.disconnect(conn);
        }
    }

    /// Queues event `name` for `targets` behind the output gate; it is
    /// dropped if the save it waits for fails.
    fn queue_event(&self, targets: Vec<Conn>, name: &str, args_cbor: &[u8]) -> Result<(), RivetError> {
        let (event, args) = (name.to_owned(), args_cbor.to_vec());
        let ctx = self.downgrade();
        self.after_save(outbox::Kind::Event, move |released| match released {
            Ok(()) => match ctx.upgrade() {
                Some(ctx) => {
                    ctx.send_events(&targets, &event, &args);
                }
                None => {
                    Connections::send_to(&targets, &event, &args);
                }
            },
            Err(err) => {
                tracing::debug!(event, error = %err.message, "an event was dropped: what it reports was not saved")
            }
        })
    }
}

/// The earlier of two optional times.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl std::fmt::Debug for ActorContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorContext")
            .field("actor_id", &self.actor_id())
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl ActorContext {
    /// Moves the phase, as the task does ([`Signals::enter`]).
    pub(crate) fn enter(&self, to: Phase) {
        self.signals().enter(to)
    }

    pub(crate) fn state_slot(&self) -> Option<u8> {
        self.persisted().state_slot()
    }

    /// Puts a command straight into the task's traffic queue.
    pub(crate) fn dispatch_for_test(&self, cmd: super::commands::DispatchCommand) -> bool {
        self.clients().traffic().try_send(cmd).is_ok()
    }

    /// A context for tests, backed by an in-memory link.
    pub fn for_test(actor_id: &str, generation: u32) -> Self {
        Self::for_test_with(actor_id, generation, Arc::new(super::link::MemoryLink::default()))
    }

    /// Another generation of the same actor over the same in-memory storage.
    pub fn for_test_sharing(other: &ActorContext, generation: u32) -> Self {
        Self::for_test_with(other.actor_id(), generation, other.link().clone())
    }

    pub(crate) fn for_test_with(actor_id: &str, generation: u32, link: Arc<dyn EngineLink>) -> Self {
        Self::for_test_built(actor_id, generation, link, None)
    }

    /// A context for tests whose actor type has `hooks`.
    pub(crate) fn for_test_with_hooks(actor_id: &str, generation: u32, hooks: Arc<DynHooks>) -> Self {
        Self::for_test_built(actor_id, generation, Arc::new(super::link::MemoryLink::default()), Some(hooks))
    }

    fn for_test_built(
        actor_id: &str,
        generation: u32,
        link: Arc<dyn EngineLink>,
        hooks: Option<Arc<DynHooks>>,
    ) -> Self {
        let identity = ActorIdentity {
            actor_id: actor_id.into(),
            generation,
            name: "test".into(),
            key: ActorKey::default(),
            region: String::new(),
            input: None,
        };
        Self::new(identity, CancellationToken::new(), link, &ActorConfig::default(), hooks).0
    }
}
