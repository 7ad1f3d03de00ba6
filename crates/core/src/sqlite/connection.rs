//! The state behind one generation's database (docs/sqlite.md): its
//! connection, opened on the first statement and closed when idle, evicted,
//! `close()`d or at the end of the generation, and the locks that order
//! statements. [`super::database`] is the API on top of it, and
//! [`super::transaction`] builds on it; it knows a transaction and the pool
//! only through the narrow traits [`ActiveTransaction`] and
//! [`PoolMember`], so neither file imports the other back.
//!
//! Locks, in the order they are taken:
//! - `gate`: statements outside a transaction share it; a transaction holds
//!   it exclusively from `BEGIN` to its end, so nothing else runs inside it.
//!   `admission` bounds how many statements may wait for it.
//! - `conn`: every statement holds it shared while it runs; opening and
//!   closing take it exclusively, so a connection is never closed under a
//!   statement, and a new one is opened only once the old one is gone.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use depot_client::database::{open_database_from_transport, NativeDatabaseHandle};
use depot_client::vfs::SqliteVfsMetricsSnapshot;
use futures::future::BoxFuture;
use tokio::sync::{RwLock, RwLockReadGuard, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::errors::{self, Mapped};
use super::limits::STATEMENT_QUEUE_CAPACITY;
use super::link::SqliteLink;
use super::pool::{PoolMember, Slot, SqlitePool};
use super::transport::FencedPages;
use crate::error::{catalog, ActorSpecifier};

/// The open transaction of a database, as the database sees it: ended
/// when the database closes ([`super::transaction`] implements it).
pub(crate) trait ActiveTransaction: Send + Sync {
    /// Rolls it back and ends it as the database closes.
    fn end_for_close(self: Arc<Self>) -> BoxFuture<'static, ()>;
}

pub(crate) struct Shared {
    actor_id: String,
    /// The actor's key, for error messages.
    key: String,
    generation: u32,
    specifier: ActorSpecifier,
    link: Arc<dyn SqliteLink>,
    /// The generation's write fence (see [`super::transport`]).
    fence: CancellationToken,
    pool: Arc<SqlitePool>,
    pub(crate) gate: Arc<RwLock<()>>,
    pub(crate) admission: Arc<Semaphore>,
    conn: RwLock<Conn>,
    /// Why the database is closed for good, once it is.
    closed: Mutex<Option<String>>,
    pub(crate) active_tx: Mutex<Option<Arc<dyn ActiveTransaction>>>,
    /// Set from before a transaction's `BEGIN` until its end: an open
    /// transaction pins the connection (never closed as idle).
    pub(crate) tx_active: AtomicBool,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The idle timer of the open connection.
    reaper: Mutex<Option<JoinHandle<()>>>,
    opens: AtomicU64,
    crash_reported: AtomicBool,
    /// The actor type's `sqliteProfiling` (default until set).
    profiling: std::sync::OnceLock<Arc<super::profiling::SqliteProfiling>>,
    /// This generation's statement counters.
    pub(crate) profile: super::profiling::Profile,
}

enum Conn {
    Closed,
    Open { handle: NativeDatabaseHandle, _slot: Slot },
}

/// Counts a running statement; the database counts as used when it ends.
struct Busy<'a>(&'a Shared);

impl<'a> Busy<'a> {
    fn new(shared: &'a Shared) -> Self {
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(shared)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(super) fn new(
        specifier: ActorSpecifier,
        link: Arc<dyn SqliteLink>,
        fence: CancellationToken,
        pool: Arc<SqlitePool>,
    ) -> Arc<Self> {
        let generation = u32::try_from(specifier.generation).unwrap_or(u32::MAX);
        Arc::new(Self {
            actor_id: specifier.actor_id.clone(),
            key: specifier.key.clone().unwrap_or_default(),
            generation,
            specifier,
            link,
            fence,
            pool,
            gate: Arc::new(RwLock::new(())),
            admission: Arc::new(Semaphore::new(STATEMENT_QUEUE_CAPACITY)),
            conn: RwLock::new(Conn::Closed),
            closed: Mutex::new(None),
            active_tx: Mutex::new(None),
            tx_active: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            reaper: Mutex::new(None),
            opens: AtomicU64::new(0),
            crash_reported: AtomicBool::new(false),
            profiling: std::sync::OnceLock::new(),
            profile: super::profiling::Profile::default(),
        })
    }

    /// Sets the profiling settings (once, before the first statement).
    pub(super) fn set_profiling(&self, settings: Arc<super::profiling::SqliteProfiling>) {
        let _ = self.profiling.set(settings);
    }

    pub(crate) fn profiling(&self) -> &super::profiling::SqliteProfiling {
        self.profiling.get_or_init(Default::default)
    }

    /// Whether a connection is open now.
    pub(super) fn is_open(&self) -> bool {
        self.conn.try_read().map(|c| matches!(*c, Conn::Open { .. })).unwrap_or(true)
    }

    /// Whether it was closed for good (`close()`, end of the generation).
    pub(super) fn is_shut(&self) -> bool {
        lock(&self.closed).is_some()
    }

    /// How many times a connection was opened (idle closes reopen).
    pub(super) fn open_count(&self) -> u64 {
        self.opens.load(Ordering::Acquire)
    }

    /// The page store's last transport error, if the database is open.
    pub(super) fn take_last_kv_error(&self) -> Option<String> {
        let conn = self.conn.try_read().ok()?;
        match &*conn {
            Conn::Open { handle, .. } => handle.take_last_kv_error(),
            Conn::Closed => None,
        }
    }

    /// The page store client's counters, if the database is open.
    pub(super) fn metrics(&self) -> Option<SqliteVfsMetricsSnapshot> {
        let conn = self.conn.try_read().ok()?;
        match &*conn {
            Conn::Open { handle, .. } => Some(handle.sqlite_vfs_metrics()),
            Conn::Closed => None,
        }
    }

    pub(crate) fn last_used(&self) -> Instant {
        *lock(&self.last_used)
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Cheap pre-check of [`Self::try_close_idle`], without locks.
    pub(crate) fn looks_idle(&self) -> bool {
        !self.tx_active.load(Ordering::Acquire) && self.in_flight.load(Ordering::Acquire) == 0
    }

    /// `Ok` while statements may run.
    pub(crate) fn check_usable(&self) -> anyhow::Result<()> {
        if self.fence.is_cancelled() {
            return Err(catalog::actor_stopping(Some("this actor generation has stopped; its database is closed"))
                .with_actor(self.specifier.clone())
                .into_anyhow());
        }
        if let Some(reason) = lock(&self.closed).as_deref() {
            return Err(errors::closed(reason).with_actor(self.specifier.clone()).into_anyhow());
        }
        Ok(())
    }

    /// A statement outside a transaction: bounded wait, then shared gate.
    /// What SQLite's own error on `sql` becomes: the same error, with the
    /// actor and the statement named in front of SQLite's message (the log
    /// line and `metadata.error` then say where it failed). Other errors
    /// pass unchanged.
    pub(crate) fn statement_namer(&self, sql: &str) -> impl FnOnce(anyhow::Error) -> anyhow::Error {
        let place = format!(
            "SQLite statement `{}` of actor {} (key {}, generation {})",
            errors::excerpt(sql),
            self.actor_id,
            self.key,
            self.generation
        );
        move |err| if errors::sqlite_code(&err).is_some() { err.context(place) } else { err }
    }

    pub(super) async fn regular<T, F, Fut>(self: &Arc<Self>, op: F) -> anyhow::Result<T>
    where
        F: FnOnce(NativeDatabaseHandle) -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        self.check_usable()?;
        let _permit = self
            .admission
            .clone()
            .try_acquire_owned()
            .map_err(|_| errors::overloaded(STATEMENT_QUEUE_CAPACITY).into_anyhow())?;
        let _gate = self.gate.read().await;
        self.with_open(op).await
    }

    /// Runs `op` on the open connection (opening it if needed), holding it
    /// shared so it cannot be closed meanwhile.
    pub(crate) async fn with_open<T, F, Fut>(self: &Arc<Self>, op: F) -> anyhow::Result<T>
    where
        F: FnOnce(NativeDatabaseHandle) -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        self.check_usable()?;
        let conn = self.open_guard().await?;
        let Conn::Open { handle, .. } = &*conn else {
            return Err(errors::closed("it closed while opening").into_anyhow());
        };
        let busy = Busy::new(self);
        let result = op(handle.clone()).await;
        drop(busy);
        drop(conn);
        result.map_err(|err| self.map_error(err))
    }

    async fn open_guard(self: &Arc<Self>) -> anyhow::Result<RwLockReadGuard<'_, Conn>> {
        {
            let conn = self.conn.read().await;
            if matches!(*conn, Conn::Open { .. }) {
                return Ok(conn);
            }
        }
        let mut conn = self.conn.write().await;
        self.check_usable()?;
        if matches!(*conn, Conn::Closed) {
            *conn = self.open_conn().await?;
        }
        Ok(conn.downgrade())
    }

    async fn open_conn(self: &Arc<Self>) -> anyhow::Result<Conn> {
        let transport = self.link.sqlite_transport().ok_or_else(|| errors::unavailable().into_anyhow())?;
        let slot = self.pool.acquire(self.clone()).await?;
        let started = Instant::now();
        let handle = open_database_from_transport(
            FencedPages::handle(transport, self.fence.clone()),
            self.actor_id.clone(),
            u64::from(self.generation),
            tokio::runtime::Handle::current(),
            None,
        )
        .await
        .map_err(|err| errors::open_failed(&err).with_actor(self.specifier.clone()).into_anyhow())?;
        // The workflow engine's table: RivetKit reads it through ordinary
        // statements and never creates it (docs/workflows.md).
        let pragma = format!(
            "PRAGMA cache_size = -{}; CREATE TABLE IF NOT EXISTS _rivet_wf_kv \
             (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID",
            self.pool.limits().pager_cache_kib
        );
        if let Err(err) = handle.exec(pragma).await {
            if !close_handle(&handle).await {
                self.mark_closed("its worker did not stop");
            }
            return Err(errors::open_failed(&err).into_anyhow());
        }
        let opens = self.opens.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::debug!(
            actor_id = %self.actor_id,
            generation = self.generation,
            opens,
            open_ms = started.elapsed().as_millis() as u64,
            "actor database opened"
        );
        self.touch();
        self.spawn_reaper();
        Ok(Conn::Open { handle, _slot: slot })
    }

    /// Closes the connection if it is idle: no statement running, no
    /// transaction open (ours, or one the user began with `BEGIN`). True if
    /// it closed it. Never waits for a statement.
    pub(crate) async fn try_close_idle(&self, why: &str) -> bool {
        if !self.looks_idle() {
            return false;
        }
        let Ok(mut conn) = self.conn.try_write() else {
            return false;
        };
        if self.tx_active.load(Ordering::Acquire) {
            return false;
        }
        let Conn::Open { handle, .. } = &*conn else {
            return false;
        };
        if !in_autocommit(handle).await {
            return false;
        }
        if let Conn::Open { handle, _slot } = std::mem::replace(&mut *conn, Conn::Closed) {
            // Still under the exclusive lock: the next open waits until
            // this connection (and its VFS registration) is gone.
            if !close_handle(&handle).await {
                self.mark_closed("its worker did not stop");
            }
            drop(handle);
            drop(_slot);
        }
        tracing::debug!(actor_id = %self.actor_id, generation = self.generation, why, "actor database closed");
        true
    }

    /// Marks it closed for good, unless it already is (the first reason
    /// is kept).
    fn mark_closed(&self, reason: &str) {
        let mut closed = lock(&self.closed);
        if closed.is_none() {
            *closed = Some(reason.to_string());
        }
    }

    /// Closes it for good (`reason` is what later statements are told).
    pub(crate) async fn shut(&self, reason: &str) -> anyhow::Result<()> {
        self.mark_closed(reason);
        if let Some(reaper) = lock(&self.reaper).take() {
            reaper.abort();
        }
        let active = lock(&self.active_tx).take();
        if let Some(tx) = active {
            tx.end_for_close().await;
        }
        let mut conn = self.conn.write().await;
        if let Conn::Open { handle, _slot } = std::mem::replace(&mut *conn, Conn::Closed) {
            close_handle(&handle).await;
            tracing::debug!(actor_id = %self.actor_id, generation = self.generation, reason, "actor database closed");
        }
        Ok(())
    }

    fn spawn_reaper(self: &Arc<Self>) {
        let idle = self.pool.limits().idle_close;
        let weak = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            let mut due = match weak.upgrade() {
                Some(db) => db.last_used() + idle,
                None => return,
            };
            loop {
                tokio::time::sleep_until(due).await;
                let Some(db) = weak.upgrade() else { return };
                let last = db.last_used();
                if last + idle > Instant::now() {
                    due = last + idle;
                    continue;
                }
                if db.try_close_idle("idle").await {
                    return;
                }
                let open = db.conn.try_read().map(|c| matches!(*c, Conn::Open { .. })).unwrap_or(true);
                if !open {
                    return;
                }
                due = Instant::now() + idle;
            }
        });
        if let Some(old) = lock(&self.reaper).replace(task) {
            old.abort();
        }
    }

    /// Classifies a failure; a fatal one closes the database for the
    /// generation and reports the crash to the engine (once).
    fn map_error(&self, err: anyhow::Error) -> anyhow::Error {
        if self.fence.is_cancelled() {
            return catalog::actor_stopping(Some("this actor generation can no longer write"))
                .with_actor(self.specifier.clone())
                .into_anyhow()
                .context(format!("{err:#}"));
        }
        match errors::map(err) {
            Mapped::Plain(err) => err,
            Mapped::Fatal(err, message) => {
                self.mark_closed("its storage failed");
                if !self.crash_reported.swap(true, Ordering::AcqRel) {
                    tracing::error!(actor_id = %self.actor_id, generation = self.generation, %message, "actor database failed");
                    self.link.report_crash(&self.actor_id, self.generation, message);
                }
                err
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(reaper) = lock(&self.reaper).take() {
            reaper.abort();
        }
    }
}

impl PoolMember for Shared {
    fn looks_idle(&self) -> bool {
        Shared::looks_idle(self)
    }

    fn last_used(&self) -> Instant {
        Shared::last_used(self)
    }

    fn try_close_idle<'a>(&'a self, why: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(Shared::try_close_idle(self, why))
    }
}

/// Whether the connection is outside any transaction: `BEGIN` (deferred,
/// no I/O) succeeds only then, and is rolled back at once.
async fn in_autocommit(handle: &NativeDatabaseHandle) -> bool {
    match handle.execute("BEGIN".into(), None).await {
        Ok(_) => {
            let _ = handle.execute("ROLLBACK".into(), None).await;
            true
        }
        Err(_) => false,
    }
}

/// Closes a connection; false if its worker may still be running (its
/// close timed out), in which case the database must not open again in
/// this generation: the worker still holds the generation's VFS name.
async fn close_handle(handle: &NativeDatabaseHandle) -> bool {
    match handle.close().await {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(error = %format!("{err:#}"), "closing an actor database connection failed");
            err.downcast_ref::<depot_client::worker::SqliteWorkerCloseTimeoutError>().is_none()
        }
    }
}
