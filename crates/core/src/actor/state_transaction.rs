//! State transactions (`beginStateTransaction`, RivetKit's
//! `db.transaction(fn, { experimental: { includeState: true } })`): SQL
//! statements and the actor state commit together, or neither does.
//!
//! The state lives in KV and the database on the engine's page store, two
//! stores with no shared commit, so SQLite is the commit point, exactly as
//! for workflow flushes: the commit writes a copy of the state with a new
//! revision inside the open SQLite transaction, commits it, then saves the
//! state and that revision to KV. A start that finds a newer revision in
//! SQLite than in KV takes the state from SQLite (docs/workflows.md,
//! docs/sqlite.md).
//!
//! A state transaction holds the generation's save lock (the workflow
//! mark) from its begin to its end, taken before the SQLite gate as a
//! workflow flush takes them, so no save lands between its SQLite commit
//! and its KV put and the two lock orders never cross. Its timeout ends
//! both: the SQLite transaction rolls back and the lock is released. So
//! does the generation's final save, which would otherwise wait for a
//! transaction its code abandoned, up to the timeout (60 s by default).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;

use crate::actor::lifecycle::Phase;
use crate::actor::{storage, workflow, ActorContext};
use crate::sqlite::{errors, BindParam, ExecuteResult, SqliteTransaction, DEFAULT_TRANSACTION_TIMEOUT};

/// An open state transaction. Cloning shares it.
#[derive(Clone)]
pub struct StateTransaction(Arc<Inner>);

struct Inner {
    ctx: ActorContext,
    tx: SqliteTransaction,
    /// The save lock; `None` once the transaction ended.
    mark: tokio::sync::Mutex<Option<OwnedMutexGuard<Option<u64>>>>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

impl StateTransaction {
    /// Waits for the save lock and the database, then begins. Rolled back
    /// after `timeout` (default [`DEFAULT_TRANSACTION_TIMEOUT`]) unless
    /// committed or rolled back before.
    pub async fn begin(ctx: &ActorContext, timeout: Option<Duration>) -> anyhow::Result<Self> {
        ctx.check_writable()?;
        let timeout = timeout.unwrap_or(DEFAULT_TRANSACTION_TIMEOUT);
        let mark = ctx.persisted().workflow_mark().clone().lock_owned().await;
        // Holding the save lock, the wait for a plain SQLite transaction
        // ends at the final save, which would otherwise wait behind it.
        let gave_up = tokio_util::sync::CancellationToken::new();
        let mut phase = ctx.signals().subscribe_phase();
        let give_up_at_final_save = async {
            let _ = phase.wait_for(|p| matches!(p, Phase::Finalizing | Phase::Stopped)).await;
            gave_up.cancel();
            std::future::pending::<()>().await
        };
        let tx = tokio::select! {
            tx = ctx.sqlite().begin_transaction_unless(Some(timeout), &gave_up) => tx?,
            _ = give_up_at_final_save => unreachable!("never finishes"),
        };
        let inner = Arc::new(Inner {
            ctx: ctx.clone(),
            tx,
            mark: tokio::sync::Mutex::new(Some(mark)),
            timer: Mutex::new(None),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let mut phase = ctx.signals().subscribe_phase();
        // Ends with the transaction (aborted by commit and rollback); holds
        // no strong reference, so a dropped transaction ends here too. The
        // final save must not wait for a transaction nobody will finish.
        let timer = tokio::spawn(async move {
            let finalizing = phase.wait_for(|p| matches!(p, Phase::Finalizing | Phase::Stopped));
            let why = tokio::select! {
                _ = tokio::time::sleep(timeout) => "state transaction timed out; rolling back",
                _ = finalizing => "state transaction still open at the final save; rolling back",
            };
            if let Some(inner) = weak.upgrade() {
                tracing::warn!(timeout_ms = timeout.as_millis() as u64, "{why}");
                inner.end().await;
            }
        });
        *inner.timer.lock().unwrap_or_else(|p| p.into_inner()) = Some(timer);
        Ok(Self(inner))
    }

    /// Runs one statement inside the transaction.
    pub async fn execute(&self, sql: String, params: Option<Vec<BindParam>>) -> anyhow::Result<ExecuteResult> {
        self.0.tx.execute(sql, params).await
    }

    /// Commits the statements together with `state` (the current state when
    /// `None`). On any failure before the SQLite commit, everything is
    /// rolled back; after it, the state is kept in SQLite and a failed KV
    /// put is returned (the next start takes the SQLite copy).
    pub async fn commit(&self, state: Option<Vec<u8>>) -> anyhow::Result<()> {
        let mut slot = self.0.mark.lock().await;
        let Some(mut mark) = slot.take() else {
            // Ended: the SQLite side gives the refusal (committed, rolled
            // back, expired or closed).
            self.0.tx.execute("SELECT 1".to_string(), None).await?;
            return Err(errors::transaction_finished("ended").into_anyhow());
        };
        self.0.stop_timer();
        let ctx = &self.0.ctx;
        let state = state.unwrap_or_else(|| ctx.state());
        let prepared = async {
            ctx.check_writable()?;
            let known = workflow::known_revision(ctx, &mut mark).await?;
            workflow::write_state_copy(&self.0.tx, known, state.clone()).await
        }
        .await;
        let revision = match prepared {
            Ok(revision) => revision,
            Err(err) => {
                if let Err(rollback) = self.0.tx.rollback().await {
                    tracing::debug!(error = %format!("{rollback:#}"), "rollback after a failed state transaction");
                }
                return Err(err);
            }
        };
        self.0.tx.commit().await?;
        ctx.set_state(state);
        storage::save_record_with(ctx, vec![workflow::mark_entry(revision)]).await?;
        *mark = Some(revision);
        Ok(())
    }

    /// Rolls back; a no-op once it rolled back or timed out.
    pub async fn rollback(&self) -> anyhow::Result<()> {
        let mut slot = self.0.mark.lock().await;
        if slot.take().is_none() {
            return self.0.tx.rollback().await;
        }
        self.0.stop_timer();
        self.0.tx.rollback().await
    }
}

impl Inner {
    fn stop_timer(&self) {
        if let Some(timer) = self.timer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            timer.abort();
        }
    }

    /// Timeout: rolls the SQLite side back and releases the save lock.
    async fn end(&self) {
        let mut slot = self.mark.lock().await;
        if slot.take().is_some() {
            if let Err(err) = self.tx.rollback().await {
                tracing::debug!(error = %format!("{err:#}"), "rolling back an expired state transaction");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::ColumnValue;

    async fn count(ctx: &ActorContext) -> i64 {
        let result = ctx.sqlite().execute("SELECT COUNT(*) FROM t".to_string(), None).await.unwrap();
        match result.rows[0][0] {
            ColumnValue::Integer(n) => n,
            ref other => panic!("count: {other:?}"),
        }
    }

    async fn setup(name: &str) -> ActorContext {
        let ctx = ActorContext::for_test(name, 1);
        ctx.set_state(b"s0".to_vec());
        storage::save_record(&ctx).await.unwrap();
        ctx.sqlite().execute("CREATE TABLE t (v INTEGER)".to_string(), None).await.unwrap();
        ctx
    }

    /// The rows and the state land together, and the next generation reads
    /// both.
    #[tokio::test]
    async fn commit_lands_rows_and_state() {
        let first = setup("stx-commit").await;
        let tx = StateTransaction::begin(&first, None).await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)".to_string(), None).await.unwrap();
        tx.commit(Some(b"s1".to_vec())).await.unwrap();
        assert_eq!(first.state(), b"s1");
        first.close_sqlite().await;

        let second = ActorContext::for_test_sharing(&first, 2);
        let record = storage::load_record(&second).await.unwrap();
        let record = workflow::reconcile(&second, record).await.unwrap().unwrap();
        assert_eq!(record.state, b"s1");
        assert_eq!(count(&second).await, 1);
    }

    /// A rollback keeps neither, and saves go on at once.
    #[tokio::test]
    async fn rollback_keeps_neither() {
        let ctx = setup("stx-rollback").await;
        let tx = StateTransaction::begin(&ctx, None).await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)".to_string(), None).await.unwrap();
        tx.rollback().await.unwrap();
        tx.rollback().await.unwrap();
        assert!(tx.commit(Some(b"late".to_vec())).await.is_err(), "a commit after the rollback is refused");
        assert_eq!(ctx.state(), b"s0");
        assert_eq!(count(&ctx).await, 0);
        ctx.set_state(b"after".to_vec());
        tokio::time::timeout(Duration::from_secs(5), storage::save_record(&ctx)).await.unwrap().unwrap();
    }

    /// A transaction left open rolls back at its timeout and releases the
    /// save lock; its commit then reports the expiry.
    #[tokio::test]
    async fn timeout_rolls_back_and_releases_saves() {
        let ctx = setup("stx-timeout").await;
        let tx = StateTransaction::begin(&ctx, Some(Duration::from_millis(50))).await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)".to_string(), None).await.unwrap();
        ctx.set_state(b"saved".to_vec());
        tokio::time::timeout(Duration::from_secs(5), storage::save_record(&ctx)).await.unwrap().unwrap();
        let err = tx.commit(Some(b"late".to_vec())).await.unwrap_err();
        let err = crate::error::RivetError::extract(&err);
        assert_eq!((err.group.as_str(), err.code.as_str()), ("sqlite", "transaction_expired"));
        assert_eq!(count(&ctx).await, 0);
        assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"saved");
    }

    /// A transaction left open when the generation reaches its final save
    /// rolls back then, long before its timeout, so the save can run.
    #[tokio::test]
    async fn the_final_save_does_not_wait_for_an_abandoned_transaction() {
        let ctx = setup("stx-final").await;
        let tx = StateTransaction::begin(&ctx, Some(Duration::from_secs(600))).await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)".to_string(), None).await.unwrap();
        for phase in
            [Phase::Starting, Phase::Started, Phase::Stopping(crate::actor::ShutdownKind::Sleep), Phase::Finalizing]
        {
            ctx.enter(phase);
        }
        ctx.set_state(b"final".to_vec());
        tokio::time::timeout(Duration::from_secs(5), storage::save_record(&ctx)).await.unwrap().unwrap();
        assert!(tx.commit(Some(b"late".to_vec())).await.is_err(), "the abandoned transaction was rolled back");
        assert_eq!(count(&ctx).await, 0);
        assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"final");
    }

    /// A state transaction waiting behind a plain SQLite transaction holds
    /// the save lock; the final save ends that wait instead of waiting
    /// for the plain transaction's timeout.
    #[tokio::test]
    async fn the_final_save_does_not_wait_for_a_state_transaction_still_beginning() {
        let ctx = setup("stx-final-begin").await;
        let plain = ctx.sqlite().begin_transaction(Some(Duration::from_secs(600))).await.unwrap();
        let beginning = {
            let ctx = ctx.clone();
            tokio::spawn(async move { StateTransaction::begin(&ctx, Some(Duration::from_secs(600))).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        for phase in
            [Phase::Starting, Phase::Started, Phase::Stopping(crate::actor::ShutdownKind::Sleep), Phase::Finalizing]
        {
            ctx.enter(phase);
        }
        ctx.set_state(b"final".to_vec());
        tokio::time::timeout(Duration::from_secs(5), storage::save_record(&ctx)).await.unwrap().unwrap();
        assert!(beginning.await.unwrap().is_err(), "the waiting begin gave up");
        plain.rollback().await.unwrap();
    }

    /// A save waits while a state transaction is open (it would otherwise
    /// land between the SQLite commit and the KV put).
    #[tokio::test]
    async fn saves_wait_for_the_transaction() {
        let ctx = setup("stx-order").await;
        let tx = StateTransaction::begin(&ctx, None).await.unwrap();
        let save = {
            let ctx = ctx.clone();
            tokio::spawn(async move { storage::save_record(&ctx).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!save.is_finished());
        tx.commit(Some(b"s1".to_vec())).await.unwrap();
        save.await.unwrap().unwrap();
        assert_eq!(storage::load_record(&ctx).await.unwrap().unwrap().state, b"s1");
    }
}
