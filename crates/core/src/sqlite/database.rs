//! One generation's database (docs/sqlite.md).
//!
//! Created cheaply with the generation's context and opened on its first
//! statement, so an actor that never queries pays nothing. While open it
//! holds a slot of the process-wide [`SqlitePool`] and one page store
//! connection (a worker thread running SQLite); it is closed when unused
//! for the idle period, when the pool needs its slot, when JavaScript calls
//! `close()`, and in any case when the generation ends. A closed database
//! reopens on its next statement, except after `close()` or the end of the
//! generation, which are final.
//!
//! The state and the connection behind it live in [`super::connection`].

use std::sync::Arc;
use std::time::Duration;

use depot_client::query::{BindParam, ExecuteResult, QueryResult};
use depot_client::vfs::SqliteVfsMetricsSnapshot;
use tokio_util::sync::CancellationToken;

use super::connection::Shared;
use super::link::SqliteLink;
use super::pool::SqlitePool;
use super::transaction::SqliteTransaction;
use crate::error::ActorSpecifier;

/// One statement of [`ActorDatabase::execute_batch`].
#[derive(Debug, Clone)]
pub struct BatchStatement {
    pub sql: String,
    pub params: Option<Vec<BindParam>>,
}

/// The database of one actor generation. Cloning shares it.
#[derive(Clone)]
pub struct ActorDatabase(pub(crate) Arc<Shared>);

impl ActorDatabase {
    /// A database for generation `generation` of `specifier`'s actor; its
    /// commits are fenced by `fence`. Opens nothing.
    pub fn new(
        specifier: ActorSpecifier,
        link: impl SqliteLink,
        fence: CancellationToken,
        pool: Arc<SqlitePool>,
    ) -> Self {
        Self(Shared::new(specifier, Arc::new(link), fence, pool))
    }

    /// Whether a connection is open now.
    pub fn is_open(&self) -> bool {
        self.0.is_open()
    }

    /// Whether it was closed for good (`close()`, end of the generation).
    pub fn is_shut(&self) -> bool {
        self.0.is_shut()
    }

    /// How many times a connection was opened (idle closes reopen).
    pub fn open_count(&self) -> u64 {
        self.0.open_count()
    }

    /// Runs `sql`, any number of statements; the rows of the last one that
    /// returned rows.
    pub async fn exec(&self, sql: String) -> anyhow::Result<QueryResult> {
        let named = self.0.statement_namer(&sql);
        let pending = self.0.profiling().start(&sql);
        let result = self.0.regular(|h| async move { h.exec(sql).await }).await.map_err(named);
        self.0.profile.finish(self.0.profiling(), pending);
        result
    }

    /// Runs one statement with its bound parameters.
    pub async fn execute(&self, sql: String, params: Option<Vec<BindParam>>) -> anyhow::Result<ExecuteResult> {
        let named = self.0.statement_namer(&sql);
        let pending = self.0.profiling().start(&sql);
        let result = self.0.regular(|h| async move { h.execute(sql, params).await }).await.map_err(named);
        self.0.profile.finish(self.0.profiling(), pending);
        result
    }

    /// Runs the statements in one transaction: all or none.
    pub async fn execute_batch(&self, statements: Vec<BatchStatement>) -> anyhow::Result<Vec<ExecuteResult>> {
        let tx = self.begin_transaction(None).await?;
        let mut results = Vec::with_capacity(statements.len());
        for statement in statements {
            match tx.execute(statement.sql, statement.params).await {
                Ok(result) => results.push(result),
                Err(err) => {
                    if let Err(rollback) = tx.rollback().await {
                        tracing::debug!(error = %format!("{rollback:#}"), "rollback after a failed batch statement");
                    }
                    return Err(err);
                }
            }
        }
        tx.commit().await?;
        Ok(results)
    }

    /// Begins a transaction: waits until no other one is open, then holds
    /// the database alone until it is committed or rolled back, or rolls
    /// it back after `timeout` (default
    /// [`super::transaction::DEFAULT_TRANSACTION_TIMEOUT`]).
    pub async fn begin_transaction(&self, timeout: Option<Duration>) -> anyhow::Result<SqliteTransaction> {
        SqliteTransaction::begin(&self.0, timeout, None).await
    }

    /// The same, except that the wait for the other transaction ends
    /// (`sqlite.closed`) when `gave_up` fires: for a requester that may go
    /// away meanwhile (the runtime socket's leases).
    pub async fn begin_transaction_unless(
        &self,
        timeout: Option<Duration>,
        gave_up: &CancellationToken,
    ) -> anyhow::Result<SqliteTransaction> {
        SqliteTransaction::begin(&self.0, timeout, Some(gave_up)).await
    }

    /// Closes the database for the rest of the generation.
    pub async fn close(&self) -> anyhow::Result<()> {
        self.0.shut("it was closed by close()").await
    }

    /// Closes it because the generation ended (idempotent).
    pub async fn close_for_generation_end(&self) {
        if let Err(err) = self.0.shut("the actor generation stopped").await {
            tracing::warn!(error = %format!("{err:#}"), "closing the actor database failed");
        }
    }

    /// Profiles its statements with `settings` (the actor type's
    /// `sqliteProfiling`); call it before the first statement.
    pub fn set_profiling(&self, settings: Arc<super::profiling::SqliteProfiling>) {
        self.0.set_profiling(settings);
    }

    /// This generation's statement counters, by label.
    pub fn profile(&self) -> std::collections::HashMap<String, super::profiling::ProfileEntry> {
        self.0.profile.snapshot()
    }

    /// The page store's last transport error, if the database is open.
    pub fn take_last_kv_error(&self) -> Option<String> {
        self.0.take_last_kv_error()
    }

    /// The page store client's counters, if the database is open.
    pub fn metrics(&self) -> Option<SqliteVfsMetricsSnapshot> {
        self.0.metrics()
    }
}
