//! The per-generation actor context shared by the task, the dispatcher and
//! the host runtime.
//!
//! It carries the generation's identity, the flags the admission rules read
//! (started, lost, sleep/destroy requested), the *generation holds* that say
//! when a generation is really finished, the abort signal and the state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::lifecycle::{self, Phase};
use super::save::{SaveOptions, SaveRequests};
use super::{ActorKey, EngineLink};
use crate::error::{catalog, ActorSpecifier, RivetError};

#[derive(Clone)]
pub struct ActorContext(Arc<Inner>);

/// A context that does not keep its generation alive (for what the
/// generation's own connections hold).
#[derive(Clone)]
pub struct WeakContext(std::sync::Weak<Inner>);

impl WeakContext {
    pub fn upgrade(&self) -> Option<ActorContext> {
        self.0.upgrade().map(ActorContext)
    }
}

struct Inner {
    actor_id: String,
    generation: u32,
    name: String,
    key: ActorKey,
    region: String,
    input: Option<Vec<u8>>,
    lost: CancellationToken,
    /// Fires when the generation can no longer write: when it is lost, or
    /// once its task finished stopping (see [`ActorContext::end_writes`]).
    /// Every write of the runtime is fenced by it.
    writes_closed: CancellationToken,
    abort: CancellationToken,
    /// The task's phase (it is the only writer; see [`super::lifecycle`]).
    phase: watch::Sender<Phase>,
    destroy_requested: AtomicBool,
    sleep_requested: AtomicBool,
    holds: watch::Sender<usize>,
    state: Mutex<Vec<u8>>,
    link: Arc<dyn EngineLink>,
    activity: Activity,
    saves: SaveRequests,
    save_interval: Duration,
    /// The alarm (ms since the epoch), persisted with the actor record.
    alarm: watch::Sender<Option<i64>>,
    /// Scheduled actions (`schedule.after/at`) and cron jobs.
    schedule: super::schedule::Schedule,
    /// The message queue (`ctx.queue()`).
    queue: super::queue::Queue,
    /// The wake-up time last pushed to the engine (`None`: nothing pushed yet).
    pushed_alarm: Mutex<Option<Option<i64>>>,
    /// Whether the `run` handler is running; `restart_run` asks the task
    /// to start it again.
    run_active: AtomicBool,
    run_restart: tokio::sync::Notify,
    /// Which chunk slot holds a large state (storage detail); 255 = none.
    state_slot: std::sync::atomic::AtomicU8,
    /// Serializes record writes (throttled saves, `saveState`, final save),
    /// and holds the fingerprint of the record the engine has (see
    /// [`super::storage::save_record`]); `None`: not known.
    write_lock: tokio::sync::Mutex<Option<super::storage::Fingerprint>>,
    conns: super::Connections,
    /// The task's traffic queue (bounded by the actor's
    /// `dispatch_queue_capacity`), for connections the context connects
    /// itself; its receiving end is handed to the task once.
    dispatch: tokio::sync::mpsc::Sender<super::task::DispatchCommand>,
    dispatch_rx: Mutex<Option<tokio::sync::mpsc::Receiver<super::task::DispatchCommand>>>,
    /// Connections that ended and whose `onDisconnect` the task has yet to
    /// run. Not a bounded queue, and need not be: a connection is removed
    /// once, so it holds at most one entry per connection of this generation.
    ended_conns: Mutex<Vec<super::Conn>>,
    ended_conns_changed: tokio::sync::Notify,
    /// The inspector's token and counters ([`crate::inspector`]).
    inspector: crate::inspector::ActorInspector,
    /// When the `run` handler asked to be woken (`setRunWakeAt`), ms since
    /// the epoch; this generation's only, never persisted.
    run_wake_at: Mutex<Option<i64>>,
    /// The SQLite database, created on the first `sqlite()` (it opens on
    /// its first statement; see [`crate::sqlite`]).
    sqlite: std::sync::OnceLock<crate::sqlite::ActorDatabase>,
    /// The runtime socket (docs/runtime-socket.md), provisioned on demand
    /// and closed when the generation stops.
    runtime_socket: super::runtime_socket::RuntimeSocket,
    /// The hooks, for workflow flushes that must serialize the state
    /// (set when the generation starts; docs/workflows.md).
    hooks: std::sync::OnceLock<Arc<dyn super::ActorHooks>>,
    /// Serializes workflow flushes, state transactions and state saves;
    /// holds the workflow revision last written to KV (`None` until read
    /// this generation).
    workflow_mark: Arc<tokio::sync::Mutex<Option<u64>>>,
    /// Outputs held until their save is acknowledged ([`super::outbox`]).
    outbox: super::outbox::Outbox,
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

/// Keeps a generation "unfinished" while alive. The actor task owns one for
/// its whole life; storage cleanup of a lost generation may take another.
pub struct GenerationHold(watch::Sender<usize>);

impl Drop for GenerationHold {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl ActorContext {
    /// `lost` is the envoy's lost signal for this generation; `config` is
    /// its actor type's (limits and intervals are fixed for its life).
    pub fn new(
        identity: ActorIdentity,
        lost: CancellationToken,
        link: Arc<dyn EngineLink>,
        config: &super::ActorConfig,
    ) -> Self {
        let ActorIdentity { actor_id, generation, name, key, region, input } = identity;
        let (dispatch, dispatch_rx) = tokio::sync::mpsc::channel(config.dispatch_queue_capacity.max(1));
        Self(Arc::new(Inner {
            actor_id,
            generation,
            name,
            key,
            region,
            input,
            writes_closed: lost.child_token(),
            lost,
            abort: CancellationToken::new(),
            phase: watch::channel(Phase::Created).0,
            destroy_requested: AtomicBool::new(false),
            sleep_requested: AtomicBool::new(false),
            holds: watch::channel(0).0,
            state: Mutex::new(Vec::new()),
            link,
            activity: Activity::default(),
            saves: SaveRequests::default(),
            save_interval: config.state_save_interval,
            alarm: watch::channel(None).0,
            schedule: super::schedule::Schedule::with_limit(config.max_schedules),
            queue: super::queue::Queue::new(super::queue::Limits::new(
                config.max_queue_size,
                config.max_queue_message_size,
            )),
            pushed_alarm: Mutex::new(None),
            run_active: AtomicBool::new(false),
            run_restart: tokio::sync::Notify::new(),
            state_slot: std::sync::atomic::AtomicU8::new(u8::MAX),
            write_lock: tokio::sync::Mutex::new(None),
            conns: super::Connections::default(),
            dispatch,
            dispatch_rx: Mutex::new(Some(dispatch_rx)),
            inspector: crate::inspector::ActorInspector::default(),
            run_wake_at: Mutex::new(None),
            ended_conns: Mutex::default(),
            ended_conns_changed: tokio::sync::Notify::new(),
            sqlite: std::sync::OnceLock::new(),
            runtime_socket: super::runtime_socket::RuntimeSocket::new(config.enable_actor_runtime_socket),
            hooks: std::sync::OnceLock::new(),
            workflow_mark: Arc::new(tokio::sync::Mutex::new(None)),
            outbox: super::outbox::Outbox::new(config.output_gate == super::OutputGate::On && config.has_state),
        }))
    }

    pub fn actor_id(&self) -> &str {
        &self.0.actor_id
    }
    pub fn generation(&self) -> u32 {
        self.0.generation
    }
    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn key(&self) -> &ActorKey {
        &self.0.key
    }
    pub fn region(&self) -> &str {
        &self.0.region
    }
    pub fn input(&self) -> Option<&[u8]> {
        self.0.input.as_deref()
    }
    pub fn link(&self) -> &Arc<dyn EngineLink> {
        &self.0.link
    }

    /// `{actorId, generation, key}` attached to every error this generation returns.
    pub fn specifier(&self) -> ActorSpecifier {
        ActorSpecifier {
            actor_id: self.0.actor_id.clone(),
            generation: u64::from(self.0.generation),
            key: Some(self.0.key.format()),
        }
    }

    /// True when both handles point at the same generation.
    pub fn same_instance(&self, other: &ActorContext) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    // --- lost / abort -----------------------------------------------------

    pub fn is_lost(&self) -> bool {
        self.0.lost.is_cancelled()
    }
    pub fn mark_lost(&self) {
        self.0.lost.cancel();
    }
    pub fn lost_token(&self) -> &CancellationToken {
        &self.0.lost
    }
    /// The actor's abort signal: fires when the generation begins to stop.
    pub fn abort_token(&self) -> &CancellationToken {
        &self.0.abort
    }
    pub fn aborted(&self) -> bool {
        self.0.abort.is_cancelled()
    }

    // --- write fence ------------------------------------------------------

    /// The token every write of this generation is fenced by: a put is
    /// dropped before it leaves the host once it fired.
    pub fn write_fence(&self) -> &CancellationToken {
        &self.0.writes_closed
    }

    /// True once this generation may no longer write (lost, or stopped).
    pub fn writes_closed(&self) -> bool {
        self.0.writes_closed.is_cancelled()
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
        let _writing = self.0.write_lock.lock().await;
        self.0.writes_closed.cancel();
        self.0
            .saves
            .close(catalog::actor_stopping(Some("this actor generation has stopped")).with_actor(self.specifier()));
    }

    /// The same without waiting for a write under way: for a task that
    /// ends without a shutdown (a failed start, a panic, a lost generation).
    /// A database still open is closed in the background, under a
    /// generation hold.
    pub(crate) fn end_writes_now(&self) {
        self.0.writes_closed.cancel();
        let db = self.0.sqlite.get().filter(|db| !db.is_shut()).cloned();
        let socket_open = self.0.runtime_socket.path().is_some();
        if db.is_some() || socket_open {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let (ctx, hold) = (self.clone(), self.hold_generation());
                    runtime.spawn(async move {
                        ctx.0.runtime_socket.shutdown().await;
                        if let Some(db) = db {
                            db.close_for_generation_end().await;
                        }
                        drop(hold);
                    });
                }
                Err(_) => self.0.runtime_socket.shutdown_now(),
            }
        }
        self.0
            .saves
            .close(catalog::actor_stopping(Some("this actor generation has stopped")).with_actor(self.specifier()));
    }

    // --- SQLite -----------------------------------------------------------

    /// The generation's SQLite database: created on the first call, opened
    /// on its first statement.
    pub fn sqlite(&self) -> &crate::sqlite::ActorDatabase {
        self.0.sqlite.get_or_init(|| {
            crate::sqlite::ActorDatabase::new(
                self.specifier(),
                self.0.link.clone(),
                self.0.writes_closed.clone(),
                crate::sqlite::SqlitePool::global(),
            )
        })
    }

    // --- runtime socket ---------------------------------------------------

    /// Provisions the generation's runtime socket (once; later calls give
    /// the same path): `actor_runtime_socket.not_enabled` unless the actor
    /// type enabled it, `.closed` once the generation stopped,
    /// `.database_unavailable` on a host without a page store.
    pub fn provision_runtime_socket(&self) -> anyhow::Result<String> {
        use super::runtime_socket as socket;
        let refuse = |e: crate::error::RivetError| Err(e.with_actor(self.specifier()).into_anyhow());
        if !self.0.runtime_socket.is_enabled() {
            return refuse(socket::not_enabled());
        }
        if self.writes_closed() {
            return refuse(socket::closed());
        }
        if self.0.link.sqlite_transport().is_none() {
            return refuse(socket::database_unavailable());
        }
        self.0.runtime_socket.provision(self.sqlite())
    }

    /// Where the runtime socket listens, while it does.
    pub fn runtime_socket_path(&self) -> Option<String> {
        self.0.runtime_socket.path()
    }

    /// Closes the runtime socket for the end of the generation (idempotent).
    pub async fn shutdown_runtime_socket(&self) {
        self.0.runtime_socket.shutdown().await;
    }

    /// Remembers the generation's hooks (once; later calls change nothing).
    pub fn set_hooks(&self, hooks: Arc<dyn super::ActorHooks>) {
        let _ = self.0.hooks.set(hooks);
    }
    pub fn hooks(&self) -> Option<Arc<dyn super::ActorHooks>> {
        self.0.hooks.get().cloned()
    }
    pub(crate) fn workflow_mark(&self) -> &Arc<tokio::sync::Mutex<Option<u64>>> {
        &self.0.workflow_mark
    }

    /// Closes the database for the end of the generation (at once if it
    /// was never opened); later statements are refused.
    pub async fn close_sqlite(&self) {
        self.sqlite().close_for_generation_end().await;
    }

    // --- lifecycle flags --------------------------------------------------

    /// The task's phase.
    pub fn phase(&self) -> Phase {
        *self.0.phase.borrow()
    }
    pub fn subscribe_phase(&self) -> watch::Receiver<Phase> {
        self.0.phase.subscribe()
    }
    /// Between the start hooks and the final save.
    pub fn started(&self) -> bool {
        self.phase().is_running()
    }
    /// Moves the phase (the task alone calls it). A move the table does
    /// not allow is a bug: it is logged and not applied.
    pub(crate) fn enter(&self, to: Phase) {
        let from = self.phase();
        if !from.can_become(to) {
            tracing::error!(?from, ?to, "bug: lifecycle transition not in the table; ignored");
            return;
        }
        if to == Phase::Starting {
            self.0.sleep_requested.store(false, Ordering::Release);
        }
        self.0.phase.send_replace(to);
    }

    /// Whether client traffic may run now (the admission table of
    /// [`super::lifecycle::admit`]), with this generation's specifier.
    pub fn admit(&self) -> anyhow::Result<()> {
        lifecycle::admit(self.phase(), self.is_lost(), self.destroy_requested())
            .map_err(|err| err.with_actor(self.specifier()).into_anyhow())
    }
    pub fn destroy_requested(&self) -> bool {
        self.0.destroy_requested.load(Ordering::Acquire)
    }
    pub fn mark_destroy_requested(&self) {
        self.0.destroy_requested.store(true, Ordering::Release);
    }
    pub fn sleep_requested(&self) -> bool {
        self.0.sleep_requested.load(Ordering::Acquire)
    }

    /// `ctx.sleep()`: asks the engine to stop this generation with `SleepIntent`.
    pub fn sleep(&self) -> anyhow::Result<()> {
        if !self.started() {
            if self.sleep_requested() || self.destroy_requested() {
                return Err(catalog::actor_stopping(None).into_anyhow());
            }
            return Err(catalog::actor_starting().into_anyhow());
        }
        if self.0.sleep_requested.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.0.link.request_sleep(&self.0.actor_id, self.0.generation);
        Ok(())
    }

    /// `ctx.destroy()`: asks the engine to destroy the actor (`StopIntent`).
    pub fn destroy(&self) -> anyhow::Result<()> {
        if !self.started() {
            return Err(catalog::actor_starting().into_anyhow());
        }
        if self.0.destroy_requested.swap(true, Ordering::AcqRel) {
            return Err(catalog::actor_stopping(Some("destroy was already requested")).into_anyhow());
        }
        self.0.link.request_destroy(&self.0.actor_id, self.0.generation);
        Ok(())
    }

    // --- generation holds -------------------------------------------------

    pub fn hold_generation(&self) -> GenerationHold {
        self.0.holds.send_modify(|n| *n += 1);
        GenerationHold(self.0.holds.clone())
    }
    pub fn is_generation_finished(&self) -> bool {
        *self.0.holds.borrow() == 0
    }
    pub async fn wait_for_generation_finished(&self) {
        let mut rx = self.0.holds.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    // --- state ------------------------------------------------------------

    pub fn state(&self) -> Vec<u8> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    pub fn set_state(&self, state: Vec<u8>) {
        *self.0.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
        self.0.inspector.state_changed();
    }

    /// The inspector's token and counters.
    pub fn inspector(&self) -> &crate::inspector::ActorInspector {
        &self.0.inspector
    }

    pub(crate) async fn lock_writes(&self) -> tokio::sync::MutexGuard<'_, Option<super::storage::Fingerprint>> {
        self.0.write_lock.lock().await
    }

    pub(crate) fn state_slot(&self) -> Option<u8> {
        Some(self.0.state_slot.load(Ordering::Acquire)).filter(|s| *s != u8::MAX)
    }
    pub(crate) fn set_state_slot(&self, slot: u8) {
        self.0.state_slot.store(slot, Ordering::Release);
    }

    // --- saves ------------------------------------------------------------

    /// `requestSave`: persist soon (throttled). Returns the request's revision.
    /// A no-op once the generation stopped (a hint to a task that is gone).
    pub fn request_save(&self, options: SaveOptions) -> Option<u64> {
        self.0.saves.request(options, self.0.save_interval)
    }

    /// `requestSaveAndWait`: resolves once a save covering this request is
    /// acknowledged by the engine.
    pub async fn request_save_and_wait(&self, options: SaveOptions) -> anyhow::Result<()> {
        if !self.started() && !self.0.abort.is_cancelled() {
            return Err(catalog::actor_starting().into_anyhow());
        }
        self.check_writable()?;
        match self.request_save(options) {
            Some(revision) => self.0.saves.wait_for(revision).await,
            None => self.check_writable(),
        }
    }

    pub(crate) fn saves(&self) -> &SaveRequests {
        &self.0.saves
    }

    pub(crate) fn outbox(&self) -> &super::outbox::Outbox {
        &self.0.outbox
    }

    pub fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.0))
    }

    // --- connections ------------------------------------------------------

    /// The live connections; any of them keeps the actor awake.
    pub fn conns(&self) -> &super::Connections {
        &self.0.conns
    }

    /// The task's end of the traffic queue: `None` after the first call.
    pub(crate) fn take_dispatch_rx(&self) -> Option<tokio::sync::mpsc::Receiver<super::task::DispatchCommand>> {
        self.0.dispatch_rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn dispatch_sender(&self) -> &tokio::sync::mpsc::Sender<super::task::DispatchCommand> {
        &self.0.dispatch
    }

    /// Closes `conn`'s socket, after the events the output gate still holds
    /// for it ([`super::outbox`]).
    pub fn close_conn_transport(&self, conn: &super::Conn, code: u16, reason: &str) {
        if !self.outbox().is_gated() || self.outbox().is_empty() {
            conn.close_transport(code, reason);
            return;
        }
        let (conn, reason) = (conn.clone(), reason.to_owned());
        // An answer always queues; the close goes out whatever the save did.
        let _ = self.after_save(super::outbox::Kind::Answer, move |_| conn.close_transport(code, &reason));
    }

    /// Ends a connection: removed at once (idempotent), its subscriptions
    /// cleared, and `onDisconnect` handed to the actor task, which runs it
    /// however busy its traffic queue is.
    pub fn disconnect(&self, conn: &super::Conn) {
        if !self.end_conn(conn) {
            return;
        }
        self.0.ended_conns.lock().unwrap_or_else(|p| p.into_inner()).push(conn.clone());
        self.0.ended_conns_changed.notify_one();
    }

    /// Removes `conn` (false if it was not registered) and its record.
    pub(crate) fn end_conn(&self, conn: &super::Conn) -> bool {
        if !self.0.conns.remove(conn) {
            return false;
        }
        conn.clear_subscriptions();
        if conn.is_hibernatable() {
            // Its record goes with it (on the next save, which we ask for now).
            self.0.conns.forget_record(conn.id());
            self.request_save(SaveOptions { immediate: true, max_wait: None });
        }
        true
    }

    /// Connections whose `onDisconnect` is due (the task takes them).
    pub(crate) fn take_ended_conns(&self) -> Vec<super::Conn> {
        std::mem::take(&mut *self.0.ended_conns.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) async fn ended_conns_changed(&self) {
        self.0.ended_conns_changed.notified().await
    }

    /// A connection without a socket (e.g. for one HTTP request): the
    /// connect hooks run in the actor and it is registered on success.
    pub async fn connect_conn(
        &self,
        params: Vec<u8>,
        request: Option<super::HttpRequest>,
    ) -> anyhow::Result<super::Conn> {
        let conn = super::Conn::new(super::conn::new_id(), params, None, None);
        let tx = &self.0.dispatch;
        let (reply, rx) = tokio::sync::oneshot::channel();
        tx.try_send(super::task::DispatchCommand::Connect { conn: conn.clone(), request, reply })
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
        if !self.outbox().is_gated() {
            return self.0.conns.broadcast(name, args_cbor);
        }
        let targets: Vec<super::Conn> = self.0.conns.list().into_iter().filter(|c| c.is_subscribed(name)).collect();
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
    pub fn send_event(&self, conn: &super::Conn, name: &str, args_cbor: &[u8]) -> anyhow::Result<()> {
        if !self.outbox().is_gated() {
            return conn.send(name, args_cbor);
        }
        conn.check_can_send()?;
        self.queue_event(vec![conn.clone()], name, args_cbor).map_err(RivetError::into_anyhow)
    }

    /// Queues event `name` for `targets` behind the output gate; it is
    /// dropped if the save it waits for fails.
    fn queue_event(&self, targets: Vec<super::Conn>, name: &str, args_cbor: &[u8]) -> Result<(), RivetError> {
        let (event, args) = (name.to_owned(), args_cbor.to_vec());
        self.after_save(super::outbox::Kind::Event, move |released| match released {
            Ok(()) => {
                super::Connections::send_to(&targets, &event, &args);
            }
            Err(err) => {
                tracing::debug!(event, error = %err.message, "an event was dropped: what it reports was not saved")
            }
        })
    }

    // --- activity ---------------------------------------------------------

    /// Keep-awake regions and tracked work.
    pub fn activity(&self) -> &Activity {
        &self.0.activity
    }

    // --- run handler ------------------------------------------------------

    pub fn run_handler_active(&self) -> bool {
        self.0.run_active.load(Ordering::Acquire)
    }
    pub(crate) fn set_run_active(&self, active: bool) {
        self.0.run_active.store(active, Ordering::Release);
    }
    /// Starts the `run` handler again if it is not running.
    pub fn restart_run_handler(&self) {
        self.0.run_restart.notify_one();
    }
    pub(crate) async fn run_restart_requested(&self) {
        self.0.run_restart.notified().await
    }

    /// Reports a crash to the engine (the actor is put to sleep and the
    /// error recorded), e.g. when the `run` handler fails.
    pub fn stop_with_error(&self, message: String) {
        if self.0.sleep_requested.swap(true, Ordering::AcqRel) || self.destroy_requested() {
            return;
        }
        self.0.link.report_crash(&self.0.actor_id, self.0.generation, message);
    }

    // --- alarm ------------------------------------------------------------

    /// The alarm that will wake this actor, if any (ms since the epoch).
    pub fn alarm(&self) -> Option<i64> {
        *self.0.alarm.borrow()
    }

    /// Sets (or clears) the alarm: persisted with the actor record, and the
    /// engine is told the actor's next wake-up so a sleeping actor wakes on time.
    pub fn set_alarm(&self, timestamp_ms: Option<i64>) -> anyhow::Result<()> {
        self.check_writable()?;
        self.0.alarm.send_replace(timestamp_ms);
        self.sync_engine_alarm();
        self.request_save(SaveOptions { immediate: true, max_wait: None });
        Ok(())
    }

    /// The actor's next wake-up: the earliest of its alarm and its
    /// scheduled events.
    pub fn next_wake(&self) -> Option<i64> {
        match (self.alarm(), self.0.schedule.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sets (or clears) the time the `run` handler wants the actor awake
    /// by: the engine's alarm covers it too, so a sleeping actor is started
    /// (and its `run` with it) on time. Not persisted, and nothing fires
    /// in-process: an awake `run` keeps its own timers (docs/generations.md).
    pub fn set_run_wake_at(&self, timestamp_ms: Option<i64>) -> anyhow::Result<()> {
        self.check_writable()?;
        *self.0.run_wake_at.lock().unwrap_or_else(|p| p.into_inner()) = timestamp_ms;
        self.sync_engine_alarm();
        Ok(())
    }

    pub fn run_wake_at(&self) -> Option<i64> {
        *self.0.run_wake_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pushes the next wake-up to the engine if it changed since the last push.
    pub(crate) fn sync_engine_alarm(&self) {
        if self.is_lost() {
            return;
        }
        let next = match (self.next_wake(), self.run_wake_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        {
            let mut pushed = self.0.pushed_alarm.lock().unwrap_or_else(|p| p.into_inner());
            // Nothing pushed yet and nothing to wake for: leave the engine be.
            if *pushed == Some(next) || (pushed.is_none() && next.is_none()) {
                return;
            }
            *pushed = Some(next);
        }
        self.0.link.set_alarm(&self.0.actor_id, self.0.generation, next);
    }

    /// Scheduled actions and cron jobs.
    pub fn schedule(&self) -> &super::schedule::Schedule {
        &self.0.schedule
    }

    /// The message queue.
    pub fn queue(&self) -> &super::queue::Queue {
        &self.0.queue
    }

    /// Restores the persisted alarm at start without pushing it again.
    pub(crate) fn restore_alarm(&self, timestamp_ms: Option<i64>) {
        self.0.alarm.send_replace(timestamp_ms);
    }

    pub(crate) fn subscribe_alarm(&self) -> watch::Receiver<Option<i64>> {
        self.0.alarm.subscribe()
    }
}

impl std::fmt::Debug for ActorContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorContext")
            .field("actor_id", &self.0.actor_id)
            .field("generation", &self.0.generation)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl ActorContext {
    /// Puts a command straight into the task's traffic queue.
    pub(crate) fn dispatch_for_test(&self, cmd: super::task::DispatchCommand) -> bool {
        self.0.dispatch.try_send(cmd).is_ok()
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
        Self::new(
            ActorIdentity {
                actor_id: actor_id.into(),
                generation,
                name: "test".into(),
                key: ActorKey::default(),
                region: String::new(),
                input: None,
            },
            CancellationToken::new(),
            link,
            &super::ActorConfig::default(),
        )
    }
}
