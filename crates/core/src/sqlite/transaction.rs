//! Transactions (`beginTransaction`, and `executeBatch` on top of them).
//!
//! A transaction holds the database's gate exclusively from its `BEGIN` to
//! its end, so statements outside it wait and nothing interleaves with it
//! on the single connection. Its own statements run one at a time, under
//! its state lock, which its commit, rollback, timeout and the database's
//! close also take: a transaction ends exactly once, and never under a
//! statement of its own.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use depot_client::query::{BindParam, ExecuteResult, QueryResult};
use futures::future::BoxFuture;
use tokio::sync::OwnedRwLockWriteGuard;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::connection::{ActiveTransaction, Shared};
use super::errors;
use super::limits::STATEMENT_QUEUE_CAPACITY;

/// How long a transaction may stay open when its caller gives no timeout.
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// An open transaction. Cloning shares it.
#[derive(Clone)]
pub struct SqliteTransaction(Arc<TxShared>);

pub(crate) struct TxShared {
    db: Arc<Shared>,
    timeout: Duration,
    state: tokio::sync::Mutex<State>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

enum State {
    /// Holds the database's gate.
    Active(#[allow(dead_code)] OwnedRwLockWriteGuard<()>),
    Committed,
    RolledBack,
    Expired,
    Closed,
}

impl State {
    fn refusal(&self, timeout: Duration) -> Option<anyhow::Error> {
        let err = match self {
            State::Active(_) => return None,
            State::Committed => errors::transaction_finished("committed"),
            State::RolledBack => errors::transaction_finished("rolled back"),
            State::Expired => errors::transaction_expired(timeout.as_millis() as u64),
            State::Closed => errors::closed("it was closed while the transaction was open"),
        };
        Some(err.into_anyhow())
    }
}

impl SqliteTransaction {
    /// Begins once the gate is free. `gave_up`, if given, ends the wait
    /// for the gate (`sqlite.closed`); once the gate is taken, the `BEGIN`
    /// runs to its end.
    pub(crate) async fn begin(
        db: &Arc<Shared>,
        timeout: Option<Duration>,
        gave_up: Option<&CancellationToken>,
    ) -> anyhow::Result<Self> {
        let timeout = timeout.unwrap_or(DEFAULT_TRANSACTION_TIMEOUT);
        db.check_usable()?;
        let permit = db
            .admission
            .clone()
            .try_acquire_owned()
            .map_err(|_| errors::overloaded(STATEMENT_QUEUE_CAPACITY).into_anyhow())?;
        let gate = match gave_up {
            Some(gave_up) => tokio::select! {
                biased;
                _ = gave_up.cancelled() => {
                    return Err(errors::closed("the transaction was given up before it began").into_anyhow());
                }
                gate = db.gate.clone().write_owned() => gate,
            },
            None => db.gate.clone().write_owned().await,
        };
        drop(permit);
        db.check_usable()?;
        db.tx_active.store(true, Ordering::Release);
        if let Err(err) = db.with_open(|h| async move { h.execute("BEGIN".into(), None).await }).await {
            db.tx_active.store(false, Ordering::Release);
            return Err(err);
        }
        let tx = Arc::new(TxShared {
            db: db.clone(),
            timeout,
            state: tokio::sync::Mutex::new(State::Active(gate)),
            timer: Mutex::new(None),
        });
        *db.active_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
        // Closed while it began: the close may have missed it.
        if let Err(err) = db.check_usable() {
            tx.end(State::Closed, None).await;
            return Err(err);
        }
        let weak: Weak<TxShared> = Arc::downgrade(&tx);
        let timer = tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(tx) = weak.upgrade() {
                tracing::warn!(timeout_ms = timeout.as_millis() as u64, "SQLite transaction timed out; rolling back");
                tx.end(State::Expired, Some("ROLLBACK")).await;
            }
        });
        *tx.timer.lock().unwrap_or_else(|p| p.into_inner()) = Some(timer);
        Ok(Self(tx))
    }

    /// Runs one statement inside the transaction.
    pub async fn execute(&self, sql: String, params: Option<Vec<BindParam>>) -> anyhow::Result<ExecuteResult> {
        let state = self.0.state.lock().await;
        if let Some(err) = state.refusal(self.0.timeout) {
            return Err(err);
        }
        let named = self.0.db.statement_namer(&sql);
        let pending = self.0.db.profiling().start(&sql);
        let result = self.0.db.with_open(|h| async move { h.execute(sql, params).await }).await.map_err(named);
        self.0.db.profile.finish(self.0.db.profiling(), pending);
        result
    }

    /// Runs any number of statements inside the transaction.
    pub async fn exec(&self, sql: String) -> anyhow::Result<QueryResult> {
        let state = self.0.state.lock().await;
        if let Some(err) = state.refusal(self.0.timeout) {
            return Err(err);
        }
        let named = self.0.db.statement_namer(&sql);
        let pending = self.0.db.profiling().start(&sql);
        let result = self.0.db.with_open(|h| async move { h.exec(sql).await }).await.map_err(named);
        self.0.db.profile.finish(self.0.db.profiling(), pending);
        result
    }

    /// Commits. If the commit fails, the transaction is rolled back and
    /// the failure returned.
    pub async fn commit(&self) -> anyhow::Result<()> {
        let mut state = self.0.state.lock().await;
        if let Some(err) = state.refusal(self.0.timeout) {
            return Err(err);
        }
        let result = self.0.db.with_open(|h| async move { h.execute("COMMIT".into(), None).await }).await;
        match result {
            Ok(_) => {
                self.0.finish(&mut state, State::Committed, None).await;
                Ok(())
            }
            Err(err) => {
                self.0.finish(&mut state, State::RolledBack, Some("ROLLBACK")).await;
                Err(err)
            }
        }
    }

    /// Rolls back. Rolling back a transaction that already rolled back or
    /// expired is a no-op; one that committed is refused.
    pub async fn rollback(&self) -> anyhow::Result<()> {
        let mut state = self.0.state.lock().await;
        match &*state {
            State::Active(_) => {
                self.0.finish(&mut state, State::RolledBack, Some("ROLLBACK")).await;
                Ok(())
            }
            State::RolledBack | State::Expired => Ok(()),
            other => Err(other.refusal(self.0.timeout).unwrap_or_else(|| anyhow::anyhow!("transaction state"))),
        }
    }
}

impl ActiveTransaction for TxShared {
    /// Ends the transaction as the database closes.
    fn end_for_close(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.end(State::Closed, Some("ROLLBACK")).await })
    }
}

impl TxShared {
    async fn end(self: &Arc<Self>, to: State, statement: Option<&'static str>) {
        let mut state = self.state.lock().await;
        if matches!(*state, State::Active(_)) {
            self.finish(&mut state, to, statement).await;
        }
    }

    /// Runs `statement` (a rollback, whose failure only means there was
    /// nothing left to roll back), moves to `to` (releasing the gate) and
    /// unregisters the transaction.
    async fn finish(&self, state: &mut State, to: State, statement: Option<&'static str>) {
        if let Some(sql) = statement {
            if let Err(err) = self.db.with_open(|h| async move { h.execute(sql.into(), None).await }).await {
                tracing::debug!(error = %format!("{err:#}"), sql, "ending a SQLite transaction");
            }
        }
        self.db.tx_active.store(false, Ordering::Release);
        {
            let mut active = self.db.active_tx.lock().unwrap_or_else(|p| p.into_inner());
            if active.as_ref().is_some_and(|a| std::ptr::addr_eq(Arc::as_ptr(a), self)) {
                *active = None;
            }
        }
        *state = to;
        let timer = self.timer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(timer) = timer {
            // From the timer itself this only marks it: it has no await left.
            timer.abort();
        }
    }
}
